"""Idle sessions: after `--idle-after` without a frame a session gets a `session_idle` record, and
the first traffic after it a `session_resumed` one.

Why it exists: a stdio session that sits idle for hours looked the same as a busy one, so "how long
was this session really in use" had no answer. Deployments end sessions after an idle timeout (120
minutes is common); the recorder marks the same moments without ending anything: the session
stays open and recorded, and its in-use time is its span minus the idle stretches.

`IdleWatch` follows one stdio session: the relay calls `touch()` once per chunk it reads (an
attribute write and a flag test; the rare transitions take a lock), and a background thread
notices the silence. `IdleSessions` does the same for the proxy's many sessions, driven by its
reaper and its session routing (no thread of its own).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from blackbox.recorder.log import events
from blackbox.recorder.store import EventStore, records_of_kinds

DEFAULT_IDLE_AFTER_S = 120 * 60.0
# The columns `sessions --idle` adds.
IDLE_COLUMNS = ["idle_periods", "idle_s", "in_use_s"]
# The watcher looks at least this often; less often for long limits (a quarter of the limit).
_MAX_CHECK_S = 5.0

Emit = Callable[[events.Document], None]


def check_interval(idle_after_s: float) -> float:
    """How often to look for silence: a quarter of the limit, between 50 ms and 5 s."""
    return max(0.05, min(_MAX_CHECK_S, idle_after_s / 4))


def _wall_ns_of(mono: float) -> int:
    """A monotonic reading (s) as wall clock ns."""
    return time.time_ns() - int((time.monotonic() - mono) * 1e9)


class IdleWatch:
    """Marks one session idle after `idle_after_s` without traffic, and resumed after."""

    def __init__(self, idle_after_s: float, emit: Emit) -> None:
        self.idle_after_s = idle_after_s
        self.emit = emit
        self.last = time.monotonic()
        self.idle = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="blackbox-idle", daemon=True)

    @classmethod
    def started(cls, idle_after_s: float | None, emit: Emit) -> IdleWatch | None:
        """A running watch, or None when `idle_after_s` is None (idle marking is off)."""
        if not idle_after_s:
            return None
        watch = cls(idle_after_s, emit)
        watch.start()
        return watch

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)

    def touch(self, direction: str) -> None:
        """Traffic: called by the relay before it journals what it read."""
        if self.idle:
            self._resume(direction)
        self.last = time.monotonic()

    def _resume(self, direction: str) -> None:
        with self._lock:
            if not self.idle:
                return
            self.idle = False
            idle_ns = int((time.monotonic() - self.last) * 1e9)
            self.emit(events.SessionResumed(idle_ns=idle_ns, direction=direction))

    def _run(self) -> None:
        interval = check_interval(self.idle_after_s)
        while not self._stop.wait(interval):
            self.check()

    def check(self) -> bool:
        """Mark the session idle if it has been silent long enough; True when it did now."""
        with self._lock:
            last = self.last
            if self.idle or time.monotonic() - last < self.idle_after_s:
                return False
            self.idle = True
            self.emit(
                events.SessionIdle(
                    idle_after_ns=int(self.idle_after_s * 1e9), last_frame_ns=_wall_ns_of(last)
                )
            )
            return True


class IdleSessions:
    """The proxy's idle marking over its open sessions (objects with `session_id`,
    `last_active` (monotonic s) and `ended`)."""

    def __init__(self, idle_after_s: float, append: Callable[[Any, str, bytes], Any]) -> None:
        self.idle_after_s = idle_after_s
        self.append = append  # (session, kind, raw)
        self._idle: dict[str, float] = {}  # session id -> its last activity when marked idle

    def sweep(self, sessions: Iterable[Any], now: float) -> None:
        """Mark the sessions silent past the limit idle."""
        for session in sessions:
            sid = session.session_id
            # An open stream with nothing on it (the GET stream a client keeps) is idle too.
            if session.ended or sid in self._idle:
                continue
            if now - session.last_active >= self.idle_after_s:
                self._idle[sid] = session.last_active
                doc = events.SessionIdle(
                    idle_after_ns=int(self.idle_after_s * 1e9),
                    last_frame_ns=_wall_ns_of(session.last_active),
                )
                self.append(session, doc.KIND, events.encode(doc))

    def resume(self, session: Any, now: float) -> None:
        """Traffic in `session`, which may have been marked idle."""
        since = self._idle.pop(session.session_id, None)
        if since is not None:
            doc = events.SessionResumed(idle_ns=int((now - since) * 1e9), direction="c2s")
            self.append(session, doc.KIND, events.encode(doc))

    def forget(self, session: Any) -> None:
        self._idle.pop(session.session_id, None)


# -- reading it back -----------------------------------------------------------------------------


def idle_summary(store: EventStore) -> dict[str, dict[str, int]]:
    """Sessions that went idle: id -> `idle_periods` and `idle_ns` (each stretch from its last
    frame to the traffic that resumed it; one never resumed counts up to the session's end, or
    now while it is open)."""
    out: dict[str, dict[str, int]] = {}
    open_since: dict[str, int] = {}
    kinds = (events.SessionIdle.KIND, events.SessionResumed.KIND)
    for sid, kind, wall_ns, raw in records_of_kinds(store, kinds):
        row = out.setdefault(sid, {"idle_periods": 0, "idle_ns": 0})
        if kind == events.SessionIdle.KIND:
            idle = events.decode_as(events.SessionIdle, raw)
            row["idle_periods"] += 1
            since = idle.last_frame_ns if idle is not None and idle.last_frame_ns else wall_ns
            open_since[sid] = since
        else:
            resumed = events.decode_as(events.SessionResumed, raw)
            opened = open_since.pop(sid, None)
            if opened is not None:
                row["idle_ns"] += max(0, wall_ns - opened)
            elif resumed is not None and resumed.idle_ns:
                row["idle_ns"] += resumed.idle_ns
    for sid, since in open_since.items():
        ended = store.session(sid).ended_ns or time.time_ns()
        out[sid]["idle_ns"] += max(0, ended - since)
    return out


def idle_session_rows(store: EventStore, rows: list[dict], limit: int | None) -> list[dict]:
    """`rows` (session rows, `id` keyed) narrowed to the sessions that went idle, each with its
    idle time and the time it was in use (its span less the idle stretches)."""
    summary = idle_summary(store)
    out = []
    for row in rows:
        found = summary.get(row["id"])
        if found is None:
            continue
        idle_s = round(found["idle_ns"] / 1e9, 3)
        duration = row.get("duration_s")
        out.append(
            {
                **row,
                "idle_periods": found["idle_periods"],
                "idle_s": idle_s,
                "in_use_s": round(max(0.0, duration - idle_s), 3) if duration is not None else None,
            }
        )
        if limit is not None and len(out) >= limit:
            break
    return out
