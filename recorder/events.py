"""The typed, versioned documents of every non-frame record kind: one encode, one decode.

A frame's `raw` is the bytes that crossed the wire and is never touched. Every other record holds a
JSON document describing a session event, and this module is the one place that knows their
shape: one frozen dataclass per kind, `encode` (one JSON encoder, so one spelling of every float),
and `decode(kind, raw)`, which returns `(document, None)` or `(None, problem)` and never raises, as
`recorder.jsonrpc.parse` does for frames. An audit log is kept for years, so every document written
from now on carries its schema version as `"v"`; documents from before the schema (no `"v"`, version
0) are brought up to date by one small upgrade step per version, as mitmproxy does for its flows.
docs/log-format.md is generated from this module (`python -m recorder.events`, rendered by
`recorder.log_format`) and a test keeps the two in step: it is what an auditor reads.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from recorder.jsonrpc import parse

#: Any JSON value (objects, arrays, strings, numbers, booleans, null).
JSON = Any


def _field(doc: str, *, required: bool = False, optional: bool = False, default: Any = None) -> Any:
    """A document field. `required`: a decoded document without it is a problem. `optional`:
    left out of the encoded document when None (fields one producer writes and others do not)."""
    meta = {"doc": doc, "required": required, "optional": optional}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def _extra() -> Any:
    return field(default_factory=dict, metadata={"doc": "", "extra": True})


@dataclass(frozen=True, slots=True)
class Document:
    """Base of every record document. `extra` keeps the keys a producer added beyond the schema
    (a fault's evidence, a tap's own settings): a decoded document never loses a key."""

    KIND: ClassVar[str]
    VERSION: ClassVar[int] = 1


@dataclass(frozen=True, slots=True)
class SessionStarted(Document):
    """The first record of every session: who recorded it, what ran, where. The sessions
    projection takes its name, transport, command and replay_of from here."""

    KIND: ClassVar[str] = "session_started"

    name: str | None = _field(
        "The session's name (`--name`, the host's server name).", required=True
    )
    transport: str | None = _field(
        "`stdio`, `http`, `hook` (host decisions), or null (the recorder's own sessions, such as"
        " retention).",
        required=True,
    )
    command: list[str] | str | None = _field(
        "What was recorded: the server's argv (stdio, replay against a command), its URL (http),"
        " or the host (hook).",
        required=True,
    )
    cwd: str | None = _field("The working directory the server was started in.")
    env_names: list[str] = _field(
        "Names (never values) of the environment variables the server was given.", default=[]
    )
    tap_version: str | None = _field("The mcp-blackbox version that recorded the session.")
    pid: int | None = _field("The recording process's id.")
    replay_of: str | None = _field("For a replay: the id of the session it replayed.")
    max_frame: int | None = _field(
        "stdio: the largest frame recorded whole, in bytes.", optional=True
    )
    quarantine_noise: bool | None = _field(
        "stdio: non-JSON stdout lines were kept from the client.", optional=True
    )
    policy: bool | None = _field("stdio: a policy gate was in force.", optional=True)
    redaction: bool | None = _field("stdio: redaction rules were in force.", optional=True)
    session_rule: str | None = _field(
        "http: how the proxy told sessions apart (legacy id, trace id, client).", optional=True
    )
    session_key: str | None = _field("http: the value that rule keyed on.", optional=True)
    remote: str | None = _field("http: the client's address.", optional=True)
    host_session: str | None = _field("hook: the host's own session id.", optional=True)
    timing: str | None = _field("replay: the timing mode.", optional=True)
    injections: list[JSON] | None = _field("replay: the faults injected.", optional=True)
    extra: Mapping[str, JSON] = _extra()


@dataclass(frozen=True, slots=True)
class EraDetected(Document):
    """The protocol era the session speaks, from the handshake or the first request's `_meta`."""

    KIND: ClassVar[str] = "era_detected"

    era: str | None = _field(
        "The protocol version, such as 2025-11-25 or 2026-07-28.", required=True
    )
    client_info: JSON = _field("The client's `clientInfo`, as sent.")
    server_info: JSON = _field("The server's `serverInfo`, as answered (null when unknown).")
    via: str | None = _field(
        "The method that told: `initialize`, `server/discover` or the first request.", optional=True
    )
    requested: str | None = _field(
        "The version the client asked for, when the server answered another.", optional=True
    )
    extra: Mapping[str, JSON] = _extra()


@dataclass(frozen=True, slots=True)
class SessionEnded(Document):
    """How the session ended. Its outcome is the sessions projection's outcome."""

    KIND: ClassVar[str] = "session_ended"

    reason: str = _field(
        "What ended it: client_closed, server_exited, interrupted, spawn_failed, recovered,"
        " abandoned, proxy_stopped, completed...",
        required=True,
        default="ended",
    )
    outcome: str = _field(
        "ok, server_exited, crashed, interrupted, recovered, abandoned...",
        required=True,
        default="ended",
    )
    exit_code: int | None = _field("The server's exit code, when it exited.")
    signal: str | None = _field("The signal that ended the server, by name.")
    tap_signals: list[str] | None = _field("Signals the tap itself received.", optional=True)
    detail: str | None = _field("A sentence on how it ended.", optional=True)
    verdict: str | None = _field("replay: the replay's verdict.", optional=True)
    recovered_ns: int | None = _field(
        "recovered: when `blackbox ship` closed a session its tap left open.", optional=True
    )
    sealed_by: str | None = _field("abandoned: what sealed it (retention).", optional=True)
    sealed_at_ns: int | None = _field("abandoned: when it was sealed.", optional=True)
    last_activity_ns: int | None = _field("abandoned: the time of its last record.", optional=True)
    idle_ns: int | None = _field("abandoned: the idle time that made it abandoned.", optional=True)
    extra: Mapping[str, JSON] = _extra()


@dataclass(frozen=True, slots=True)
class SessionSealed(Document):
    """The seal: the last record of a session, written by the store. It fixes how many records
    precede it and the chain head over them; `verify` finds truncation against it."""

    KIND: ClassVar[str] = "session_sealed"

    count: int = _field("How many records precede the seal.", required=True, default=0)
    head: str = _field(
        "The chain hash of the record before the seal, hex.", required=True, default=""
    )
    extra: Mapping[str, JSON] = _extra()


@dataclass(frozen=True, slots=True)
class Stderr(Document):
    """One line the server wrote to stderr (stdio), decoded as UTF-8 with replacement."""

    KIND: ClassVar[str] = "stderr"

    line: str = _field("The line, without its line ending.", required=True, default="")
    extra: Mapping[str, JSON] = _extra()


@dataclass(frozen=True, slots=True)
class Fault(Document):
    """Something went wrong on the wire or in the server; the doctor's tree is built from these."""

    KIND: ClassVar[str] = "fault"

    fault: str = _field(
        "The fault: stdout_pollution, invalid_json, invalid_utf8, oversize_frame, spawn_failed,"
        " server_exited, exit_with_outstanding, broken_pipe, timeout, stream_cut,"
        " upstream_error...",
        required=True,
        default="unknown",
    )
    stage: str = _field(
        "The doctor's stage: transport, handshake, discovery or execution.", default="transport"
    )
    detail: str = _field("What happened, in a sentence.", default="")
    seq: int | None = _field("The seq of the record it concerns, if any.")
    direction: str | None = _field("c2s or s2c, for a fault in one direction.", optional=True)
    excerpt: str | None = _field("The start of the offending bytes.", optional=True)
    exit_code: int | None = _field("The server's exit code, for an exit.", optional=True)
    signal: str | None = _field("The signal that ended the server, by name.", optional=True)
    http_method: str | None = _field("http: the request's method.", optional=True)
    path: str | None = _field("http: the request's path.", optional=True)
    extra: Mapping[str, JSON] = _extra()


@dataclass(frozen=True, slots=True)
class Decision(Document):
    """A permission decision on a tool call, by the policy gate (source policy) or a host (source
    host or user). Joined to the call it decided by rpc id, or by server, tool and arguments
    fingerprint nearest in time."""

    KIND: ClassVar[str] = "decision"

    decision: str | None = _field(
        "allow, deny or ask; null for a host's record of a call not decided yet.", required=True
    )
    final: str | None = _field("The final outcome, allow or deny, once known.")
    source: str = _field("policy, host or user.", required=True, default="policy")
    decided_by: str | None = _field("rule, default, settings, hook, classifier or user.")
    rule: str | None = _field("The rule that decided, if any.")
    server: str | None = _field("The server's name.")
    tool: str | None = _field("The tool's name.")
    method: str = _field("The method decided on.", default="tools/call")
    args_fingerprint: str | None = _field(
        "sha256 hex of the canonical JSON of the call's arguments."
    )
    rpc_id: str | None = _field("The JSON-RPC id of the call, as text.")
    request_seq: int | None = _field("The seq of the request frame it decided.")
    host_session: str | None = _field("The host's own session id.")
    reason: str | None = _field("Why, as the rule or host put it.")
    extra: Mapping[str, JSON] = _extra()


@dataclass(frozen=True, slots=True)
class HttpExchange(Document):
    """One HTTP request/response through the proxy: what the frames alone do not say. Credentials
    in headers are kept only as fingerprints."""

    KIND: ClassVar[str] = "http_exchange"

    method: str | None = _field("The HTTP method.", required=True)
    path: str | None = _field("The request target.", required=True)
    status: int | None = _field("The response status (null when none was sent).")
    content_type: str | None = _field("The response's content type.")
    duration_ms: float | None = _field("From the request's start to the response's end.")
    request_headers: dict[str, JSON] = _field("The request's headers, as recorded.", default={})
    response_headers: dict[str, JSON] = _field("The response's headers, as recorded.", default={})
    request_seq: int | None = _field("The seq of the request's first frame.")
    remote: str | None = _field("The client's address.")
    bytes_in: int | None = _field("Request body bytes.")
    bytes_out: int | None = _field("Response body bytes.")
    upstream_answered: bool | None = _field("Whether the upstream answered at all.")
    sse_events: list[JSON] | None = _field("The SSE events of a stream, in order.", optional=True)
    client_disconnected: bool | None = _field("The client went away mid-response.", optional=True)
    note: str | None = _field("What the proxy did itself (a refusal, a denial).", optional=True)
    partial: bool | None = _field(
        "A long stream is written in parts: true for every part but the last.", optional=True
    )
    part: int | None = _field("The part's number, from 1.", optional=True)
    extra: Mapping[str, JSON] = _extra()


@dataclass(frozen=True, slots=True)
class ReplayStep(Document):
    """A replay's finding: a step that did not replay equivalent, a message the recording did not
    have, or (status summary, last) the replay's verdict."""

    KIND: ClassVar[str] = "replay_step"

    step: int | None = _field("The step's number; null for unexpected messages and the summary.")
    status: str = _field(
        "diverged, missing, not_sent, unexpected, summary...", required=True, default="summary"
    )
    replay_of: str | None = _field("The id of the session replayed.", optional=True)
    verdict: str | None = _field("summary: equivalent or diverged.", optional=True)
    summary: dict[str, JSON] | None = _field("summary: counts by status.", optional=True)
    faults: list[JSON] | None = _field(
        "summary: each recorded fault, reproduced or not.", optional=True
    )
    extra: Mapping[str, JSON] = _extra()


@dataclass(frozen=True, slots=True)
class RetentionApplied(Document):
    """Retention removed sessions (after archiving them in a verified bundle). The one sanctioned
    removal from the log, itself recorded."""

    KIND: ClassVar[str] = "retention_applied"

    older_than_ns: int | None = _field("The age limit asked for.")
    cutoff_ns: int | None = _field("Sessions that ended before this were removed.")
    cutoff: str | None = _field("The cutoff, as ISO 8601 text.")
    idle_ns: int | None = _field("Unsealed sessions idle this long were sealed as abandoned.")
    removed: list[str] = _field("The ids of the sessions removed.", default=[])
    sessions_removed: int = _field("How many sessions were removed.", default=0)
    records_removed: int = _field("How many records were removed.", default=0)
    archive: str | None = _field("Where the archive bundle was written.")
    archive_format: str | None = _field("The archive's data file format.")
    archive_manifest_sha256: str | None = _field("sha256 of the archive's manifest.")
    held_kept: list[str] = _field("Sessions kept because of a legal hold.", default=[])
    abandoned_sealed: list[str] = _field("Sessions sealed as abandoned first.", default=[])
    broken_kept: list[str] = _field("Sessions kept because their chain did not verify.", default=[])
    extra: Mapping[str, JSON] = _extra()


def started_here(**fields: JSON) -> SessionStarted:
    """A `session_started` document by this process: its version and pid filled in; keys beyond
    the schema (a tap's own settings) are kept as extra."""
    from recorder import __version__

    extra = fields.pop("extra", None) or {}
    values = {"tap_version": __version__, "pid": os.getpid(), **extra, **fields}
    return from_dict(SessionStarted.KIND, values)  # type: ignore[return-value]


DOCUMENTS: dict[str, type[Document]] = {
    cls.KIND: cls
    for cls in (
        SessionStarted,
        EraDetected,
        SessionEnded,
        SessionSealed,
        Stderr,
        Fault,
        Decision,
        HttpExchange,
        ReplayStep,
        RetentionApplied,
    )
}


# -- the schema as data: field lists the store, Parquet and export columns derive from -----------


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a document kind, as the schema states it."""

    name: str
    types: tuple[type, ...]  # the JSON types it may hold (object for any)
    annotation: str
    doc: str
    required: bool
    optional: bool


def _runtime_types(hint: object) -> tuple[type, ...]:
    if hint is Any:
        return (object,)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _runtime_types(arg))
    if hint is type(None):
        return (type(None),)
    if hint is float:
        return (float, int)
    if origin is not None:
        return (dict,) if origin in (dict, Mapping) else (origin,)  # type: ignore[return-value]
    return (hint,)  # type: ignore[return-value]


_TYPE_WORDS = {
    "Mapping[str, JSON]": "object",
    "dict[str, JSON]": "object",
    "list[JSON]": "array",
    "list[str]": "array of strings",
    "JSON": "any JSON value",
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "None": "null",
    "|": "or",
}
_TYPE_TOKEN = re.compile("|".join(re.escape(code) for code in _TYPE_WORDS))


def _plain_type(annotation: str) -> str:
    """A field's annotation in the words of JSON, for the written schema."""
    return _TYPE_TOKEN.sub(lambda m: _TYPE_WORDS[m.group()], annotation)


def _specs(cls: type[Document]) -> tuple[FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("extra"):
            continue
        annotation = _plain_type(str(f.type))
        out.append(
            FieldSpec(
                f.name,
                _runtime_types(hints[f.name]),
                annotation,
                f.metadata["doc"],
                f.metadata["required"],
                f.metadata["optional"],
            )
        )
    return tuple(out)


_SPECS: dict[type[Document], tuple[FieldSpec, ...]] = {
    cls: _specs(cls) for cls in DOCUMENTS.values()
}


def _default_makers(cls: type[Document]) -> dict[str, Callable[[], JSON]]:
    makers: dict[str, Callable[[], JSON]] = {}
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            makers[f.name] = f.default_factory
        else:
            makers[f.name] = lambda value=f.default: value
    return makers


# Each field's default, as a maker (a fresh list or dict each time), for `encode_fields`.
_DEFAULTS = {cls: _default_makers(cls) for cls in DOCUMENTS.values()}
# The encoder's layout per class: (name, left out when None), in schema order.
_LAYOUT: dict[type[Document], tuple[tuple[str, bool], ...]] = {
    cls: tuple((s.name, s.optional) for s in specs) for cls, specs in _SPECS.items()
}


def fields_of(kind: str) -> tuple[FieldSpec, ...]:
    """The fields of a kind's document, in schema order (raises KeyError for an unknown kind)."""
    return _SPECS[DOCUMENTS[kind]]


def field_names(kind: str) -> tuple[str, ...]:
    """The names of a kind's fields, in schema order: the column lists derive from these."""
    return tuple(s.name for s in fields_of(kind))


# -- encoding ------------------------------------------------------------------------------------


def _fragments(value: object) -> object:
    """`value` with every integer beyond 64 bits as an orjson fragment of its exact digits."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return orjson.Fragment(str(value))
    if isinstance(value, dict):
        return {k: _fragments(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_fragments(v) for v in value]
    return value


def dumps(value: object) -> bytes:
    """Compact UTF-8 JSON by the one encoder of record documents (orjson: several times faster
    than `json`, and one spelling of every float). Integers beyond 64 bits keep their digits."""
    try:
        return orjson.dumps(value)  # the common case; the option below costs twice the time
    except TypeError:
        return orjson.dumps(_fragments(value), option=orjson.OPT_NON_STR_KEYS)


def as_dict(doc: Document) -> dict[str, JSON]:
    """The document as the JSON object `encode` writes, with its `"v"` first."""
    out: dict[str, JSON] = {"v": doc.VERSION}
    for name, optional in _LAYOUT[type(doc)]:
        value = getattr(doc, name)
        if optional and value is None:
            continue
        out[name] = value
    for key, value in doc.extra.items():  # type: ignore[attr-defined]
        out.setdefault(key, value)
    return out


def encode(doc: Document) -> bytes:
    """The raw bytes of a record document."""
    return dumps(as_dict(doc))


def encode_fields(cls: type[Document], /, **values: JSON) -> bytes:
    """The bytes `encode(cls(**values))` gives, without building the frozen object: for producers
    on a hot path (a frozen dataclass of 18 fields costs about 5 µs to build, the proxy writes one
    exchange document a request). Unknown names are refused as the class would refuse them."""
    layout, defaults = _LAYOUT[cls], _DEFAULTS[cls]
    if not values.keys() <= defaults.keys():
        unknown = ", ".join(sorted(values.keys() - defaults.keys()))
        raise TypeError(f"{cls.__name__} has no field {unknown}")
    extra = values.pop("extra", None) or {}
    out: dict[str, JSON] = {"v": cls.VERSION}
    for name, optional in layout:
        value = values[name] if name in values else defaults[name]()
        if optional and value is None:
            continue
        out[name] = value
    for key, value in extra.items():
        out.setdefault(key, value)
    return dumps(out)


# -- upgrading old documents ---------------------------------------------------------------------

Upgrade = Callable[[dict[str, JSON]], dict[str, JSON]]


def _defaults(**values: JSON) -> Upgrade:
    def step(doc: dict[str, JSON]) -> dict[str, JSON]:
        for key, value in values.items():
            if doc.get(key) is None:
                doc[key] = value(doc) if callable(value) else value
        return doc

    return step


def _v0_session_ended(doc: dict[str, JSON]) -> dict[str, JSON]:
    # Before the schema, readers took the outcome from the reason when it was missing.
    reason = doc.get("reason") if isinstance(doc.get("reason"), str) else None
    doc.setdefault("reason", "ended")
    if not isinstance(doc.get("outcome"), str) or not doc["outcome"]:
        doc["outcome"] = reason or "ended"
    doc.setdefault("exit_code", None)
    doc.setdefault("signal", None)
    return doc


#: UPGRADES[kind][n] turns a version-n document (as a dict, without "v") into version n + 1.
#: Version 0 is every document written before the schema: the same fields, no "v", and some
#: written by producers that left out what version 1 requires.
UPGRADES: dict[str, dict[int, Upgrade]] = {
    "session_started": {
        0: _defaults(name=None, transport=None, command=None, env_names=[], replay_of=None)
    },
    "era_detected": {0: _defaults(era=None, client_info=None, server_info=None)},
    "session_ended": {0: _v0_session_ended},
    "session_sealed": {0: _defaults()},
    "stderr": {0: _defaults(line="")},
    # The replayer wrote transport faults with no stage, detail or seq of their own.
    "fault": {
        0: _defaults(
            stage="transport",
            detail=lambda d: d.get("fault") if isinstance(d.get("fault"), str) else "",
            seq=None,
        )
    },
    "decision": {0: _defaults(method="tools/call")},
    "http_exchange": {0: _defaults(request_headers={}, response_headers={})},
    "replay_step": {0: _defaults()},
    "retention_applied": {
        0: _defaults(removed=[], held_kept=[], abandoned_sealed=[], broken_kept=[])
    },
}


# -- decoding ------------------------------------------------------------------------------------


def decode(kind: str, raw: bytes) -> tuple[Document | None, str | None]:
    """A record's document: (document, None), or (None, problem). Never raises.

    Problems: `not_a_document` (a frame: its raw bytes are the wire's), `unknown_kind`, `empty`,
    `invalid_json`, `invalid_utf8`, `not_an_object`, `unsupported_version N` (written by a
    newer mcp-blackbox), `missing_field NAME`, `wrong_type NAME`."""
    cls = DOCUMENTS.get(str(kind))
    if cls is None:
        return None, "not_a_document" if kind == "frame" else "unknown_kind"
    value, problem = parse(raw)
    if problem is not None:
        return None, problem
    if not isinstance(value, dict):
        return None, "not_an_object"
    version = value.pop("v", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        return None, "wrong_type v"
    if version > cls.VERSION:
        return None, f"unsupported_version {version}"
    steps = UPGRADES.get(cls.KIND, {})
    for n in range(version, cls.VERSION):
        value = steps[n](value)
    return _build(cls, value)


def _build(cls: type[Document], value: dict[str, JSON]) -> tuple[Document | None, str | None]:
    """A document from a current-version dict (consumed): fields checked, other keys kept."""
    values: dict[str, JSON] = {}
    for spec in _SPECS[cls]:
        if spec.name in value:
            item = value.pop(spec.name)
            if not isinstance(item, spec.types) or (
                isinstance(item, bool) and bool not in spec.types and object not in spec.types
            ):
                return None, f"wrong_type {spec.name}"
            values[spec.name] = item
        elif spec.required:
            return None, f"missing_field {spec.name}"
    return cls(**values, extra=value), None  # type: ignore[call-arg]


def from_dict(kind: str, values: Mapping[str, JSON]) -> Document:
    """A producer's document of `kind` from a dict of fields and evidence (keys beyond the schema
    are kept). Raises ValueError when the fields break the schema: a producer's bug, not data."""
    cls = DOCUMENTS[str(kind)]
    doc, problem = _build(cls, {k: v for k, v in values.items() if k != "v"})
    if doc is None:
        raise ValueError(f"{kind} document: {problem}")
    return doc


D = typing.TypeVar("D", bound=Document)


def decode_as(cls: type[D], raw: bytes) -> D | None:
    """The document of a record known to be of `cls`'s kind, or None when it does not decode."""
    doc, _problem = decode(cls.KIND, raw)
    return doc if isinstance(doc, cls) else None


def decode_dict(kind: str, raw: bytes) -> dict[str, JSON] | None:
    """A record's document as a plain dict in the current version (`as_dict` of `decode`), or
    None when it does not decode: for readers that pass documents on as JSON."""
    doc, _problem = decode(kind, raw)
    return None if doc is None else as_dict(doc)


DERIVED_KEYS = ("method", "tool", "era")


def derived_fields(raw: bytes) -> tuple[str | None, str | None, str | None]:
    """The derived columns (method, tool, era) of a non-frame record: its document's keys of those
    names when they hold text, as written. Read from the bytes, not through the upgrade steps, so
    that a record's derived columns never change when an upgrade step is added and `verify` can
    recompute them from any log ever written."""
    value, problem = parse(raw)
    if problem is not None or not isinstance(value, dict):
        return None, None, None
    method, tool, era = (value.get(key) for key in DERIVED_KEYS)
    return (
        method if isinstance(method, str) else None,
        tool if isinstance(tool, str) else None,
        era if isinstance(era, str) else None,
    )


if __name__ == "__main__":  # the written schema: python -m recorder.events > docs/log-format.md
    import sys

    from recorder.log_format import schema_markdown

    sys.stdout.write(schema_markdown())
