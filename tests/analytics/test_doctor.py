"""The doctor's fault tree: each finding is raised by a session that has that fault, and by none
of the others (every scenario's exact set of findings is checked)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from blackbox.analytics.doctor_session import diagnose, doctor, render_text
from blackbox.recorder.errors import SessionNotFound
from blackbox.recorder.store import open_store

from tests.fixtures.analytics_kit import Session


def base(s: Session) -> None:
    s.handshake(0)
    s.list_tools(["echo", "read"], 5)


def clean(s: Session) -> None:
    base(s)
    s.call("echo", 10, 3.0)
    s.end(20)


def stdout_pollution(s: Session) -> None:
    base(s)
    for i, line in enumerate([b"Listening on port 3000", b"debug: ready", b"debug: go"]):
        seq = s.raw("s2c", line, 6 + i)
        s.fault("stdout_pollution", 6 + i, seq=seq, excerpt=line.decode())
    s.call("echo", 10, 3.0)
    s.end(20)


def stdout_pollution_unreported(s: Session) -> None:
    """An invalid frame with no fault record (a tap that did not flag it)."""
    base(s)
    s.raw("s2c", b"Server started", 6)
    s.call("echo", 10, 3.0)
    s.end(20)


def broken_pipe(s: Session) -> None:
    base(s)
    s.call("echo", 10, 3.0)
    s.fault("broken_pipe", 15)
    s.end(20)


def oversize_frame(s: Session) -> None:
    base(s)
    s.call("read", 10, 3.0)
    s.fault("oversize_frame", 13, seq=s.seq)
    s.end(20)


def crashed(s: Session) -> None:
    base(s)
    s.call("echo", 10, 3.0)
    s.event("stderr", {"line": "Traceback (most recent call last):"}, 14)
    s.event("stderr", {"line": "KeyError: 'API_KEY'"}, 15)
    s.end(20, outcome="crashed", reason="server_exited", exit_code=1)


def exit_with_outstanding(s: Session) -> None:
    base(s)
    seq, _ = s.call("read", 10, None)
    s.fault("exit_with_outstanding", 15, stage="execution", seq=seq)
    s.end(20, outcome="crashed", reason="server_exited", exit_code=3)


def era_fallback(s: Session) -> None:
    _, rid = s.request("server/discover", {"_meta": {}}, 0)
    s.error(rid, -32601, "Method not found", 1)
    s.handshake(2)
    s.call("echo", 10, 3.0)
    s.end(20)


def discover_failed(s: Session) -> None:
    _, rid = s.request("server/discover", {}, 0)
    s.error(rid, -32601, "Method not found", 1)
    s.end(20)


def initialize_failed(s: Session) -> None:
    _, rid = s.request("initialize", {"protocolVersion": "2026-01-01"}, 0)
    s.error(rid, -32602, "Unsupported protocol version", 1)
    s.end(20)


def handshake_unanswered(s: Session) -> None:
    s.request("initialize", {"protocolVersion": "2025-11-25"}, 0)
    s.end(20)


def version_downgrade(s: Session) -> None:
    s.handshake(0, version="2025-11-25", answer="2025-06-18")
    s.call("echo", 10, 3.0)
    s.end(20)


def tool_not_listed(s: Session) -> None:
    base(s)
    s.call("search", 10, 3.0)
    s.end(20)


def unknown_tool(s: Session) -> None:
    s.handshake(0)
    _, rid = s.request("tools/call", {"name": "serch", "arguments": {}}, 10)
    s.error(rid, -32602, "Unknown tool: serch", 11)
    s.end(20)


def tool_error(s: Session) -> None:
    base(s)
    s.call("read", 10, 3.0, {"path": "nope"}, outcome="tool_error")
    s.end(20)


def rpc_error(s: Session) -> None:
    base(s)
    s.call("read", 10, 3.0, outcome="rpc_error")
    s.end(20)


def no_response(s: Session) -> None:
    base(s)
    s.call("read", 10, None)
    s.end(20)


def slow_calls(s: Session) -> None:
    base(s)
    s.call("read", 10, 12_000.0)
    s.call("read", 12_100, 9_000.0)
    s.end(30_000)


def denied(s: Session) -> None:
    base(s)
    seq, rid = s.call("read", 10, None, {"path": "/etc/shadow"})
    s.decision(10.5, decision="deny", final="deny", rule="no-etc", tool="read", request_seq=seq)
    s.error(rid, -32001, "denied by policy", 11)
    s.end(20)


def cancelled(s: Session) -> None:
    base(s)
    _, rid = s.call("read", 10, None)
    s.frame(
        "c2s",
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}},
        12,
    )
    s.end(20)


def server_request_unanswered(s: Session) -> None:
    base(s)
    s.call("echo", 10, 3.0)
    s.request("roots/list", None, 15, direction="s2c", rpc_id=0)
    s.end(20)


def no_end(s: Session) -> None:
    base(s)
    s.call("echo", 10, 3.0)


SCENARIOS: dict[str, tuple[Callable[[Session], None], set[str], bool]] = {
    # name: (builder, the exact findings, whether doctor fails)
    "clean": (clean, set(), False),
    "stdout_pollution": (stdout_pollution, {"stdout_pollution"}, True),
    "stdout_pollution_unreported": (stdout_pollution_unreported, {"stdout_pollution"}, True),
    "broken_pipe": (broken_pipe, {"broken_pipe"}, True),
    "oversize_frame": (oversize_frame, {"oversize_frame"}, True),
    "crashed": (crashed, {"crashed"}, True),
    "exit_with_outstanding": (
        exit_with_outstanding,
        {"exit_with_outstanding", "open_at_fault"},
        True,
    ),
    "era_fallback": (era_fallback, {"era_fallback"}, False),
    "discover_failed": (discover_failed, {"discover_failed"}, True),
    "initialize_failed": (initialize_failed, {"initialize_failed"}, True),
    "handshake_unanswered": (handshake_unanswered, {"handshake_unanswered"}, True),
    "version_downgrade": (version_downgrade, {"version_downgrade"}, False),
    "tool_not_listed": (tool_not_listed, {"tool_not_listed"}, True),
    "unknown_tool": (unknown_tool, {"unknown_tool"}, True),
    "tool_error": (tool_error, {"tool_error"}, True),
    "rpc_error": (rpc_error, {"rpc_error"}, True),
    "no_response": (no_response, {"no_response"}, True),
    "slow_calls": (slow_calls, {"slow_calls"}, True),
    "denied": (denied, {"denied"}, True),
    "cancelled": (cancelled, {"cancelled"}, False),
    "server_request_unanswered": (server_request_unanswered, {"server_request_unanswered"}, False),
    "no_end": (no_end, {"no_end"}, False),
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """Every scenario recorded into one store: (store URL, scenario -> session id)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('doctor') / 'store.db'}"
    store = open_store(url)
    ids = {}
    for name, (build, _, _) in SCENARIOS.items():
        s = Session(name=name)
        build(s)
        ids[name] = s.save(store)
    store.close()
    return url, ids


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_finding_comes_from_its_fault_only(name: str, recorded) -> None:  # type: ignore[no-untyped-def]
    url, ids = recorded
    _, expected, failing = SCENARIOS[name]
    diagnosis = diagnose(open_store(url), ids[name])
    assert {f.code for f in diagnosis.findings} == expected
    assert diagnosis.failing is failing
    for finding in diagnosis.findings:
        assert finding.seqs, finding  # evidence
        assert finding.fix


def test_messages_carry_the_evidence(recorded) -> None:  # type: ignore[no-untyped-def]
    url, ids = recorded
    store = open_store(url)
    (pollution,) = diagnose(store, ids["stdout_pollution"]).findings
    assert pollution.message.startswith("the server wrote 3 non-JSON lines to stdout (seq ")
    assert "'Listening on port 3000'" in pollution.message
    assert "stderr" in pollution.fix
    (fallback,) = diagnose(store, ids["era_fallback"]).findings
    assert fallback.message == (
        "client asked 2026-07-28, server answered -32601 ('Method not found') to "
        "server/discover and the client fell back to 2025-11-25"
    )
    (slow,) = diagnose(store, ids["slow_calls"]).findings
    assert slow.message.startswith("1 call over 10 s (slowest: tools/call 'read' 12.0 s")
    (crash,) = diagnose(store, ids["crashed"]).findings
    assert "exit code 1" in crash.message and "KeyError: 'API_KEY'" in (crash.excerpt or "")
    (missing,) = diagnose(store, ids["tool_not_listed"]).findings
    assert missing.message.startswith("tools/call 'search' not in the last tools/list")
    text = render_text(diagnosis := diagnose(store, ids["tool_not_listed"]))
    assert "[discovery] warning" in text and "fix:" in text
    assert json.loads(json.dumps(diagnosis.as_dict()))["clean"] is False
    assert diagnose(store, ids["slow_calls"], slow_s=20).findings == []


def test_doctor_resolves_prefixes_and_last(recorded) -> None:  # type: ignore[no-untyped-def]
    url, ids = recorded
    store = open_store(url)
    assert doctor(store, ids["clean"]).session_id == ids["clean"]
    assert doctor(store, "last").session_id in ids.values()
    with pytest.raises(SessionNotFound):
        doctor(store, "ffffffff")


def test_tool_lists_are_followed_over_time(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    s = Session()
    s.handshake(0)
    s.list_tools(["old"], 5)
    s.call("old", 10, 1.0)
    s.frame("s2c", {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}, 20)
    s.list_tools(["new"], 30)
    s.call("new", 40, 1.0)
    s.call("old", 50, 1.0)  # renamed away: this one is the finding
    s.end(60)
    (finding,) = diagnose(store, s.save(store)).findings
    assert finding.code == "tool_not_listed" and finding.seqs == [s.seq - 2]
