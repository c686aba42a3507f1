"""The doctor's one pass over a session, and what every stage of its fault tree shares.

`Walk` reads the session's records once and keeps what the stages look at: faults, stderr lines,
the end record, policy decisions, tool lists and tool drift, and the calls paired by the same
`CallTracker` that builds the `calls` dataset (so the doctor's outcomes agree with the reports).
`DoctorFinding` is what a stage returns. The stages (`doctor_transport`, `doctor_handshake`,
`doctor_discovery` with `doctor_tools`, `doctor_execution`) import this module, never `doctor`,
which runs them in order: so no stage needs an import deferred to break a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from blackbox.analytics.calls import CallTracker, as_dict
from blackbox.recorder.log import Kind, StoredEvent, events, parse

# The fault tree's stages, in the order a session meets them: the order findings are listed in.
STAGES = ("transport", "handshake", "discovery", "execution")


@dataclass
class DoctorFinding:
    """One thing the doctor found."""

    stage: str
    code: str
    severity: str
    message: str
    fix: str
    seqs: list[int] = field(default_factory=list)
    excerpt: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def seq_span(given: Iterable[int | None]) -> str:
    seqs = sorted(s for s in given if s is not None)
    if not seqs:
        return ""
    if len(seqs) == 1:
        return f"seq {seqs[0]}"
    if seqs[-1] - seqs[0] + 1 == len(seqs):
        return f"seq {seqs[0]}–{seqs[-1]}"
    shown = ", ".join(str(s) for s in seqs[:6])
    return f"seq {shown}{', …' if len(seqs) > 6 else ''}"


def event_doc(ev: StoredEvent) -> dict:
    """A session event's document through the schema (empty when it does not decode)."""
    return events.decode_dict(ev.kind, ev.raw) or {}


def call_label(call: dict) -> str:
    if call["tool"]:
        return f"{call['method']} '{call['tool']}'"
    return str(call["method"])


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Walk:
    """The state gathered in one pass over the session's records."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []
        self.by_seq: dict[int, StoredEvent] = {}
        self.faults: list[tuple[StoredEvent, dict]] = []
        self.stderr: list[tuple[int, str]] = []
        self.ended: tuple[StoredEvent, dict] | None = None
        self.calls: list[dict] = []
        self.decisions: list[tuple[StoredEvent, dict]] = []
        self.tracker = CallTracker()
        # discovery: the tools each tools/list response listed, by the seq of its response
        self.tool_lists: list[tuple[int, set[str], bool]] = []  # (seq, names, is_first_page)
        self.list_requests: dict[tuple[str, str | None], bool] = {}  # key -> first page?
        self.invalid_frames: list[StoredEvent] = []
        # tool drift (`blackbox.recorder.gate.tool_watch`): the changes and flagged definitions
        # recorded in this session
        self.tool_changes: list[tuple[StoredEvent, dict]] = []
        self.tool_findings: dict[str, list] = {}

    def feed(self, ev: StoredEvent) -> None:
        self.events.append(ev)
        self.by_seq[ev.seq] = ev
        if ev.kind == Kind.FRAME:
            if ev.msg_type == "invalid":
                self.invalid_frames.append(ev)
            self._discovery(ev)
        elif ev.kind == Kind.FAULT:
            self.faults.append((ev, event_doc(ev)))
        elif ev.kind == Kind.STDERR:
            self.stderr.append((ev.seq, str(event_doc(ev).get("line", ""))))
        elif ev.kind == Kind.SESSION_ENDED:
            self.ended = (ev, event_doc(ev))
        elif ev.kind == Kind.DECISION:
            self.decisions.append((ev, event_doc(ev)))
        elif ev.kind == "tool_changed":
            self.tool_changes.append((ev, event_doc(ev)))
        elif ev.kind == "tools_listed":
            self.tool_findings.update(event_doc(ev).get("findings") or {})
        self.tracker.feed(ev)
        self.calls.extend(as_dict(c) for c in self.tracker.take_closed())

    def _discovery(self, ev: StoredEvent) -> None:
        if ev.msg_type == "request" and ev.method == "tools/list":
            value, _ = parse(ev.raw)
            params = value.get("params") if isinstance(value, dict) else None
            first = not (isinstance(params, dict) and params.get("cursor"))
            self.list_requests[(ev.direction, ev.rpc_id)] = first
        elif ev.msg_type == "response":
            other = "s2c" if ev.direction == "c2s" else "c2s"
            asked_first = self.list_requests.pop((other, ev.rpc_id), None)
            if asked_first is None:
                return
            value, _ = parse(ev.raw)
            result = value.get("result") if isinstance(value, dict) else None
            tools = result.get("tools") if isinstance(result, dict) else None
            names = {
                t["name"]
                for t in (tools if isinstance(tools, list) else [])
                if isinstance(t, dict) and isinstance(t.get("name"), str)
            }
            self.tool_lists.append((ev.seq, names, asked_first))

    def finish(self) -> None:
        self.calls.extend(as_dict(c) for c in self.tracker.pending())
        self.calls.sort(key=lambda c: (c["request_seq"], c["request_item"] or 0))
