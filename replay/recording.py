"""A recorded session as the replayer and the mock server see it.

The store keeps a flat log of records; replay needs structure: which client frames are *steps* to
re-send, which server response answers each step, which server-initiated requests the client
answered (and with what), and which faults the session ended with. `load_recording` builds that
once, so the replayer, the mock server and the report all read the same interpretation.

JSON-RPC ids are per direction and of mixed type, so responses are joined to requests on
(direction, id text, id type), never on the id text alone: `blackbox.recorder.log.pairing` does the
joining.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blackbox.recorder import BlackboxError
from blackbox.recorder.log import (
    Direction,
    Kind,
    Pending,
    StoredEvent,
    classify,
    classify_message,
    events,
    parse,
    request_key,
    response_key,
)
from blackbox.recorder.store import EventStore

# Outcomes of session_ended that mean the server went away on its own.
EXIT_OUTCOMES = frozenset({"server_exited", "crashed"})


class ReplayError(BlackboxError):
    """A replay or a mock server cannot run as asked (bad session, target, or option)."""


@dataclass(slots=True)
class Frame:
    """One recorded wire frame with its parsed form. `message` is None when the bytes are not
    JSON; `kind` is the classifier's msg_type (request, notification, response, error, ...)."""

    seq: int
    mono_ns: int
    direction: str
    raw: bytes
    message: object
    kind: str
    method: str | None
    id_key: tuple[str | None, str] | None
    tool: str | None
    is_error: bool | None
    error_code: int | None


@dataclass(slots=True)
class Step:
    """A client-initiated frame to re-send: a request, a notification, or an unparseable frame.

    `deps` are the steps whose recorded responses arrived before this frame was sent: the replay
    sends this step only after their replayed responses arrive (causal order). `anchor_mono_ns`
    is the recorded time of the last frame before this one that the replay can time against."""

    number: int
    frame: Frame
    response: Frame | None = None
    deps: list[int] = field(default_factory=list)
    anchor_mono_ns: int = 0
    anchor_step: int = 0
    anchor_is_response: bool = False

    @property
    def label(self) -> str:
        method = self.frame.method or self.frame.kind
        return f"{method} {self.frame.tool}" if self.frame.tool else method


@dataclass(slots=True)
class ServerRequest:
    """A request the server sent to the client (roots/list, sampling, elicitation) and the
    client's recorded answer, if any."""

    frame: Frame
    answer: Frame | None = None
    after_step: int = 0


@dataclass(slots=True)
class RecordedFault:
    """Something that went wrong in the recorded session, pinned to the step it followed."""

    fault: str
    step: int
    label: str
    detail: str
    exit_code: int | None = None
    signal: str | None = None


@dataclass(slots=True)
class Recording:
    """A session ready to replay or serve."""

    session_id: str
    name: str | None
    transport: str | None
    command: list[str] | str | None
    cwd: str | None
    era: str | None
    started: dict
    ended: dict | None
    frames: list[Frame]
    steps: list[Step]
    server_requests: list[ServerRequest]
    notifications: list[Frame]
    faults: list[RecordedFault]
    start_mono_ns: int

    @property
    def argv(self) -> list[str] | None:
        """The recorded stdio command as an argv, if the session was a stdio one."""
        if isinstance(self.command, list) and self.command:
            return [str(part) for part in self.command]
        return None


def _doc(kind: str, raw: bytes) -> dict:
    """A session event's document through the schema (empty when it does not decode)."""
    return events.decode_dict(kind, raw) or {}


def frame_from_raw(seq: int, mono_ns: int, direction: str, raw: bytes) -> Frame:
    """Parse and classify a frame (recorded or replayed) once."""
    message, problem = parse(raw)
    if problem is not None:
        c = classify(raw)
    elif isinstance(message, list):
        c = classify(raw)  # batches are rare: let the classifier handle them
    else:
        c = classify_message(message)  # parse once, not twice
    id_key = (c.rpc_id, c.rpc_id_type) if c.rpc_id_type is not None else None
    return Frame(
        seq=seq,
        mono_ns=mono_ns,
        direction=direction,
        raw=raw,
        message=message,
        kind=c.msg_type,
        method=c.method,
        id_key=id_key,
        tool=c.tool,
        is_error=c.is_error,
        error_code=c.error_code,
    )


def _frame(ev: StoredEvent) -> Frame:
    message, _problem = parse(ev.raw)
    id_key = (ev.rpc_id, ev.rpc_id_type) if ev.rpc_id_type is not None else None
    return Frame(
        seq=ev.seq,
        mono_ns=ev.mono_ns,
        direction=ev.direction,
        raw=ev.raw,
        message=message,
        kind=ev.msg_type or "invalid",
        method=ev.method,
        id_key=id_key,
        tool=ev.tool,
        is_error=ev.is_error,
        error_code=ev.error_code,
    )


def load_recording(store: EventStore, session_id: str) -> Recording:
    """Read one session from the store and give it the structure replay needs."""
    events = list(store.read_session(session_id))
    if not events:
        raise ReplayError(f"session {session_id} has no records")
    return build_recording(session_id, events)


def build_recording(session_id: str, events: list[StoredEvent]) -> Recording:
    """The structure of a session from its records (seq order)."""
    started: dict = {}
    ended: dict | None = None
    era: str | None = None
    frames: list[Frame] = []
    fault_docs: list[tuple[int, dict]] = []
    for ev in events:
        if ev.kind == Kind.FRAME:
            frames.append(_frame(ev))
            if era is None and ev.era:
                era = ev.era
        elif ev.kind == Kind.SESSION_STARTED:
            started = _doc(ev.kind, ev.raw)
        elif ev.kind == Kind.ERA_DETECTED:
            era = _doc(ev.kind, ev.raw).get("era") or era
        elif ev.kind == Kind.SESSION_ENDED:
            ended = _doc(ev.kind, ev.raw) | {"_seq": ev.seq}
        elif ev.kind == Kind.FAULT:
            fault_docs.append((ev.seq, _doc(ev.kind, ev.raw)))
    if not frames:
        raise ReplayError(f"session {session_id} recorded no frames: nothing to replay")
    steps, server_requests, notifications = _structure(frames)
    recording = Recording(
        session_id=session_id,
        name=started.get("name"),
        transport=started.get("transport"),
        command=started.get("command"),
        cwd=started.get("cwd"),
        era=era,
        started=started,
        ended=ended,
        frames=frames,
        steps=steps,
        server_requests=server_requests,
        notifications=notifications,
        faults=[],
        start_mono_ns=events[0].mono_ns,
    )
    recording.faults = detect_faults(steps, ended, fault_docs)
    return recording


def _structure(frames: list[Frame]) -> tuple[list[Step], list[ServerRequest], list[Frame]]:
    steps: list[Step] = []
    server_requests: list[ServerRequest] = []
    notifications: list[Frame] = []
    # The client's requests (steps) and the server's own (server requests) awaiting answers.
    waiting: Pending[Step | ServerRequest] = Pending()
    answered_since_last: list[int] = []
    anchor_mono = frames[0].mono_ns
    anchor_step = 0
    anchor_is_response = False
    for frame in frames:
        answered = None
        if frame.kind in ("response", "error") and frame.id_key is not None:
            answered = waiting.close(response_key(frame.direction, *frame.id_key))
        if frame.direction == Direction.CLIENT_TO_SERVER:
            if isinstance(answered, ServerRequest):
                answered.answer = frame
                continue
            step = Step(
                number=len(steps) + 1,
                frame=frame,
                deps=answered_since_last,
                anchor_mono_ns=anchor_mono,
                anchor_step=anchor_step,
                anchor_is_response=anchor_is_response,
            )
            answered_since_last = []
            steps.append(step)
            if frame.kind == "request" and frame.id_key is not None:
                waiting.open(request_key(frame.direction, *frame.id_key), step)
            anchor_mono, anchor_step, anchor_is_response = frame.mono_ns, step.number, False
        elif frame.direction == Direction.SERVER_TO_CLIENT:
            if isinstance(answered, Step):
                answered.response = frame
                answered_since_last.append(answered.number)
                anchor_mono, anchor_step, anchor_is_response = frame.mono_ns, answered.number, True
            elif frame.kind == "request" and frame.id_key is not None:
                request = ServerRequest(frame=frame, after_step=len(steps))
                server_requests.append(request)
                waiting.open(request_key(frame.direction, *frame.id_key), request)
            else:
                notifications.append(frame)
    return steps, server_requests, notifications


def step_at_seq(steps: list[Step], seq: int | None) -> Step | None:
    """The last step sent at or before a record's seq (the step a fault followed)."""
    if seq is None:
        return steps[-1] if steps else None
    found = None
    for step in steps:
        if step.frame.seq > seq:
            break
        found = step
    return found


def exit_description(exit_code: int | None, signal: str | None) -> str:
    if signal:
        return f"server killed by {signal}"
    if exit_code is not None:
        return f"server exited with status {exit_code}"
    return "server exited"


def detect_faults(
    steps: list[Step], ended: dict | None, fault_docs: list[tuple[int, dict]]
) -> list[RecordedFault]:
    """The faults of a session, each pinned to a step: the server exit, transport faults the
    tap recorded, tool errors (`isError`), JSON-RPC errors and requests left unanswered."""
    faults: list[RecordedFault] = []
    for step in steps:
        response = step.response
        if step.frame.kind == "request" and response is None:
            faults.append(RecordedFault("no_response", step.number, step.label, "no response"))
        elif response is not None and response.kind == "error":
            # A failed server/discover is the auto client's era probe, not a fault.
            if step.frame.method != "server/discover":
                detail = f"JSON-RPC error {response.error_code}"
                faults.append(RecordedFault("jsonrpc_error", step.number, step.label, detail))
        elif response is not None and response.is_error:
            detail = "tool error (isError: true)"
            faults.append(RecordedFault("tool_error", step.number, step.label, detail))
    seen_transport: set[str] = set()
    for seq, doc in fault_docs:
        name = str(doc.get("fault") or "fault")
        if name in seen_transport or name == "exit_with_outstanding":
            continue  # the exit itself is reported once, from session_ended
        seen_transport.add(name)
        at = step_at_seq(steps, doc.get("seq") if doc.get("seq") is not None else seq)
        faults.append(
            RecordedFault(
                name,
                at.number if at else 0,
                at.label if at else "start",
                str(doc.get("detail") or name),
            )
        )
    if ended is not None and (
        ended.get("outcome") in EXIT_OUTCOMES or ended.get("reason") == "server_exited"
    ):
        at = step_at_seq(steps, ended.get("_seq"))
        code, signal = ended.get("exit_code"), ended.get("signal")
        faults.append(
            RecordedFault(
                "server_exit",
                at.number if at else 0,
                at.label if at else "start",
                exit_description(code, signal),
                exit_code=code,
                signal=signal,
            )
        )
        # Requests left unanswered by a dying server are part of the exit, not faults of their own.
        faults = [
            f for f in faults if not (f.fault == "no_response" and at and f.step >= at.number)
        ]
    return faults
