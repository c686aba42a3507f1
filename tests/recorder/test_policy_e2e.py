"""End to end: the official SDK client talks to a real SDK server through `blackbox record
--policy`, while recorded Claude Code hook payloads are fed to the hook as the host would.

One recorded session per (protocol era, store backend) is shared by the tests below, which each
check one promise: denied calls never reach the server (its own log says so), the client gets
the explaining error, every call has exactly one decision, `policy test` lists the right
decisions, and host decisions join the calls they decided.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from blackbox.recorder.gate.decisions import (
    args_fingerprint,
    correlate,
    host_decisions,
    policy_decisions,
    tool_calls,
)
from blackbox.recorder.gate.hooks import run_hook
from blackbox.recorder.store import open_store
from click.testing import CliRunner
from mcp import Client, StdioServerParameters

from blackbox.cli.main import main
from tests.fixtures.environment import BLACKBOX, backend_store_url
from tests.fixtures.polling import eventually

HERE = Path(__file__).parent
SERVER = HERE / "servers" / "call_log_server.py"
HOOKS = HERE / "fixtures" / "claude_code_hooks" / "session_mixed.jsonl"
HOST_SESSION = "claude-code:4c1f6e2a-8d3b-4b7e-9a51-2f0c7d9e1b36"

POLICY = """\
default = "allow"

[[rule]]
id = "no-etc"
decision = "deny"
server = "calllog"
tool = "write_*"
reason = "nothing writes under /etc"
when = [{ arg = "path", matches = "^/etc/" }]

[[rule]]
id = "ask-deletes"
decision = "ask"
tool = "delete_*"
"""

# Calls made straight through the tap, with no host decision: (tool, arguments, allowed?)
DIRECT_CALLS = [
    ("write_file", {"path": "/etc/passwd", "content": "root::0:0"}, False),
    ("delete_all", {"confirm": True}, False),
    ("echo", {"message": "direct"}, True),
]


@dataclass
class Recorded:
    store_url: str
    session_id: str
    server_log: list[dict]
    direct_results: list[tuple[str, object]]
    policy_file: Path
    era: str


async def _drive(params: StdioServerParameters, mode: str, store_url: str, spool: Path):  # type: ignore[no-untyped-def]
    direct: list[tuple[str, object]] = []
    with anyio.fail_after(90):
        await _session(params, mode, store_url, spool, direct)
    return direct


async def _session(params, mode, store_url, spool, direct) -> None:  # type: ignore[no-untyped-def]
    async with Client(params, mode=mode, read_timeout_seconds=30) as client:
        # Claude Code's side: each hook event as the host would send it; a call is made only
        # when the host let it run (just before its PostToolUse).
        for line in HOOKS.read_text().splitlines():
            payload = json.loads(line)
            if payload["hook_event_name"] in ("PostToolUse", "PostToolUseFailure"):
                tool = payload["tool_name"].split("__", 2)[2]
                await client.call_tool(tool, payload["tool_input"])
            run_hook(
                line.encode(),
                mode="observe",
                policy=None,
                open_store=lambda: open_store(store_url),
                spool_dir=spool,
            )
        # Later, calls no hook saw. A pause first, as a user typing the next prompt would make:
        # an identical call within a denied use's own time span could not be told apart from
        # it (see correlate()).
        await anyio.sleep(0.5)
        for tool, args, _allowed in DIRECT_CALLS:
            try:
                result = await client.call_tool(tool, args)
                direct.append(("ok", result))
            except Exception as exc:  # the SDK raises on a JSON-RPC error response
                direct.append(("error", exc))


@pytest.fixture(
    scope="module",
    params=[("legacy", "sqlite"), ("2026-07-28", "postgresql")],
    ids=["legacy-sqlite", "modern-postgresql"],
)
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    era, backend = request.param
    tmp = tmp_path_factory.mktemp(f"e2e-{backend}")
    with backend_store_url(request, backend, tmp) as store_url:
        policy_file = tmp / "policy.toml"
        policy_file.write_text(POLICY)
        log = tmp / "calls.log"
        env = {"BLACKBOX_STORE": store_url, "BLACKBOX_HOME": str(tmp / "home")}
        params = StdioServerParameters(
            command=BLACKBOX,
            args=[
                *("record", "--name", "calllog", "--policy", str(policy_file), "--"),
                *(sys.executable, str(SERVER), str(log)),
            ],
            env=env,
        )
        mode = "legacy" if era == "legacy" else era
        direct = anyio.run(_drive, params, mode, store_url, tmp / "spool")
        # The tap ships its journal in the background: wait for the sealed session.
        store = open_store(store_url)
        try:
            found = eventually(
                lambda: [s for s in store.list_sessions(name="calllog") if s.sealed],
                timeout=60,
                interval=0.2,
                message="the tap's session to reach the store",
            )
        finally:
            store.close()
        server_log = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
        yield Recorded(store_url, found[0].session_id, server_log, direct, policy_file, era)


def test_denied_calls_never_reach_the_server(recorded: Recorded) -> None:
    received = [(c["tool"], c["arguments"]) for c in recorded.server_log]
    assert received == [
        ("echo", {"message": "hello from claude"}),
        ("write_file", {"path": "/home/alex/notes/todo.md", "content": "- buy milk\n"}),
        ("echo", {"message": "direct"}),
    ]


def test_client_gets_an_error_naming_the_rule(recorded: Recorded) -> None:
    outcomes = recorded.direct_results
    assert [kind for kind, _ in outcomes] == ["error", "error", "ok"]
    etc_error, delete_error = outcomes[0][1], outcomes[1][1]
    assert etc_error.error.code == -32001
    assert str(etc_error).startswith("denied by policy rule no-etc: nothing writes under /etc")
    assert etc_error.error.data == {"rule": "no-etc", "decision": "deny", "policy_decision": "deny"}
    assert "ask-deletes" in str(delete_error) and "no one to ask" in str(delete_error)


def test_every_call_has_exactly_one_decision(recorded: Recorded) -> None:
    store = open_store(recorded.store_url)
    try:
        calls = tool_calls(store, recorded.session_id)
        decided = policy_decisions(store, recorded.session_id)
        assert store.verify(recorded.session_id) == []  # decisions are in the chain
    finally:
        store.close()
    assert len(calls) == 5
    requests = [req for _doc, req in decided]
    assert all(req is not None for req in requests)
    assert sorted(req.seq for req in requests) == sorted(c.seq for c in calls)
    by_seq = {req.seq: doc for doc, req in decided}
    verdicts = [(c.tool, by_seq[c.seq]["final"], by_seq[c.seq]["rule"]) for c in calls]
    assert verdicts == [
        ("echo", "allow", "default"),
        ("write_file", "allow", "default"),
        ("write_file", "deny", "no-etc"),
        ("delete_all", "deny", "ask-deletes"),
        ("echo", "allow", "default"),
    ]
    for call in calls:
        doc = by_seq[call.seq]
        assert doc["source"] == "policy" and doc["server"] == "calllog"
        assert doc["args_fingerprint"] == call.args_fingerprint
        assert doc["rpc_id"] == call.rpc_id


def test_policy_test_lists_the_right_decisions(recorded: Recorded) -> None:
    result = CliRunner().invoke(
        main,
        [
            "policy",
            "test",
            str(recorded.policy_file),
            recorded.session_id[:13],
            "--store",
            recorded.store_url,
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["tool"], r["decision"], r["rule"]) for r in rows] == [
        ("echo", "allow", "default"),
        ("write_file", "allow", "default"),
        ("write_file", "deny", "no-etc"),
        ("delete_all", "ask", "ask-deletes"),
        ("echo", "allow", "default"),
    ]
    assert [r["recorded"] for r in rows] == [
        "allow (default)",
        "allow (default)",
        "deny (no-etc)",
        "deny (ask-deletes)",
        "allow (default)",
    ]


def test_host_decisions_join_the_calls_they_decided(recorded: Recorded) -> None:
    store = open_store(recorded.store_url)
    try:
        (host,) = store.list_sessions(name=HOST_SESSION)
        decisions = host_decisions(store, host.session_id)
        calls = tool_calls(store, recorded.session_id)
    finally:
        store.close()
    joined = correlate(decisions, calls)
    pairs = {d.tool_use_id: (c.tool, c.args_fingerprint) for d, c in joined.matches}
    assert pairs == {
        "toolu_01AllowedBySettings": (
            "echo",
            args_fingerprint({"message": "hello from claude"}),
        ),
        "toolu_02AskApproved": (
            "write_file",
            args_fingerprint({"path": "/home/alex/notes/todo.md", "content": "- buy milk\n"}),
        ),
    }
    approved = next(d for d, _ in joined.matches if d.tool_use_id == "toolu_02AskApproved")
    assert (approved.final, approved.decided_by, approved.asked) == ("allow", "user", True)
    # the ask the user denied and the classifier's denial never became calls
    unmatched = {d.tool_use_id: (d.final, d.decided_by) for d in joined.unmatched_decisions}
    assert unmatched == {
        "toolu_03AskDenied": ("deny", "user"),
        "toolu_04Classifier": ("deny", "classifier"),
    }
    # calls made without the host's hooks stay visible as undecided
    assert [(c.tool, c.args_fingerprint) for c in joined.undecided_calls] == [
        (tool, args_fingerprint(args)) for tool, args, _ in DIRECT_CALLS
    ]
