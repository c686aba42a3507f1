"""OpenTelemetry export against a real OTLP/HTTP receiver (tests/fixtures/otlp.py): real SDK
clients talk to real servers through `blackbox record` (stdio) and the proxy tap (HTTP), in both
protocol eras; the spans, their parentage through `_meta.traceparent` and the histograms that
reach the receiver are checked as decoded with `opentelemetry-proto`."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from blackbox.recorder.otel.batch import build_spans, export
from blackbox.recorder.otel.sdk import Target
from blackbox.recorder.otel.spans import DURATION_BUCKETS
from blackbox.recorder.otel.watermark import Watermark
from blackbox.recorder.store import open_store
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult, Implementation

from tests.fixtures import peers
from tests.fixtures.http_kit import RecordingProxy, sdk_server
from tests.fixtures.otlp import Receiver, attrs
from tests.fixtures.replay_kit import wait_recorded

pytestmark = pytest.mark.timeout(180)

HOST_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
HOST_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{HOST_TRACE}-{HOST_SPAN}-01"
IDS = {"mcp_blackbox.session_id", "mcp_blackbox.position", "mcp.session.id", "jsonrpc.request.id"}


async def _stdio_legacy(server) -> None:  # type: ignore[no-untyped-def]
    calls = [("echo", {"message": "hi ada@example.com"}), ("fail", {"reason": "no"})]
    await peers.run_legacy(server, calls)


async def _stdio_modern(server) -> None:  # type: ignore[no-untyped-def]
    async with Client(server, mode=peers.MODERN) as client:
        await client.call_tool("echo", {"message": "traced"}, meta={"traceparent": TRACEPARENT})
        await client.call_tool("fail", {"reason": "no"})


def _export(store_url: str, receiver: Receiver, tmp_path, **kw) -> object:  # type: ignore[no-untyped-def]
    store = open_store(store_url)
    try:
        watermark = Watermark(tmp_path / "wm.sqlite", store_url)
        return export(store, watermark, Target(receiver.url), **kw)
    finally:
        store.close()


def _by_session(receiver: Receiver) -> dict[str, list]:
    out: dict[str, list] = {}
    for _res, _scope, span in receiver.spans():
        out.setdefault(attrs(span)["mcp_blackbox.session_id"], []).append(span)
    return out


def _check_metrics(receiver: Receiver) -> None:
    points = list(receiver.metric_points())
    names = {name for name, _unit, _p in points}
    assert names == {"mcp.client.operation.duration", "mcp.client.session.duration"}
    for name, unit, point in points:
        assert unit == "s"
        assert list(point.explicit_bounds) == [float(b) for b in DURATION_BUCKETS]
        keys = set(attrs(point))
        assert not keys & IDS, (name, keys)
        if name == "mcp.client.operation.duration":
            assert "mcp.method.name" in keys
    tool_points = [attrs(p) for n, _u, p in points if attrs(p).get("gen_ai.tool.name") == "fail"]
    assert tool_points and all(a["error.type"] == "tool_error" for a in tool_points)


def _record_both_eras(home: Path, store_url: str) -> dict[str, str]:
    """A legacy and a modern SDK session with the example server, each through `blackbox record`
    into `store_url`; their ids by era, once sealed."""
    env = peers.tap_env(home, store_url)
    for era, run in (("legacy", _stdio_legacy), ("modern", _stdio_modern)):
        server = peers.params(peers.record_command(peers.EXAMPLE_SERVER, era, store_url), env)
        anyio.run(run, server)
    store = open_store(store_url)
    try:
        return {era: wait_recorded(store, era) for era in ("legacy", "modern")}
    finally:
        store.close()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Both eras recorded into a SQLite store once per module (each recording starts a tap, its
    store worker and the example server: most of these tests' CPU). The batch export only reads
    the store, but each test still takes a copy of its own (`recorded_copy`)."""
    directory = tmp_path_factory.mktemp("otel-recorded")
    (directory / "store").mkdir()
    sids = _record_both_eras(directory / "home", f"sqlite:///{directory / 'store' / 'store.db'}")
    return directory / "store", sids


@pytest.fixture
def recorded_copy(
    recorded: tuple[Path, dict[str, str]], tmp_path: Path
) -> tuple[str, dict[str, str]]:
    """This test's copy of the module's recorded store: its URL and the sessions' ids by era."""
    source, sids = recorded
    shutil.copytree(source, tmp_path / "store")
    return f"sqlite:///{tmp_path / 'store' / 'store.db'}", sids


@pytest.fixture(params=["sqlite", "postgresql"])
def both_eras(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """Both eras recorded through the tap on each backend: SQLite from the module's recording,
    PostgreSQL recorded here (its schema is this test's own)."""
    if request.param == "sqlite":
        return request.getfixturevalue("recorded_copy")
    url = request.getfixturevalue("pg_url")
    return url, _record_both_eras(tmp_path, url)


def test_stdio_sessions_both_eras_become_convention_spans(
    both_eras: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    store_url, sids = both_eras  # both backends
    with Receiver() as receiver:
        report = _export(store_url, receiver, tmp_path)
        assert report.failure is None and report.spans == len(receiver.spans()) > 0
        spans = _by_session(receiver)
        for era, sid in sids.items():
            mine = spans[sid]
            session = [s for s in mine if s.name == "mcp.client.session"]
            assert len(session) == 1
            calls = {s.name: s for s in mine if s.name != "mcp.client.session"}
            assert {"tools/call echo", "tools/call fail", "tools/list"} <= set(calls)
            for span in mine:
                assert span.kind == span.SPAN_KIND_CLIENT
                a = attrs(span)
                assert a["network.transport"] == "pipe"
                assert a["mcp_blackbox.session_id"] == sid
                assert isinstance(a["mcp_blackbox.position"], int)
                assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
            echo = attrs(calls["tools/call echo"])
            assert echo["gen_ai.tool.name"] == "echo"
            assert echo["gen_ai.operation.name"] == "execute_tool"
            assert echo["mcp.method.name"] == "tools/call"
            assert isinstance(echo["jsonrpc.request.id"], str)
            assert "gen_ai.tool.call.arguments" not in echo  # opt-in only
            assert "error.type" not in echo and calls["tools/call echo"].status.code == 0
            fail = calls["tools/call fail"]
            assert attrs(fail)["error.type"] == "tool_error"
            assert fail.status.code == fail.status.STATUS_CODE_ERROR
            assert "gen_ai.operation.name" not in attrs(calls["tools/list"])
            version = attrs(calls["tools/list"])["mcp.protocol.version"]
            assert version == ("2025-11-25" if era == "legacy" else peers.MODERN)
            trace = int(sid.replace("-", ""), 16).to_bytes(16, "big")
            assert session[0].trace_id == trace and not session[0].parent_span_id
            if era == "modern":
                # The host's trace context in _meta parents the call; the rest stay in the
                # session's trace, children of the session span.
                traced = calls["tools/call echo"]
                assert traced.trace_id.hex() == HOST_TRACE
                assert traced.parent_span_id.hex() == HOST_SPAN
                assert traced.flags & 0x300 == 0x300  # parent is remote
                assert calls["tools/call fail"].trace_id == trace
                assert calls["tools/call fail"].parent_span_id == session[0].span_id
            else:
                assert "initialize" in calls
                assert all(s.trace_id == trace for s in mine)
                events = [e.name for e in session[0].events]
                assert "notifications/initialized" in events
        _check_metrics(receiver)
        resource = receiver.spans()[0][0]
        assert attrs(resource)["service.name"] == "mcp-blackbox"

        # Second run: nothing is sent twice; --all resends the same ids.
        before = len(receiver.spans())
        again = _export(store_url, receiver, tmp_path)
        assert again.spans == 0 and len(receiver.spans()) == before
        ids = {s.span_id for _r, _s, s in receiver.spans()}
        resent = _export(store_url, receiver, tmp_path, resend_all=True)
        assert resent.spans == before
        assert {s.span_id for _r, _s, s in receiver.spans()[before:]} == ids


async def _elicit(_ctx: object, _params: object) -> ElicitResult:
    return ElicitResult(action="accept", content={"name": "Ada"})


async def _http_client(url: str, mode: str) -> None:
    async with Client(
        streamable_http_client(url),
        mode=mode,
        elicitation_callback=_elicit,
        client_info=Implementation(name=f"otel-{mode}", version="1"),
    ) as client:
        await client.call_tool("add", {"a": 1, "b": 2}, meta={"traceparent": TRACEPARENT})
        await client.call_tool("fail", {"reason": "no"})
        assert "Ada" in (await client.call_tool("greet", {})).content[0].text


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """One SDK server for the module's HTTP tests (its start-up, the SDK's import, costs more CPU
    than a test's calls); each test's client opens sessions of its own on it."""
    with sdk_server() as url:
        yield url


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_http_sessions_both_eras(mode: str, sqlite_url: str, tmp_path, upstream: str) -> None:
    with RecordingProxy(upstream, tmp_path / "journal") as proxy:
        anyio.run(_http_client, proxy.url, mode)
    proxy.ship(sqlite_url)
    port = int(upstream.rsplit(":", 1)[1].split("/")[0])
    with Receiver() as receiver:
        report = _export(sqlite_url, receiver, tmp_path)
        assert report.failure is None
        spans = [s for _r, _s, s in receiver.spans()]
        calls = {s.name: s for s in spans if s.name.startswith("tools/call")}
        assert set(calls) == {"tools/call add", "tools/call fail", "tools/call greet"}
        for span in calls.values():
            a = attrs(span)
            assert a["network.transport"] == "tcp"
            assert a["network.protocol.name"] == "http"
            assert a["server.address"] == "127.0.0.1" and a["server.port"] == port
        add = calls["tools/call add"]
        assert add.trace_id.hex() == HOST_TRACE and add.parent_span_id.hex() == HOST_SPAN
        assert attrs(calls["tools/call fail"])["error.type"] == "tool_error"
        if mode == "legacy":
            # The server's own request (elicitation) is a CLIENT span from the server's side.
            (asked,) = [s for s in spans if s.name == "elicitation/create"]
            assert asked.kind == asked.SPAN_KIND_CLIENT
            assert attrs(asked)["mcp_blackbox.direction"] == "s2c"
            # The server's session id is a bearer secret: what goes out is its fingerprint.
            sid_attr = attrs(add)["mcp.session.id"]
            assert sid_attr.startswith("hmac:")
            assert attrs(add)["mcp.protocol.version"] == "2025-11-25"
        else:
            assert "mcp.session.id" not in attrs(add)
            assert attrs(add)["mcp.protocol.version"] == "2026-07-28"
        assert any(s.name == "mcp.client.session" for s in spans)
        _check_metrics(receiver)
        assert _export(sqlite_url, receiver, tmp_path).spans == 0


def _eventually(check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def _timed_calls(server, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    import time

    async def run() -> list[float]:
        out = []
        async with Client(server, mode=peers.MODERN) as client:
            for i in range(n):
                began = time.perf_counter()
                await client.call_tool("echo", {"message": f"m{i}"})
                out.append(time.perf_counter() - began)
        return out

    return anyio.run(run)


def test_record_otel_sends_live_and_batch_sends_nothing_twice(sqlite_url: str, tmp_path) -> None:
    env = peers.tap_env(tmp_path, sqlite_url)
    with Receiver() as receiver:
        argv = peers.record_command(
            peers.EXAMPLE_SERVER, "live", sqlite_url, "--otel", "--otel-endpoint", receiver.url
        )
        _timed_calls(peers.params(argv, env), 5)
        store = open_store(sqlite_url)
        sid = wait_recorded(store, "live")
        store.close()

        def session_span() -> list:
            return [s for _r, _sc, s in receiver.spans() if s.name == "mcp.client.session"]

        assert _eventually(session_span), "the follower sent no session span"
        live = _by_session(receiver)[sid]
        assert sum(s.name == "tools/call echo" for s in live) == 5
        # The follower and the batch share the watermark in the data directory. The follower
        # records a send once the collector has answered it: wait for that record, as a batch
        # run by hand a moment later would find it.
        store = open_store(sqlite_url)
        try:
            watermark = Watermark(tmp_path / "otel-watermark.sqlite", sqlite_url)
            last = max(span.end_seq for span in build_spans(store, session_id=sid))
            assert _eventually(lambda: watermark.sent_seq(sid) >= last), watermark.sent()
            again = export(store, watermark, Target(receiver.url))
        finally:
            store.close()
        assert again.spans == 0 and again.skipped >= len(live)


def _follower_of(tap_pid: int) -> int | None:
    from pathlib import Path

    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if (
            int(stat.rsplit(")", 1)[1].split()[1]) == tap_pid
            and b"blackbox.recorder.otel.live" in cmdline
        ):
            return int(proc.name)
    return None


def test_follower_yields_the_cpu_to_the_tap(sqlite_url: str, tmp_path) -> None:
    """The follower stays in the tap's session (a session of its own is a scheduler autogroup of
    its own on Linux, where its nice 19 counts for nothing against the tap's group: the tap's p99
    rose up to 19x while the follower started), runs SCHED_IDLE, and has a process group of its
    own (a Ctrl-C to the host's group spares its drain)."""
    import os
    import subprocess

    env = dict(os.environ, **peers.tap_env(tmp_path, sqlite_url))
    argv = peers.record_command(
        peers.EXAMPLE_SERVER, "prio", sqlite_url, "--otel", "--otel-endpoint", "http://127.0.0.1:9"
    )
    tap = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert tap.stdin is not None
    try:
        follower = _eventually(lambda: _follower_of(tap.pid))
        assert follower, "no follower process"
        assert _eventually(lambda: os.sched_getscheduler(follower) == os.SCHED_IDLE)
        assert os.getsid(follower) == os.getsid(tap.pid)
        assert os.getpgid(follower) == follower != os.getpgid(tap.pid)
    finally:
        tap.stdin.close()
        tap.wait(60)


def test_dead_collector_neither_delays_the_tap_nor_loses_spans(sqlite_url: str, tmp_path) -> None:
    """A collector that accepts connections and never answers: calls through the tap take no
    longer than without --otel, and the next batch export delivers every span."""
    from statistics import median

    from tests.fixtures.otlp import BlackHole

    env = peers.tap_env(tmp_path, sqlite_url, OTEL_EXPORTER_OTLP_TIMEOUT="2")
    plain = peers.params(peers.record_command(peers.EXAMPLE_SERVER, "plain", sqlite_url), env)
    with BlackHole() as hole:
        argv = peers.record_command(
            peers.EXAMPLE_SERVER, "dead", sqlite_url, "--otel", "--otel-endpoint", hole.url
        )
        dead = peers.params(argv, env)
        baseline = _timed_calls(plain, 30)
        with_otel = _timed_calls(dead, 30)
    # The first calls pay for the client's and server's warm-up (seconds on a busy machine, with
    # or without --otel); past them, a blocked exporter would add seconds per call. Generous
    # bounds: the machine is shared and noisy.
    baseline, with_otel = baseline[3:], with_otel[3:]
    assert median(with_otel) < max(3 * median(baseline), median(baseline) + 0.05)
    assert max(with_otel) < 1.0
    store = open_store(sqlite_url)
    sid = wait_recorded(store, "dead")
    store.close()
    with Receiver() as receiver:
        report = _export(sqlite_url, receiver, tmp_path)
        assert report.failure is None
        mine = _by_session(receiver)[sid]
        assert sum(s.name == "tools/call echo" for s in mine) == 30
        assert any(s.name == "mcp.client.session" for s in mine)


def test_proxy_otel_sends_live(
    sqlite_url: str, tmp_path, blackbox_env: dict[str, str], upstream: str
) -> None:
    """`blackbox proxy --otel`: HTTP calls reach the receiver from the follower, and the session
    span once the proxy stops (Ctrl-C)."""
    import signal
    import subprocess

    from tests.fixtures.polling import free_port, wait_listening

    port = free_port()
    with Receiver() as receiver:
        path = "/" + upstream.split("/", 3)[3]
        proc = subprocess.Popen(
            [peers.BLACKBOX, "proxy", "--upstream", upstream, "--store", sqlite_url,
             "--listen", f"127.0.0.1:{port}", "--otel", "--otel-endpoint", receiver.url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=blackbox_env,
        )  # fmt: skip
        try:
            wait_listening(port, proc, timeout=20.0)
            anyio.run(_http_client, f"http://127.0.0.1:{port}{path}", "legacy")

            def calls() -> list:
                return [s for _r, _s, s in receiver.spans() if s.name.startswith("tools/call")]

            def all_calls() -> list:
                return calls() if len(calls()) >= 3 else []

            assert len(_eventually(all_calls)) == 3, "the follower sent the calls while running"
        finally:
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert _eventually(
            lambda: [s for _r, _s, s in receiver.spans() if s.name == "mcp.client.session"]
        )
        names = {s.name for _r, _s, s in receiver.spans()}
        assert {"initialize", "tools/list", "tools/call add", "tools/call fail"} <= names


def test_grpc_on_request(recorded_copy: tuple[str, dict[str, str]], tmp_path) -> None:
    """--protocol grpc: the same spans and histograms through the SDK's OTLP/gRPC exporter."""
    from tests.fixtures.otlp import GrpcReceiver

    sqlite_url, sids = recorded_copy
    sid = sids["legacy"]
    store = open_store(sqlite_url)
    try:
        with GrpcReceiver() as receiver:
            watermark = Watermark(tmp_path / "wm.sqlite", sqlite_url)
            report = export(store, watermark, Target(receiver.url, "grpc"))
            assert report.failure is None and report.spans > 0
            mine = _by_session(receiver)[sid]
            names = {s.name for s in mine}
            assert {"initialize", "tools/call echo", "mcp.client.session"} <= names
            fail = next(s for s in mine if s.name == "tools/call fail")
            assert attrs(fail)["error.type"] == "tool_error"
            assert fail.status.code == fail.status.STATUS_CODE_ERROR
            _check_metrics(receiver)
    finally:
        store.close()


def test_cli_export_twice_errors_in_one_line(
    recorded_copy: tuple[str, dict[str, str]],
    tmp_path,
    blackbox_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    from click.testing import CliRunner

    from blackbox.cli.main import main

    sqlite_url, sids = recorded_copy
    runner = CliRunner()

    def run(*args: str):  # type: ignore[no-untyped-def]
        return runner.invoke(main, ["otel", "export", "--store", sqlite_url, *args])

    # A collector that is not there: one line, exit 1, nothing marked sent.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    down = run("--endpoint", "http://127.0.0.1:9")
    assert down.exit_code == 1 and "Traceback" not in down.output
    assert "the collector stopped taking spans" in down.output
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=k3y,x-team=mcp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    with Receiver() as receiver:
        first = run("--endpoint", receiver.url)
        assert first.exit_code == 0, first.output
        sent = int(first.output.split()[1])
        assert sent == len(receiver.spans()) > 0
        assert all(h["x-api-key"] == "k3y" and h["x-team"] == "mcp" for h in receiver.headers)
        assert all(h.get("content-encoding") == "gzip" for h in receiver.headers)
        second = run("--endpoint", receiver.url)
        assert second.exit_code == 0 and second.output.startswith("sent 0 spans")
        assert len(receiver.spans()) == sent
        # --content: arguments and results go out, redacted (the e-mail address never leaves).
        content = run("--endpoint", receiver.url, "--all", "--content")
        assert content.exit_code == 0, content.output
        echo = [
            attrs(s)
            for _r, _s, s in receiver.spans()[sent:]
            if s.name == "tools/call echo"
            and attrs(s)["mcp_blackbox.session_id"] == sids["legacy"]  # the e-mail's session
        ]
        assert len(echo) == 1
        assert "[redacted:" in echo[0]["gen_ai.tool.call.arguments"]
        assert "ada@example.com" not in json.dumps(echo[0])
        assert "gen_ai.tool.call.result" in echo[0]
    for bad in (["--since", "soon"], ["--session", "nope"], ["--protocol", "thrift"]):
        result = run(*bad)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) <= 3  # at most click's usage lines, then one error
    missing = runner.invoke(main, ["otel", "export", "--store", f"sqlite:///{tmp_path}/no.db"])
    assert missing.exit_code == 2 and len(missing.output.strip().splitlines()) == 1


def test_attach_otel_and_the_otel_environment(sqlite_url: str, tmp_path, blackbox_env) -> None:  # type: ignore[no-untyped-def]
    """`attach --otel` wraps a host's server with `record --otel`; the follower then takes its
    endpoint, service name and resource attributes from the standard OTEL_* variables."""
    import json

    from click.testing import CliRunner

    from blackbox.cli.main import main

    config = tmp_path / "claude_desktop_config.json"
    server = {"command": peers.PYTHON, "args": peers.EXAMPLE_SERVER[1:]}
    config.write_text(json.dumps({"mcpServers": {"ex": server}}, indent=2))
    result = CliRunner().invoke(main, ["attach", str(config), "--otel", "--store", sqlite_url])
    assert result.exit_code == 0, result.output
    entry = json.loads(config.read_text())["mcpServers"]["ex"]
    assert entry["args"][: entry["args"].index("--")].count("--otel") == 1
    with Receiver() as receiver:
        env = peers.tap_env(
            tmp_path / "host",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_SERVICE_NAME="agent-x",
            OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test",
        )
        anyio.run(_stdio_legacy, peers.params([entry["command"], *entry["args"]], env))

        def session() -> list:
            return [r for r, _s, s in receiver.spans() if s.name == "mcp.client.session"]

        (resource,) = _eventually(session)
        assert attrs(resource)["service.name"] == "agent-x"
        assert attrs(resource)["deployment.environment"] == "test"
        # The follower flushes its histograms every few seconds and when it exits.
        assert _eventually(
            lambda: [n for n, _u, _p in receiver.metric_points() if n.startswith("mcp.client")]
        )
