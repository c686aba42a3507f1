"""Replay a session recorded in one protocol era against a server in another (filled below)."""

from __future__ import annotations

from collections.abc import Callable

from recorder.store import EventStore
from replay.recording import Recording
from replay.replayer import ReplayOptions, Target, replay_recording
from replay.results import ReplayResult


def bridge_replay(
    rec: Recording,
    target: Target,
    options: ReplayOptions | None = None,
    *,
    era: str | None = None,
    store: EventStore | None = None,
    progress: Callable[[str], None] | None = None,
) -> ReplayResult:
    """Replay `rec` as recorded, or re-driven in protocol era `era`."""
    return replay_recording(rec, target, options, store=store, progress=progress)
