"""Replay many sessions as one regression suite: select them, run them in parallel, sum them up.

A team keeps its interesting sessions as a suite and replays every one against each new server
build in CI. This module selects the sessions (ids, a name glob, an age, or a saved suite), runs
`replay_session` on each in a pool of threads (the work is the server processes' and the pipes':
the threads mostly wait), and gives one `SessionOutcome` per session in the order asked. Saved
suites are `suite_saved` records in the store, one small session per save, so they are part of
the same append-only log as everything else. Rendering lives in replay/suite_report.py.
"""

from __future__ import annotations

import copy
import fnmatch
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from blackbox.recorder import BlackboxError
from blackbox.recorder.log import Direction, NewEvent, SessionInfo, events, new_session_id
from blackbox.recorder.query import count_sessions, derived_outcome, handles_for, short_handles
from blackbox.recorder.store import EventStore
from blackbox.replay.compare import summarize
from blackbox.replay.recording import Recording, ReplayError
from blackbox.replay.replayer import ReplayOptions, replay_session
from blackbox.replay.report import as_json, render_text
from blackbox.replay.results import ReplayResult

Guard = Callable[[Recording], frozenset[int]]

SUITE_PREFIX = "suite:"  # the session name a saved suite is stored under


@dataclass
class SessionOutcome:
    """One session's line in a suite: its verdict, the first divergence and the whole report."""

    session_id: str
    name: str | None
    status: str  # equivalent | diverged | fault not reproduced | error
    first: str = ""  # the first divergence, one line ("" when equivalent)
    explanation: str = ""  # the whole text report, or the error
    duration_s: float = 0.0
    replay_id: str | None = None
    report: dict | None = None  # the JSON report (None on error)
    handle: str = ""  # the session's short handle (`blackbox.recorder.query.handles`)
    # The recording's counts and outcome as every surface shows them (`query.count_sessions`,
    # `query.derived_outcome`): a CI report says what the replayed session held.
    recorded: dict[str, int | str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "equivalent"

    @property
    def short_id(self) -> str:
        """The handle `blackbox sessions` prints and every command takes."""
        return self.handle or handles_for([self.session_id])[self.session_id]

    @property
    def title(self) -> str:
        """The test case name: the session's name and short id."""
        return f"{self.name or 'session'} [{self.short_id}]"


@dataclass
class SuiteResult:
    outcomes: list[SessionOutcome]
    duration_s: float
    jobs: int
    target: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for o in self.outcomes:
            self.counts[o.status] = self.counts.get(o.status, 0) + 1

    @property
    def exit_code(self) -> int:
        """0 when every session replayed equivalent, else 1 (usage errors raise instead)."""
        return 0 if all(o.passed for o in self.outcomes) else 1


# -- saved suites ---------------------------------------------------------------------------


def save_suite(store: EventStore, name: str, refs: Sequence[str]) -> tuple[str, list[str]]:
    """Store suite `name` as the sessions `refs` resolve to; returns (record session, ids)."""
    if not name.strip() or any(c in name for c in "\n\r"):
        raise ReplayError("a suite needs a name on one line")
    if not refs:
        raise ReplayError(f"suite {name}: name at least one session")
    ids = list(dict.fromkeys(store.resolve(ref) for ref in refs))
    now = time.time_ns()
    sid = new_session_id(now)
    docs: list[events.Document] = [
        events.started_here(
            name=SUITE_PREFIX + name, transport=None, command=["blackbox", "suite", "add", name]
        ),
        events.SuiteSaved(name=name, sessions=ids),
        events.SessionEnded(reason="completed", outcome="ok"),
    ]
    store.append(
        [
            NewEvent(sid, seq, now + seq, seq, doc.KIND, Direction.NONE, events.encode(doc))
            for seq, doc in enumerate(docs, start=1)
        ]
    )
    return sid, ids


def load_suite(store: EventStore, name: str) -> list[str]:
    """The session ids of the newest save of suite `name`."""
    for info in store.list_sessions(name=SUITE_PREFIX + name):
        for ev in store.read_session(info.session_id):
            if ev.kind == events.SuiteSaved.KIND:
                doc = events.decode_as(events.SuiteSaved, ev.raw)
                if doc is not None:
                    return list(doc.sessions)
    raise ReplayError(f"no suite named {name!r}: save one with 'blackbox suite add {name} ...'")


def list_suites(store: EventStore) -> list[tuple[str, int, int | None]]:
    """(name, number of sessions, saved at ns) of every saved suite, newest save per name."""
    seen: dict[str, tuple[str, int, int | None]] = {}
    for info in store.list_sessions():
        if not (info.name or "").startswith(SUITE_PREFIX) or info.transport is not None:
            continue
        name = (info.name or "")[len(SUITE_PREFIX) :]
        if name not in seen:
            seen[name] = (name, len(load_suite(store, name)), info.started_ns)
    return sorted(seen.values())


# -- selection ------------------------------------------------------------------------------


def select_sessions(
    store: EventStore,
    refs: Sequence[str] = (),
    *,
    name_glob: str | None = None,
    since_ns: int | None = None,
    suite: str | None = None,
) -> list[SessionInfo]:
    """The sessions a suite run replays, oldest first and each once: those `refs` name, those of
    a saved suite, and recorded sessions (not replays, not the recorder's own) whose name
    matches `name_glob` and that started after `since_ns`. Raises when nothing is selected."""
    ids: list[str] = [store.resolve(ref) for ref in refs]
    if suite is not None:
        ids += load_suite(store, suite)
    if name_glob is not None or (since_ns is not None and not ids):
        for info in reversed(store.list_sessions(since_ns=since_ns)):
            if info.replay_of or info.transport is None or not info.frames:
                continue
            if name_glob is None or fnmatch.fnmatchcase(info.name or "", name_glob):
                ids.append(info.session_id)
    elif since_ns is not None:
        ids = [i for i in ids if (store.session(i).started_ns or 0) >= since_ns]
    if not ids:
        raise ReplayError("no session selected: name sessions, --name GLOB, --since or --suite")
    return [store.session(i) for i in dict.fromkeys(ids)]


# -- running --------------------------------------------------------------------------------


def first_divergence(result: ReplayResult) -> str:
    """The first thing that did not replay the same, in one line."""
    for step in result.steps:
        if step.status == "ok":
            continue
        name = step.method or "frame"
        if step.tool:
            name += f" {step.tool}"
        text = f"step {step.number} (seq {step.seq}) {name}: {step.status}"
        if step.differences:
            d = step.differences[0]
            text += (
                f" at {d.path}: recorded {summarize(d.recorded, 60)}, "
                f"replayed {summarize(d.replayed, 60)}"
            )
        elif step.note:
            text += f": {step.note}"
        return text
    for extra in result.extras:
        return f"{extra['what']} {extra.get('method') or ''}".rstrip()
    for fault in result.faults:
        if not fault.reproduced:
            return fault.describe()
    return ""


def _outcome(info: SessionInfo, result: ReplayResult, seconds: float) -> SessionOutcome:
    return SessionOutcome(
        session_id=info.session_id,
        name=info.name,
        status=result.verdict,
        first=first_divergence(result) if result.exit_code else "",
        explanation=render_text(result),
        duration_s=seconds,
        replay_id=result.replay_id,
        report=as_json(result),
    )


def replay_one(
    store: EventStore,
    info: SessionInfo,
    against: str | None,
    url: str | None,
    options: ReplayOptions,
    guard: Guard | None = None,
) -> SessionOutcome:
    """Replay one session of a suite; a session that cannot run (a replay the safety `guard`
    refused included) is an `error` outcome, not an exception, so one broken session does not
    stop the others."""
    began = time.monotonic()
    try:
        result = replay_session(
            store,
            info.session_id,
            against=against,
            url=url,
            options=copy.deepcopy(options),
            guard=guard,
        )
    except (BlackboxError, OSError) as exc:
        return SessionOutcome(
            info.session_id,
            info.name,
            "error",
            first=f"could not replay: {exc}",
            explanation=str(exc),
            duration_s=time.monotonic() - began,
        )
    return _outcome(info, result, time.monotonic() - began)


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


def run_suite(
    store: EventStore,
    sessions: Sequence[SessionInfo],
    *,
    against: str | None = None,
    url: str | None = None,
    options: ReplayOptions | None = None,
    jobs: int | None = None,
    on_done: Callable[[SessionOutcome, int, int], None] | None = None,
    guard: Guard | None = None,
) -> SuiteResult:
    """Replay every session, `jobs` at a time; outcomes come back in the order of `sessions`.
    `on_done(outcome, done, total)` is called as each finishes (progress); `guard` is replay
    safety's check (replay/safety.py), run on each session before anything is sent."""
    options = options or ReplayOptions()
    options.check()
    jobs = jobs or default_jobs()
    if jobs < 1:
        raise ReplayError("--jobs must be at least 1")
    began = time.monotonic()
    outcomes: list[SessionOutcome | None] = [None] * len(sessions)
    done = 0
    lock = threading.Lock()
    # Counted before any replay is stored: the handles are those `sessions` printed.
    handles = short_handles(store, [info.session_id for info in sessions])
    counted = count_sessions(store, [info.session_id for info in sessions])

    def work(index: int) -> None:
        nonlocal done
        outcome = replay_one(store, sessions[index], against, url, options, guard)
        outcome.handle = handles.get(outcome.session_id, "")
        counts = counted[outcome.session_id]
        outcome.recorded = {**counts.as_dict(), "outcome": derived_outcome(sessions[index], counts)}
        with lock:
            outcomes[index] = outcome
            done += 1
            if on_done is not None:
                on_done(outcome, done, len(sessions))

    with ThreadPoolExecutor(max_workers=min(jobs, max(1, len(sessions)))) as pool:
        for future in [pool.submit(work, i) for i in range(len(sessions))]:
            future.result()
    return SuiteResult(
        outcomes=[o for o in outcomes if o is not None],
        duration_s=time.monotonic() - began,
        jobs=jobs,
        target=url or against,
    )
