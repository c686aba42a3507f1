"""`blackbox tools`, `--history`, `--changes`, `doctor` and `sessions` over sessions recorded
from a real SDK server whose tool definition changed between sessions (a rug pull)."""

from __future__ import annotations

import json
import os

import pytest
from blackbox.recorder.store import open_store

from tests.fixtures.clirun import run_blackbox
from tests.fixtures.taps import run_session, wait_sealed


@pytest.fixture(scope="module")
def drifted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two sessions of the drift server, clean then poisoned, recorded once for the tests
    below, which only read them: the environment of a `blackbox` run over them."""
    tmp_path = tmp_path_factory.mktemp("drifted")
    sqlite_url = f"sqlite:///{tmp_path / 'store.db'}"
    run_session(tmp_path, sqlite_url, "clean")
    store = open_store(sqlite_url)
    try:
        wait_sealed(store, 1)
        run_session(tmp_path, sqlite_url, "poisoned")
        wait_sealed(store, 2)
    finally:
        store.close()
    return {**os.environ, "BLACKBOX_HOME": str(tmp_path / "home"), "BLACKBOX_STORE": sqlite_url}


def blackbox(env: dict[str, str], *args: str, status: int = 0) -> str:
    # In-process: these tests ask what the commands print over recorded sessions.
    done = run_blackbox(*args, env=env)
    assert done.returncode == status, done.stderr
    return done.stdout


def test_inventory_counts_sessions_and_calls_per_definition(drifted: dict[str, str]) -> None:
    rows = json.loads(blackbox(drifted, "tools", "--format", "json"))
    weather = [r for r in rows if r["name"] == "weather"]
    assert len(weather) == 2  # two definitions of one tool
    assert [(r["sessions"], r["calls"], r["errors"]) for r in weather] == [(1, 1, 0), (1, 1, 0)]
    clean, poisoned = weather
    assert clean["flags"] == ""
    assert {"instruction_tag", "invisible_unicode", "secret_reference"} <= set(
        poisoned["flags"].split(",")
    )
    assert {r["server"] for r in rows} == {"drift"}
    (rug_pull,) = [r for r in rows if r["name"] == "rug_pull"]
    assert (rug_pull["sessions"], rug_pull["calls"]) == (2, 0)
    table = blackbox(drifted, "tools", "--server", "drift")
    assert clean["hash"][:12] in table and poisoned["hash"] not in table
    assert json.loads(blackbox(drifted, "tools", "--server", "nope", "--format", "json")) == []


def test_history_and_changes(drifted: dict[str, str]) -> None:
    history = json.loads(blackbox(drifted, "tools", "--history", "weather", "--format", "json"))
    assert len(history) == 2 and all(len(h["session_ids"]) == 1 for h in history)
    (change,) = json.loads(blackbox(drifted, "tools", "--changes", "--format", "json"))
    assert (change["name"], change["change"]) == ("weather", "changed")
    assert (change["old_hash"], change["new_hash"]) == (history[0]["hash"], history[1]["hash"])
    assert "<IMPORTANT>" in change["diff"]
    table = blackbox(drifted, "tools", "--changes")
    assert "+ description:" in table and "<U+200B>" in table


def test_doctor_and_sessions_name_the_change(drifted: dict[str, str]) -> None:
    text = blackbox(drifted, "doctor", "last", "--format", "json", status=1)  # a warning
    findings = json.loads(text)["findings"]
    (drift,) = [f for f in findings if f["code"] == "tool_changed"]
    assert drift["stage"] == "discovery"
    assert "'weather' changed" in drift["message"] and "1 call made under" in drift["message"]
    assert "instruction_tag" in drift["message"]
    rows = json.loads(blackbox(drifted, "sessions", "--format", "json"))
    assert [r["tools_changed"] for r in rows] == [1, 0]  # newest first
    assert "tools_changed" in blackbox(drifted, "sessions")
