"""The HTTP proxy's settings and the state of one exchange in flight.

Why it exists: the proxy's ASGI core (`blackbox.recorder.capture.taps.http`), its forwarding and
response relays (`blackbox.recorder.capture.taps.http_relay`) and its server runtime
(`blackbox.recorder.capture.taps.http_server`) all speak of the same settings, counters and
exchange; here they are defined once, below all three, so none of them imports another for a type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from blackbox.recorder import BlackboxError
from blackbox.recorder.capture.taps.http_headers import (
    GuardError,
    normalise_allowed_host,
    normalise_allowed_origin,
)
from blackbox.recorder.capture.taps.http_sessions import DEFAULT_IDLE_GAP_S, RecordingSession

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Notice = Callable[[str], None]

MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_JSON_REPLY_BYTES = 64 * 1024 * 1024
SSE_EVENTS_PER_RECORD = 500
PROXY_ERROR_CODE = -32000  # JSON-RPC implementation-defined server error


class ProxyError(BlackboxError):
    """The proxy cannot start as asked (bad upstream URL, listen address in use, ...)."""


@dataclass(frozen=True)
class ProxySettings:
    """What a proxy forwards to and how it records."""

    upstream: str
    name: str | None = None
    idle_gap_s: float = DEFAULT_IDLE_GAP_S
    idle_after_s: float | None = None  # session_idle after this long without traffic
    timeout_s: float = 300.0
    connect_timeout_s: float = 10.0
    rewrite_host: bool = False
    max_request_bytes: int = MAX_REQUEST_BYTES
    max_json_reply_bytes: int = MAX_JSON_REPLY_BYTES
    fingerprint_key: bytes | None = field(default=None, repr=False)  # HMAC key of fingerprints
    # Host names (NAME or NAME:PORT) and web origins served besides the listen address's own.
    allow_hosts: tuple[str, ...] = ()
    allow_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProxyError(f"bad upstream URL {self.upstream!r}: give http(s)://HOST[:PORT]/PATH")
        try:
            for host in self.allow_hosts:
                normalise_allowed_host(host)
            for origin in self.allow_origins:
                normalise_allowed_origin(origin)
        except GuardError as exc:
            raise ProxyError(str(exc)) from None

    @property
    def origin(self) -> str:
        parts = urlsplit(self.upstream)
        return urlunsplit((parts.scheme, parts.netloc, "", "", ""))

    @property
    def path(self) -> str:
        parts = urlsplit(self.upstream)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    @property
    def server_name(self) -> str:
        """The name sessions are recorded under (and that a policy's `server` globs match)."""
        return self.name or (urlsplit(self.upstream).hostname or "http")


@dataclass
class ProxyStats:
    """Counters a running proxy keeps (read by the CLI and the tests)."""

    exchanges: int = 0
    frames: int = 0
    faults: int = 0
    sessions: int = 0
    refused: int = 0  # not forwarded because the journal failed (503)
    rejected: int = 0  # refused at the door: foreign Host or Origin (403), body too large (413)
    fault_names: dict[str, int] = field(default_factory=dict)


@dataclass
class Exchange:
    """One HTTP exchange in flight: what the records about it need."""

    method: str
    target: str
    remote: str
    request_headers: list[tuple[bytes, bytes]]
    started_ns: int
    session: RecordingSession | None = None
    legacy_id: str | None = None
    trace: str | None = None
    era: str | None = None
    messages: list[dict] = field(default_factory=list)
    first_method: str | None = None
    rpc_id: object = None
    single_request: bool = False
    client_info: object = None
    initialize: bool = False
    request_seq: int | None = None
    status: int | None = None
    content_type: str | None = None
    response_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    sse_events: list[dict] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    upstream_answered: bool = False
    client_disconnected: bool = False
    response_started: bool = False
    sse_stream: bool = False
    note: str | None = None
    partial_records: int = 0
    refused: bool = False  # refused by the Host/Origin check: nothing in it is believed
