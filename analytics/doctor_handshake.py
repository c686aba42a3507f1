"""The doctor's handshake stage: initialize and server/discover.

A rejected or unanswered handshake, a server/discover the client did or did not fall back from,
and a protocol version the server answered below the one the client asked for. It reads the
versions from the handshake's own frames, which no other stage needs.
"""

from __future__ import annotations

from blackbox.analytics.doctor_walk import DoctorFinding, Walk
from blackbox.recorder.log import parse


def _requested_version(w: Walk, call: dict) -> str | None:
    ev = w.by_seq.get(call["request_seq"])
    value, _ = parse(ev.raw) if ev is not None else (None, None)
    params = value.get("params") if isinstance(value, dict) else None
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    return version if isinstance(version, str) else None


def _answered_version(w: Walk, call: dict) -> str | None:
    ev = w.by_seq.get(call["response_seq"]) if call["response_seq"] else None
    value, _ = parse(ev.raw) if ev is not None else (None, None)
    result = value.get("result") if isinstance(value, dict) else None
    version = result.get("protocolVersion") if isinstance(result, dict) else None
    return version if isinstance(version, str) else None


def handshake(w: Walk) -> list[DoctorFinding]:
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
