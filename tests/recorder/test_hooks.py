"""Claude Code hook payloads (recorded from the hooks documentation) ingested as host decisions:
who decided each MCP tool call, inference of asks the user approved or denied, observe mode that
never blocks the host, enforce mode answering PreToolUse from a policy."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from blackbox.recorder.errors import StoreUnavailable
from blackbox.recorder.gate.decisions import SPOOL_NAME, args_fingerprint, host_decisions
from blackbox.recorder.gate.hooks import HookError, parse_event, run_hook
from blackbox.recorder.gate.policy import Policy
from blackbox.recorder.log.model import Kind
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.environment import BLACKBOX

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code_hooks"
MIXED_SESSION = "claude-code:4c1f6e2a-8d3b-4b7e-9a51-2f0c7d9e1b36"

POLICY = """\
[[rule]]
id = "no-etc"
decision = "deny"
tool = "write_file"
reason = "nothing writes under /etc"
when = [{ arg = "path", matches = "^/etc/" }]

[[rule]]
id = "ask-deletes"
decision = "ask"
tool = "delete_*"
"""


def payloads(name: str) -> list[bytes]:
    return [line.encode() for line in (FIXTURES / name).read_text().splitlines() if line]


def feed(store_url: str, lines: list[bytes], spool: Path, mode: str = "observe", policy=None):  # type: ignore[no-untyped-def]
    results = []
    for line in lines:
        results.append(
            run_hook(
                line,
                mode=mode,
                policy=policy,
                open_store=lambda: open_store(store_url),
                spool_dir=spool,
            )
        )
    return results


def by_use(store_url: str, name: str) -> dict:
    store = open_store(store_url)
    try:
        (info,) = store.list_sessions(name=name)
        return {d.tool_use_id: d for d in host_decisions(store, info.session_id)}, info
    finally:
        store.close()


def test_parse_event_reads_the_documented_fields() -> None:
    event = parse_event((FIXTURES / "pre_tool_use.json").read_bytes())
    assert event.event == "PreToolUse"
    assert event.session_id == "4c1f6e2a-8d3b-4b7e-9a51-2f0c7d9e1b36"
    assert event.tool_name == "mcp__calllog__echo"
    assert (event.server, event.tool) == ("calllog", "echo")
    assert event.tool_use_id == "toolu_01AllowedBySettings"
    assert event.permission_mode == "default"
    assert event.tool_input == {"message": "hello from claude"}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"session_id": "s"}', "hook_event_name"),
        (b'{"hook_event_name": "PreToolUse"}', "session_id"),
    ],
)
def test_parse_event_rejects_what_it_cannot_use(data: bytes, words: str) -> None:
    with pytest.raises(HookError, match=words):
        parse_event(data)


def test_mixed_session_records_who_decided_each_call(store_url: str, tmp_path: Path) -> None:
    results = feed(store_url, payloads("session_mixed.jsonl"), tmp_path / "spool")
    assert all(r.stdout == b"" and r.exit_code == 0 for r in results)  # observe: silent
    uses, info = by_use(store_url, MIXED_SESSION)
    assert set(uses) == {
        "toolu_01AllowedBySettings",
        "toolu_02AskApproved",
        "toolu_03AskDenied",
        "toolu_04Classifier",
    }
    settings = uses["toolu_01AllowedBySettings"]
    assert (settings.final, settings.decided_by, settings.asked) == ("allow", "settings", False)
    approved = uses["toolu_02AskApproved"]
    assert (approved.final, approved.decided_by, approved.asked) == ("allow", "user", True)
    assert approved.args_fingerprint == args_fingerprint(
        {"path": "/home/alex/notes/todo.md", "content": "- buy milk\n"}
    )
    assert (approved.server, approved.tool) == ("calllog", "write_file")
    denied = uses["toolu_03AskDenied"]
    assert (denied.final, denied.decided_by, denied.asked) == ("deny", "user", True)
    assert denied.doc["inferred"] is True and denied.doc["hook_event"] == "Stop"
    classifier = uses["toolu_04Classifier"]
    assert (classifier.final, classifier.decided_by) == ("deny", "classifier")
    assert "system configuration" in classifier.doc["reason"]
    # the session is the host's: named after it, transport hook, ended, sealed and intact
    assert info.transport == "hook" and info.sealed
    store = open_store(store_url)
    try:
        assert store.verify(info.session_id) == []
        kinds = [ev.kind for ev in store.read_session(info.session_id)]
        decisions = [json.loads(ev.raw) for ev in store.read_session(info.session_id)]
    finally:
        store.close()
    assert kinds[0] == Kind.SESSION_STARTED and kinds[-2:] == [Kind.SESSION_ENDED, "session_sealed"]
    # the second Stop added nothing: every use already had its final word
    inferred = [d for d in decisions if d.get("inferred")]
    assert len(inferred) == 1
    # every record of a decided use names the host session and the tool as Claude Code did
    assert all(
        d["host_session"] == "4c1f6e2a-8d3b-4b7e-9a51-2f0c7d9e1b36"
        for d in decisions
        if "decision" in d
    )


def test_failed_tool_was_still_allowed(store_url: str, tmp_path: Path) -> None:
    feed(store_url, payloads("session_failure.jsonl"), tmp_path / "spool")
    uses, _info = by_use(store_url, "claude-code:7d0e9b14-2c55-4f1a-b8e3-6a4d2c9f0e71")
    failed = uses["toolu_11Failed"]
    assert (failed.final, failed.decided_by) == ("allow", "settings")
    assert failed.doc["tool_outcome"] == "failed"
    assert "bypassPermissions" in failed.doc["reason"]


def test_enforce_mode_answers_pre_tool_use_from_the_policy(sqlite_url: str, tmp_path: Path) -> None:
    policy = Policy.from_text(POLICY)
    base = json.loads((FIXTURES / "pre_tool_use.json").read_text())
    cases = [
        ("mcp__calllog__write_file", {"path": "/etc/hosts"}, "deny"),
        ("mcp__calllog__delete_all", {"confirm": True}, "ask"),
        ("mcp__calllog__echo", {"message": "x"}, "allow"),
    ]
    for i, (tool, args, expected) in enumerate(cases):
        payload = base | {"tool_name": tool, "tool_input": args, "tool_use_id": f"toolu_e{i}"}
        (result,) = feed(sqlite_url, [json.dumps(payload).encode()], tmp_path, "enforce", policy)
        out = json.loads(result.stdout)["hookSpecificOutput"]
        assert out["hookEventName"] == "PreToolUse"
        assert out["permissionDecision"] == expected
        assert out["permissionDecisionReason"].startswith("blackbox policy rule ")
    uses, _ = by_use(sqlite_url, MIXED_SESSION)
    assert uses["toolu_e0"].final == "deny" and uses["toolu_e0"].decided_by == "hook"
    assert uses["toolu_e0"].doc["rule"] == "no-etc"
    assert uses["toolu_e1"].decision == "ask" and uses["toolu_e1"].final is None
    assert uses["toolu_e2"].decision == "allow" and uses["toolu_e2"].doc["rule"] == "default"
    # a hook allow is not final by itself: the tool running makes it so, decided by the hook
    post = base | {
        "hook_event_name": "PostToolUse",
        "tool_name": "mcp__calllog__echo",
        "tool_input": {"message": "x"},
        "tool_use_id": "toolu_e2",
        "tool_response": [],
    }
    feed(sqlite_url, [json.dumps(post).encode()], tmp_path, "enforce", policy)
    uses, _ = by_use(sqlite_url, MIXED_SESSION)
    assert (uses["toolu_e2"].final, uses["toolu_e2"].decided_by) == ("allow", "hook")


def test_enforce_mode_refuses_input_it_cannot_read(tmp_path: Path, sqlite_url: str) -> None:
    with pytest.raises(HookError):
        feed(sqlite_url, [b"garbage"], tmp_path, "enforce", Policy.from_text(""))
    with pytest.raises(HookError, match="--policy"):
        feed(sqlite_url, [b"{}"], tmp_path, "enforce", None)


def test_store_down_spools_and_the_next_run_ships(tmp_path: Path, sqlite_url: str) -> None:
    spool = tmp_path / "journal"
    lines = payloads("session_mixed.jsonl")

    def down():  # type: ignore[no-untyped-def]
        raise StoreUnavailable("store postgresql://nowhere is unreachable")

    first = run_hook(lines[0], mode="observe", policy=None, open_store=down, spool_dir=spool)
    assert first.exit_code == 0 and first.stdout == b""
    assert any("spooling" in note for note in first.notes)
    assert (spool / SPOOL_NAME).read_text().count("\n") == 1
    feed(sqlite_url, lines[1:2], spool)  # the store is back: the spool goes first
    assert (spool / SPOOL_NAME).read_text() == ""
    uses, _ = by_use(sqlite_url, MIXED_SESSION)
    use = uses["toolu_01AllowedBySettings"]
    assert (use.final, use.decided_by) == ("allow", "settings")
    store = open_store(sqlite_url)
    try:
        (info,) = store.list_sessions(name=MIXED_SESSION)
        events = list(store.read_session(info.session_id))
    finally:
        store.close()
    docs = [json.loads(ev.raw) for ev in events if ev.kind == Kind.DECISION]
    assert [d["hook_event"] for d in docs] == ["PreToolUse", "PostToolUse"]
    assert events[1].wall_ns <= events[2].wall_ns  # the spooled record keeps its own time


def test_cli_observe_exits_zero_silently_when_the_store_is_unreachable(
    tmp_path: Path, blackbox_env: dict[str, str]
) -> None:
    env = blackbox_env | {"BLACKBOX_STORE": "postgresql://postgres@127.0.0.1:1/nowhere"}
    data = (FIXTURES / "pre_tool_use.json").read_bytes()
    started = time.monotonic()
    proc = subprocess.run(
        [BLACKBOX, "hook", "claude-code"], input=data, env=env, capture_output=True, timeout=30
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b""
    assert b"unreachable" in proc.stderr
    assert elapsed < 10
    spooled = Path(env["BLACKBOX_HOME"]) / "journal" / SPOOL_NAME
    assert "toolu_01AllowedBySettings" in spooled.read_text()
    # garbage on stdin: still exit 0, nothing on stdout
    proc = subprocess.run(
        [BLACKBOX, "hook", "claude-code"],
        input=b"\x00oops",
        env=env,
        capture_output=True,
        timeout=30,
    )
    assert (proc.returncode, proc.stdout) == (0, b"")


def test_cli_enforce_prints_the_decision_and_fails_closed(
    tmp_path: Path, blackbox_env: dict[str, str]
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    payload = json.loads((FIXTURES / "pre_tool_use.json").read_text())
    payload |= {"tool_name": "mcp__calllog__write_file", "tool_input": {"path": "/etc/passwd"}}
    runner = CliRunner()
    args = ["hook", "claude-code", "--mode", "enforce", "--policy", str(policy)]
    result = runner.invoke(main, args, input=json.dumps(payload))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny" and "no-etc" in out["permissionDecisionReason"]
    # a broken policy: exit 2, which Claude Code takes as "block"
    policy.write_text('[[rule]]\nid = "x"\ndecision = "perhaps"\n')
    result = runner.invoke(main, args, input=json.dumps(payload))
    assert result.exit_code == 2
    assert f"{policy}:3:1:" in result.output


def test_cli_decision_record(tmp_path: Path, blackbox_env: dict[str, str], sqlite_url: str) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "decision",
            "record",
            "--store",
            sqlite_url,
            "--tool",
            "mcp__fs__write_file",
            "--decision",
            "deny",
            "--decided-by",
            "user",
            "--args",
            '{"path": "/etc/hosts"}',
            "--host",
            "cursor",
            "--host-session",
            "abc",
        ],
    )
    assert result.exit_code == 0, result.output
    sid = result.output.strip()
    store = open_store(sqlite_url)
    try:
        assert store.session(sid).name == "cursor:abc"
        (d,) = host_decisions(store, sid)
    finally:
        store.close()
    assert (d.server, d.tool, d.decision, d.final, d.decided_by) == (
        "fs",
        "write_file",
        "deny",
        "deny",
        "user",
    )
    assert d.args_fingerprint == args_fingerprint({"path": "/etc/hosts"})
    bad = runner.invoke(
        main,
        [
            "decision",
            "record",
            "--store",
            sqlite_url,
            "--tool",
            "t",
            "--decision",
            "deny",
            "--args",
            "{oops",
        ],
    )
    assert bad.exit_code == 2 and "--args is not JSON" in bad.output
