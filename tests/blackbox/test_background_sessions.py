"""`last` means the last session with traffic. A real session is recorded through `blackbox
record` (the example server, one call); after it come two background sessions: the HTTP proxy's
tool watch ("tool watch: NAME", written as the proxy's shipper process writes it: a `ToolWatch`
over the real session's records, recording in an `OwnSession`) and a server started and never
spoken to. `show last` shows the real session, `sessions` and the web UI's list hide the
background ones, and `sessions --all` lists them. A host's hook decisions, which hold no frame,
are traffic all the same. On both databases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from blackbox.recorder.gate.decisions import record_decision
from blackbox.recorder.gate.tool_watch import OwnSession, ToolWatch
from blackbox.recorder.log import NewEvent
from blackbox.recorder.store import open_store
from click.testing import CliRunner
from starlette.testclient import TestClient

from blackbox.cli.main import main
from blackbox.ui.app import Context, unguarded_app
from tests.fixtures import peers
from tests.fixtures.taps import record, wait_sealed

SILENT = [sys.executable, "-c", "import sys; sys.stdin.read()"]


def _background_sessions(url: str, real: str, home: Path) -> None:
    """The proxy's tool watch over the real session's records, then a silent server."""
    store = open_store(url, create=False)
    try:
        batch = [
            NewEvent(e.session_id, e.seq, e.wall_ns, e.mono_ns, e.kind, e.direction, e.raw)
            for e in store.read_session(real)
        ]
    finally:
        store.close()
    own = OwnSession(lambda: open_store(url, create=False))
    watch = ToolWatch(own.emit, lambda: open_store(url, create=False), own_session=own.session_id)
    watch(batch)
    watch.close()
    own.close()
    silent = subprocess.run(
        peers.record_command(SILENT, "silent", url),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=peers.tap_env(home),
        timeout=60,
    )
    assert silent.returncode == 0, silent.stderr


def test_last_and_the_session_lists_skip_background_sessions(
    store_url: str, tmp_path: Path
) -> None:
    record(tmp_path / "home", store_url, "real", [("echo", {"message": "with traffic"})])
    store = open_store(store_url, create=False)
    try:
        (real,) = [s.session_id for s in wait_sealed(store, 1)]
        _background_sessions(store_url, real, tmp_path / "home")
        names = [s.name for s in wait_sealed(store, 3)]
        assert names[0] == "silent" and names[1].startswith("tool watch: ") and names[2] == "real"
        assert store.resolve("last") == real

        runner = CliRunner()
        shown = runner.invoke(main, ["show", "last", "--store", store_url, "--format", "json"])
        assert shown.exit_code == 0, shown.output
        assert "with traffic" in shown.output

        listed = runner.invoke(main, ["sessions", "--store", store_url, "--format", "json"])
        assert listed.exit_code == 0, listed.output
        assert [r["name"] for r in json.loads(listed.output)] == ["real"]
        everything = ["sessions", "--all", "--store", store_url, "--format", "json"]
        listed = runner.invoke(main, everything)
        assert listed.exit_code == 0, listed.output
        assert [r["name"] for r in json.loads(listed.output)] == names

        client = TestClient(unguarded_app(Context(store, None, tmp_path / "analytics", "-")))
        page = client.get("/api/sessions").json()
        assert [s["name"] for s in page["sessions"]] == ["real"]
        page = client.get("/api/sessions", params={"all": "1"}).json()
        assert [s["name"] for s in page["sessions"]] == names

        # A host's hook session holds no frame, yet each record is a tool call it decided:
        # traffic, so it is `last` and listed.
        hook = record_decision(
            store, tool="mcp__files__write", decision="deny", host="cursor", host_session="abc"
        )
        assert store.resolve("last") == hook
        listed = runner.invoke(main, ["sessions", "--store", store_url, "--format", "json"])
        assert [r["name"] for r in json.loads(listed.output)] == ["cursor:abc", "real"]
    finally:
        store.close()
