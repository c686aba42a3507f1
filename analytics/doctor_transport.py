"""The doctor's transport stage: the pipe or HTTP exchange itself.

Every recorded fault (stdout pollution, invalid JSON, a crash, a cut stream, a refused record),
invalid frames no fault names, how the session ended, and the heartbeats. The fixes per fault kind
(`FIXES`) live here because only this stage reports recorded faults.
"""

from __future__ import annotations

from blackbox.analytics.doctor_walk import STAGES, DoctorFinding, Walk, plural, seq_span
from blackbox.recorder.capture import heartbeat_stats
from blackbox.recorder.log import StoredEvent, events
from blackbox.recorder.query import excerpt

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


def transport(w: Walk) -> list[DoctorFinding]:
    out: list[DoctorFinding] = []
    by_kind: dict[str, list[tuple[StoredEvent, dict]]] = {}
    for ev, doc in w.faults:
        by_kind.setdefault(str(doc.get("fault") or "unknown"), []).append((ev, doc))
    covered = {doc.get("seq") for _, doc in w.faults}
    # Invalid frames no fault names count too: a log from a tap that did not report them as
    # faults (an older version), or a replayed log, holds only the frames.
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
        span = seq_span(seqs)
        if kind == "stdout_pollution":
            message = (
                f"the server wrote {plural(len(items), 'non-JSON line')} to stdout"
                f" ({span}: '{first_excerpt or ''}')"
            )
        elif kind == "invalid_json":
            message = f"the client sent {plural(len(items), 'line')} that are not JSON-RPC ({span})"
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


def heartbeats(w: Walk) -> list[DoctorFinding]:
    """The session's pings: interval, jitter and missed ones (a note; `unresponsive` and
    `peer_back` are the recorded events)."""
    stats = heartbeat_stats(w.calls)
    if stats is None:
        return []
    back = [ev.seq for ev in w.events if ev.kind == events.PeerBack.KIND]
    interval = f"every {stats['interval_s']} s" if stats["interval_s"] is not None else "once"
    jitter = f", jitter {stats['jitter_s']} s" if stats["jitter_s"] is not None else ""
    message = (
        f"heartbeats: {plural(stats['pings'], 'ping')} ({stats['direction']}) {interval}"
        f"{jitter}, {stats['missed']} missed"
    )
    if back:
        message += f"; the peer answered again after being unresponsive ({seq_span(back)})"
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
