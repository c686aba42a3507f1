"""Capture: getting every frame off the wire and into the store, whatever happens.

Taps (`taps.stdio`, `taps.http`, `taps.bridge`) relay and journal each frame before they forward it;
the shipper and its worker move the journal into the store off the relay path (`shipper`,
`ship_worker`, `salvage`), what a killed tap left behind is shipped by `leftovers`, and the
shipper side watches the traffic it stored (`observer`, `heartbeat`, `idle`).
"""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.recorder.capture.heartbeat import heartbeat_stats as heartbeat_stats
    from blackbox.recorder.capture.idle import IDLE_COLUMNS as IDLE_COLUMNS
    from blackbox.recorder.capture.idle import idle_session_rows as idle_session_rows
    from blackbox.recorder.capture.journal import JournalReader as JournalReader
    from blackbox.recorder.capture.journal import StoreMark as StoreMark
    from blackbox.recorder.capture.journal import parse_segment_name as parse_segment_name
    from blackbox.recorder.capture.journal import read_store_mark as read_store_mark
    from blackbox.recorder.capture.leftovers import ship_leftovers as ship_leftovers
    from blackbox.recorder.capture.salvage import REFUSED_DIR as REFUSED_DIR
    from blackbox.recorder.capture.salvage import refused_files as refused_files
    from blackbox.recorder.capture.taps.bridge import HEADERS_ENV as HEADERS_ENV
    from blackbox.recorder.capture.taps.bridge import parse_header as parse_header
    from blackbox.recorder.capture.taps.http_exchange import ProxySettings as ProxySettings
    from blackbox.recorder.capture.taps.http_server import DEFAULT_LISTEN as DEFAULT_LISTEN
    from blackbox.recorder.capture.taps.http_server import ProxyConfig as ProxyConfig
    from blackbox.recorder.capture.taps.http_server import parse_listen as parse_listen
    from blackbox.recorder.capture.taps.http_server import run_proxy as run_proxy
    from blackbox.recorder.capture.taps.http_sessions import (
        DEFAULT_IDLE_GAP_S as DEFAULT_IDLE_GAP_S,
    )
    from blackbox.recorder.capture.taps.stdio import DEFAULT_MAX_FRAME as DEFAULT_MAX_FRAME
    from blackbox.recorder.capture.taps.stdio import FINAL_SHIP_SECONDS as FINAL_SHIP_SECONDS
    from blackbox.recorder.capture.taps.stdio import (
        REDACT_BUDGET_SECONDS as REDACT_BUDGET_SECONDS,
    )
    from blackbox.recorder.capture.taps.stdio import TapConfig as TapConfig
    from blackbox.recorder.capture.taps.stdio import run_tap as run_tap

_FACE: dict[str, tuple[str, str | None]] = {
    "DEFAULT_IDLE_GAP_S": ("blackbox.recorder.capture.taps.http_sessions", "DEFAULT_IDLE_GAP_S"),
    "DEFAULT_LISTEN": ("blackbox.recorder.capture.taps.http_server", "DEFAULT_LISTEN"),
    "DEFAULT_MAX_FRAME": ("blackbox.recorder.capture.taps.stdio", "DEFAULT_MAX_FRAME"),
    "FINAL_SHIP_SECONDS": ("blackbox.recorder.capture.taps.stdio", "FINAL_SHIP_SECONDS"),
    "HEADERS_ENV": ("blackbox.recorder.capture.taps.bridge", "HEADERS_ENV"),
    "IDLE_COLUMNS": ("blackbox.recorder.capture.idle", "IDLE_COLUMNS"),
    "JournalReader": ("blackbox.recorder.capture.journal", "JournalReader"),
    "ProxyConfig": ("blackbox.recorder.capture.taps.http_server", "ProxyConfig"),
    "ProxySettings": ("blackbox.recorder.capture.taps.http_exchange", "ProxySettings"),
    "REDACT_BUDGET_SECONDS": ("blackbox.recorder.capture.taps.stdio", "REDACT_BUDGET_SECONDS"),
    "REFUSED_DIR": ("blackbox.recorder.capture.salvage", "REFUSED_DIR"),
    "StoreMark": ("blackbox.recorder.capture.journal", "StoreMark"),
    "TapConfig": ("blackbox.recorder.capture.taps.stdio", "TapConfig"),
    "heartbeat_stats": ("blackbox.recorder.capture.heartbeat", "heartbeat_stats"),
    "idle_session_rows": ("blackbox.recorder.capture.idle", "idle_session_rows"),
    "parse_header": ("blackbox.recorder.capture.taps.bridge", "parse_header"),
    "parse_listen": ("blackbox.recorder.capture.taps.http_server", "parse_listen"),
    "parse_segment_name": ("blackbox.recorder.capture.journal", "parse_segment_name"),
    "read_store_mark": ("blackbox.recorder.capture.journal", "read_store_mark"),
    "refused_files": ("blackbox.recorder.capture.salvage", "refused_files"),
    "run_proxy": ("blackbox.recorder.capture.taps.http_server", "run_proxy"),
    "run_tap": ("blackbox.recorder.capture.taps.stdio", "run_tap"),
    "ship_leftovers": ("blackbox.recorder.capture.leftovers", "ship_leftovers"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---
