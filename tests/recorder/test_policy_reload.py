"""Live permissions: a policy file rewritten while a tap runs changes the next decision, with the
new version named in it; a broken rewrite keeps the old policy in force, is recorded as a failed
load and said on stderr. Both taps: `blackbox record` as a real process in front of a real SDK
server, and the HTTP proxy in front of a real SDK server over Streamable HTTP."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from blackbox.recorder.gate.policy_reload import LivePolicy, policy_history
from blackbox.recorder.gate.policy_rules import PolicyError
from blackbox.recorder.log import events
from blackbox.recorder.store import open_store
from click.testing import CliRunner
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from blackbox.cli.main import main
from tests.fixtures.environment import BLACKBOX
from tests.fixtures.http_kit import RecordingProxy, doc, of_kind, sdk_server
from tests.fixtures.lifecycle_kit import TapProcess, write_atomically
from tests.fixtures.polling import eventually, free_port, wait_listening

pytestmark = pytest.mark.timeout(120)

SERVER = Path(__file__).parent / "servers" / "call_log_server.py"
ALLOW = 'default = "allow"\n'
DENY_ECHO = """\
default = "allow"

[[rule]]
id = "no-echo"
decision = "deny"
tool = "echo"
reason = "echo is switched off"
"""
BROKEN = 'default = "allow"\n[[rule]]\nid = "half-written\n'


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """One SDK server over Streamable HTTP for every proxy test here: each test opens its own MCP
    session through its own proxy, and the server's echo keeps no state between sessions, so one
    start (the SDK's import, most of a second of CPU) serves them all."""
    with sdk_server() as url:
        yield url


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _sealed(store_url: str, name: str) -> str:
    store = open_store(store_url)
    try:
        found = eventually(
            lambda: [s for s in store.list_sessions(name=name) if s.sealed],
            timeout=60,
            message="the sealed session",
        )
        return found[0].session_id
    finally:
        store.close()


def _docs(store_url: str, session_id: str, kind: str) -> list[dict]:
    store = open_store(store_url)
    try:
        return [
            events.as_dict(events.decode(ev.kind, ev.raw)[0])  # type: ignore[arg-type]
            for ev in store.read_session(session_id)
            if ev.kind == kind
        ]
    finally:
        store.close()


def test_stdio_tap_reloads_a_rewritten_policy_and_keeps_it_through_a_broken_one(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(ALLOW)
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    log = tmp_path / "calls.log"
    tap = TapProcess(
        ["--name", "calllog", "--policy", str(policy)],
        [sys.executable, str(SERVER), str(log)],
        store_url,
        tmp_path / "home",
    )
    try:
        tap.initialize()
        first = tap.call("echo", {"message": "one"})
        assert "result" in first
        write_atomically(policy, DENY_ECHO)
        # The watcher reads the file once a second; the tap says so once the new version is in
        # force (the notice follows the swap).
        eventually(lambda: any("reloaded" in line for line in tap.stderr), timeout=5)
        second = tap.call("echo", {"message": "two"})
        assert second["error"]["data"]["rule"] == "no-echo"
        write_atomically(policy, BROKEN)
        eventually(lambda: any("did not load" in line for line in tap.stderr), timeout=10)
        third = tap.call("echo", {"message": "three"})
        assert third["error"]["data"]["rule"] == "no-echo", "the old policy stays in force"
        assert tap.close() == 0
    finally:
        if tap.proc.poll() is None:
            tap.proc.kill()
    assert [json.loads(line)["arguments"]["message"] for line in log.read_text().splitlines()] == [
        "one"
    ]
    sid = _sealed(store_url, "calllog")
    loads = _docs(store_url, sid, "policy_loaded")
    assert [(d["ok"], d["sha256"], d["trigger"]) for d in loads] == [
        (True, sha(ALLOW), "start"),
        (True, sha(DENY_ECHO), "changed"),
        (False, sha(BROKEN), "changed"),
    ]
    assert loads[1]["rules"][0]["id"] == "no-echo" and loads[1]["previous"] == sha(ALLOW)
    assert loads[2]["in_force"] == sha(DENY_ECHO) and "half-written" not in loads[2]["sha256"]
    assert loads[2]["error"] and loads[0]["pid"] and loads[0]["user"] and loads[0]["host"]
    decisions = _docs(store_url, sid, "decision")
    assert [(d["final"], d["policy_sha256"]) for d in decisions] == [
        ("allow", sha(ALLOW)),
        ("deny", sha(DENY_ECHO)),
        ("deny", sha(DENY_ECHO)),
    ]
    store = open_store(store_url)
    try:
        assert store.verify(sid) == []
        rows = policy_history(store, server="calllog")
        assert [(r["version"], r["ok"]) for r in rows] == [
            (sha(ALLOW), True),
            (sha(DENY_ECHO), True),
            (sha(BROKEN), False),
        ]
        assert policy_history(store, server="other") == []
    finally:
        store.close()
    out = CliRunner().invoke(main, ["policy", "history", "--store", store_url])
    assert out.exit_code == 0, out.output
    assert sha(DENY_ECHO)[:12] in out.output and "failed" in out.output
    report = CliRunner().invoke(
        main, ["report", "permissions", "--by", "version", "--store", store_url]
    )
    assert report.exit_code == 0, report.output
    assert sha(ALLOW)[:12] in report.output and sha(DENY_ECHO)[:12] in report.output


async def _said(notices: list[str], text: str, timeout: float = 10) -> None:
    """Wait until a notice holds `text`: a watcher says a reload once the new version is in
    force, and a failed load once it has kept the old one."""
    with anyio.fail_after(timeout):
        while not any(text in notice for notice in notices):
            await anyio.sleep(0.02)


async def _denied(session: ClientSession, message: str) -> str:
    try:
        await session.call_tool("echo", {"message": message})
    except MCPError as exc:  # the SDK raises on a JSON-RPC error response
        return str(exc)
    return "allowed"


def test_proxy_reloads_a_rewritten_policy_and_keeps_it_through_a_broken_one(
    tmp_path: Path, upstream: str
) -> None:
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(ALLOW)
    notices: list[str] = []
    live = LivePolicy(policy_file, interval=0.1, on_notice=notices.append)

    async def call(url: str) -> list[object]:
        out: list[object] = []
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            out.append(await s.call_tool("echo", {"message": "one"}))
            write_atomically(policy_file, DENY_ECHO)
            await _said(notices, "reloaded")
            out.append(await _denied(s, "two"))
            write_atomically(policy_file, BROKEN)
            await _said(notices, "did not load")
            out.append(await _denied(s, "three"))
        return out

    with RecordingProxy(upstream, tmp_path / "j", policy=live) as proxy:
        results = anyio.run(call, proxy.url)
    assert not results[0].is_error  # type: ignore[attr-defined]
    assert results[1:] == ["denied by policy rule no-echo: echo is switched off"] * 2
    assert any("did not load" in n for n in notices)
    sessions = proxy.sessions()
    records = next(evs for evs in sessions.values() if of_kind(evs, "decision"))
    loads = [doc(ev) for ev in of_kind(records, "policy_loaded")]
    assert [(d["ok"], d["sha256"]) for d in loads] == [
        (True, sha(ALLOW)),
        (True, sha(DENY_ECHO)),
        (False, sha(BROKEN)),
    ]
    decisions = [doc(ev) for ev in of_kind(records, "decision")]
    assert [(d["final"], d["policy_sha256"]) for d in decisions] == [
        ("allow", sha(ALLOW)),
        ("deny", sha(DENY_ECHO)),
        ("deny", sha(DENY_ECHO)),
    ]
    # Each version's policy_loaded comes before the first decision it made.
    first_deny = next(ev.seq for ev in records if ev.kind == "decision" and b"no-echo" in ev.raw)
    assert of_kind(records, "policy_loaded")[1].seq < first_deny


def test_a_policy_that_does_not_load_at_start_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text(BROKEN)
    with pytest.raises(PolicyError):
        LivePolicy(bad)
    out = CliRunner().invoke(main, ["record", "--policy", str(bad), "--", "true"])
    assert out.exit_code == 2 and "Traceback" not in out.output


def _read_lines(stream, into: list[str]) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        into.append(line)


def test_blackbox_proxy_process_reloads_its_policy(
    store_url: str, blackbox_env: dict[str, str], tmp_path: Path, upstream: str
) -> None:
    """`blackbox proxy --policy` as a user runs it, on both store backends: the rewrite denies
    the next call with the new version named, the broken one is said on stderr and recorded."""
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(ALLOW)
    port = free_port()

    async def calls(url: str) -> list[str]:
        out = []
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            out.append(await _denied(s, "one"))
            write_atomically(policy_file, DENY_ECHO)
            await _said(said, "reloaded")
            out.append(await _denied(s, "two"))
            write_atomically(policy_file, BROKEN)
            await _said(said, "did not load")
            out.append(await _denied(s, "three"))
        return out

    proc = subprocess.Popen(
        [
            *(BLACKBOX, "proxy", "--upstream", upstream, "--store", store_url),
            *("--name", "live", "--policy", str(policy_file)),
            *("--listen", f"127.0.0.1:{port}"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=blackbox_env,
    )
    # Its stderr, line by line as the proxy says them (a reload, a failed load).
    said: list[str] = []
    reader = threading.Thread(target=_read_lines, args=(proc.stderr, said), daemon=True)
    reader.start()
    try:
        wait_listening(port, proc, timeout=20.0)
        results = anyio.run(calls, f"http://127.0.0.1:{port}/mcp")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        reader.join(timeout=30)
    err = "".join(said)
    assert results == ["allowed", *["denied by policy rule no-echo: echo is switched off"] * 2]
    assert "did not load, keeping version " + sha(DENY_ECHO)[:12] in err
    store = open_store(store_url)
    try:
        rows = eventually(
            lambda: (
                [r for r in policy_history(store, "live") if not r["ok"]]
                and policy_history(store, "live")
            ),
            timeout=30,
        )
    finally:
        store.close()
    assert [(r["version"], r["ok"]) for r in rows] == [
        (sha(ALLOW), True),
        (sha(DENY_ECHO), True),
        (sha(BROKEN), False),
    ]


def test_poll_records_changes_only_and_survives_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(ALLOW)
    notices: list[str] = []
    live = LivePolicy(path, on_notice=notices.append)
    seen: list[events.PolicyLoaded] = []
    live.watch(seen.append)
    try:
        assert [d.trigger for d in seen] == ["start"]
        path.write_text(ALLOW)  # the same bytes again (a touch, a redeploy of the same file)
        assert live.poll() is None
        path.unlink()
        gone = live.poll()
        assert gone is not None and not gone.ok and "cannot read" in str(gone.error)
        assert live.sha256 == sha(ALLOW)  # still in force
        assert live.poll() is None  # said once, not every second
        path.write_bytes(b"x" * (5 * 1024 * 1024))  # a file too large to be a policy
        big = live.poll()
        assert big is not None and not big.ok and "larger than" in str(big.error)
        path.write_bytes(b'default = "deny"\n# \xff\n')  # not UTF-8
        assert not live.poll().ok  # type: ignore[union-attr]
        write_atomically(path, DENY_ECHO)
        loaded = live.poll()
        assert loaded is not None and loaded.ok and live.sha256 == sha(DENY_ECHO)
    finally:
        live.stop()
    assert [d.ok for d in seen] == [True, False, False, False, True]
    assert sum("did not load" in n for n in notices) == 3
