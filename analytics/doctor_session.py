"""`blackbox doctor`: walk the fault tree of the design over one session.

Stages, in the order a session meets them: transport (the pipe or HTTP exchange itself),
handshake (initialize / server/discover), discovery (the tools the server announced), execution
(the calls). Each finding carries its evidence (seqs and an excerpt) and the likely fix.

The doctor reads the one session straight from the store (it needs the raw frames: tool lists,
result texts, stderr lines) in one pass (`doctor_walk.Walk`), then asks each stage's module
(`doctor_transport`, `doctor_handshake`, `doctor_discovery`, `doctor_execution`) for its findings.
This module holds the entry points and the answer: what the command calls and renders.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from blackbox.analytics.doctor_discovery import discovery
from blackbox.analytics.doctor_execution import execution
from blackbox.analytics.doctor_handshake import handshake
from blackbox.analytics.doctor_tools import observed_elsewhere
from blackbox.analytics.doctor_transport import heartbeats, transport
from blackbox.analytics.doctor_walk import STAGES, DoctorFinding, Walk, plural, seq_span
from blackbox.recorder.store import EventStore

SLOW_S = 10.0
# Findings of these severities make `doctor` exit 1; `info` notes (an era fallback that worked,
# a cancelled call) are shown but do not.
FAILING = ("error", "warning")


@dataclass
class Diagnosis:
    """The doctor's answer for one session."""

    session_id: str
    findings: list[DoctorFinding]
    records: int
    calls: int

    @property
    def failing(self) -> bool:
        return any(f.severity in FAILING for f in self.findings)

    def as_dict(self) -> dict:
        return {
            "session_id": self.session_id,
            "clean": not self.failing,
            "records": self.records,
            "calls": self.calls,
            "findings": [f.as_dict() for f in self.findings],
        }


def doctor(store: EventStore, ref: str, slow_s: float = SLOW_S) -> Diagnosis:
    """Diagnose the session named by `ref`: a full id, a unique prefix, or `last`."""
    return diagnose(store, store.resolve(ref), slow_s)


def diagnose(store: EventStore, session_id: str, slow_s: float = SLOW_S) -> Diagnosis:
    """Walk the fault tree over one session (a full id: resolve prefixes with the store)."""
    info = store.session(session_id)  # raises SessionNotFound with a clear message
    walk = Walk()
    for ev in store.read_session(session_id):
        walk.feed(ev)
    walk.finish()
    if info.transport == "http" and info.name:
        observed_elsewhere(store, walk, info.name, session_id)
    findings: list[DoctorFinding] = []
    findings += transport(walk)
    findings += heartbeats(walk)
    findings += handshake(walk)
    findings += discovery(walk)
    findings += execution(walk, slow_s)
    order = {stage: i for i, stage in enumerate(STAGES)}
    findings.sort(key=lambda f: order.get(f.stage, len(order)))
    return Diagnosis(session_id, findings, len(walk.events), len(walk.calls))


def render_text(diagnosis: Diagnosis) -> str:
    """The diagnosis as lines for a terminal."""
    head = (
        f"session {diagnosis.session_id}: {diagnosis.records} records, "
        f"{plural(diagnosis.calls, 'call')}"
    )
    if not diagnosis.findings:
        return head + "\nno findings: transport, handshake, discovery and execution look healthy"
    lines = [head]
    for f in diagnosis.findings:
        lines.append(f"[{f.stage}] {f.severity}: {f.message}")
        evidence = seq_span(f.seqs)
        if f.excerpt:
            evidence = f"{evidence}: {json.dumps(f.excerpt, ensure_ascii=False)}".lstrip(": ")
        if evidence:
            lines.append(f"    evidence: {evidence}")
        lines.append(f"    fix: {f.fix}")
    if not diagnosis.failing:
        lines.append("nothing failing (notes only)")
    return "\n".join(lines)
