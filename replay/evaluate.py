"""Turn a run into verdicts: each recorded step against its replayed response, the messages the
recording lacks, and whether each recorded fault happened again.

Pure functions over a `Recording` and a `Run`, no server and no store, so the verdicts can be
tested on hand-made runs; the engine in replay/replayer.py only drives and records.
"""

from __future__ import annotations

from collections.abc import Sequence

from blackbox.replay.compare import (
    Masks,
    compare_messages,
    diff,
    parse_pattern,
    strip_id,
    summarize,
)
from blackbox.replay.matchers import params_of
from blackbox.replay.recording import Frame, Recording, exit_description
from blackbox.replay.results import SKIPPED, SKIPPED_ALONG, FaultResult, Run, StepResult


def _step_masks(base: Masks, learned: dict[int, list[tuple]], number: int) -> Masks:
    extra = learned.get(number)
    if not extra:
        return base
    masks = Masks()
    masks.patterns = list(base.patterns)
    masks._parsed = [*base._parsed, *extra]
    return masks


def evaluate(
    rec: Recording,
    run: Run,
    base: Masks,
    learned: dict[int, list[tuple]] | None = None,
) -> tuple[list[StepResult], list[dict], list[FaultResult]]:
    """Compare a run with the recording: per-step results, extra messages, fault verdicts."""
    learned = learned or {}
    explained = {f.step for f in rec.faults if f.fault in ("no_response", "server_exit")}
    exit_step = next((f.step for f in rec.faults if f.fault == "server_exit"), None)
    results: list[StepResult] = []
    skipped: list[int] = []
    for step in rec.steps:
        f = step.frame
        res = StepResult(step.number, f.seq, step.label, f.method, f.tool, "ok")
        replayed = run.responses.get(step.number)
        res.replay_seq = replayed.seq if replayed is not None else None
        recorded = step.response
        if run.not_sent.get(step.number) in (SKIPPED, SKIPPED_ALONG):
            res.status, res.note = "skipped", run.not_sent[step.number]
            skipped.append(step.number)
        elif step.number in run.not_sent:
            if recorded is not None or f.kind == "request":
                res.status = "not_sent"
                res.note = run.not_sent[step.number]
            else:
                res.note = f"not sent: {run.not_sent[step.number]}"
        elif recorded is not None and replayed is not None:
            res.differences = compare_messages(
                recorded.message, replayed.message, _step_masks(base, learned, step.number)
            )
            if res.differences:
                res.status = "diverged"
                if skipped:
                    # The replayed server did not get those calls: its state may differ.
                    res.note = f"follows skipped step(s) {', '.join(map(str, skipped))}"
        elif recorded is not None:
            res.status = "missing"
            res.note = _explain_missing(recorded, run)
        elif replayed is not None:
            fault_explains = step.number in explained or (
                exit_step is not None and step.number >= exit_step
            )
            res.status = "fault_not_reproduced" if fault_explains else "unexpected"
            res.note = (
                "the recording has no response here (fault); the replay got one"
                if fault_explains
                else "the recording has no response to this request; the replay got one"
            )
        results.append(res)
    extras = list(run.unexpected)
    for i, req in enumerate(rec.server_requests):
        if (
            not run.server_used[i]
            and req.after_step <= max(run.sent_at, default=0)
            and req.after_step not in skipped  # a skipped call's requests were never due
        ):
            extras.append(
                {
                    "what": "missing server request",
                    "method": req.frame.method,
                    "seq": req.frame.seq,
                    "nearest": _nearest_replayed(req.frame, run.unmatched_requests),
                }
            )
    for frame in run.stray_responses:
        extras.append(
            {
                "what": "response to no request",
                "replay_seq": frame.seq,
                "nearest": f"id {frame.id_key[0] if frame.id_key else None} "
                "matches no request sent",
            }
        )
    return results, extras, _fault_verdicts(rec, run, results)


def _nearest_replayed(recorded: Frame, replayed: list[Frame]) -> str:
    """For a recorded server request the replay lacks: the closest one the replay did get."""
    if not isinstance(recorded.message, dict) or not replayed:
        return "the server did not send it in the replay"
    scored = []
    for frame in replayed:
        live = frame.message if isinstance(frame.message, dict) else {}
        differences = compare_messages(
            {"method": recorded.method, "params": params_of(recorded.message)},
            {"method": frame.method, "params": params_of(live)},
            Masks(),
        )
        scored.append((len(differences), differences, frame))
    _n, differences, near = min(scored, key=lambda item: item[0])
    shown = "; ".join(
        f"{d.path}: recorded {summarize(d.recorded, 60)}, replayed {summarize(d.replayed, 60)}"
        for d in differences[:3]
    )
    return f"nearest server request in the replay is {near.method} (replay seq {near.seq}): {shown}"


def _explain_missing(recorded: Frame, run: Run) -> str:
    if run.stray_responses:
        scored = [
            (compare_messages(recorded.message, fr.message, Masks()), fr)
            for fr in run.stray_responses
        ]
        differences, near = min(scored, key=lambda pair: len(pair[0]))
        shown = "; ".join(
            f"{d.path}: recorded {summarize(d.recorded, 60)}, got {summarize(d.replayed, 60)}"
            for d in differences[:3]
        )
        return (
            f"no response with this id; nearest unmatched response is replay seq {near.seq} "
            f"(id {near.id_key[0] if near.id_key else None})"
            + (f", differing at {shown}" if shown else "")
        )
    if run.gone_after_step is not None:
        return describe_gone(run)
    return "no response within the timeout"


def describe_gone(run: Run) -> str:
    """How and when the server went away on its own, e.g. "exited with code 1 after step 3"."""
    code = run.exit.exit_code if run.exit else None
    sig = run.exit.signal if run.exit else None
    return f"{exit_description(code, sig)} after step {run.gone_after_step}"


def _replay_faults(
    rec: Recording, run: Run, results: list[StepResult]
) -> list[tuple[str, int, str]]:
    found: list[tuple[str, int, str]] = []
    for step, res in zip(rec.steps, results, strict=True):
        replayed = run.responses.get(res.number)
        if replayed is not None and replayed.kind == "error":
            found.append(("jsonrpc_error", res.number, f"JSON-RPC error {replayed.error_code}"))
        elif replayed is not None and replayed.is_error:
            found.append(("tool_error", res.number, "tool error (isError: true)"))
        elif (
            replayed is None
            and step.frame.kind == "request"
            and res.number in run.sent_at
            and (run.gone_after_step is None or res.number < run.gone_after_step)
        ):
            found.append(("no_response", res.number, "no response"))
    for doc in run.transport_faults:
        found.append((str(doc.get("fault")), int(doc.get("step") or 0), str(doc.get("detail"))))
    exit_info = run.exit
    if run.gone_after_step is not None:
        code = exit_info.exit_code if exit_info else None
        sig = exit_info.signal if exit_info else None
        found.append(("server_exit", run.gone_after_step, exit_description(code, sig)))
    return found


def _fault_verdicts(rec: Recording, run: Run, results: list[StepResult]) -> list[FaultResult]:
    replay_faults = _replay_faults(rec, run, results)
    verdicts: list[FaultResult] = []
    skipped = {r.number for r in results if r.status == "skipped"}
    for fault in rec.faults:
        if fault.step in skipped:
            verdicts.append(FaultResult(fault, False, "replay: the call was skipped", True))
            continue
        same = [rf for rf in replay_faults if rf[0] == fault.fault and rf[1] == fault.step]
        if same:
            verdicts.append(FaultResult(fault, True, same[0][2]))
            continue
        elsewhere = [rf for rf in replay_faults if rf[0] == fault.fault]
        if elsewhere:
            detail = f"replay: {elsewhere[0][2]} at step {elsewhere[0][1]} instead"
        elif fault.fault == "server_exit":
            detail = "replay: the server kept running"
        else:
            detail = "replay: no such fault"
        verdicts.append(FaultResult(fault, False, detail))
    return verdicts


def learn_masks(runs: Sequence[Run], rec: Recording) -> dict[int, list[tuple]]:
    """Paths whose values differ between learning runs, per step: the volatile fields."""
    learned: dict[int, list[tuple]] = {}
    first, second = runs[0], runs[1]
    for step in rec.steps:
        a, b = first.responses.get(step.number), second.responses.get(step.number)
        if a is None or b is None:
            continue
        differences = diff(strip_id(a.message), strip_id(b.message), Masks())
        if differences:
            learned[step.number] = [parse_pattern(d.path) for d in differences]
    return learned
