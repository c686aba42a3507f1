"""The doctor's execution stage: the calls themselves.

Tool errors, JSON-RPC errors, requests left unanswered (by the server, or by the client when the
server asked), requests open when the session failed, slow calls, calls the policy denied, and
cancellations. It reads the first text of a failing result for the evidence.
"""

from __future__ import annotations

from collections import Counter

from blackbox.analytics.doctor_discovery import is_unknown
from blackbox.analytics.doctor_walk import DoctorFinding, Walk, call_label, plural
from blackbox.recorder.log import parse
from blackbox.recorder.query import excerpt


def _result_text(w: Walk, call: dict) -> str | None:
    ev = w.by_seq.get(call["response_seq"]) if call["response_seq"] else None
    if ev is None:
        return None
    value, _ = parse(ev.raw)
    result = value.get("result") if isinstance(value, dict) else None
    content = result.get("content") if isinstance(result, dict) else None
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            text = block["text"].replace("\n", " ")
            return text if len(text) <= 80 else text[:79] + "…"
    return excerpt(ev.raw)


def execution(w: Walk, slow_s: float) -> list[DoctorFinding]:
    out: list[DoctorFinding] = []
    calls = [c for c in w.calls if c["method"] not in ("initialize", "server/discover")]
    denied_seqs = {
        d.get("request_seq")
        for _, d in w.decisions
        if (d.get("final") or d.get("decision")) == "deny" and d.get("source") != "host"
    }
    denied = [c for c in calls if c["request_seq"] in denied_seqs]
    calls = [c for c in calls if c["request_seq"] not in denied_seqs]
    groups: dict[str, list[dict]] = {}
    for call in calls:
        groups.setdefault(call["base_outcome"], []).append(call)
    if groups.get("tool_error"):
        items = groups["tool_error"]
        tools = Counter(call_label(c) for c in items)
        out.append(
            DoctorFinding(
                "execution",
                "tool_error",
                "warning",
                f"{plural(len(items), 'call')} returned isError: true ("
                + ", ".join(f"{k} ×{v}" for k, v in tools.most_common(5))
                + ")",
                "read the result text: a missing file, a permission or a downstream failure "
                "inside the tool",
                [c["request_seq"] for c in items],
                _result_text(w, items[0]),
            )
        )
    rpc = [c for c in groups.get("rpc_error", []) if not (c["tool"] and is_unknown(c))]
    if rpc:
        codes = Counter(f"{c['error_code']} '{c['error_message'] or ''}'" for c in rpc)
        out.append(
            DoctorFinding(
                "execution",
                "rpc_error",
                "warning",
                f"{plural(len(rpc), 'request')} failed with JSON-RPC errors: "
                + ", ".join(f"{k} ×{v}" for k, v in codes.most_common(3)),
                "-32602 means bad arguments (check the tool's input schema); -32603 an error "
                "inside the server (read its stderr)",
                [c["request_seq"] for c in rpc],
            )
        )
    # A server's own request (roots/list, sampling) often arrives after the client is done and
    # is never answered: worth a note, not a failure.
    asked_by_server = [c for c in groups.get("no_response", []) if c["direction"] == "s2c"]
    if asked_by_server:
        out.append(
            DoctorFinding(
                "execution",
                "server_request_unanswered",
                "info",
                f"the client never answered {plural(len(asked_by_server), 'server request')}: "
                + ", ".join(
                    f"{call_label(c)} (seq {c['request_seq']})" for c in asked_by_server[:5]
                ),
                "nothing to fix if the client closed first; otherwise check that the client "
                "supports the capability the server asked for",
                [c["request_seq"] for c in asked_by_server],
            )
        )
    unanswered = [c for c in groups.get("no_response", []) if c["direction"] != "s2c"]
    if unanswered:
        items = unanswered
        out.append(
            DoctorFinding(
                "execution",
                "no_response",
                "error",
                f"{plural(len(items), 'request')} got no response: "
                + ", ".join(f"{call_label(c)} (seq {c['request_seq']})" for c in items[:5]),
                "the server hung or dropped the request: a downstream timeout, a deadlock, or "
                "a request it does not handle",
                [c["request_seq"] for c in items],
            )
        )
    if groups.get("transport_fault"):
        items = groups["transport_fault"]
        out.append(
            DoctorFinding(
                "execution",
                "open_at_fault",
                "error",
                f"{plural(len(items), 'request')} {'was' if len(items) == 1 else 'were'} "
                "open when the session failed: "
                + ", ".join(f"{call_label(c)} (seq {c['request_seq']})" for c in items[:5]),
                "see the transport finding: the server went away before answering",
                [c["request_seq"] for c in items],
            )
        )
    slow = [c for c in calls if c["latency_ns"] is not None and c["latency_ns"] > slow_s * 1e9]
    if slow:
        worst = max(slow, key=lambda c: c["latency_ns"])
        out.append(
            DoctorFinding(
                "execution",
                "slow_calls",
                "warning",
                f"{plural(len(slow), 'call')} over {slow_s:g} s (slowest: {call_label(worst)} "
                f"{worst['latency_ns'] / 1e9:.1f} s at seq {worst['request_seq']})",
                "calls over 10 s are suspect: a slow downstream service or a missing timeout",
                [c["request_seq"] for c in slow],
            )
        )
    if denied:
        rules = Counter(
            str(d.get("rule") or d.get("decided_by") or "?")
            for _, d in w.decisions
            if d.get("request_seq") in {c["request_seq"] for c in denied}
        )
        out.append(
            DoctorFinding(
                "execution",
                "denied",
                "warning",
                f"{plural(len(denied), 'call')} denied by policy ("
                + ", ".join(f"rule {k} ×{v}" for k, v in rules.most_common(3))
                + ")",
                "expected if the policy is right; otherwise change the rule (blackbox policy test)",
                [c["request_seq"] for c in denied],
            )
        )
    if groups.get("cancelled"):
        items = groups["cancelled"]
        out.append(
            DoctorFinding(
                "execution",
                "cancelled",
                "info",
                f"{plural(len(items), 'request')} cancelled by the requester: "
                + ", ".join(call_label(c) for c in items[:5]),
                "nothing to fix unless the cancellations are timeouts of slow calls",
                [c["request_seq"] for c in items],
            )
        )
    return out
