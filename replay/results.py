"""What a replay produced and what it concluded, as plain data.

`Run` is the raw outcome of one drive (the responses, timings and faults as they happened); the
step results, fault verdicts and `ReplayResult` are the conclusions drawn from it. They live apart
from the engine that drives a server and from the evaluation, so the report, the CLI and the tests
read them without importing either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blackbox.recorder.log import NewEvent
from blackbox.replay.compare import Difference
from blackbox.replay.drivers import ExitInfo
from blackbox.replay.recording import Frame, RecordedFault


@dataclass
class Run:
    """What one drive of the session produced."""

    responses: dict[int, Frame] = field(default_factory=dict)
    sent_at: dict[int, int] = field(default_factory=dict)  # step -> mono ns sent
    arrived_at: dict[int, int] = field(default_factory=dict)
    not_sent: dict[int, str] = field(default_factory=dict)  # step -> why
    stand_ins: dict[int, Frame] = field(default_factory=dict)  # skipped step -> recorded answer
    unexpected: list[dict] = field(default_factory=list)  # messages the recording lacks
    server_requests_seen: list[int] = field(default_factory=list)
    transport_faults: list[dict] = field(default_factory=list)
    gone_after_step: int | None = None  # the server went away on its own after this step
    exit: ExitInfo | None = None
    events: list[NewEvent] = field(default_factory=list)
    stray_responses: list[Frame] = field(default_factory=list)
    server_used: list[int] = field(default_factory=list)  # per recorded server request
    stderr_tail: list[str] = field(default_factory=list)  # the server's last stderr lines
    unmatched_requests: list[Frame] = field(default_factory=list)  # server requests, no match
    mono0: int = 0  # the replay session's time origin
    wall0: int = 0
    started_mono: int = 0
    finished_mono: int = 0


# Why a step was not sent when replay/safety.py had it skipped (`--read-only`, or "n" at the
# prompt), and why a step that only makes sense with a skipped call was not sent either.
SKIPPED = "skipped: may change something; its recorded answer stands in"
SKIPPED_ALONG = "skipped: goes with a skipped call"


@dataclass
class StepResult:
    number: int
    seq: int
    label: str
    method: str | None
    tool: str | None
    status: str  # ok | diverged | missing | unexpected | not_sent | skipped | fault_not_reproduced
    differences: list[Difference] = field(default_factory=list)
    note: str | None = None
    replay_seq: int | None = None

    @property
    def diverged(self) -> bool:
        return self.status in ("diverged", "missing", "unexpected", "not_sent")

    def as_dict(self) -> dict:
        return {
            "step": self.number,
            "seq": self.seq,
            "replay_seq": self.replay_seq,
            "method": self.method,
            "tool": self.tool,
            "status": self.status,
            "note": self.note,
            "differences": [d.as_dict() for d in self.differences],
        }


@dataclass
class FaultResult:
    fault: RecordedFault
    reproduced: bool
    replay_detail: str
    skipped: bool = False  # the step it belongs to was skipped: nothing to reproduce it with

    def describe(self) -> str:
        # An exit or a transport fault follows a step; an error or a silence is the step's own.
        own = self.fault.fault in ("tool_error", "jsonrpc_error", "no_response")
        where = f"{'at' if own else 'after'} {self.fault.label}, step {self.fault.step}"
        if self.skipped:
            return f"not checked: {self.fault.detail} {where} (the call was skipped)"
        if self.reproduced:
            return f"reproduced: {self.fault.detail} {where}"
        return f"not reproduced: {self.fault.detail} {where} ({self.replay_detail})"

    def as_dict(self) -> dict:
        return {
            "fault": self.fault.fault,
            "step": self.fault.step,
            "label": self.fault.label,
            "detail": self.fault.detail,
            "reproduced": self.reproduced,
            "skipped": self.skipped,
            "replay": self.replay_detail,
            "text": self.describe(),
        }


@dataclass
class ReplayResult:
    """The outcome of `replay_session`: per-step verdicts, extra messages, fault reproduction."""

    original_id: str
    replay_id: str | None
    target: str
    transport: str
    era: str | None
    timing: str
    steps: list[StepResult]
    extras: list[dict]
    faults: list[FaultResult]
    learned: list[str]
    injections: list[str]
    exit: ExitInfo | None
    duration_s: float
    expect_fault: bool
    server_gone: str | None = None  # how and when the server went away on its own
    stderr_tail: list[str] = field(default_factory=list)
    run: Run | None = field(default=None, repr=False)  # the raw drive, for minimisation
    recorded_era: str | None = None  # set when --era re-spoke the session in another era
    # Session id -> its short handle (`blackbox.recorder.query.handles`), once the replay is stored.
    handles: dict[str, str] = field(default_factory=dict)

    @property
    def divergences(self) -> int:
        return sum(1 for s in self.steps if s.diverged) + len(self.extras)

    @property
    def faults_not_reproduced(self) -> int:
        return sum(1 for f in self.faults if not f.reproduced and not f.skipped)

    @property
    def faults_checked(self) -> int:
        """Recorded faults the replay could check: not those of skipped calls."""
        return sum(1 for f in self.faults if not f.skipped)

    @property
    def exit_code(self) -> int:
        """0 equivalent; 1 diverged, or a fault not reproduced under --expect-fault."""
        if self.divergences:
            return 1
        if self.expect_fault and (not self.faults_checked or self.faults_not_reproduced):
            return 1
        return 0

    @property
    def unanswered(self) -> bool:
        """Every request that had an answer in the recording went without one here."""
        # A step that had a recorded answer is `missing`, or ok/diverged with a replayed one.
        expected = [
            s
            for s in self.steps
            if s.status == "missing" or (s.status in ("ok", "diverged") and s.replay_seq)
        ]
        return bool(expected) and all(s.status == "missing" for s in expected)

    @property
    def verdict(self) -> str:
        if self.unanswered:
            return "unanswered"
        if self.divergences:
            return "diverged"
        if self.expect_fault and (not self.faults_checked or self.faults_not_reproduced):
            return "fault not reproduced"
        return "equivalent"

    def summary(self) -> dict:
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.status] = counts.get(s.status, 0) + 1
        return {
            "steps": len(self.steps),
            "equivalent": counts.get("ok", 0),
            "diverged": counts.get("diverged", 0),
            "missing": counts.get("missing", 0),
            "unexpected": counts.get("unexpected", 0) + len(self.extras),
            "not_sent": counts.get("not_sent", 0),
            "skipped": counts.get("skipped", 0),
            "fault_not_reproduced": counts.get("fault_not_reproduced", 0),
            "faults_recorded": len(self.faults),
            "faults_reproduced": sum(1 for f in self.faults if f.reproduced),
            "faults_skipped": len(self.faults) - self.faults_checked,
        }
