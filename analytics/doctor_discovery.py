"""The doctor's discovery stage: the tools the server announced against the ones called.

A call to a tool missing from the last tools/list, a tool the server says it does not know, and
tool drift (`doctor_tools`). `is_unknown` is shared with the execution stage, which leaves those
errors to this one.
"""

from __future__ import annotations

import re

from blackbox.analytics.doctor_tools import tool_drift
from blackbox.analytics.doctor_walk import DoctorFinding, Walk, plural

_UNKNOWN_TOOL = re.compile(r"unknown tool|tool\b.*\bnot found|no such tool", re.I)


def discovery(w: Walk) -> list[DoctorFinding]:
    out: list[DoctorFinding] = []
    missing: dict[str, list[int]] = {}
    listed_at: dict[str, int] = {}
    for call in w.calls:
        if call["method"] != "tools/call" or not call["tool"]:
            continue
        current: set[str] | None = None
        current_seq = None
        for seq, names, first in w.tool_lists:
            if seq > call["request_seq"]:
                break
            current = set(names) if first or current is None else current | names
            current_seq = seq
        if current is not None and call["tool"] not in current:
            missing.setdefault(call["tool"], []).append(call["request_seq"])
            listed_at[call["tool"]] = current_seq or 0
    for tool, seqs in missing.items():
        out.append(
            DoctorFinding(
                "discovery",
                "tool_not_listed",
                "warning",
                f"tools/call '{tool}' not in the last tools/list (listed at seq "
                f"{listed_at[tool]}; called {plural(len(seqs), 'time')})",
                "the tool was renamed or filtered out by an allowlist, or a "
                "notifications/tools/list_changed was missed: list the tools again",
                seqs,
            )
        )
    out += tool_drift(w)
    unknown = [
        c
        for c in w.calls
        if c["method"] == "tools/call"
        and c["base_outcome"] == "rpc_error"
        and c["tool"] not in missing
        and is_unknown(c)
    ]
    if unknown:
        out.append(
            DoctorFinding(
                "discovery",
                "unknown_tool",
                "warning",
                f"the server does not know {plural(len(unknown), 'called tool')}: "
                + ", ".join(sorted({str(c["tool"]) for c in unknown})),
                "call only tools from the server's current tools/list",
                [c["request_seq"] for c in unknown],
                unknown[0]["error_message"],
            )
        )
    return out


def is_unknown(call: dict) -> bool:
    return bool(_UNKNOWN_TOOL.search(call["error_message"] or ""))
