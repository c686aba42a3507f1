"""A replay's divergences side by side: for each step that did not come out the same, the answer
the recording holds and the answer the replay got, whole, next to the step's differences.

Why it exists: the report (replay/report.py) names each differing JSON path with both values;
someone looking at a divergence also wants both messages entire, as the web UI shows them. The
replay is stored as a session of its own and sends the recorded JSON-RPC ids, so the replayed
answer to a recorded request is the replay's response with the same id, in the same direction.

It is the web UI's replay, so it is as safe as the CLI's: a call that may change something
(`blackbox.replay.safety`) is sent only for a tool the person named when confirming; the page
asks first, with the tools `calls_at_risk` lists.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from blackbox.recorder.log import StoredEvent
from blackbox.recorder.query import answer_seq, timeline_page
from blackbox.recorder.store import EventStore
from blackbox.replay.recording import Recording, load_recording
from blackbox.replay.replayer import ReplayOptions, replay_session
from blackbox.replay.report import as_json
from blackbox.replay.results import ReplayResult
from blackbox.replay.safety import check_replay_safety, decide


def calls_at_risk(store: EventStore, session_ref: str) -> list[dict[str, Any]]:
    """The recorded calls a replay of the session would send that may change something, each as
    step, seq, tool, reason and idempotent (what the page names before it starts a replay)."""
    rec = load_recording(store, store.resolve(session_ref))
    return [
        {
            "step": call.step,
            "seq": call.seq,
            "tool": call.tool,
            "reason": call.reason,
            "idempotent": call.idempotent,
        }
        for call in check_replay_safety(rec)
    ]


def replay_side_by_side(
    store: EventStore,
    session_ref: str,
    against: str | None = None,
    allow_tools: Collection[str] = (),
) -> dict[str, Any]:
    """Replay a session (default options, stored as a new session) against `against` (a command
    line; None: the recorded one) and return the JSON report (`report.as_json`) with `sides`:
    each step that is not ok, with both answers (`divergent_sides`), and `skipped_tools`. A call
    that may change something is sent only when its tool is in `allow_tools` (what the person
    confirmed); every other one is skipped, so by default only read-only calls are sent."""
    confirmed = frozenset(allow_tools)
    skipped: set[str] = set()

    def guard(rec: Recording) -> frozenset[int]:
        risky = check_replay_safety(rec)
        skipped.update(call.tool for call in risky if call.tool not in confirmed)
        return decide(risky, confirm=lambda call: call.tool in confirmed)

    result = replay_session(
        store, session_ref, against=against, options=ReplayOptions(), guard=guard
    )
    doc = as_json(result)
    doc["sides"] = divergent_sides(store, result)
    doc["skipped_tools"] = sorted(skipped)
    return doc


def divergent_sides(store: EventStore, result: ReplayResult) -> list[dict[str, Any]]:
    """Each step of `result` that is not ok, as its `as_dict()` plus `label`, and `recorded` and
    `replayed`: the answers as text (JSON pretty-printed, else the bytes as text), None where
    there is none (a notification, a step the replay did not answer)."""
    sides = []
    for step in result.steps:
        if step.status == "ok":
            continue
        recorded = _recorded_answer(store, result.original_id, step.seq)
        replayed = None
        if result.replay_id and recorded is not None and recorded.rpc_id is not None:
            seq = answer_seq(store, result.replay_id, recorded.rpc_id, recorded.direction)
            replayed = _record(store, result.replay_id, seq) if seq else None
        sides.append(
            {
                **step.as_dict(),
                "label": step.label,
                "recorded": None if recorded is None else shown(recorded.raw),
                "replayed": None if replayed is None else shown(replayed.raw),
            }
        )
    return sides


def shown(raw: bytes) -> str:
    """A message as a person reads it: its JSON pretty-printed, or, when it is not JSON, its
    bytes as text (undecodable bytes escaped)."""
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", errors="backslashreplace")


def _recorded_answer(store: EventStore, session_id: str, seq: int) -> StoredEvent | None:
    """The recorded response to the request at `seq`, if it is a request with one."""
    page = timeline_page(store, session_id, seq - 1, 1)["records"]
    answer = page[0].get("response_seq") if page else None
    return _record(store, session_id, answer) if answer else None


def _record(store: EventStore, session_id: str, seq: int) -> StoredEvent | None:
    for ev in store.read_session(session_id, after_seq=seq - 1):
        return ev if ev.seq == seq else None
    return None
