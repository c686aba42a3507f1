"""One handle per session: sessions started in the same millisecond (their UUIDv7 ids share the
whole timestamp prefix) get different handles in `sessions`, `tail`, `report`, the web UI and a
suite's JUnit, each handle is accepted by `show`, `export` and `replay`, and a handle grows when
another stored id ends the same way."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from blackbox.recorder.compliance import select_bundle_sessions
from blackbox.recorder.compliance.bundle_read import BundleSession, ExportError
from blackbox.recorder.query import session_handle, short_handles
from blackbox.recorder.store import EventStore, open_store
from click.testing import CliRunner
from starlette.testclient import TestClient

from blackbox.cli.main import main
from blackbox.ui.app import unguarded_app
from blackbox.ui.context import Context
from tests.fixtures import peers, replay_kit
from tests.fixtures.replay_kit import c2s, s2c

# Same timestamp prefix (the first 48 bits: one millisecond); ALPHA and BETA also share the last
# six characters of their random part, so their handles need a seventh.
ALPHA = "019af3c2-1b40-7a11-8c22-00000a123456"
BETA = "019af3c2-1b40-7b33-9d44-00000b123456"
GAMMA = "019af3c2-1b40-7c55-ae66-0000007e57ab"
NAMES = {ALPHA: "alpha", BETA: "beta", GAMMA: "gamma"}
HANDLES = {ALPHA: "a123456", BETA: "b123456", GAMMA: "7e57ab"}

INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "handles-test", "version": "1"},
}


def _store_named(store: EventStore, monkeypatch: pytest.MonkeyPatch, session_id: str) -> None:
    """A short echo session under the given id (the example server's calls), named after it."""
    monkeypatch.setattr(replay_kit, "new_session_id", lambda: session_id)
    name = NAMES[session_id]
    call = {"name": "echo", "arguments": {"message": name}}
    replay_kit.store_session(
        store,
        [
            c2s({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}, 0),
            s2c({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25"}}, 2),
            c2s({"jsonrpc": "2.0", "method": "notifications/initialized"}, 3),
            c2s({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}, 4),
            s2c({"jsonrpc": "2.0", "id": 2, "result": {"content": [], "isError": False}}, 6),
        ],
        command=peers.EXAMPLE_SERVER,
        ended={"reason": "client_closed", "outcome": "ok", "exit_code": 0},
        name=name,
    )


@pytest.fixture
def three(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    store = open_store(sqlite_url)
    try:
        for sid in (ALPHA, BETA, GAMMA):
            _store_named(store, monkeypatch, sid)
    finally:
        store.close()
    return sqlite_url


def cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_collision_extends_the_handle(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(sqlite_url)
    try:
        _store_named(store, monkeypatch, ALPHA)
        assert session_handle(store, ALPHA) == "123456"  # alone: six characters
        _store_named(store, monkeypatch, BETA)  # ends with the same six
        assert short_handles(store, [ALPHA, BETA]) == {ALPHA: "a123456", BETA: "b123456"}
        assert store.resolve("a123456") == ALPHA and store.resolve("b123456") == BETA
        # Not the timestamp: the ids' first characters say when, not which.
        assert ALPHA[:13] == BETA[:13] and "019af3c2" not in session_handle(store, ALPHA)
    finally:
        store.close()


def test_every_surface_prints_the_handle_every_command_takes(
    three: str, blackbox_env: dict[str, str], tmp_path: Path
) -> None:
    url = three
    listed = json.loads(cli("sessions", "--store", url, "--format", "json"))
    assert {row["id"]: row["handle"] for row in listed} == HANDLES

    # tail: each line names the session by its handle and its name (the server).
    lines = cli("tail", "-n", "100", "--store", url).splitlines()
    for sid, handle in HANDLES.items():
        mine = [line for line in lines if f" {handle} {NAMES[sid]} " in line]
        # started, initialize and its answer, initialized, echo and its answer, ended, sealed
        assert len(mine) == 6, lines
    assert not any(" 019af3c2 " in line for line in lines)

    report = json.loads(
        cli("report", "sessions", "--by", "session", "--store", url, "--format", "json")
    )
    rows = [row for section in report["sections"].values() for row in section]
    assert {row["session"]: row["handle"] for row in rows} == HANDLES

    store = open_store(url)
    try:
        client = TestClient(unguarded_app(Context(store, None, tmp_path / "analytics", "-")))
        page = client.get("/api/sessions").json()
        assert {s["id"]: s["handle"] for s in page["sessions"]} == HANDLES
        # The session page takes the handle and shows it.
        html = client.get(f"/sessions/{HANDLES[BETA]}").text
        assert "beta [b123456]" in html and BETA in html
    finally:
        store.close()

    for sid, handle in HANDLES.items():
        shown = json.loads(cli("show", handle, "--store", url, "--format", "json"))
        assert NAMES[sid] in json.dumps(shown)  # its own echo, not another session's
        out = tmp_path / f"bundle-{handle}"
        cli("export", "--session", handle, "--out", str(out), "--store", url, "--no-redact")
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["selection"]["sessions"] == [sid]


def test_a_suite_and_its_junit_name_sessions_by_the_handle_replay_takes(
    three: str, blackbox_env: dict[str, str], tmp_path: Path
) -> None:
    url = three
    listed = json.loads(cli("sessions", "--store", url, "--format", "json"))
    handles = [row["handle"] for row in reversed(listed) if row["id"] in (ALPHA, BETA)]
    junit = tmp_path / "suite.xml"
    against = " ".join(peers.EXAMPLE_SERVER)
    # `replay` takes the handles `sessions` printed; its table and JUnit print them back.
    args = ["replay", *handles, "--against", against, "--allow-writes", "--jobs", "2"]
    result = CliRunner().invoke(main, [*args, "--junit", str(junit), "--store", url])
    assert result.exit_code in (0, 1), result.output
    table = result.stdout.splitlines()
    assert [line.split()[1] for line in table[:2]] == ["a123456", "b123456"]
    cases = [case.get("name") or "" for case in ET.parse(junit).getroot().iter("testcase")]
    assert cases == ["alpha [a123456]", "beta [b123456]"]

    # The handle in a JUnit case name is what `show` takes back: that session, not its twin.
    handle = cases[1].split("[")[1].rstrip("]")
    shown = json.loads(cli("show", handle, "--store", url, "--format", "json"))
    assert json.loads(shown[0]["payload"])["name"] == "beta"


def test_a_bundle_takes_the_handles_the_store_takes() -> None:
    """The pytest plugin and `replay --bundle` select a bundle's sessions by the same handles."""
    found = {sid: BundleSession(sid, NAMES[sid], None) for sid in (ALPHA, BETA, GAMMA)}
    for sid, handle in HANDLES.items():
        assert select_bundle_sessions(found, [handle]) == [found[sid]]
    assert select_bundle_sessions(found, [ALPHA[:30]]) == [found[ALPHA]]  # a prefix, as before
    with pytest.raises(ExportError, match="2 sessions in the bundle match '123456'"):
        select_bundle_sessions(found, ["123456"])  # the shared tail names neither
