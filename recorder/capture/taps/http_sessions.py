"""Which recording session an HTTP exchange belongs to.

Why it exists: over stdio a recording session is one process lifetime, but HTTP has no such
boundary, and the 2026-07-28 protocol is stateless (no `initialize`, no `Mcp-Session-Id`). The
recorder therefore decides its own unit, in this order:

1. the legacy session id, when the exchange has one: the `Mcp-Session-Id` header (Streamable HTTP
   2025-03-26 .. 2025-11-25), or the message endpoint a 2024-11-05 HTTP+SSE stream announced;
2. else the W3C trace id of `traceparent` (the HTTP header, or `params._meta.traceparent`);
3. else the client's identity: `clientInfo` name/version (from `initialize` or
   `params._meta["io.modelcontextprotocol/clientInfo"]`; the last one seen from that address when
   a message carries none) plus the remote address, with an idle gap: a message arriving more than
   the gap after the session's last one starts a new session.

An `initialize` request begins a new session (unless the current one has seen no handshake yet, so
that an `auto` client's failed `server/discover` probe and its fallback `initialize` stay
together); the session id the server then assigns is bound to it. Sessions idle longer than the
gap with no exchange in flight are closed by `expire()`; a session closed by DELETE ends once its
last exchange finishes, so no record ever follows a session's end.

This module is pure bookkeeping: the proxy journals what it decides.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from blackbox.recorder.log import new_session_id

RULE_SESSION_ID = "mcp-session-id"
RULE_SSE = "sse-endpoint"
RULE_HANDSHAKE = "initialize"  # begun by a handshake, then bound to the id the server assigns
RULE_TRACE = "traceparent"
RULE_CLIENT = "client"
DEFAULT_IDLE_GAP_S = (
    120 * 60.0
)  # the common session timeout (blackbox.recorder.capture.idle's default too)

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_id(traceparent: object) -> str | None:
    """The trace id of a W3C traceparent value, or None when absent or malformed."""
    if not isinstance(traceparent, str):
        return None
    m = _TRACEPARENT.match(traceparent.strip().lower())
    if m is None or m.group(1) == "0" * 32:
        return None
    return m.group(1)


def client_label(client_info: object) -> str | None:
    """`name/version` of a clientInfo object, or None."""
    if not isinstance(client_info, dict) or not isinstance(client_info.get("name"), str):
        return None
    version = client_info.get("version")
    return f"{client_info['name']}/{version}" if isinstance(version, str) else client_info["name"]


@dataclass(eq=False)
class RecordingSession:
    """One recording session the proxy writes to."""

    session_id: str
    rule: str
    key: str
    remote: str
    last_active: float
    inflight: int = 0
    handshakes: int = 0
    era: str | None = None
    client_info: object = None
    legacy_ids: set[str] = field(default_factory=set)
    closing: tuple[str, str] | None = None  # (reason, outcome) once an end is requested
    ended: bool = False


@dataclass(frozen=True, slots=True)
class Routing:
    """Where an exchange goes: the session, whether it is new, and sessions the routing closed
    (replaced by a new handshake or past the idle gap) that the caller must end."""

    session: RecordingSession
    created: bool
    closed: tuple[RecordingSession, ...] = ()


class SessionRouter:
    """Maps exchanges to recording sessions by the rule above."""

    def __init__(
        self,
        idle_gap_s: float = DEFAULT_IDLE_GAP_S,
        clock: Callable[[], float] = time.monotonic,
        new_id: Callable[[], str] = new_session_id,
    ) -> None:
        self.idle_gap_s = idle_gap_s
        self._clock = clock
        self._new_id = new_id
        self._by_legacy: dict[str, RecordingSession] = {}
        self._by_key: dict[str, RecordingSession] = {}
        self._client_of_remote: dict[str, str] = {}
        self._open: dict[str, RecordingSession] = {}

    def _new(self, rule: str, key: str, remote: str) -> RecordingSession:
        session = RecordingSession(self._new_id(), rule, key, remote, self._clock())
        self._open[session.session_id] = session
        return session

    def knows(self, legacy_id: str) -> bool:
        return legacy_id in self._by_legacy

    def route(
        self,
        *,
        remote: str,
        legacy_id: str | None = None,
        trace: str | None = None,
        client_info: object = None,
        handshake: bool = False,
        new_stream: bool = False,
    ) -> Routing:
        """The session for an exchange. `legacy_id` is a namespaced legacy session id
        ("mcp:<Mcp-Session-Id>" or "sse:<endpoint>"); `handshake` marks an `initialize` request;
        `new_stream` a 2024-11-05 SSE stream that just announced its endpoint (always a new
        session)."""
        now = self._clock()
        if new_stream:
            session = self._new(RULE_SSE, f"sse:{session_id_tail(self._new_id())}", remote)
            return Routing(session, True)
        if legacy_id is not None:
            known = self._by_legacy.get(legacy_id)
            if known is not None:
                known.last_active = now
                return Routing(known, False)
            # A session begun before this proxy started (or already closed): record what follows.
            session = self._new(RULE_SESSION_ID, legacy_id, remote)
            self.bind(legacy_id, session)
            return Routing(session, True)
        label = client_label(client_info)
        if label is not None:
            self._client_of_remote[remote] = label
        if trace is not None:
            rule, key = RULE_TRACE, f"trace:{trace}"
        else:
            label = label or self._client_of_remote.get(remote, "?")
            rule, key = RULE_CLIENT, f"client:{label}@{remote}"
        current = self._by_key.get(key)
        closed: list[RecordingSession] = []
        if current is not None:
            stale = now - current.last_active > self.idle_gap_s
            replaced = handshake and (current.handshakes > 0 or bool(current.legacy_ids))
            if stale or replaced:
                del self._by_key[key]
                # A session still reachable by its legacy id lives on; others end here.
                if not current.legacy_ids:
                    closed.append(current)
                    self.close(current, "idle_gap" if stale else "new_handshake", "ok")
                current = None
        if current is not None:
            current.last_active = now
            if handshake:
                current.handshakes += 1
            return Routing(current, False, tuple(closed))
        session = self._new(RULE_HANDSHAKE if handshake else rule, key, remote)
        session.handshakes = int(handshake)
        self._by_key[key] = session
        return Routing(session, True, tuple(closed))

    def bind(self, legacy_id: str, session: RecordingSession) -> None:
        """Route later exchanges carrying `legacy_id` to `session` (a session id the server
        assigned in its `initialize` reply, or an SSE stream's endpoint)."""
        if session.ended:
            return
        self._by_legacy[legacy_id] = session
        session.legacy_ids.add(legacy_id)

    def enter(self, session: RecordingSession) -> None:
        """An exchange of this session begins."""
        session.inflight += 1
        session.last_active = self._clock()

    def leave(self, session: RecordingSession) -> bool:
        """An exchange ends; True when the session is closing and this was its last exchange, so
        the caller must record its end now."""
        session.inflight -= 1
        session.last_active = self._clock()
        return session.closing is not None and session.inflight <= 0 and not session.ended

    def close(self, session: RecordingSession, reason: str, outcome: str) -> None:
        """Stop routing to a session; it ends once no exchange of it is in flight."""
        if session.closing is None:
            session.closing = (reason, outcome)
        for legacy_id in session.legacy_ids:
            if self._by_legacy.get(legacy_id) is session:
                del self._by_legacy[legacy_id]
        if self._by_key.get(session.key) is session:
            del self._by_key[session.key]

    def mark_ended(self, session: RecordingSession) -> None:
        session.ended = True
        self._open.pop(session.session_id, None)

    def expire(self) -> list[RecordingSession]:
        """Sessions idle past the gap with nothing in flight: closed, for the caller to end."""
        now = self._clock()
        out = []
        for session in list(self._open.values()):
            if session.ended or session.inflight > 0:
                continue
            if session.closing is not None or now - session.last_active > self.idle_gap_s:
                self.close(session, "idle_gap", "ok")
                out.append(session)
        return out

    def open_sessions(self) -> list[RecordingSession]:
        """Every session not yet ended (closing ones included)."""
        return [s for s in self._open.values() if not s.ended]


def session_id_tail(session_id: str) -> str:
    return session_id.rsplit("-", 1)[-1]
