"""The divergence report: text for a person, JSON for CI.

A report that only says "mismatch" is useless; each divergent step names its seq, method and
tool, and every differing JSON path with both values; a missing or unexpected message says what
came closest and why it did not match. Fault reproduction gets its own sentence per fault.
"""

from __future__ import annotations

import json
import sys

from blackbox.replay.compare import summarize
from blackbox.replay.results import ReplayResult

MAX_PATHS = 10  # per step in the text report; the JSON report has them all


def as_json(result: ReplayResult) -> dict:
    """The whole report as a JSON-able document (the `--format json` output)."""
    return {
        "verdict": result.verdict,
        "exit_code": result.exit_code,
        "original": result.original_id,
        "replay": result.replay_id,
        "handles": result.handles,
        "target": result.target,
        "transport": result.transport,
        "era": result.era,
        "recorded_era": result.recorded_era,
        "timing": result.timing,
        "duration_s": round(result.duration_s, 3),
        "summary": result.summary(),
        "steps": [s.as_dict() for s in result.steps if s.status != "ok"],
        "extras": result.extras,
        "faults": [f.as_dict() for f in result.faults],
        "learned_masks": result.learned,
        "injections": result.injections,
        "server_gone": result.server_gone,
        "stderr_tail": result.stderr_tail,
        "server_exit": (
            None
            if result.exit is None
            else {"exit_code": result.exit.exit_code, "signal": result.exit.signal}
        ),
    }


def render_json(result: ReplayResult) -> str:
    return json.dumps(as_json(result), indent=2, default=str)


def render_text(result: ReplayResult, whole: bool = False) -> str:
    """A report a person reads top to bottom: what was replayed, each divergence, faults, total.
    Each step lists `MAX_PATHS` differing paths with values cut to a line; with `whole`, every
    path and every value in full (the CLI wraps them to the terminal rather than cut them)."""
    paths = None if whole else MAX_PATHS
    value_width = sys.maxsize if whole else 80
    lines = [
        f"replay of {result.handles.get(result.original_id, result.original_id)} "
        f"against {result.target} "
        f"({result.transport}, era {result.era or 'unknown'}, timing {result.timing})"
    ]
    if result.recorded_era:
        lines.append(f"re-spoken from era {result.recorded_era} (handshake and era fields ignored)")
    if result.injections:
        lines.append("injected: " + ", ".join(result.injections))
    if result.learned:
        lines.append(f"learned {len(result.learned)} volatile path(s) from two runs:")
        lines.extend(f"  {p}" for p in result.learned[:paths])
        if paths is not None and len(result.learned) > paths:
            lines.append(f"  ... {len(result.learned) - paths} more")
    for step in result.steps:
        if step.status == "ok":
            continue
        name = step.method or "frame"
        if step.tool:
            name += f" {step.tool}"
        lines.append(f"step {step.number} (seq {step.seq}) {name}: {step.status}")
        for d in step.differences[:paths]:
            lines.append(
                f"  {d.path}: recorded {summarize(d.recorded, value_width)}, "
                f"replayed {summarize(d.replayed, value_width)}"
            )
        if paths is not None and len(step.differences) > paths:
            lines.append(f"  ... {len(step.differences) - paths} more path(s)")
        if step.note:
            lines.append(f"  {step.note}")
    for extra in result.extras:
        where = f" (seq {extra['seq']})" if extra.get("seq") else ""
        where = f" (replay seq {extra['replay_seq']})" if extra.get("replay_seq") else where
        lines.append(f"{extra['what']} {extra.get('method') or ''}{where}".rstrip())
        if extra.get("nearest"):
            lines.append(f"  {extra['nearest']}")
    if result.server_gone:
        lines.append(f"the replayed server went away: {result.server_gone}")
        lines.extend(f"  stderr: {line}" for line in result.stderr_tail)
    for fault in result.faults:
        lines.append(fault.describe())
    s = result.summary()
    lines.append(
        f"{s['steps']} steps: {s['equivalent']} equivalent, {s['diverged']} diverged, "
        f"{s['missing']} missing, {s['unexpected']} unexpected, {s['not_sent']} not sent"
        + (f", {s['skipped']} skipped (may change something)" if s["skipped"] else "")
        + (
            f"; faults {s['faults_reproduced']}/{s['faults_recorded']} reproduced"
            + (f", {s['faults_skipped']} not checked (skipped)" if s["faults_skipped"] else "")
            if s["faults_recorded"]
            else ""
        )
    )
    if result.replay_id:
        handle = result.handles.get(result.replay_id, result.replay_id)
        lines.append(f"replay stored as session {handle} ({result.replay_id})")
    if result.unanswered:
        lines.append("the server answered none of the requests the recording has answers to")
    lines.append(f"verdict: {result.verdict}")
    return "\n".join(lines)
