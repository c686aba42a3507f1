"""The doctor's tool-drift findings at the discovery stage: definitions that changed against the
last recorded ones (`tool_changed`), the calls made under them, and definitions the heuristics
flagged (`tools_listed` findings). Apart from `doctor_discovery` because tool drift has its own
records, written by the gate's tool watch (`blackbox.recorder.gate.tool_watch`), and for an HTTP
session in the watcher's own sessions, which `observed_elsewhere` adds to the walk.
"""

from __future__ import annotations

from blackbox.analytics.doctor_walk import DoctorFinding, Walk, event_doc, plural
from blackbox.recorder.gate import watch_name
from blackbox.recorder.store import EventStore


def observed_elsewhere(store: EventStore, w: Walk, name: str, session_id: str) -> None:
    """Add to the walk what the HTTP proxy's watcher recorded about this session in its own
    sessions (`tool watch: NAME`, found by name; they hold few records)."""
    for info in store.list_sessions(name=watch_name(name)):
        for ev in store.read_session(info.session_id):
            if ev.kind not in ("tool_changed", "tools_listed"):
                continue
            doc = event_doc(ev)
            if doc.get("observed_session") != session_id:
                continue
            if ev.kind == "tool_changed":
                w.tool_changes.append((ev, doc))
            else:
                w.tool_findings.update(doc.get("findings") or {})


def tool_drift(w: Walk) -> list[DoctorFinding]:
    """Definitions that changed against the last recorded ones, and calls made under them."""
    out: list[DoctorFinding] = []
    flagged_changes = set()
    for ev, doc in w.tool_changes:
        tool, change = doc.get("tool"), doc.get("change")
        seq = doc.get("seq") or ev.seq
        after = [
            c["request_seq"]
            for c in w.calls
            if c["method"] == "tools/call" and c["tool"] == tool and c["request_seq"] > seq
        ]
        rules = sorted({str(f.get("rule")) for f in doc.get("findings") or []})
        flagged_changes.add(tool)
        old, new = str(doc.get("old_hash") or "")[:12], str(doc.get("new_hash") or "")[:12]
        message = f"{doc.get('item_kind') or 'tool'} '{tool}' {change}"
        message += f" ({old or '-'} -> {new or '-'})" if change == "changed" else ""
        message += f"; {plural(len(after), 'call')} made under the new definition"
        if rules:
            message += f"; suspicious: {', '.join(rules)}"
        out.append(
            DoctorFinding(
                "discovery",
                "tool_changed",
                "warning",
                message,
                "review the change (blackbox tools --changes); if it is expected, approve it "
                f"(blackbox tools approve {doc.get('server')} {tool}); pin tools in the policy "
                "to refuse calls under unapproved definitions",
                [ev.seq, *after],
                "\n".join(doc.get("diff") or [])[:400] or None,
            )
        )
    for tool, found in sorted(w.tool_findings.items()):
        if tool in flagged_changes or not isinstance(found, list):
            continue
        rules = sorted({str(f.get("rule")) for f in found if isinstance(f, dict)})
        out.append(
            DoctorFinding(
                "discovery",
                "suspicious_definition",
                "warning",
                f"tool '{tool}' has a suspicious definition: {', '.join(rules)} (a heuristic)",
                "read the tool's description and schema before trusting it "
                f"(blackbox tools --history {tool})",
                [],
                "; ".join(str(f.get("excerpt")) for f in found if isinstance(f, dict))[:400],
            )
        )
    return out
