"""Cut a recorded session down to the few client requests that still reproduce its outcome.

A fault recorded in a session of two thousand calls is hard to read and slow to replay; the calls
that matter are usually one or two. This runs delta debugging (Zeller's ddmin) over the session's
client steps: it replays subsets against the server, keeps a subset whenever the outcome (a
recorded fault, the first divergence, or a text in the report) still happens, and stops when no
single step can be removed (1-minimal). The handshake (`initialize`, `notifications/initialized`,
`server/discover`) is always kept, and a kept step keeps what it depends on: a resource read
keeps the subscribe to its URI, a cancellation the request it cancels, a 2026-07-28 retry that
carries `requestState` the call it continues.

Calls the safety check skips (`--read-only`, or "n" at the prompt: replay/safety.py) are left
out of every trial and of the result.

The result is stored as a new session, marked derived from the original (`derived_from` in its
`session_started`), so it replays, serves and exports like any other.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from blackbox.recorder.log import Kind, NewEvent, StoredEvent, events, new_session_id
from blackbox.recorder.query import session_handle
from blackbox.recorder.store import EventStore
from blackbox.replay.recording import Recording, ReplayError, Step, build_recording, step_at_seq
from blackbox.replay.replayer import ReplayOptions, Target, default_target, replay_recording
from blackbox.replay.report import render_text
from blackbox.replay.results import ReplayResult
from blackbox.replay.safety import skipped_along

HANDSHAKE = frozenset({"initialize", "notifications/initialized", "server/discover"})
# The least a trial waits for the server to exit on its own (an exit goal): a crashing Python
# server is gone within tens of milliseconds; the margin is for a busy machine.
EXIT_WAIT_S = 0.75
# Records carried into the derived session besides the kept frames (the store adds the seal).
CARRIED = frozenset(
    {Kind.SESSION_STARTED, Kind.ERA_DETECTED, Kind.STDERR, Kind.FAULT, Kind.SESSION_ENDED}
)


@dataclass(frozen=True)
class Goal:
    """What must still happen for a subset to count: `fault` (a recorded fault, by name and the
    step it belongs to), `divergence` (the first divergence, by step label and status), or a
    text that must appear in the replay's report or the server's stderr."""

    until: str  # fault | divergence | text
    name: str = ""  # fault name, or divergence status
    label: str = ""  # the step's label (method and tool)
    text: str = ""
    exit_code: int | None = None
    signal: str | None = None

    def describe(self) -> str:
        if self.until == "fault":
            return f"fault {self.name} at {self.label}"
        if self.until == "divergence":
            return f"{self.label} {self.name}"
        return repr(self.text)


@dataclass
class MinimizeResult:
    original_id: str
    goal: Goal | None
    steps_before: int
    steps_after: int
    replays: int
    seconds: float
    derived_id: str | None = None
    not_reproduced: str | None = None  # why nothing was searched
    kept_labels: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return 1 if self.not_reproduced else 0

    def summary(self) -> str:
        return (
            f"{self.steps_before:,} requests -> {self.steps_after:,}, "
            f"{self.replays} replays, {self.seconds:.1f} s"
        )


# -- the goal -------------------------------------------------------------------------------


def _goal(until: str, rec: Recording, baseline: ReplayResult) -> tuple[Goal | None, str | None]:
    """The goal the baseline replay shows, or (None, why it shows none)."""
    if until == "fault":
        if not rec.faults:
            raise ReplayError(
                f"session {rec.session_id} recorded no fault: use --until divergence or a text"
            )
        for fr in sorted(baseline.faults, key=lambda fr: _severity(fr.fault.fault)):
            if fr.reproduced:
                f = fr.fault
                goal = Goal("fault", f.fault, f.label, exit_code=f.exit_code, signal=f.signal)
                return goal, None
        why = "; ".join(fr.describe() for fr in baseline.faults)
        return None, f"the recorded fault does not reproduce against {baseline.target}: {why}"
    if until == "divergence":
        for step in baseline.steps:
            if step.diverged:
                return Goal("divergence", step.status, step.label), None
        return None, f"the session replays equivalent against {baseline.target}: no divergence"
    if until in _report_text(baseline):
        return Goal("text", text=until), None
    return None, f"{until!r} does not appear in the replay against {baseline.target}"


def _severity(fault: str) -> int:
    """Which recorded fault a `fault` goal takes when several reproduce: the server going away
    first, then a transport fault, then errors, then silences."""
    order = {"server_exit": 0, "jsonrpc_error": 2, "tool_error": 3, "no_response": 4}
    return order.get(fault, 1)


def _report_text(result: ReplayResult) -> str:
    stderr = result.run.stderr_tail if result.run is not None else []
    return "\n".join([render_text(result), *stderr])


def reproduces(goal: Goal, rec: Recording, result: ReplayResult) -> bool:
    """Whether a replay of a (reduced) recording shows the goal."""
    run = result.run
    if goal.until == "text":
        return goal.text in _report_text(result)
    if goal.until == "divergence":
        return any(s.label == goal.label and s.status == goal.name for s in result.steps)
    assert run is not None
    if goal.name == "server_exit":
        if run.gone_after_step is None or run.exit is None:
            return False
        return (goal.exit_code, goal.signal) in (
            (None, None),
            (run.exit.exit_code, run.exit.signal),
        )
    if goal.name in ("tool_error", "jsonrpc_error", "no_response"):
        for step in rec.steps:
            if step.label != goal.label or step.number not in run.sent_at:
                continue
            got = run.responses.get(step.number)
            if goal.name == "no_response" and got is None and step.frame.kind == "request":
                return True
            if got is not None and goal.name == "tool_error" and got.is_error:
                return True
            if got is not None and goal.name == "jsonrpc_error" and got.kind == "error":
                return True
        return False
    if any(f.get("fault") == goal.name for f in run.transport_faults):
        return True
    return any(fr.reproduced and fr.fault.fault == goal.name for fr in result.faults)


# -- dependencies and reduced recordings -----------------------------------------------------


def _params(step: Step) -> dict:
    message = step.frame.message
    params = message.get("params") if isinstance(message, dict) else None
    return params if isinstance(params, dict) else {}


def dependencies(steps: Sequence[Step]) -> dict[int, set[int]]:
    """Step number -> the earlier steps it cannot be replayed without."""
    deps: dict[int, set[int]] = {}
    subscribed: dict[str, int] = {}
    by_id: dict[object, int] = {}
    calls: dict[tuple[str | None, object], int] = {}
    for step in steps:
        params, method, need = _params(step), step.frame.method, set()
        uri = params.get("uri")
        if method == "resources/subscribe" and isinstance(uri, str):
            subscribed[uri] = step.number
        elif method in ("resources/read", "resources/unsubscribe") and uri in subscribed:
            need.add(subscribed[uri])
        if method == "notifications/cancelled" and params.get("requestId") in by_id:
            need.add(by_id[params["requestId"]])
        key = (method, params.get("name") or params.get("uri"))
        if params.get("requestState") is not None and key in calls:
            need.add(calls[key])  # a 2026-07-28 round continues the call that asked for input
        if step.frame.kind == "request" and isinstance(step.frame.message, dict):
            by_id[step.frame.message.get("id")] = step.number
            calls[key] = step.number
        deps[step.number] = need
    return deps


def closure(chosen: set[int], deps: dict[int, set[int]]) -> set[int]:
    out, todo = set(chosen), list(chosen)
    while todo:
        for dep in deps.get(todo.pop(), ()):
            if dep not in out:
                out.add(dep)
                todo.append(dep)
    return out


def _kept_seqs(rec: Recording, kept: set[int]) -> set[int]:
    """The seqs of the frames a reduced recording holds: each kept step and its response, and
    the server's own requests and notifications that followed a kept step (or none)."""
    seqs: set[int] = set()
    for step in rec.steps:
        if step.number in kept:
            seqs.add(step.frame.seq)
            if step.response is not None:
                seqs.add(step.response.seq)
    for req in rec.server_requests:
        if req.after_step == 0 or req.after_step in kept:
            seqs.add(req.frame.seq)
            if req.answer is not None:
                seqs.add(req.answer.seq)
    for note in rec.notifications:
        after = step_at_seq(rec.steps, note.seq)
        if after is None or after.number in kept:
            seqs.add(note.seq)
    return seqs


def reduced_events(
    records: Sequence[StoredEvent], rec: Recording, kept: set[int], with_outcome: bool
) -> list[StoredEvent]:
    """The records of a reduced session: kept frames, and (`with_outcome`) the recorded faults
    and end, so that a replay of it judges the recorded faults."""
    seqs = _kept_seqs(rec, kept)
    carried = CARRIED if with_outcome else CARRIED - {Kind.FAULT, Kind.SESSION_ENDED}
    return [
        ev
        for ev in records
        if (ev.kind == Kind.FRAME and ev.seq in seqs)
        or (ev.kind != Kind.FRAME and ev.kind in carried)
    ]


# -- ddmin ----------------------------------------------------------------------------------


def ddmin(
    items: list[int], test: Callable[[list[int]], bool], guess: int | None = None
) -> list[int]:
    """Zeller's ddmin: a 1-minimal sublist of `items` for which `test` holds (it holds for
    `items`). Subsets first, then complements, doubling the granularity when neither helps.

    `guess` is the item most likely to be all that matters (the step the goal names): tried
    alone first, it ends the search in two tests when it is, since nothing smaller than one
    item holds once the empty list does not."""
    if test([]):
        return []
    if guess is not None and guess in items and test([guess]):
        return [guess]
    n = 2
    while len(items) >= 2:
        size = len(items) / n
        chunks = [items[int(i * size) : int((i + 1) * size)] for i in range(n)]
        chunks = [c for c in chunks if c]
        reduced = False
        for chunk in chunks:
            if test(chunk):
                items, n, reduced = chunk, 2, True
                break
        if not reduced and n > 2:
            for chunk in chunks:
                inside = set(chunk)
                complement = [i for i in items if i not in inside]
                if test(complement):
                    items, n, reduced = complement, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(items):
                break
            n = min(n * 2, len(items))
    return items


# -- the search -----------------------------------------------------------------------------


def minimize_session(
    store: EventStore,
    session_ref: str,
    *,
    against: str | None = None,
    url: str | None = None,
    until: str = "fault",
    options: ReplayOptions | None = None,
    progress: Callable[[str], None] | None = None,
    guard: Callable[[Recording], frozenset[int]] | None = None,
) -> MinimizeResult:
    """Minimise a session for `until` (fault, divergence, or a text) and store the result as a
    derived session. When the baseline replay does not show the goal, nothing is searched and
    the result says why (`not_reproduced`). `guard` (replay/safety.py) sees the recording
    first and returns the steps to leave out of every trial, or raises to refuse."""
    say = progress or (lambda _msg: None)
    began = time.monotonic()
    options = options or ReplayOptions()
    original_id = store.resolve(session_ref)
    records = list(store.read_session(original_id))
    if not records:
        raise ReplayError(f"session {original_id} has no records")
    rec = build_recording(original_id, records)
    skip = skipped_along(rec, guard(rec) if guard is not None else frozenset())
    target = default_target(rec, against, url)
    say(f"replaying all {len(rec.steps):,} steps of {original_id} against {target.describe()}")
    whole = copy.copy(options)
    # Trials renumber their steps: only this replay of the whole session skips by number.
    whole.skip_steps = skip
    baseline = replay_recording(rec, target, whole)
    goal, why = _goal(until, rec, baseline)
    replays = 1
    if goal is None:
        return MinimizeResult(
            original_id, None, len(rec.steps), len(rec.steps), replays, _since(began), None, why
        )
    say(f"goal: {goal.describe()}")
    fixed = [s.number for s in rec.steps if s.frame.method in HANDSHAKE]
    candidates = [
        s.number for s in rec.steps if s.frame.method not in HANDSHAKE and s.number not in skip
    ]
    deps = dependencies(rec.steps)
    cache: dict[frozenset[int], bool] = {}
    exit_goal = goal.name == "server_exit"
    trial_options = _trial_options(options, baseline) if exit_goal else options

    def test(subset: list[int]) -> bool:
        nonlocal replays
        kept = frozenset(closure(set(subset), deps) | set(fixed)) - skip
        if kept not in cache:
            replays += 1
            cache[kept] = _trial(records, rec, kept, target, trial_options, goal, exit_goal)
            verdict = "reproduces" if cache[kept] else "does not"
            say(f"replay {replays}: {len(kept):,} steps, {verdict}")
        return cache[kept]

    found = ddmin(candidates, test, guess=_named_step(rec, goal, candidates))
    kept = (closure(set(found), deps) | set(fixed)) - skip
    derived = _store_derived(store, records, rec, kept, goal)
    return MinimizeResult(
        original_id,
        goal,
        len(rec.steps),
        len(kept),
        replays,
        _since(began),
        derived,
        kept_labels=tuple(s.label for s in rec.steps if s.number in kept),
    )


def _named_step(rec: Recording, goal: Goal, candidates: list[int]) -> int | None:
    """The step the goal names by its label: a fault shows at the last step so labelled before
    it (a crash ends the session), a divergence at the first."""
    named = [s.number for s in rec.steps if goal.label and s.label == goal.label]
    named = [n for n in named if n in candidates]
    if not named:
        return None
    return named[-1] if goal.until == "fault" else named[0]


def _since(began: float) -> float:
    return time.monotonic() - began


def _trial_options(options: ReplayOptions, baseline: ReplayResult) -> ReplayOptions:
    """Options for trials of an exit goal. With the recorded exit in a trial the replayer waits
    for the server to exit on its own: in every trial that does not reproduce, so that wait is
    cut to a few times the slowest response of the full replay.

    The first response also carries the server's start-up (what was sent before the server was
    up waited for it): the responses a trial waits for keep it in, since every trial starts a
    server; the exit wait, which begins once every response is in, counts each response from
    when it was sent or from the server's first answer, whichever came later (an SDK server's
    start-up of 1.5 s, tripled, made every trial that does not reproduce wait 5 s for an exit
    that a crashing server makes within milliseconds)."""
    run = baseline.run
    slowest = after_start = 0.0
    if run is not None and run.arrived_at:
        up = min(run.arrived_at.values())
        answered = [(run.sent_at[n], run.arrived_at[n]) for n in run.arrived_at if n in run.sent_at]
        slowest = max(((got - sent) / 1e9 for sent, got in answered), default=0.0)
        after_start = max(((got - max(sent, up)) / 1e9 for sent, got in answered), default=0.0)
    trial = copy.copy(options)
    trial.response_timeout_s = min(options.response_timeout_s, max(EXIT_WAIT_S, 3 * slowest))
    trial.exit_wait_s = min(trial.response_timeout_s, max(EXIT_WAIT_S, 3 * after_start))
    return trial


def _trial(
    records: Sequence[StoredEvent],
    rec: Recording,
    kept: frozenset[int],
    target: Target,
    options: ReplayOptions,
    goal: Goal,
    with_outcome: bool,
) -> bool:
    # Only an exit goal keeps the recorded end in trials (so the replayer waits for the exit):
    # for any other goal that wait would only cost time.
    sub = build_recording(rec.session_id, reduced_events(records, rec, set(kept), with_outcome))
    return reproduces(goal, sub, replay_recording(sub, target, options))


def _store_derived(
    store: EventStore, records: Sequence[StoredEvent], rec: Recording, kept: set[int], goal: Goal
) -> str:
    """Append the reduced session: the kept records renumbered, fault seqs remapped, and a
    `session_started` naming the original."""
    chosen = reduced_events(records, rec, kept, True)
    new_seq: dict[int, int] = {ev.seq: i for i, ev in enumerate(chosen, start=1)}
    old_seqs = sorted(new_seq)

    def remap(old: object) -> object:
        if not isinstance(old, int):
            return old
        earlier = [s for s in old_seqs if s <= old]
        return new_seq[earlier[-1]] if earlier else 1

    sid = new_session_id()
    out: list[NewEvent] = []
    for ev in chosen:
        raw = ev.raw
        if ev.kind == Kind.SESSION_STARTED:
            doc = events.decode_dict(ev.kind, raw) or {}
            doc = doc | {
                "name": f"minimized {rec.name or session_handle(store, rec.session_id)}",
                "derived_from": rec.session_id,
                "derived_by": "minimize",
                "minimized_for": goal.describe(),
            }
            raw = events.encode(events.from_dict(ev.kind, doc))
        elif ev.kind == Kind.FAULT:
            fault = events.decode_dict(ev.kind, raw)
            if fault is not None and fault.get("seq") is not None:
                fault = fault | {"seq": remap(fault["seq"])}
                raw = events.encode(events.from_dict(ev.kind, fault))
        out.append(
            NewEvent(sid, new_seq[ev.seq], ev.wall_ns, ev.mono_ns, ev.kind, ev.direction, raw)
        )
    store.append(out)
    return sid
