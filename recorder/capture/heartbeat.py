"""Heartbeats: `ping` requests watched, so a peer that stops answering them is a recorded fault.

Why it exists: deployments keep sessions alive with a ping every 30 seconds and freeze a session
after three missed in a row, which no single frame shows. Pings are paired like any call
(`blackbox.recorder.log.pairing`, the calls dataset); this module adds what only a sequence of
pings shows:

- `HeartbeatWatch`, fed by the frame observer (`blackbox.recorder.capture.observer`, on the
  shipper's side, never the relay's): a ping is *missed* when the next ping in the same direction
  goes out while it is still unanswered, or when the peer answers a later request first. After
  `misses` consecutive missed pings (3 unless `BLACKBOX_HEARTBEAT_MISSES` says otherwise) it records
  a `fault` (`unresponsive`, stage transport, with the ping ids and the time since the peer last
  answered one); the first ping answered after that records `peer_back`. A peer that answers tool
  calls but not pings is exactly what this catches.
- `heartbeat_stats(calls)`: interval, jitter and missed pings of one session, for `doctor` and
  `report sessions`.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from blackbox.recorder.log import events, id_fields, parse

MISSES_ENV = "BLACKBOX_HEARTBEAT_MISSES"
DEFAULT_MISSES = 3
PING = "ping"

# (session, document): the session as the caller names it (an id, or the proxy's session object).
# What it returns (the proxy's append gives the seq) is ignored.
Emit = Callable[[Any, events.Document], object]


def configured_misses() -> int:
    """Consecutive missed pings that make a peer unresponsive (`BLACKBOX_HEARTBEAT_MISSES`)."""
    try:
        value = int(os.environ.get(MISSES_ENV, DEFAULT_MISSES))
    except ValueError:
        return DEFAULT_MISSES
    return value if value >= 1 else DEFAULT_MISSES


def _peer(direction: str) -> str:
    """The side that should answer a ping sent in `direction`."""
    return "server" if direction == "c2s" else "client"


class HeartbeatWatch:
    """Follows the pings of one or more sessions, in each direction."""

    def __init__(self, emit: Emit, misses: int | None = None) -> None:
        self.emit = emit
        self.misses = misses if misses is not None else configured_misses()
        # (session, direction) -> pings sent and not answered yet: [(id, seq, wall_ns)]
        self._open: dict[tuple[Any, str], list[tuple[str | None, int, int]]] = {}
        self._missed: dict[tuple[Any, str], list[str | None]] = {}
        self._last_answer: dict[tuple[Any, str], int] = {}
        self._down: set[tuple[Any, str]] = set()

    def ping(
        self, session_id: Any, direction: str, rpc_id: str | None, seq: int, wall_ns: int
    ) -> None:
        """A ping request went out in `direction`: the ones still waiting were missed."""
        key = (session_id, direction)
        waiting = self._open.setdefault(key, [])
        overdue, waiting[:] = list(waiting), [(rpc_id, seq, wall_ns)]
        self._miss(key, overdue, seq, wall_ns)

    def overtaken(
        self, session_id: Any, direction: str, request_seq: int, seq: int, wall_ns: int
    ) -> None:
        """The peer answered another request sent in `direction` (at `request_seq`): the pings
        sent before it and still waiting were skipped, so missed."""
        key = (session_id, direction)
        waiting = self._open.get(key)
        if not waiting:
            return
        overdue = [p for p in waiting if p[1] < request_seq]
        if overdue:
            waiting[:] = [p for p in waiting if p[1] >= request_seq]
            self._miss(key, overdue, seq, wall_ns)

    def _miss(
        self,
        key: tuple[Any, str],
        overdue: list[tuple[str | None, int, int]],
        seq: int,
        wall_ns: int,
    ) -> None:
        if not overdue:
            return
        session_id, direction = key
        missed = self._missed.setdefault(key, [])
        missed.extend(rpc_id for rpc_id, _seq, _ns in overdue)
        if len(missed) < self.misses or key in self._down:
            return
        self._down.add(key)
        last = self._last_answer.get(key)
        since = (
            f"{(wall_ns - last) / 1e9:.1f} s since it last answered one"
            if last
            else "it never answered one"
        )
        self.emit(
            session_id,
            events.Fault(
                fault="unresponsive",
                stage="transport",
                detail=f"the {_peer(direction)} left {len(missed)} pings in a row unanswered"
                f" ({since})",
                seq=seq,
                direction=direction,
                extra={
                    "peer": _peer(direction),
                    "ping_ids": list(missed),
                    "missed": len(missed),
                    "since_last_answer_ns": wall_ns - last if last else None,
                },
            ),
        )

    def answered(
        self, session_id: Any, direction: str, rpc_id: str | None, seq: int, wall_ns: int
    ) -> None:
        """The answer to a ping sent in `direction` came back (in the other direction)."""
        key = (session_id, direction)
        waiting = self._open.get(key, [])
        self._open[key] = [p for p in waiting if p[0] != rpc_id]
        missed = len(self._missed.get(key, []))
        self._missed[key] = []
        last = self._last_answer.get(key)
        self._last_answer[key] = wall_ns
        if key in self._down:
            self._down.discard(key)
            self.emit(
                session_id,
                events.PeerBack(
                    peer=_peer(direction),
                    silent_ns=wall_ns - last if last else None,
                    missed=missed,
                    rpc_id=rpc_id,
                    seq=seq,
                ),
            )

    def knows(self, session_id: Any, direction: str, rpc_id: str | None) -> bool:
        """Whether `rpc_id` is a ping sent in `direction` still waiting, or missed."""
        key = (session_id, direction)
        return any(p[0] == rpc_id for p in self._open.get(key, ())) or rpc_id in self._missed.get(
            key, ()
        )

    def waiting(self, session_id: Any) -> bool:
        """Whether the session has a ping without its answer, in either direction."""
        return any(
            self._open.get((session_id, d)) or self._missed.get((session_id, d))
            for d in ("c2s", "s2c")
        )

    def forget(self, session_id: Any) -> None:
        """The session ended: drop what is kept about it."""
        for d in ("c2s", "s2c"):
            for table in (self._open, self._missed, self._last_answer):
                table.pop((session_id, d), None)
            self._down.discard((session_id, d))


class FrameHeartbeats:
    """Heartbeats for a tap without a frame observer (the HTTP proxy). It parses a frame only
    when the frame names `"ping"` or its session has a ping waiting (else one byte search), and
    applies the next-ping rule only: HTTP requests run concurrently, so an answer to a later
    request says nothing about a ping. An error whose message starts with `own_prefix` was
    written by the tap itself (the upstream gave no answer): it is not the peer answering."""

    def __init__(self, emit: Emit, own_prefix: str, misses: int | None = None) -> None:
        self.watch = HeartbeatWatch(emit, misses)
        self.own_prefix = own_prefix
        self._watching: set[Any] = set()  # sessions with a ping waiting or missed

    def frame(self, session: Any, direction: str, raw: bytes, seq: int) -> None:
        if session not in self._watching and b'"ping"' not in raw:
            return
        wall_ns = time.time_ns()
        value, problem = parse(raw)
        if problem is not None:
            return
        for msg in value if isinstance(value, list) else [value]:
            if not isinstance(msg, dict) or "id" not in msg:
                continue
            rpc_id = id_fields(msg["id"])[0]
            if msg.get("method") == PING:
                self.watch.ping(session, direction, rpc_id, seq, wall_ns)
            elif "method" not in msg and not self._own(msg):
                asker = "s2c" if direction == "c2s" else "c2s"
                if self.watch.knows(session, asker, rpc_id):
                    self.watch.answered(session, asker, rpc_id, seq, wall_ns)
        if self.watch.waiting(session):
            self._watching.add(session)
        else:
            self._watching.discard(session)

    def forget(self, session: Any) -> None:
        """The session ended."""
        self._watching.discard(session)
        self.watch.forget(session)

    def _own(self, msg: dict[str, Any]) -> bool:
        error = msg.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return isinstance(message, str) and message.startswith(self.own_prefix)


# -- statistics ----------------------------------------------------------------------------------


def heartbeat_stats(calls: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """Interval, jitter (the standard deviation of the intervals) and missed pings of one
    session's calls (rows with `method`, `direction`, `started_ns`, `response_seq`); None when
    it has no pings. Per the direction that pinged most."""
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        if call.get("method") == PING and call.get("started_ns") is not None:
            by_dir.setdefault(str(call.get("direction")), []).append(call)
    if not by_dir:
        return None
    direction, pings = max(by_dir.items(), key=lambda kv: len(kv[1]))
    pings.sort(key=lambda c: c["started_ns"])
    gaps = [(b["started_ns"] - a["started_ns"]) / 1e9 for a, b in itertools.pairwise(pings)]
    return {
        "direction": direction,
        "pings": len(pings),
        "interval_s": round(statistics.fmean(gaps), 3) if gaps else None,
        "jitter_s": round(statistics.pstdev(gaps), 3) if len(gaps) > 1 else None,
        "missed": sum(1 for c in pings if c.get("response_seq") is None),
    }
