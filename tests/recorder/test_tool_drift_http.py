"""Tool drift through `blackbox proxy`: the proxy's shipper process watches the list answers and
records the change (in a watcher session of its own, naming the session it was seen in)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from blackbox.recorder.store import open_store
from mcp import Client

from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import BLACKBOX
from tests.fixtures.http_kit import server_process
from tests.fixtures.polling import eventually, free_port, wait_listening

pytestmark = pytest.mark.timeout(120)
DRIFT = str(Path(__file__).parent / "servers" / "drift_server.py")


def _session(url: str) -> dict[str, str]:
    async def go() -> dict[str, str]:
        async with Client(url, mode="legacy") as client:
            tools = (await client.list_tools()).tools
            seen = {t.name: t.description or "" for t in tools}
            try:
                result = await client.call_tool("weather", {"city": "Oslo"})
                seen["result"] = result.content[0].text
            except Exception as exc:  # the gate's denial
                seen["error"] = str(exc)
            return seen

    return anyio.run(go)


def _proxy(upstream: str, port: int, store_url: str, env: dict[str, str], *extra: str):  # type: ignore[no-untyped-def]
    proc = subprocess.Popen(
        [
            BLACKBOX,
            "proxy",
            "--upstream",
            upstream,
            "--store",
            store_url,
            "--name",
            "drift-http",
            "--listen",
            f"127.0.0.1:{port}",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_listening(port, proc, timeout=20.0)
    return proc


def test_the_proxy_records_a_change_between_sessions(
    tmp_path: Path, sqlite_url: str, blackbox_env: dict[str, str]
) -> None:
    upstream_port, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/mcp"
    proxy = subprocess.Popen(
        [
            BLACKBOX,
            "proxy",
            "--upstream",
            upstream,
            "--store",
            sqlite_url,
            "--name",
            "drift-http",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=blackbox_env,
    )
    try:
        wait_listening(port, proxy, timeout=20.0)
        url = f"http://127.0.0.1:{port}/mcp"
        argv = [sys.executable, DRIFT, "http", str(upstream_port)]
        with server_process(argv, upstream_port, {"DRIFT_VARIANT": "clean"}):
            assert "IMPORTANT" not in _session(url)["weather"]
        with server_process(argv, upstream_port, {"DRIFT_VARIANT": "poisoned"}):
            assert "IMPORTANT" in _session(url)["weather"]
    finally:
        proxy.send_signal(signal.SIGINT)
        proxy.communicate(timeout=30)
    store = open_store(sqlite_url)

    def changes() -> list[tuple[str, dict]]:
        found = []
        for info in store.list_sessions():
            for ev in store.read_session(info.session_id):
                if ev.kind == "tool_changed":
                    found.append((info.session_id, json.loads(ev.raw)))
        return found

    eventually(lambda: len(changes()) == 1, timeout=30, message="one tool_changed")
    ((watcher, change),) = changes()
    assert (change["tool"], change["change"], change["server"]) == (
        "weather",
        "changed",
        "drift-http",
    )
    assert change["command"] == upstream
    assert "<IMPORTANT>" in "\n".join(change["diff"])
    observed = change["observed_session"]
    assert observed != watcher and store.session(observed).name == "drift-http"
    assert store.session(watcher).sealed and store.session(watcher).name == "tool watch: drift-http"
    assert store.verify() == []
    # The doctor of the observed session names the change the watcher recorded elsewhere.
    from blackbox.analytics.doctor_session import diagnose

    codes = [f.code for f in diagnose(store, observed).findings]
    assert "tool_changed" in codes


def test_the_proxy_denies_a_pinned_tool_under_a_new_definition(
    tmp_path: Path, sqlite_url: str, blackbox_env: dict[str, str]
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[pin]\nservers = ["drift-http"]\ntrust_on_first_use = true\n')
    upstream_port, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/mcp"
    argv = [sys.executable, DRIFT, "http", str(upstream_port)]
    url = f"http://127.0.0.1:{port}/mcp"
    proxy = _proxy(upstream, port, sqlite_url, blackbox_env, "--policy", str(policy))
    try:
        with server_process(argv, upstream_port, {"DRIFT_VARIANT": "clean"}):
            assert _session(url)["result"] == "sunny in Oslo"  # approved on first use
        with server_process(argv, upstream_port, {"DRIFT_VARIANT": "poisoned"}):
            denied = _session(url)
    finally:
        proxy.send_signal(signal.SIGINT)
        _out, err = proxy.communicate(timeout=30)
    assert "result" not in denied and "changed" in denied["error"]
    if "will be shipped by the next tap" in err:
        # On a loaded machine the proxy's last 2.5 s of shipping may not suffice: what the store
        # did not take stays in the journal, and `blackbox ship` delivers it. Nothing is lost.
        shipped = run_blackbox("ship", "--store", sqlite_url, env=blackbox_env)
        assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    store = open_store(sqlite_url)
    approvals = [
        json.loads(ev.raw)
        for info in store.list_sessions(name="blackbox tool approvals")
        for ev in store.read_session(info.session_id)
        if ev.kind == "decision"
    ]
    assert sorted(a["tool"] for a in approvals) == ["rug_pull", "weather"]
    assert all(a["decided_by"] == "trust_on_first_use" for a in approvals)
