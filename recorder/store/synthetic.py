"""Synthetic recorded sessions, built through the store API, for the benchmarks and the tests.

It lives in the library, not in tests/, so the benchmarks need nothing from the test suite.
Frames are the JSON-RPC messages the SDKs exchange in each era (the legacy `initialize` handshake
and the 2026-07-28 per-request `_meta`), with the session events a tap writes around them.
`SECRETS` are planted in params, results, stderr lines and HTTP headers when asked.
"""

from __future__ import annotations

import json
from typing import TypedDict, Unpack

from blackbox.recorder.log import Direction, Kind, NewEvent, events, new_session_id
from blackbox.recorder.store import EventStore

DAY_NS = 86_400 * 1_000_000_000

SECRETS = {
    "param_api_key": "sk-proj-Abc123Def456Ghi789Jkl012",
    "param_password": "correct-horse-battery-staple",
    "result_github": "ghp_" + "A1b2C3d4E5" * 4,
    "result_email": "alice.auditor@example.org",
    "stderr_aws": "AKIAIOSFODNN7EXAMPLE",
    "stderr_password": "hunter2hunter2",
    "header_bearer": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "header_slack": "xoxb-123456789012-abcdefghijkl",
    "google_key": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
}


class SessionShape(TypedDict, total=False):
    """The keywords of `session_events` that `record_session` passes on."""

    name: str
    era: str
    secrets: bool
    ended: bool
    calls: int


def _j(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def session_events(
    sid: str,
    start_ns: int,
    *,
    name: str = "time",
    era: str = "2025-11-25",
    secrets: bool = False,
    ended: bool = True,
    calls: int = 1,
) -> list[NewEvent]:
    """One recorded stdio (or HTTP, when `secrets`) session of a time server."""
    c2s, s2c, none = Direction.CLIENT_TO_SERVER, Direction.SERVER_TO_CLIENT, Direction.NONE
    out: list[tuple[str, str, bytes]] = []
    started = events.SessionStarted(
        name=name,
        transport="stdio",
        command=["python", "-m", "mcp_server_time"],
        cwd="/srv",
        env_names=["PATH"],
        tap_version="0.1.0",
        pid=4242,
    )
    out.append((Kind.SESSION_STARTED, none, events.encode(started)))
    modern = era == "2026-07-28"
    meta = {
        "io.modelcontextprotocol/protocolVersion": era,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "2.3.0"},
    }
    if modern:
        out.append(
            (
                Kind.FRAME,
                c2s,
                _j(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "server/discover",
                        "params": {"_meta": meta},
                    }
                ),
            )
        )
        out.append(
            (
                Kind.FRAME,
                s2c,
                _j(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "result": {
                            "supportedVersions": [era],
                            "capabilities": {"tools": {}},
                            "serverInfo": {"name": "mcp-time", "version": "1.0"},
                        },
                    }
                ),
            )
        )
    else:
        out.append(
            (
                Kind.FRAME,
                c2s,
                _j(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": era,
                            "capabilities": {},
                            "clientInfo": {"name": "mcp"},
                        },
                    }
                ),
            )
        )
        out.append(
            (
                Kind.FRAME,
                s2c,
                _j(
                    {
                        "id": 1,
                        "jsonrpc": "2.0",
                        "result": {
                            "protocolVersion": era,
                            "capabilities": {"tools": {"listChanged": False}},
                            "serverInfo": {"name": "mcp-time", "version": "1.0"},
                        },
                    }
                ),
            )
        )
        out.append((Kind.FRAME, c2s, _j({"jsonrpc": "2.0", "method": "notifications/initialized"})))
    out.append(
        (
            Kind.ERA_DETECTED,
            none,
            events.encode(
                events.EraDetected(
                    era=era, client_info={"name": "mcp"}, server_info={"name": "mcp-time"}
                )
            ),
        )
    )
    params_meta = {"_meta": meta} if modern else {}
    for i in range(calls):
        rid = 2 + i
        args: dict[str, object] = {"timezone": "Europe/Paris"}
        if secrets:
            args["api_key"] = SECRETS["param_api_key"]
            args["note"] = f"login with password={SECRETS['param_password']}"
        out.append(
            (
                Kind.FRAME,
                c2s,
                _j(
                    {
                        "jsonrpc": "2.0",
                        "id": rid,
                        "method": "tools/call",
                        "params": {"name": "get_current_time", "arguments": args, **params_meta},
                    }
                ),
            )
        )
        out.append(
            (
                Kind.DECISION,
                none,
                events.encode(
                    events.Decision(
                        decision="allow",
                        final="allow",
                        source="policy",
                        decided_by="rule",
                        rule="time-ok",
                        server=name,
                        tool="get_current_time",
                        args_fingerprint="0" * 64,
                        rpc_id=str(rid),
                        request_seq=len(out),
                    )
                ),
            )
        )
        text = '{"timezone":"Europe/Paris","datetime":"2026-12-02T16:00:00+01:00"}'
        if secrets:
            text = (
                f"token {SECRETS['result_github']} belongs to {SECRETS['result_email']}; "
                f"maps key {SECRETS['google_key']}"
            )
        out.append(
            (
                Kind.FRAME,
                s2c,
                _j(
                    {
                        "jsonrpc": "2.0",
                        "id": rid,
                        "result": {"content": [{"type": "text", "text": text}], "isError": False},
                    }
                ),
            )
        )
    out.append((Kind.STDERR, none, events.encode(events.Stderr(line="INFO server ready"))))
    if secrets:
        out.append(
            (
                Kind.STDERR,
                none,
                events.encode(
                    events.Stderr(
                        line=f"DEBUG aws={SECRETS['stderr_aws']} "
                        f"db password: {SECRETS['stderr_password']}"
                    )
                ),
            )
        )
        out.append(
            (
                Kind.HTTP_EXCHANGE,
                none,
                events.encode(
                    events.HttpExchange(
                        method="POST",
                        path="/mcp",
                        status=200,
                        content_type="application/json",
                        duration_ms=12.5,
                        request_headers={
                            "Authorization": f"Bearer {SECRETS['header_bearer']}",
                            "X-Slack-Token": SECRETS["header_slack"],
                            "Accept": "application/json, text/event-stream",
                        },
                        response_headers={"content-type": "application/json"},
                    )
                ),
            )
        )
    if ended:
        out.append(
            (
                Kind.SESSION_ENDED,
                none,
                events.encode(
                    events.SessionEnded(reason="client_closed", outcome="ok", exit_code=0)
                ),
            )
        )
    return [
        NewEvent(sid, seq, start_ns + seq * 1_000_000, 1_000 + seq * 1_000_000, kind, d, raw)
        for seq, (kind, d, raw) in enumerate(out, start=1)
    ]


def record_session(store: EventStore, start_ns: int, **kwargs: Unpack[SessionShape]) -> str:
    """Append one session (see `session_events`) and return its id."""
    sid = new_session_id(start_ns)
    store.append(session_events(sid, start_ns, **kwargs))
    return sid
