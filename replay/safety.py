"""Replay is safe by default: which recorded tool calls may change something on a live server.

A replay re-sends the client's frames to a real server: replaying a filesystem session runs its
`write_file` again. Before a replay runs, this module reads the annotations the server itself
published in the recorded `tools/list` answers (`readOnlyHint`, `destructiveHint`,
`idempotentHint`) and lists each `tools/call` that may change something: every tool not marked
read-only, a tool the recording has no annotations for included (the MCP schema's defaults: a tool
is not read-only, and may be destructive, unless it says otherwise). Whoever starts the replay then
decides (`decide`): allow the writes, skip them (`--read-only`), or refuse.

`check_replay_safety` is the one entry point every replay path calls (a single replay, suites,
minimisation): it takes a `Recording` and returns the calls at risk; nothing here does I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from blackbox.replay.recording import Frame, Recording, ReplayError


@dataclass(frozen=True, slots=True)
class RiskyCall:
    """A recorded `tools/call` that may change something when sent again."""

    step: int
    seq: int
    tool: str
    reason: str  # "destructive", "not marked read-only", "no annotations recorded"
    idempotent: bool = False

    def describe(self) -> str:
        again = " (idempotent)" if self.idempotent else ""
        return f"step {self.step} (seq {self.seq}): {self.tool}: {self.reason}{again}"


class UnsafeReplay(ReplayError):
    """A replay would re-run calls that may change something, and nobody allowed it."""


def _message(frame: Frame) -> dict:
    if isinstance(frame.message, dict):
        return frame.message
    try:
        value = json.loads(frame.raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_annotations(rec: Recording) -> dict[str, dict]:
    """Tool name -> its annotations (possibly empty), from every recorded `tools/list` answer
    (the last listing of a tool wins: tools may change during a session)."""
    found: dict[str, dict] = {}
    for step in rec.steps:
        if step.frame.method != "tools/list" or step.response is None:
            continue
        result = _message(step.response).get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                notes = tool.get("annotations")
                found[tool["name"]] = notes if isinstance(notes, dict) else {}
    return found


def check_replay_safety(
    rec: Recording, skip_steps: frozenset[int] = frozenset()
) -> list[RiskyCall]:
    """Every `tools/call` step of `rec` (other than `skip_steps`) that may change something on
    the server it is replayed against, in step order."""
    notes = tool_annotations(rec)
    risky = []
    for step in rec.steps:
        if step.frame.method != "tools/call" or step.number in skip_steps:
            continue
        tool = step.frame.tool or "?"
        if tool not in notes:
            risky.append(RiskyCall(step.number, step.frame.seq, tool, "no annotations recorded"))
            continue
        hints = notes[tool]
        if hints.get("readOnlyHint") is True:
            continue
        idempotent = hints.get("idempotentHint") is True
        # destructiveHint means something only for a tool that is not read-only; its default
        # is true.
        reason = "destructive" if hints.get("destructiveHint", True) else "not marked read-only"
        risky.append(RiskyCall(step.number, step.frame.seq, tool, reason, idempotent))
    return risky


def decide(
    risky: list[RiskyCall],
    *,
    allow_writes: bool = False,
    read_only: bool = False,
    confirm: object = None,
) -> frozenset[int]:
    """The steps to skip: none when there is no risk or writes are allowed, every risky one
    with `read_only`; else `confirm()` (a callable asking a person, None when nobody can be
    asked) must say yes, or the replay is refused with `UnsafeReplay`."""
    if not risky or allow_writes:
        return frozenset()
    if read_only:
        return frozenset(call.step for call in risky)
    if callable(confirm) and confirm():
        return frozenset()
    tools = ", ".join(sorted({call.tool for call in risky}))
    raise UnsafeReplay(
        f"the replay would send {len(risky)} call(s) that may change something on the server "
        f"({tools}); pass --allow-writes to send them or --read-only to skip them"
    )
