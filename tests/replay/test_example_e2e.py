"""End to end against the example server: sessions recorded by `blackbox record` from the
official SDK client (both eras), replayed against the same server, a changed build, a fixed build,
the mock server and the same server over Streamable HTTP. The store is PostgreSQL here."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from blackbox.recorder.log.model import Direction, Kind
from blackbox.recorder.store import EventStore, open_store
from blackbox.replay.recording import load_recording
from blackbox.replay.replayer import ReplayOptions, replay_session
from blackbox.replay.report import render_text
from sqlalchemy import create_engine, text

from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.polling import eventually, free_port, wait_listening
from tests.fixtures.replay_kit import SERVERS, record_session

CALLS = [("echo", {"message": "hi"}), ("ask", {}), ("print_stdout", {}), ("fail", {})]
VARIANT = [sys.executable, str(SERVERS / "variant.py")]


@pytest.fixture(scope="module")
def pg_store(pg_database: str) -> Iterator[tuple[str, EventStore]]:
    schema = f"replay_{secrets.token_hex(4)}"
    engine = create_engine(pg_database, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{pg_database}?options=-csearch_path%3D{schema}"
    store = open_store(url)
    yield url, store
    store.close()
    with engine.connect() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


@pytest.fixture(scope="module")
def sessions(pg_store, tmp_path_factory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    url, store = pg_store
    home = tmp_path_factory.mktemp("bbhome")
    server = peers.EXAMPLE_SERVER
    return {
        "legacy": record_session(store, url, home, server, CALLS, "legacy", "ex-legacy"),
        "modern": record_session(store, url, home, server, CALLS, "modern", "ex-modern"),
        "crash": record_session(
            store, url, home, server, [("echo", {"message": "a"}), ("crash", {})], "legacy", "crash"
        ),
    }


def test_replay_against_the_same_server_is_equivalent_in_both_eras(pg_store, sessions) -> None:  # type: ignore[no-untyped-def]
    _url, store = pg_store
    for era in ("legacy", "modern"):
        result = replay_session(store, sessions[era])
        assert result.exit_code == 0, render_text(result)
        assert result.verdict == "equivalent"
        # the recorded faults (a tool error; a non-JSON line on stdout) reproduce at their steps
        faults = {(f.fault.fault, f.fault.label): f.reproduced for f in result.faults}
        assert faults == {
            ("tool_error", "tools/call fail"): True,
            ("stdout_pollution", "tools/call print_stdout"): True,
        }
        # the replay is a session of its own, pointing at the original
        info = store.session(result.replay_id)
        assert info.replay_of == sessions[era] and info.sealed
        replayed = list(store.read_session(result.replay_id))
        original = list(store.read_session(sessions[era]))
        sent = [e.raw for e in replayed if e.direction == Direction.CLIENT_TO_SERVER]
        recorded = [e.raw for e in original if e.direction == Direction.CLIENT_TO_SERVER]
        if era == "modern":
            # 2026-07-28: every request's _meta went out exactly as recorded
            assert sent == recorded
        else:
            # legacy: the handshake as recorded; the roots/list answer was sent from the recording
            assert sent[:3] == recorded[:3] and len(sent) == len(recorded)
            assert any(b"test-root" in raw for raw in sent)
        assert any(e.kind == Kind.REPLAY_STEP for e in replayed)


def cli(args: list[str], url: str) -> tuple[int, str]:
    """Run a blackbox command in-process (the CLI's import cost once, not per call); a
    traceback is raised, never taken for exit status 1."""
    result = run_blackbox(*args, "--store", url)
    return result.returncode, result.stdout


def test_cli_exit_codes_changed_build_names_path_and_values(pg_store, sessions) -> None:  # type: ignore[no-untyped-def]
    url, _store = pg_store
    code, out = cli(["replay", sessions["legacy"], "--format", "json"], url)
    assert code == 0, out
    assert json.loads(out)["verdict"] == "equivalent"
    changed = f"{VARIANT[0]} {VARIANT[1]} changed"
    code, out = cli(["replay", sessions["legacy"], "--against", changed], url)
    assert code == 1, out
    assert "tools/call echo: diverged" in out
    assert '$.result.content[0].text: recorded "hi", replayed "hi!"' in out
    # the removed tool is one difference: the recorded definition, replayed absent
    tools_report = out.split("tools/list: diverged")[1].split("step ")[0]
    (removed,) = [line for line in tools_report.splitlines() if "replayed (absent)" in line]
    assert '"name": "sleep"' in removed


def test_crash_reproduces_and_a_fixed_server_does_not(pg_store, sessions) -> None:  # type: ignore[no-untyped-def]
    url, store = pg_store
    result = replay_session(store, sessions["crash"])
    (fault,) = [f for f in result.faults if f.fault.fault == "server_exit"]
    assert fault.reproduced, render_text(result)
    assert fault.describe().startswith(
        "reproduced: server exited with status 3 after tools/call crash, step"
    )
    assert result.exit_code == 0
    assert store.session(result.replay_id).outcome == "crashed"
    fixed = f"{VARIANT[0]} {VARIANT[1]} fixed"
    options = ReplayOptions(response_timeout_s=3)
    result = replay_session(store, sessions["crash"], against=fixed, options=options)
    text_report = render_text(result)
    assert result.exit_code == 0, text_report
    assert "not reproduced: server exited with status 3 after tools/call crash" in text_report
    assert "the server kept running" in text_report
    code, out = cli(
        [
            "replay",
            sessions["crash"],
            "--against",
            fixed,
            "--expect-fault",
            "--timeout",
            "3",
            "--format",
            "json",
        ],
        url,
    )
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "fault not reproduced"
    assert [f["reproduced"] for f in report["faults"]] == [False]


def test_serve_answers_the_sdk_client_from_the_recording(pg_store, sessions, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import anyio
    from mcp.shared.exceptions import MCPError

    url, store = pg_store
    env = peers.tap_env(tmp_path / "home", url)
    serve = [peers.BLACKBOX, "serve", sessions["modern"], "--store", url]

    async def client_session() -> tuple[list, str]:
        """The recorded calls, then one never recorded, from one client (one mock process: the
        2026-07-28 era carries no session state between requests)."""
        from mcp import Client

        async with Client(peers.params(serve, env), mode=peers.MODERN) as client:
            await client.list_tools()
            results = [await client.call_tool(name, args) for name, args in (CALLS[0], CALLS[3])]
            try:
                await client.call_tool("echo", {"message": "never recorded"})
            except MCPError as exc:
                return results, str(exc)
        return results, "no error"

    results, message = anyio.run(client_session)
    assert results[0].content[0].text == "hi"
    assert results[1].is_error is True
    assert "no recorded tools/call matches" in message
    assert '$.params.arguments.message: recorded "hi", got "never recorded"' in message
    # the mock can stand in for the server in a replay
    result = replay_session(store, sessions["modern"], against=" ".join(serve))
    assert result.exit_code == 0, render_text(result)


@pytest.fixture(scope="module")
def http_server() -> Iterator[int]:
    """The example unchanged over Streamable HTTP, one per module (its start-up, the SDK's import,
    is most of an HTTP test's CPU); every replay and proxied session is a session of its own on
    it. Yields its port."""
    port = free_port()
    proc = subprocess.Popen(
        [*VARIANT, "same", "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, proc, timeout=60, interval=0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_http_target_both_eras(pg_store, sessions, http_server: int) -> None:  # type: ignore[no-untyped-def]
    _url, store = pg_store
    for era in ("legacy", "modern"):
        result = replay_session(store, sessions[era], url=f"http://127.0.0.1:{http_server}/mcp")
        assert result.exit_code == 0, render_text(result)
        assert result.transport == "http"
        assert store.session(result.replay_id).transport == "http"


def test_injected_cut_stops_the_replay_and_is_reported(pg_store, sessions) -> None:  # type: ignore[no-untyped-def]
    from blackbox.replay.inject import parse_injection

    _url, store = pg_store
    options = ReplayOptions(injections=[parse_injection("cut@3")], response_timeout_s=3)
    result = replay_session(store, sessions["legacy"], options=options)
    assert result.exit_code == 1
    statuses = {s.number: s.status for s in result.steps}
    assert statuses[4] == "not_sent" and statuses[5] == "not_sent"
    assert "injected: cut at step 3" in render_text(result)


def test_injected_drop_corrupt_and_delay(pg_store, sessions) -> None:  # type: ignore[no-untyped-def]
    from blackbox.replay.inject import parse_injection

    _url, store = pg_store
    steps = {s.label: s.number for s in load_recording(store, sessions["modern"]).steps}
    echo, fail = steps["tools/call echo"], steps["tools/call fail"]
    specs = [f"drop@{echo}", f"corrupt@{fail}", "delay@tools/list:300"]
    options = ReplayOptions(injections=[parse_injection(s) for s in specs], response_timeout_s=3)
    result = replay_session(store, sessions["modern"], options=options)
    by_number = {s.number: s for s in result.steps}
    assert by_number[echo].status == "not_sent" and by_number[echo].note == "dropped by --inject"
    # the corrupted frame (cut in half: invalid JSON) gets no answer to its id
    assert by_number[fail].status == "missing"
    assert result.exit_code == 1
    frames = [e for e in store.read_session(result.replay_id) if e.kind == Kind.FRAME]
    sent = [e for e in frames if e.direction == Direction.CLIENT_TO_SERVER]
    assert not any(b'"echo"' in e.raw for e in sent)
    assert any(e.msg_type == "invalid" for e in sent)  # the corrupted frame, as sent
    assert sent[0].method == "tools/list" and sent[0].mono_ns >= 300_000_000


def test_sessions_recorded_by_the_http_proxy_replay_against_their_upstream(
    sqlite_url: str, tmp_path: Path, http_server: int
) -> None:
    """Recorded over HTTP by `blackbox proxy` (both eras), replayed by default against the URL
    the session recorded (the upstream): equivalent."""
    import os

    import anyio
    from mcp import Client

    upstream_port, proxy_port = http_server, free_port()
    env = {**os.environ, "BLACKBOX_HOME": str(tmp_path / "home")}
    proxy_log = tmp_path / "proxy.log"  # what the proxy says goes into a failure's message
    proxy = subprocess.Popen(
        [
            peers.BLACKBOX,
            "proxy",
            "--upstream",
            f"http://127.0.0.1:{upstream_port}/mcp",
            "--listen",
            f"127.0.0.1:{proxy_port}",
            "--store",
            sqlite_url,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=proxy_log.open("wb"),
    )
    store = open_store(sqlite_url)
    try:
        wait_listening(proxy_port, proxy, timeout=60, interval=0.1)

        async def session(mode: str) -> None:
            url = f"http://127.0.0.1:{proxy_port}/mcp"
            with anyio.fail_after(60):
                async with Client(url, mode=mode, list_roots_callback=peers._roots) as client:
                    for name, args in CALLS:
                        await client.call_tool(name, args)

        for mode in ("legacy", peers.MODERN):
            anyio.run(session, mode)

        # the proxy ships its journal in the background: wait for both sessions' last answers
        def answered() -> list:
            return [
                s
                for s in store.list_sessions()
                if any(e.is_error for e in store.read_session(s.session_id))
            ]

        eventually(
            lambda: len(answered()) == 2,
            timeout=60,
            interval=0.3,
            message=lambda: (
                f"both sessions' last answers; the proxy said: {proxy_log.read_text()!r}"
            ),
        )
        done = answered()
        for info in done:
            result = replay_session(store, info.session_id)
            assert result.transport == "http" and result.target.endswith(f":{upstream_port}/mcp")
            assert result.exit_code == 0, render_text(result)
    finally:
        store.close()
        proxy.terminate()
        proxy.wait(10)
