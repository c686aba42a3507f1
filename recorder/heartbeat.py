"""Heartbeats: `ping` requests watched, so a peer that stops answering them is a recorded fault.

Why it exists: deployments keep sessions alive with a ping every 30 seconds and freeze a session
after three missed in a row; a `ping` used to be just another frame. Pings are paired like any
call (`recorder.pairing`, the calls dataset); this module adds what only a sequence of pings
shows:

- `HeartbeatWatch`, fed by the frame observer (`recorder.observer`, on the shipper's side, never
  the relay's): a ping is *missed* when the next ping in the same direction goes out while it is
  still unanswered, or when the peer answers a later request first. After `misses` consecutive
  missed pings (3 unless `BLACKBOX_HEARTBEAT_MISSES` says otherwise) it records a `fault`
  (`unresponsive`, stage transport, with the ping ids and the time since the peer last answered
  one); the first ping answered after that records `peer_back`. A peer that answers tool calls
  but not pings is exactly what this catches.
- `heartbeat_stats(calls)`: interval, jitter and missed pings of one session, for `doctor` and
  `report sessions`.
"""

from __future__ import annotations

import itertools
import os
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from recorder import events

MISSES_ENV = "BLACKBOX_HEARTBEAT_MISSES"
DEFAULT_MISSES = 3
PING = "ping"

Emit = Callable[[str, events.Document], None]  # (session id, document)


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
        self._open: dict[tuple[str, str], list[tuple[str | None, int, int]]] = {}
        self._missed: dict[tuple[str, str], list[str | None]] = {}
        self._last_answer: dict[tuple[str, str], int] = {}
        self._down: set[tuple[str, str]] = set()

    def ping(
        self, session_id: str, direction: str, rpc_id: str | None, seq: int, wall_ns: int
    ) -> None:
        """A ping request went out in `direction`: the ones still waiting were missed."""
        key = (session_id, direction)
        waiting = self._open.setdefault(key, [])
        overdue, waiting[:] = list(waiting), [(rpc_id, seq, wall_ns)]
        self._miss(key, overdue, seq, wall_ns)

    def overtaken(
        self, session_id: str, direction: str, request_seq: int, seq: int, wall_ns: int
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
        key: tuple[str, str],
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
        self, session_id: str, direction: str, rpc_id: str | None, seq: int, wall_ns: int
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
