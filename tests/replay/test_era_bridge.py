"""Replay across protocol eras with real SDK sessions of the example server: a legacy session
re-spoken in the 2026-07-28 era (server/discover, `_meta` on every request) replays against the
same server with no divergence, a 2026-07-28 session replays in a legacy era, a changed server is
still caught across the bridge, and a legacy-only server (server-everything) says the handshake
failed instead of passing silently."""

from __future__ import annotations

import json
import shlex

import pytest
from blackbox.recorder.log.model import Direction, Kind
from blackbox.recorder.store import open_store
from blackbox.replay.era_bridge import bridge_records
from blackbox.replay.replayer import ReplayOptions, replay_session
from blackbox.replay.report import render_text
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures import peers
from tests.fixtures.replay_kit import SERVERS, record_session

LOUDER = f"{peers.PYTHON} {SERVERS / 'variant.py'} louder"
CALLS = [("echo", {"message": "across"}), ("fail", {"reason": "no"})]


def sent(store, sid: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [
        json.loads(e.raw)
        for e in store.read_session(sid)
        if e.kind == Kind.FRAME and e.direction == Direction.CLIENT_TO_SERVER
    ]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """A legacy and a stateless session of the example server, recorded once for the tests
    that replay or read them (a replay stores a session of its own and leaves these as they
    were): (store URL, legacy id, modern id)."""
    tmp = tmp_path_factory.mktemp("eras")
    url = f"sqlite:///{tmp / 'store.db'}"
    store = open_store(url)
    server = peers.EXAMPLE_SERVER
    try:
        legacy = record_session(store, url, tmp, server, CALLS, "legacy", "old")
        modern = record_session(store, url, tmp, server, CALLS, "modern", "new")
    finally:
        store.close()
    return url, legacy, modern


def test_legacy_session_replays_in_the_stateless_era_with_no_divergence(
    recorded: tuple[str, str, str],
) -> None:
    sqlite_url, legacy, _ = recorded
    store = open_store(sqlite_url)
    result = replay_session(store, legacy, options=ReplayOptions(era="2026-07-28"))
    assert result.exit_code == 0, render_text(result)
    assert result.era == "2026-07-28"
    assert "re-spoken from era 2025-11-25" in render_text(result)
    frames = sent(store, result.replay_id)
    assert [f.get("method") for f in frames] == [
        "server/discover",
        "tools/list",
        "tools/call",
        "tools/call",
    ]
    for frame in frames:
        meta = frame["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "mcp"
        assert "roots" in meta["io.modelcontextprotocol/clientCapabilities"]
    # a real change still shows through the bridge
    changed = replay_session(store, legacy, against=LOUDER, options=ReplayOptions(era="2026-07-28"))
    assert changed.exit_code == 1
    (step,) = [s for s in changed.steps if s.status != "ok"]
    assert step.tool == "echo"
    assert {d.path for d in step.differences} == {
        "$.result.content[0].text",
        "$.result.structuredContent.result",
    }
    store.close()


def test_stateless_session_replays_in_a_legacy_era(recorded: tuple[str, str, str]) -> None:
    sqlite_url, _, modern = recorded
    code = CliRunner().invoke(
        main, ["replay", modern, "--era", "2025-11-25", "--format", "json", "--store", sqlite_url]
    )
    report = json.loads(code.stdout)
    assert code.exit_code == 0, code.stdout
    assert report["verdict"] == "equivalent" and report["era"] == "2025-11-25"
    assert report["recorded_era"] == "2026-07-28"
    store = open_store(sqlite_url)
    frames = sent(store, report["replay"])
    assert [f.get("method") for f in frames][:3] == [
        "initialize",
        "notifications/initialized",
        "tools/list",
    ]
    assert frames[0]["params"]["protocolVersion"] == "2025-11-25"
    assert not any("_meta" in f.get("params", {}) for f in frames)
    store.close()


def test_a_legacy_only_server_fails_the_stateless_handshake_visibly(
    recorded: tuple[str, str, str],
) -> None:
    # The legacy session of the example server, re-spoken in the stateless era and replayed
    # against server-everything (legacy only): the handshake that era needs is
    # server/discover, which that server does not know. Which server the session was recorded
    # from does not matter to that answer, so the module's recording serves (a recording of
    # server-everything of its own would cost a tap, its store worker and a node start).
    sqlite_url, legacy, _ = recorded
    store = open_store(sqlite_url)
    everything = shlex.join(peers.EVERYTHING_SERVER)
    result = replay_session(
        store, legacy, against=everything, options=ReplayOptions(era="2026-07-28")
    )
    assert result.exit_code == 1
    first = next(s for s in result.steps if s.status != "ok")
    assert first.method == "server/discover"
    assert "$.error" in {d.path for d in first.differences}  # the server's refusal, shown
    store.close()


def test_bridge_round_trip_keeps_the_calls(recorded: tuple[str, str, str]) -> None:
    sqlite_url, legacy, _ = recorded
    store = open_store(sqlite_url)
    records = list(store.read_session(legacy))
    back = bridge_records(bridge_records(records, "2026-07-28"), "2025-11-25")
    methods = [e.method for e in back if e.direction == Direction.CLIENT_TO_SERVER]
    assert methods == [e.method for e in records if e.direction == Direction.CLIENT_TO_SERVER]
    assert [e.seq for e in back] == list(range(1, len(back) + 1))
    store.close()
