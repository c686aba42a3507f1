"""Re-drive a recorded session against a server and say, step by step, whether it still behaves.

The replayer re-sends the client's frames exactly as recorded (a legacy handshake stays a
handshake; a 2026-07-28 frame keeps its `_meta`), in causal order: a frame recorded after a
response is sent only after the replayed response arrives. `timing="original"` also keeps the
recorded gap between each frame and the event it followed, scaled by `speed`. Requests the server
makes of the client are answered from the recording, matched on method and params.

Every run is itself recorded: a new session whose `session_started` names the original in
`replay_of`, holding the frames as sent and received, and one `replay_step` record per divergence.
This module drives and stores; the verdicts come from replay/evaluate.py, in the types of
replay/results.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from blackbox.recorder.log import Direction, Kind, NewEvent, events, new_session_id
from blackbox.recorder.query import session_handle, short_handles
from blackbox.recorder.store import EventStore
from blackbox.replay.compare import DEFAULT_MASKS, Masks, format_path, parse_pattern
from blackbox.replay.drivers import HttpDriver, Inbound, StdioDriver, TransportClosed
from blackbox.replay.era_bridge import bridged_recording, check_era
from blackbox.replay.evaluate import describe_gone, evaluate, learn_masks
from blackbox.replay.inject import Injection
from blackbox.replay.matchers import matches, nearest
from blackbox.replay.recording import (
    Frame,
    Recording,
    ReplayError,
    Step,
    frame_from_raw,
    load_recording,
)
from blackbox.replay.results import SKIPPED, SKIPPED_ALONG, ReplayResult, Run
from blackbox.replay.safety import skipped_along

TAP_VERSION = "replay-1"
# The second learning run starts this long after the first one ended, so any answer of the second
# comes more than a second after any answer of the first: second-resolution clocks then differ.
LEARN_SPACING_S = 1.1
SPIN_NS = 1_000_000  # the last millisecond of a timed wait is spent yielding, not sleeping


@dataclass(frozen=True, slots=True)
class Target:
    """What to replay against: a stdio command or a Streamable HTTP URL."""

    argv: tuple[str, ...] | None = None
    url: str | None = None
    cwd: str | None = None

    def describe(self) -> str:
        return self.url if self.url else shlex.join(self.argv or ())

    def driver(self) -> StdioDriver | HttpDriver:
        if self.url:
            return HttpDriver(self.url)
        return StdioDriver(list(self.argv or ()), cwd=self.cwd)


def default_target(recording: Recording, against: str | None, url: str | None) -> Target:
    """`--url`, else `--against`, else the command the session recorded."""
    if against and url:
        raise ReplayError("give --against or --url, not both")
    if url:
        return Target(url=url)
    if against:
        argv = shlex.split(against)
        if not argv:
            raise ReplayError("--against is empty: give the command to run")
        return Target(argv=tuple(argv))
    cwd = recording.cwd if recording.cwd and Path(recording.cwd).is_dir() else None
    if recording.argv:
        return Target(argv=tuple(recording.argv), cwd=cwd)
    if isinstance(recording.command, str) and recording.command.startswith(("http://", "https://")):
        return Target(url=recording.command)
    if isinstance(recording.command, str) and recording.command.strip():
        return Target(argv=tuple(shlex.split(recording.command)), cwd=cwd)
    raise ReplayError(
        f"session {recording.session_id} recorded no command to run: use --against or --url"
    )


@dataclass
class ReplayOptions:
    timing: str = "none"  # none | original
    speed: float = 1.0
    ignore: Sequence[str] = ()
    learn: bool = False
    injections: Sequence[Injection] = ()
    expect_fault: bool = False
    response_timeout_s: float = 10.0
    # How long a server whose recording exited on its own gets to exit again once every
    # response is in (None: the response timeout). replay/minimize.py cuts it for its trials.
    exit_wait_s: float | None = None
    server_request_wait_s: float = 2.0
    default_masks: bool = True
    # Steps not sent (replay/safety.py: --read-only, or "n" at the prompt); their recorded
    # answers stand in for them.
    skip_steps: frozenset[int] = frozenset()
    era: str | None = None  # re-speak the session in this protocol era (replay/era_bridge.py)

    def check(self) -> None:
        if self.era is not None:
            check_era(self.era)
        if self.timing not in ("none", "original"):
            raise ReplayError(f"--timing must be none or original, not {self.timing!r}")
        if not self.speed > 0:
            raise ReplayError("--speed must be greater than 0")
        for pattern in self.ignore:
            parse_pattern(pattern)


# -- driving --------------------------------------------------------------------------------


class _Driving:
    """One drive of a recording through a driver (the state shared by its two tasks)."""

    def __init__(
        self,
        recording: Recording,
        driver: StdioDriver | HttpDriver,
        options: ReplayOptions,
        session_id: str,
    ) -> None:
        self.rec = recording
        self.driver = driver
        self.opt = options
        self.sid = session_id
        self.run = Run()
        self.pending: dict[tuple[str | None, str], int] = {}  # replayed request id -> step
        self.arrived: dict[int, asyncio.Event] = {}
        self.gone = False
        self.input_closed = False
        self.last_sent_step = 0
        self.server_used: list[int] = [0] * len(recording.server_requests)
        self.run.server_used = self.server_used
        self.state_map: dict[str, str] = {}  # recorded requestState -> replayed one
        self.mono0 = 0
        self.wall0 = 0

    # recording of the replay session --------------------------------------------------------

    def _event(self, kind: str, direction: str, raw: bytes, mono: int | None = None) -> int:
        mono = time.monotonic_ns() if mono is None else mono
        seq = len(self.run.events) + 1
        self.run.events.append(
            NewEvent(
                self.sid,
                seq,
                self.wall0 + (mono - self.mono0),
                mono - self.mono0,
                kind,
                direction,
                raw,
            )
        )
        return seq

    def _fault(self, doc: dict, mono_ns: int | None = None) -> None:
        raw = events.encode(events.from_dict(Kind.FAULT, doc))
        self._event(Kind.FAULT, Direction.NONE, raw, mono_ns)

    async def _send(self, raw: bytes) -> int:
        """Send a frame and record it; returns the monotonic time it was handed over."""
        now = time.monotonic_ns()
        await self.driver.send(raw)
        self._event(Kind.FRAME, Direction.CLIENT_TO_SERVER, raw, now)
        return now

    # inbound ---------------------------------------------------------------------------------

    async def pump(self) -> None:
        queue = self.driver.inbound
        while True:
            item: Inbound = await queue.get()
            if item.kind == "end":
                return
            if item.kind == "eof":
                self._server_gone()
            elif item.kind == "stderr":
                stderr = events.from_dict(Kind.STDERR, item.detail or {})
                self._event(Kind.STDERR, Direction.NONE, events.encode(stderr), item.mono_ns)
                self.run.stderr_tail = [
                    *self.run.stderr_tail[-4:],
                    (item.detail or {}).get("line", ""),
                ]
            elif item.kind == "fault":
                doc = dict(item.detail or {})
                doc.setdefault("stage", "transport")
                doc.setdefault("detail", doc.get("fault"))
                doc.setdefault("seq", None)
                self.run.transport_faults.append(doc | {"step": self.last_sent_step})
                self._fault(doc, item.mono_ns)
            else:
                await self._on_frame(item)

    async def _on_frame(self, item: Inbound) -> None:
        seq = self._event(Kind.FRAME, Direction.SERVER_TO_CLIENT, item.raw, item.mono_ns)
        frame = frame_from_raw(seq, item.mono_ns, Direction.SERVER_TO_CLIENT, item.raw)
        if frame.kind in ("response", "error"):
            step = self.pending.pop(frame.id_key, None) if frame.id_key else None
            if step is None:
                self.run.stray_responses.append(frame)
                return
            self.run.responses[step] = frame
            self.run.arrived_at[step] = item.mono_ns
            self._learn_state(step, frame)
            event = self.arrived.get(step)
            if event is not None:
                event.set()
        elif frame.kind == "request":
            await self._answer(frame)
        elif frame.kind == "invalid":
            fault = "invalid_utf8" if frame.message is None and _bad_utf8(item.raw) else None
            doc = {
                "fault": fault or "stdout_pollution",
                "stage": "transport",
                "detail": item.raw[:200].decode("utf-8", errors="replace"),
                "seq": seq,
            }
            self.run.transport_faults.append(doc | {"step": self.last_sent_step})
            self._fault(doc, item.mono_ns)
        # notifications are recorded but not compared: servers send them unprompted

    def _learn_state(self, step: int, frame: Frame) -> None:
        """2026-07-28 input-required rounds: the client echoes the server's opaque
        `requestState`; a replay must echo the replayed server's value, not the recorded one."""
        recorded = self.rec.steps[step - 1].response
        new = _request_state(frame.message)
        old = _request_state(recorded.message) if recorded is not None else None
        if new is not None and old is not None and new != old:
            self.state_map[old] = new

    async def _answer(self, frame: Frame) -> None:
        live = frame.message if isinstance(frame.message, dict) else {}
        candidates = self.rec.server_requests
        chosen: int | None = None
        for i, req in enumerate(candidates):
            if isinstance(req.frame.message, dict) and matches(req.frame.message, live):
                if not self.server_used[i]:
                    chosen = i
                    break
                chosen = i if chosen is None else chosen
        if chosen is None:
            near = nearest(
                live, [r.frame.message for r in candidates if isinstance(r.frame.message, dict)]
            )
            self.run.unexpected.append(
                {
                    "what": "unexpected server request",
                    "method": frame.method,
                    "replay_seq": frame.seq,
                    "nearest": near.explain() if near else "the recording has no server requests",
                }
            )
            self.run.unmatched_requests.append(frame)
            if "id" in live:
                error = {
                    "jsonrpc": "2.0",
                    "id": live["id"],
                    "error": {
                        "code": -32601,
                        "message": "blackbox replay: the recording has no answer to "
                        f"{frame.method}",
                    },
                }
                await self._safe_send(_compact(error))
            return
        self.server_used[chosen] += 1
        self.run.server_requests_seen.append(chosen)
        answer = candidates[chosen].answer
        if answer is None or not isinstance(answer.message, dict):
            return  # the recorded client never answered: neither do we
        reply = dict(answer.message)
        reply["id"] = live.get("id")
        await self._safe_send(_compact(reply))

    async def _safe_send(self, raw: bytes) -> None:
        with contextlib.suppress(TransportClosed):
            await self._send(raw)

    def _server_gone(self) -> None:
        if not self.input_closed and not self.gone:
            self.run.gone_after_step = self.last_sent_step
        self.gone = True
        for event in self.arrived.values():
            event.set()

    # outbound --------------------------------------------------------------------------------

    async def _wait_deps(self, deps: list[int]) -> None:
        for dep in deps:
            event = self.arrived.get(dep)
            if event is None or event.is_set():
                continue
            try:
                await asyncio.wait_for(event.wait(), self.opt.response_timeout_s)
            except TimeoutError:
                event.set()  # given up: later steps must not wait for it again

    def _anchor_time(self, anchor_step: int, is_response: bool) -> int:
        """When the event a step was timed against happened in this replay."""
        if anchor_step == 0:
            return self.run.started_mono
        if is_response:
            return self.run.arrived_at.get(anchor_step) or time.monotonic_ns()
        return self.run.sent_at.get(anchor_step) or time.monotonic_ns()

    async def _sleep_until(self, target_ns: int) -> None:
        # asyncio.sleep wakes up to a millisecond late: sleep most of the way, then yield to
        # the loop until the deadline. Spinning longer backfires on a busy machine: the
        # scheduler preempts a spinning process but promptly wakes a sleeping one.
        while True:
            remaining = target_ns - time.monotonic_ns()
            if remaining <= 0:
                return
            if remaining > SPIN_NS:
                await asyncio.sleep((remaining - SPIN_NS) / 1e9)
            else:
                await asyncio.sleep(0)

    def _outgoing(self, raw: bytes, message: object) -> bytes:
        if self.state_map and isinstance(message, dict):
            params = message.get("params")
            if isinstance(params, dict) and params.get("requestState") in self.state_map:
                new = dict(message)
                new["params"] = dict(params, requestState=self.state_map[params["requestState"]])
                return _compact(new)
        return raw

    async def drive(self) -> Run:
        rec, run = self.rec, self.run
        for step in rec.steps:
            if step.response is not None:
                self.arrived[step.number] = asyncio.Event()
        self.mono0 = run.mono0 = time.monotonic_ns()
        self.wall0 = run.wall0 = time.time_ns()
        await self.driver.start()
        run.started_mono = time.monotonic_ns()
        pump = asyncio.create_task(self.pump())
        try:
            await self._drive_steps()
            await self._wait_outstanding()
        finally:
            self.input_closed = True  # from here on, the server ending is our doing
            run.exit = await self.driver.finish()
            try:
                await asyncio.wait_for(pump, 5)
            except TimeoutError:
                pump.cancel()
            run.finished_mono = time.monotonic_ns()
        return run

    async def _drive_steps(self) -> None:
        rec, opt, run = self.rec, self.opt, self.run
        for step in rec.steps:
            n = step.number
            if self.gone or self.input_closed:
                run.not_sent[n] = "server gone" if self.gone else "input closed by --inject"
                continue
            if n in opt.skip_steps:
                self._stand_in(step)
                continue
            await self._wait_deps(step.deps)
            if opt.timing == "original":
                gap = (step.frame.mono_ns - step.anchor_mono_ns) / opt.speed
                anchor = self._anchor_time(step.anchor_step, step.anchor_is_response)
                await self._sleep_until(anchor + int(gap))
            raw = step.frame.raw
            action = None
            for inj in opt.injections:
                if inj.action in ("delay", "drop", "corrupt") and inj.applies(n, step.frame.method):
                    if inj.action == "delay":
                        await asyncio.sleep(inj.delay_ms / 1000)
                    else:
                        action = inj.action
            if self.gone:
                run.not_sent[n] = "server gone"
                continue
            if action == "drop":
                run.not_sent[n] = "dropped by --inject"
                if n in self.arrived:
                    self.arrived[n].set()
                continue
            if action == "corrupt":
                raw = raw[: max(1, len(raw) // 2)]
            else:
                raw = self._outgoing(raw, step.frame.message)
            if step.frame.kind == "request" and step.frame.id_key is not None:
                self.pending[step.frame.id_key] = n
            try:
                sent = await self._send(raw)
            except TransportClosed as exc:
                run.not_sent[n] = str(exc)
                self.pending.pop(step.frame.id_key, None) if step.frame.id_key else None
                doc = {"fault": "broken_pipe", "stage": "transport", "detail": str(exc)}
                run.transport_faults.append(doc | {"step": self.last_sent_step})
                self._fault(doc | {"seq": None})
                self._server_gone()
                continue
            run.sent_at[n] = sent
            self.last_sent_step = n
            for inj in opt.injections:
                if inj.step == n and inj.action in ("close-stdin", "cut"):
                    self.input_closed = True
                    if inj.action == "cut":
                        await self.driver.cut()
                    else:
                        await self.driver.close_input()

    def _stand_in(self, step: Step) -> None:
        """A skipped step: not sent; its recorded answer is taken as arrived, so what waits
        for it goes on and what echoes its state echoes the recorded one."""
        n = step.number
        risky = step.frame.method == "tools/call"
        self.run.not_sent[n] = SKIPPED if risky else SKIPPED_ALONG
        if step.response is not None:
            self.run.stand_ins[n] = step.response
        if n in self.arrived:
            self.arrived[n].set()

    def _expects(self, after_step: int) -> bool:
        """Whether the replay waits for what the recording has after `after_step`: not for
        what came in answer to a skipped call (its server requests, its exit)."""
        return after_step not in self.opt.skip_steps

    async def _wait_outstanding(self) -> None:
        """Wait for responses the recording has and the replay still lacks, then for server
        requests the recording has and the replay has not seen yet."""
        deadline = time.monotonic() + self.opt.response_timeout_s
        for number, event in self.arrived.items():
            if number in self.run.sent_at and not event.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(event.wait(), remaining)
                except TimeoutError:
                    break
        if any(f.fault == "server_exit" and self._expects(f.step) for f in self.rec.faults):
            # The recorded server exited on its own: give the replayed one the same chance
            # before closing its input, or its exit would look like our doing.
            wait = self.opt.exit_wait_s
            deadline = time.monotonic() + (self.opt.response_timeout_s if wait is None else wait)
            while not self.gone and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        deadline = time.monotonic() + self.opt.server_request_wait_s
        while not self.gone and time.monotonic() < deadline:
            if all(
                self.server_used[i]
                or req.after_step > self.last_sent_step
                or not self._expects(req.after_step)
                for i, req in enumerate(self.rec.server_requests)
            ):
                break
            await asyncio.sleep(0.02)


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _bad_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _request_state(message: object) -> str | None:
    if isinstance(message, dict) and isinstance(message.get("result"), dict):
        value = message["result"].get("requestState")
        return value if isinstance(value, str) else None
    return None


# -- entry points ---------------------------------------------------------------------------


async def _drive_once(
    rec: Recording, target: Target, options: ReplayOptions, session_id: str
) -> Run:
    driving = _Driving(rec, target.driver(), options, session_id)
    return await driving.drive()


def replay_session(
    store: EventStore,
    session_ref: str,
    *,
    against: str | None = None,
    url: str | None = None,
    options: ReplayOptions | None = None,
    progress: Callable[[str], None] | None = None,
    record: bool = True,
    guard: Callable[[Recording], frozenset[int]] | None = None,
) -> ReplayResult:
    """Replay a recorded session against a target; store the replay as a new session.

    `guard` sees the recording before anything is sent and returns the steps to skip, or
    raises to refuse the replay (replay/safety.py: calls that may change something).
    Raises ReplayError (or another BlackboxError) when the replay cannot run at all.
    """
    options = options or ReplayOptions()
    options.check()
    original_id = store.resolve(session_ref)
    step_masks = None
    if options.era:
        records = list(store.read_session(original_id))
        if not records:
            raise ReplayError(f"session {original_id} has no records")
        rec, masks, step_masks = bridged_recording(original_id, records, options.era)
        options.ignore = [*options.ignore, *masks]
    else:
        rec = load_recording(store, original_id)
    target = default_target(rec, against, url)
    result = replay_recording(
        rec,
        target,
        options,
        store=store if record else None,
        progress=progress,
        step_masks=step_masks,
        guard=guard,
    )
    if options.era:
        result.recorded_era = store.session(original_id).era or "unknown"
    return result


def replay_recording(
    rec: Recording,
    target: Target,
    options: ReplayOptions | None = None,
    *,
    store: EventStore | None = None,
    progress: Callable[[str], None] | None = None,
    step_masks: dict[int, list[tuple]] | None = None,
    guard: Callable[[Recording], frozenset[int]] | None = None,
) -> ReplayResult:
    """Replay a recording already loaded (from a store, a bundle, or rewritten by minimisation
    or an era bridge); store the replay as a new session when `store` is given. `step_masks`
    are parsed paths ignored at given steps (what an era change must change). `guard` sees the
    recording before anything is sent and returns the steps to skip, or raises to refuse."""
    options = options or ReplayOptions()
    options.check()
    if options.speed != 1.0 and options.timing == "none":
        options.timing = "original"
    say = progress or (lambda _msg: None)
    original_id = rec.session_id
    if guard is not None:
        options.skip_steps = options.skip_steps | guard(rec)
    options.skip_steps = skipped_along(rec, options.skip_steps)
    base = Masks([*(DEFAULT_MASKS if options.default_masks else ()), *options.ignore])
    learned: dict[int, list[tuple]] = {}
    learned_paths: list[str] = []
    if options.learn:
        runs = []
        for i in range(2):
            say(f"learning run {i + 1}/2 against {target.describe()}")
            runs.append(asyncio.run(_drive_once(rec, target, options, "learn")))
            if i == 0:
                time.sleep(LEARN_SPACING_S)
        learned = learn_masks(runs, rec)
        learned_paths = sorted(
            {f"step {n}: {format_path(p)}" for n, paths in learned.items() for p in paths}
        )
    for number, paths in (step_masks or {}).items():
        learned[number] = [*learned.get(number, []), *paths]
    say(f"replaying {len(rec.steps)} steps of {original_id} against {target.describe()}")
    replay_id = new_session_id()
    began = time.monotonic()
    run = asyncio.run(_drive_once(rec, target, options, replay_id))
    steps, extras, faults = evaluate(rec, run, base, learned)
    result = ReplayResult(
        original_id=original_id,
        replay_id=replay_id if store is not None else None,
        target=target.describe(),
        transport="http" if target.url else "stdio",
        era=rec.era,
        timing=options.timing,
        steps=steps,
        extras=extras,
        faults=faults,
        learned=learned_paths,
        injections=[inj.describe() for inj in options.injections],
        exit=run.exit,
        duration_s=time.monotonic() - began,
        expect_fault=options.expect_fault,
        server_gone=describe_gone(run) if run.gone_after_step is not None else None,
        stderr_tail=run.stderr_tail if run.gone_after_step is not None else [],
        run=run,
    )
    if store is not None:
        say(f"storing the replay as session {replay_id}")
        handle = session_handle(store, original_id)
        store.append(_session_events(rec, run, result, target, replay_id, handle))
        result.handles = short_handles(store, [original_id, replay_id])
    return result


def _session_events(
    rec: Recording, run: Run, result: ReplayResult, target: Target, replay_id: str, handle: str
) -> list[NewEvent]:
    """The replay as a session: started, the frames as they crossed, one replay_step per
    divergence, a summary, ended. An unnamed original is named by its `handle`."""
    started = events.SessionStarted(
        name=f"replay of {rec.name or handle}",
        transport=result.transport,
        command=target.url if target.url else list(target.argv or ()),
        cwd=target.cwd or os.getcwd(),
        tap_version=TAP_VERSION,
        pid=os.getpid(),
        replay_of=rec.session_id,
        timing=result.timing,
        injections=result.injections,
    )
    wall0 = run.wall0
    out = [NewEvent(replay_id, 1, wall0, 0, started.KIND, Direction.NONE, events.encode(started))]
    for ev in run.events:
        out.append(
            NewEvent(replay_id, ev.seq + 1, ev.wall_ns, ev.mono_ns, ev.kind, ev.direction, ev.raw)
        )
    end_mono = max(run.finished_mono - run.mono0, out[-1].mono_ns)
    end_wall = wall0 + end_mono

    def add(doc: events.Document) -> None:
        raw = events.encode(doc)
        out.append(
            NewEvent(replay_id, len(out) + 1, end_wall, end_mono, doc.KIND, Direction.NONE, raw)
        )

    for res in result.steps:
        if res.status != "ok":
            add(events.from_dict(Kind.REPLAY_STEP, res.as_dict() | {"replay_of": rec.session_id}))
    for extra in result.extras:
        add(events.from_dict(Kind.REPLAY_STEP, {"step": None, "status": "unexpected", **extra}))
    add(
        events.ReplayStep(
            step=None,
            status="summary",
            verdict=result.verdict,
            replay_of=rec.session_id,
            summary=result.summary(),
            faults=[f.as_dict() for f in result.faults],
        )
    )
    exit_info = run.exit
    if run.gone_after_step is not None:
        failed = exit_info is not None and bool(exit_info.signal or exit_info.exit_code)
        outcome = "crashed" if failed else "server_exited"
        reason = "server_exited"
    else:
        # A replay that diverged (every answer missing, say) did not go well: not `ok`.
        outcome = "ok" if result.verdict == "equivalent" else "diverged"
        reason = "client_closed"
    add(
        events.SessionEnded(
            reason=reason,
            outcome=outcome,
            exit_code=exit_info.exit_code if exit_info else None,
            signal=exit_info.signal if exit_info else None,
            verdict=result.verdict,
        )
    )
    return out


__all__ = [
    "ReplayOptions",
    "Target",
    "replay_recording",
    "replay_session",
]
