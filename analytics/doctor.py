"""`blackbox doctor`: walk the fault tree of the design over one session.

Stages, in the order a session meets them: transport (the pipe or HTTP exchange itself),
handshake (initialize / server/discover), discovery (the tools the server announced), execution
(the calls). Each finding carries its evidence (seqs and an excerpt) and the likely fix.

The doctor reads the one session straight from the store (it needs the raw frames: tool lists,
result texts, stderr lines) and pairs calls with the same `CallTracker` that builds the `calls`
dataset, so its outcomes agree with the reports.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from blackbox.analytics.calls import CallTracker, as_dict
from blackbox.recorder.capture.heartbeat import heartbeat_stats
from blackbox.recorder.log import events
from blackbox.recorder.log.jsonrpc import parse
from blackbox.recorder.log.model import Kind, StoredEvent
from blackbox.recorder.query.excerpt import excerpt
from blackbox.recorder.store import EventStore

STAGES = ("transport", "handshake", "discovery", "execution")
SLOW_S = 10.0
# Findings of these severities make `doctor` exit 1; `info` notes (an era fallback that worked,
# a cancelled call) are shown but do not.
FAILING = ("error", "warning")

# Likely fixes per recorded fault kind.
FIXES = {
    "stdout_pollution": "it logs to stdout; send logs to stderr (stdout is the protocol channel)",
    "invalid_json": "the client wrote something that is not JSON-RPC: check the host's "
    "transport settings",
    "invalid_utf8": "the peer wrote bytes that are not UTF-8: check its output encoding",
    "oversize_frame": "a result this large is slow for every host: page or trim it "
    "(or raise --max-frame)",
    "eof_mid_frame": "the stream ended inside a message: the peer crashed or was killed while "
    "writing",
    "broken_pipe": "the other side went away: check whether the server crashed (stderr) or the "
    "host stopped it",
    "exit_with_outstanding": "the server exited while requests were open: read its stderr for "
    "the crash; check its command and environment",
    "server_exited": "the server exited on its own: run its command by hand to see the error; "
    "check the command, arguments and environment",
    "spawn_failed": "the server command could not be started: check the command and PATH",
    "http_status": "the server answered with an HTTP error: check the URL, authentication and "
    "the server's logs",
    "upstream_unreachable": "the server could not be reached: is it running at that URL?",
    "stream_cut": "the SSE stream was cut: check proxies and timeouts between host and server",
    "timeout": "the peer did not answer in time: a downstream dependency is slow or hung",
    "store_refused": "the store refused this record; its raw bytes are kept in the fault "
    "(raw_base64): read them with `blackbox show`, and report the store's reason",
    "request_incomplete": "the client closed its connection before its request body was "
    "complete; nothing was forwarded: check the client and any proxy in between",
    "unresponsive": "the peer stopped answering pings: its event loop is blocked or its ping "
    "handling is broken (the host would freeze the session); check its stderr and load",
}


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


def _span(given: Iterable[int | None]) -> str:
    seqs = sorted(s for s in given if s is not None)
    if not seqs:
        return ""
    if len(seqs) == 1:
        return f"seq {seqs[0]}"
    if seqs[-1] - seqs[0] + 1 == len(seqs):
        return f"seq {seqs[0]}–{seqs[-1]}"
    shown = ", ".join(str(s) for s in seqs[:6])
    return f"seq {shown}{', …' if len(seqs) > 6 else ''}"


def _doc(ev: StoredEvent) -> dict:
    """A session event's document through the schema (empty when it does not decode)."""
    return events.decode_dict(ev.kind, ev.raw) or {}


def _label(call: dict) -> str:
    if call["tool"]:
        return f"{call['method']} '{call['tool']}'"
    return str(call["method"])


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class _Walk:
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
        # tool drift (`blackbox.recorder.gate.tool_watch`): changes and flagged definitions recorded
        # here
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
            self.faults.append((ev, _doc(ev)))
        elif ev.kind == Kind.STDERR:
            self.stderr.append((ev.seq, str(_doc(ev).get("line", ""))))
        elif ev.kind == Kind.SESSION_ENDED:
            self.ended = (ev, _doc(ev))
        elif ev.kind == Kind.DECISION:
            self.decisions.append((ev, _doc(ev)))
        elif ev.kind == "tool_changed":
            self.tool_changes.append((ev, _doc(ev)))
        elif ev.kind == "tools_listed":
            self.tool_findings.update(_doc(ev).get("findings") or {})
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


def doctor(store: EventStore, ref: str, slow_s: float = SLOW_S) -> Diagnosis:
    """Diagnose the session named by `ref`: a full id, a unique prefix, or `last`."""
    return diagnose(store, store.resolve(ref), slow_s)


def diagnose(store: EventStore, session_id: str, slow_s: float = SLOW_S) -> Diagnosis:
    """Walk the fault tree over one session (a full id: resolve prefixes with the store)."""
    info = store.session(session_id)  # raises SessionNotFound with a clear message
    walk = _Walk()
    for ev in store.read_session(session_id):
        walk.feed(ev)
    walk.finish()
    if info.transport == "http" and info.name:
        from blackbox.analytics.doctor_tools import observed_elsewhere

        observed_elsewhere(store, walk, info.name, session_id)
    findings: list[DoctorFinding] = []
    findings += _transport(walk)
    findings += _heartbeats(walk)
    findings += _handshake(walk)
    findings += _discovery(walk)
    findings += _execution(walk, slow_s)
    order = {stage: i for i, stage in enumerate(STAGES)}
    findings.sort(key=lambda f: order.get(f.stage, len(order)))
    return Diagnosis(session_id, findings, len(walk.events), len(walk.calls))


# -- transport ----------------------------------------------------------------------------------


def _transport(w: _Walk) -> list[DoctorFinding]:
    out: list[DoctorFinding] = []
    by_kind: dict[str, list[tuple[StoredEvent, dict]]] = {}
    for ev, doc in w.faults:
        by_kind.setdefault(str(doc.get("fault") or "unknown"), []).append((ev, doc))
    covered = {doc.get("seq") for _, doc in w.faults}
    # Invalid frames the tap did not report as faults (an older tap, a replayed log).
    extra = [ev for ev in w.invalid_frames if ev.seq not in covered]
    for ev in extra:
        kind = "stdout_pollution" if ev.direction == "s2c" else "invalid_json"
        by_kind.setdefault(kind, []).append((ev, {"seq": ev.seq, "excerpt": excerpt(ev.raw)}))
    for kind, items in by_kind.items():
        docs = [doc for _, doc in items]
        seqs = [d.get("seq") if d.get("seq") is not None else ev.seq for ev, d in items]
        stage = str(docs[0].get("stage") or "transport")
        first_excerpt = next((str(d["excerpt"]) for d in docs if d.get("excerpt")), None)
        if first_excerpt is None and items and items[0][1].get("seq") in w.by_seq:
            first_excerpt = excerpt(w.by_seq[items[0][1]["seq"]].raw)
        if first_excerpt is not None and len(first_excerpt) > 60:
            first_excerpt = first_excerpt[:59] + "…"
        span = _span(seqs)
        if kind == "stdout_pollution":
            message = (
                f"the server wrote {_plural(len(items), 'non-JSON line')} to stdout"
                f" ({span}: '{first_excerpt or ''}')"
            )
        elif kind == "invalid_json":
            message = (
                f"the client sent {_plural(len(items), 'line')} that are not JSON-RPC ({span})"
            )
        else:
            detail = str(docs[0].get("detail") or kind)
            more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
            message = f"{kind}: {detail}{more}"
        warning = kind in ("oversize_frame", "stdout_pollution", "store_refused")
        severity = "warning" if warning else "error"
        if kind == "exit_with_outstanding":
            stage = "transport"  # the fault is the exit; the open calls are counted below
        out.append(
            DoctorFinding(
                stage if stage in STAGES else "transport",
                kind,
                severity,
                message,
                FIXES.get(kind, "see the evidence; the fault's detail says what failed"),
                [s for s in seqs if s is not None],
                first_excerpt,
            )
        )
    if w.ended is not None:
        ev, doc = w.ended
        outcome = str(doc.get("outcome") or "")
        recorded = set(by_kind)
        if outcome == "crashed" and not recorded & {"server_exited", "exit_with_outstanding"}:
            how = (
                f"signal {doc['signal']}"
                if doc.get("signal")
                else f"exit code {doc.get('exit_code')}"
            )
            tail = [line for _, line in w.stderr[-3:]]
            out.append(
                DoctorFinding(
                    "transport",
                    "crashed",
                    "error",
                    f"the server crashed ({how})",
                    FIXES["server_exited"],
                    [ev.seq, *(s for s, _ in w.stderr[-3:])],
                    " | ".join(tail) if tail else None,
                )
            )
    elif w.events:
        out.append(
            DoctorFinding(
                "transport",
                "no_end",
                "info",
                "the session has no end record: it is still running, or its tap was killed "
                "(run `blackbox ship` to store what a killed tap left)",
                "nothing to fix if the session is still running",
                [w.events[-1].seq],
            )
        )
    if any(f.severity == "error" for f in out) and w.stderr:
        last = w.stderr[-3:]
        for f in out:
            if f.severity == "error" and f.excerpt is None:
                f.excerpt = " | ".join(line for _, line in last)
                f.seqs += [s for s, _ in last]
    return out


def _heartbeats(w: _Walk) -> list[DoctorFinding]:
    """The session's pings: interval, jitter and missed ones (a note; `unresponsive` and
    `peer_back` are the recorded events)."""
    stats = heartbeat_stats(w.calls)
    if stats is None:
        return []
    back = [ev.seq for ev in w.events if ev.kind == events.PeerBack.KIND]
    interval = f"every {stats['interval_s']} s" if stats["interval_s"] is not None else "once"
    jitter = f", jitter {stats['jitter_s']} s" if stats["jitter_s"] is not None else ""
    message = (
        f"heartbeats: {_plural(stats['pings'], 'ping')} ({stats['direction']}) {interval}"
        f"{jitter}, {stats['missed']} missed"
    )
    if back:
        message += f"; the peer answered again after being unresponsive ({_span(back)})"
    return [
        DoctorFinding(
            "transport",
            "heartbeats",
            "info",
            message,
            "nothing to fix when none are missed",
            back,
        )
    ]


# -- handshake ----------------------------------------------------------------------------------


def _requested_version(w: _Walk, call: dict) -> str | None:
    ev = w.by_seq.get(call["request_seq"])
    value, _ = parse(ev.raw) if ev is not None else (None, None)
    params = value.get("params") if isinstance(value, dict) else None
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    return version if isinstance(version, str) else None


def _answered_version(w: _Walk, call: dict) -> str | None:
    ev = w.by_seq.get(call["response_seq"]) if call["response_seq"] else None
    value, _ = parse(ev.raw) if ev is not None else (None, None)
    result = value.get("result") if isinstance(value, dict) else None
    version = result.get("protocolVersion") if isinstance(result, dict) else None
    return version if isinstance(version, str) else None


def _handshake(w: _Walk) -> list[DoctorFinding]:
    out: list[DoctorFinding] = []
    hand = [c for c in w.calls if c["method"] in ("initialize", "server/discover")]
    for call in hand:
        seqs = [call["request_seq"]] + ([call["response_seq"]] if call["response_seq"] else [])
        outcome = call["base_outcome"]
        if call["method"] == "server/discover" and outcome == "rpc_error":
            later = [
                c
                for c in hand
                if c["method"] == "initialize" and c["request_seq"] > call["request_seq"]
            ]
            asked = call.get("era") or "2026-07-28"
            said = f"{call['error_code']}" + (
                f" ('{call['error_message']}')" if call["error_message"] else ""
            )
            if later:
                fell_back = _answered_version(w, later[0]) or _requested_version(w, later[0])
                out.append(
                    DoctorFinding(
                        "handshake",
                        "era_fallback",
                        "info",
                        f"client asked {asked}, server answered {said} to server/discover and "
                        f"the client fell back to {fell_back or 'the initialize handshake'}",
                        "nothing to fix unless you need the stateless era: upgrade the server's "
                        "SDK to one that speaks 2026-07-28",
                        [*seqs, later[0]["request_seq"]],
                    )
                )
            else:
                out.append(
                    DoctorFinding(
                        "handshake",
                        "discover_failed",
                        "error",
                        f"server/discover failed with {said} and the client did not fall back "
                        "to initialize",
                        "client and server eras differ: let the client fall back (mode 'auto') "
                        "or upgrade the server",
                        seqs,
                    )
                )
        elif call["method"] == "initialize" and outcome == "rpc_error":
            out.append(
                DoctorFinding(
                    "handshake",
                    "initialize_failed",
                    "error",
                    f"the server rejected initialize: {call['error_code']} "
                    f"'{call['error_message'] or ''}' (client asked "
                    f"{_requested_version(w, call) or '?'})",
                    "client and server eras or SDK versions differ: upgrade the older side",
                    seqs,
                )
            )
        elif outcome in ("no_response", "transport_fault"):
            out.append(
                DoctorFinding(
                    "handshake",
                    "handshake_unanswered",
                    "error",
                    f"the server never answered {call['method']}",
                    "the server did not start speaking MCP: check its command and that it "
                    "serves stdio (not HTTP)",
                    seqs,
                )
            )
        elif call["method"] == "initialize" and outcome == "ok":
            asked, got = _requested_version(w, call), _answered_version(w, call)
            if asked and got and asked != got:
                out.append(
                    DoctorFinding(
                        "handshake",
                        "version_downgrade",
                        "info",
                        f"client asked protocol {asked}, the server answered {got}",
                        "nothing to fix if the client accepted it; upgrade the server's SDK to "
                        "use newer protocol features",
                        seqs,
                    )
                )
    return out


# -- discovery ----------------------------------------------------------------------------------

_UNKNOWN_TOOL = re.compile(r"unknown tool|tool\b.*\bnot found|no such tool", re.I)


def _discovery(w: _Walk) -> list[DoctorFinding]:
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
                f"{listed_at[tool]}; called {_plural(len(seqs), 'time')})",
                "the tool was renamed or filtered out by an allowlist, or a "
                "notifications/tools/list_changed was missed: list the tools again",
                seqs,
            )
        )
    from blackbox.analytics.doctor_tools import tool_drift  # here: it imports this module

    out += tool_drift(w)
    unknown = [
        c
        for c in w.calls
        if c["method"] == "tools/call"
        and c["base_outcome"] == "rpc_error"
        and c["tool"] not in missing
        and _is_unknown(c)
    ]
    if unknown:
        out.append(
            DoctorFinding(
                "discovery",
                "unknown_tool",
                "warning",
                f"the server does not know {_plural(len(unknown), 'called tool')}: "
                + ", ".join(sorted({str(c["tool"]) for c in unknown})),
                "call only tools from the server's current tools/list",
                [c["request_seq"] for c in unknown],
                unknown[0]["error_message"],
            )
        )
    return out


# -- execution ----------------------------------------------------------------------------------


def _result_text(w: _Walk, call: dict) -> str | None:
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


def _execution(w: _Walk, slow_s: float) -> list[DoctorFinding]:
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
        tools = Counter(_label(c) for c in items)
        out.append(
            DoctorFinding(
                "execution",
                "tool_error",
                "warning",
                f"{_plural(len(items), 'call')} returned isError: true ("
                + ", ".join(f"{k} ×{v}" for k, v in tools.most_common(5))
                + ")",
                "read the result text: a missing file, a permission or a downstream failure "
                "inside the tool",
                [c["request_seq"] for c in items],
                _result_text(w, items[0]),
            )
        )
    rpc = [c for c in groups.get("rpc_error", []) if not (c["tool"] and _is_unknown(c))]
    if rpc:
        codes = Counter(f"{c['error_code']} '{c['error_message'] or ''}'" for c in rpc)
        out.append(
            DoctorFinding(
                "execution",
                "rpc_error",
                "warning",
                f"{_plural(len(rpc), 'request')} failed with JSON-RPC errors: "
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
                f"the client never answered {_plural(len(asked_by_server), 'server request')}: "
                + ", ".join(f"{_label(c)} (seq {c['request_seq']})" for c in asked_by_server[:5]),
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
                f"{_plural(len(items), 'request')} got no response: "
                + ", ".join(f"{_label(c)} (seq {c['request_seq']})" for c in items[:5]),
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
                f"{_plural(len(items), 'request')} {'was' if len(items) == 1 else 'were'} "
                "open when the session failed: "
                + ", ".join(f"{_label(c)} (seq {c['request_seq']})" for c in items[:5]),
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
                f"{_plural(len(slow), 'call')} over {slow_s:g} s (slowest: {_label(worst)} "
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
                f"{_plural(len(denied), 'call')} denied by policy ("
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
                f"{_plural(len(items), 'request')} cancelled by the requester: "
                + ", ".join(_label(c) for c in items[:5]),
                "nothing to fix unless the cancellations are timeouts of slow calls",
                [c["request_seq"] for c in items],
            )
        )
    return out


def _is_unknown(call: dict) -> bool:
    return bool(_UNKNOWN_TOOL.search(call["error_message"] or ""))


def render_text(diagnosis: Diagnosis) -> str:
    """The diagnosis as lines for a terminal."""
    head = (
        f"session {diagnosis.session_id}: {diagnosis.records} records, "
        f"{_plural(diagnosis.calls, 'call')}"
    )
    if not diagnosis.findings:
        return head + "\nno findings: transport, handshake, discovery and execution look healthy"
    lines = [head]
    for f in diagnosis.findings:
        lines.append(f"[{f.stage}] {f.severity}: {f.message}")
        evidence = _span(f.seqs)
        if f.excerpt:
            evidence = f"{evidence}: {json.dumps(f.excerpt, ensure_ascii=False)}".lstrip(": ")
        if evidence:
            lines.append(f"    evidence: {evidence}")
        lines.append(f"    fix: {f.fix}")
    if not diagnosis.failing:
        lines.append("nothing failing (notes only)")
    return "\n".join(lines)
