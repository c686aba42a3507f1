"""The log: what a record is and how it is written down.

The raw bytes of a frame are the record; everything else here is derived from them or built over
them: the frozen record types (`model`), the typed documents of every other kind (`events`,
`event_base`), the JSON-RPC classifier that never raises (`jsonrpc`), request/response pairing
(`pairing`), the per-session hash chain (`chain`), the per-value commitments that prove a
redacted record (`commitment`), the RFC 9162 Merkle hashes over the log (`merkle`), the Arrow
columns of the record types (`columns`) and the generated format page (`format_page`). Pure: no
database, no I/O beyond the page generator.
"""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.recorder.log import chain as chain
    from blackbox.recorder.log import commitment as commitment
    from blackbox.recorder.log import events as events
    from blackbox.recorder.log import merkle as merkle
    from blackbox.recorder.log.chain import Finding as Finding
    from blackbox.recorder.log.columns import arrow_columns as arrow_columns
    from blackbox.recorder.log.columns import arrow_fields as arrow_fields
    from blackbox.recorder.log.columns import document_columns as document_columns
    from blackbox.recorder.log.events import RetentionApplied as RetentionApplied
    from blackbox.recorder.log.jsonrpc import FALLBACK_DEPTH as FALLBACK_DEPTH
    from blackbox.recorder.log.jsonrpc import META_CLIENT_INFO as META_CLIENT_INFO
    from blackbox.recorder.log.jsonrpc import META_PROTOCOL_VERSION as META_PROTOCOL_VERSION
    from blackbox.recorder.log.jsonrpc import MODERN_ERA as MODERN_ERA
    from blackbox.recorder.log.jsonrpc import classify as classify
    from blackbox.recorder.log.jsonrpc import classify_message as classify_message
    from blackbox.recorder.log.jsonrpc import derived_columns as derived_columns
    from blackbox.recorder.log.jsonrpc import encode_json as encode_json
    from blackbox.recorder.log.jsonrpc import fit_era as fit_era
    from blackbox.recorder.log.jsonrpc import fit_stored as fit_stored
    from blackbox.recorder.log.jsonrpc import id_fields as id_fields
    from blackbox.recorder.log.jsonrpc import parse as parse
    from blackbox.recorder.log.jsonrpc import stored_agrees as stored_agrees
    from blackbox.recorder.log.jsonrpc import too_deep as too_deep
    from blackbox.recorder.log.model import DERIVED as DERIVED
    from blackbox.recorder.log.model import Direction as Direction
    from blackbox.recorder.log.model import Kind as Kind
    from blackbox.recorder.log.model import NewEvent as NewEvent
    from blackbox.recorder.log.model import SessionInfo as SessionInfo
    from blackbox.recorder.log.model import StoredEvent as StoredEvent
    from blackbox.recorder.log.model import new_session_id as new_session_id
    from blackbox.recorder.log.pairing import OPPOSITE as OPPOSITE
    from blackbox.recorder.log.pairing import Key as Key
    from blackbox.recorder.log.pairing import Pending as Pending
    from blackbox.recorder.log.pairing import request_key as request_key
    from blackbox.recorder.log.pairing import response_key as response_key

_FACE: dict[str, tuple[str, str | None]] = {
    "DERIVED": ("blackbox.recorder.log.model", "DERIVED"),
    "Direction": ("blackbox.recorder.log.model", "Direction"),
    "FALLBACK_DEPTH": ("blackbox.recorder.log.jsonrpc", "FALLBACK_DEPTH"),
    "Finding": ("blackbox.recorder.log.chain", "Finding"),
    "Key": ("blackbox.recorder.log.pairing", "Key"),
    "Kind": ("blackbox.recorder.log.model", "Kind"),
    "META_CLIENT_INFO": ("blackbox.recorder.log.jsonrpc", "META_CLIENT_INFO"),
    "META_PROTOCOL_VERSION": ("blackbox.recorder.log.jsonrpc", "META_PROTOCOL_VERSION"),
    "MODERN_ERA": ("blackbox.recorder.log.jsonrpc", "MODERN_ERA"),
    "NewEvent": ("blackbox.recorder.log.model", "NewEvent"),
    "OPPOSITE": ("blackbox.recorder.log.pairing", "OPPOSITE"),
    "Pending": ("blackbox.recorder.log.pairing", "Pending"),
    "RetentionApplied": ("blackbox.recorder.log.events", "RetentionApplied"),
    "SessionInfo": ("blackbox.recorder.log.model", "SessionInfo"),
    "StoredEvent": ("blackbox.recorder.log.model", "StoredEvent"),
    "arrow_columns": ("blackbox.recorder.log.columns", "arrow_columns"),
    "arrow_fields": ("blackbox.recorder.log.columns", "arrow_fields"),
    "chain": ("blackbox.recorder.log.chain", None),
    "classify": ("blackbox.recorder.log.jsonrpc", "classify"),
    "commitment": ("blackbox.recorder.log.commitment", None),
    "classify_message": ("blackbox.recorder.log.jsonrpc", "classify_message"),
    "derived_columns": ("blackbox.recorder.log.jsonrpc", "derived_columns"),
    "document_columns": ("blackbox.recorder.log.columns", "document_columns"),
    "encode_json": ("blackbox.recorder.log.jsonrpc", "encode_json"),
    "events": ("blackbox.recorder.log.events", None),
    "fit_era": ("blackbox.recorder.log.jsonrpc", "fit_era"),
    "fit_stored": ("blackbox.recorder.log.jsonrpc", "fit_stored"),
    "id_fields": ("blackbox.recorder.log.jsonrpc", "id_fields"),
    "merkle": ("blackbox.recorder.log.merkle", None),
    "new_session_id": ("blackbox.recorder.log.model", "new_session_id"),
    "parse": ("blackbox.recorder.log.jsonrpc", "parse"),
    "request_key": ("blackbox.recorder.log.pairing", "request_key"),
    "response_key": ("blackbox.recorder.log.pairing", "response_key"),
    "stored_agrees": ("blackbox.recorder.log.jsonrpc", "stored_agrees"),
    "too_deep": ("blackbox.recorder.log.jsonrpc", "too_deep"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---
