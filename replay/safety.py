"""Replay is safe by default: which recorded tool calls may change something on a live server.

A replay re-sends the client's frames to a real server: replaying a filesystem session runs its
`write_file` again. Before a replay runs, this module reads the annotations the server itself
published in the recorded `tools/list` answers (`readOnlyHint`, `destructiveHint`,
`idempotentHint`) and lists each `tools/call` that may change something: every tool not marked
read-only, a tool the recording has no annotations for included (the MCP schema's defaults: a tool
is not read-only, and may be destructive, unless it says otherwise). Whoever starts the replay then
decides (`decide`): allow the writes, skip them (`--read-only`), ask about each one, or refuse.

A skipped call is not sent, and neither is what only makes sense with it (its cancellation, a
later round carrying the `requestState` it answered): `skipped_along`. Its recorded answer stands
in for it, so the replay goes on past it and judges only the calls it sent.

`check_replay_safety` is the one entry point every replay path calls (a single replay, suites,
minimisation, the web UI): it takes a `Recording` and returns the calls at risk; nothing here does
I/O. The web UI cannot ask in the middle of a request: it asks first, naming the tools, and its
`confirm` says yes to the tools the person confirmed and no to every other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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
    confirm: Callable[[RiskyCall], bool] | None = None,
) -> frozenset[int]:
    """The steps to skip: none when there is no risk or writes are allowed, every risky one
    with `read_only`; else `confirm(call)` (asking a person, None when nobody can be asked)
    says of each call whether to send it (False: skip it and go on), or the replay is refused
    with `UnsafeReplay`."""
    if not risky or allow_writes:
        return frozenset()
    if read_only:
        return frozenset(call.step for call in risky)
    if confirm is not None:
        return frozenset(call.step for call in risky if not confirm(call))
    tools = ", ".join(sorted({call.tool for call in risky}))
    raise UnsafeReplay(
        f"the replay would send {len(risky)} call(s) that may change something on the server "
        f"({tools}); pass --allow-writes to send them or --read-only to skip them"
    )


def skipped_along(rec: Recording, skip: frozenset[int]) -> frozenset[int]:
    """`skip` and the steps that only make sense with a skipped call: a cancellation of it, and
    a later 2026-07-28 round that echoes the `requestState` its recorded answer carried."""
    if not skip:
        return skip
    out = set(skip)
    ids: set[str] = set()
    states: set[str] = set()
    for step in rec.steps:
        message = _message(step.frame)
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        cancels = step.frame.method == "notifications/cancelled" and (
            json.dumps(params.get("requestId")) in ids
        )
        continues = isinstance(params.get("requestState"), str) and params["requestState"] in states
        if cancels or continues:
            out.add(step.number)
        if step.number not in out:
            continue
        if "id" in message:
            ids.add(json.dumps(message["id"]))
        result = _message(step.response).get("result") if step.response is not None else None
        if isinstance(result, dict) and isinstance(result.get("requestState"), str):
            states.add(result["requestState"])
    return frozenset(out)
