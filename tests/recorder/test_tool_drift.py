"""Tool drift as it happens, with the SDK client and a real SDK server whose definitions change
between sessions and within one (after `notifications/tools/list_changed`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from blackbox.recorder.store import EventStore, open_store

from tests.fixtures.clirun import run_blackbox
from tests.fixtures.taps import run_session, wait_sealed


def docs_of(store: EventStore, kind: str) -> list[dict]:
    found = []
    for info in store.list_sessions():
        for ev in store.read_session(info.session_id):
            if ev.kind == kind:
                found.append({**json.loads(ev.raw), "_session": info.session_id, "_seq": ev.seq})
    return found


def test_a_change_between_sessions_is_recorded_once_with_its_diff_and_findings(
    tmp_path: Path, store_url: str
) -> None:
    run_session(tmp_path, store_url, "clean")
    store = open_store(store_url)
    wait_sealed(store, 1)
    assert docs_of(store, "tool_changed") == []  # a first listing is a snapshot, not a change
    (listed,) = docs_of(store, "tools_listed")
    assert {i["name"] for i in listed["items"]} == {"weather", "rug_pull"}
    assert listed["findings"] == {}

    run_session(tmp_path, store_url, "poisoned")
    wait_sealed(store, 2)
    run_session(tmp_path, store_url, "poisoned")  # the same definition again: no new change
    wait_sealed(store, 3)
    (change,) = docs_of(store, "tool_changed")
    assert (change["tool"], change["change"], change["server"]) == ("weather", "changed", "drift")
    assert change["old_hash"] != change["new_hash"]
    assert change["previous_session"] is not None
    diff = "\n".join(change["diff"])
    assert "+ description:" in diff and "<IMPORTANT>" in diff and "<U+200B>" in diff
    assert "- description: Get the weather forecast for a city." in diff
    rules = {f["rule"] for f in change["findings"]}
    assert {"invisible_unicode", "instruction_tag", "secret_reference"} <= rules
    assert store.verify() == []


def test_a_change_within_a_session_after_list_changed(tmp_path: Path, sqlite_url: str) -> None:
    seen = run_session(tmp_path, sqlite_url, "clean", True)
    assert "IMPORTANT" in seen["second"]["weather"]
    store = open_store(sqlite_url)
    (info,) = wait_sealed(store, 1)
    (change,) = docs_of(store, "tool_changed")
    assert change["_session"] == info.session_id
    assert change["previous_session"] == info.session_id
    assert change["after_list_changed"] is True
    listed = docs_of(store, "tools_listed")
    assert len(listed) == 2  # the first answer and the changed one
    assert "weather" in listed[1]["findings"]


PIN_POLICY = """
default = "allow"

[pin]
servers = ["drift"]
trust_on_first_use = true
"""


@pytest.fixture(scope="module")
def pinned_on_first_use(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store after one session with the clean drift server through the pin gate (trust
    on first use approves its tools): how both pinning tests begin. Recorded once for the module
    (a session costs a tap, its store worker and an SDK server); each test takes a copy."""
    base = tmp_path_factory.mktemp("pinned")
    policy = base / "policy.toml"
    policy.write_text(PIN_POLICY)
    url = f"sqlite:///{base / 'store.db'}"
    seen = run_session(base, url, "clean", False, "--policy", str(policy))
    assert seen["weather"] == "sunny in Oslo"
    store = open_store(url)
    wait_sealed(store, 3)  # the session and an approval for each of its two tools
    store.close()
    return base / "store.db"


def copy_store(store_file: Path, tmp_path: Path) -> None:
    """The store `store_file` (with its WAL, if any) as this test's `sqlite_url` store."""
    for part in store_file.parent.glob(store_file.name + "*"):
        shutil.copy2(part, tmp_path / part.name.replace(store_file.name, "store.db", 1))


def _blackbox(tmp_path: Path, store_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BLACKBOX_HOME": str(tmp_path / "home"), "BLACKBOX_STORE": store_url}
    return run_blackbox(*args, env=env)


def test_a_pinned_tool_is_denied_under_a_new_definition_until_approved(
    tmp_path: Path, sqlite_url: str, pinned_on_first_use: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(PIN_POLICY)
    gate = ("--policy", str(policy))
    # Trust on first use: the reviewed definition was approved as it was first seen (the
    # gated session with the clean server, of the module's fixture).
    copy_store(pinned_on_first_use, tmp_path)
    store = open_store(sqlite_url)
    # The rug pull: without the gate the call goes through under the poisoned definition...
    assert run_session(tmp_path, sqlite_url, "poisoned")["weather"] == "sunny in Oslo"
    # ...with it, it is denied, and the decision names the change.
    seen = run_session(tmp_path, sqlite_url, "poisoned", False, *gate)
    assert "weather" not in seen and "changed" in seen["weather_error"]
    wait_sealed(store, 5)  # the fixture's three, and the two sessions above
    denials = [d for d in docs_of(store, "decision") if d["decision"] == "deny"]
    assert [(d["tool"], d["rule"], d["decided_by"]) for d in denials] == [("weather", "pin", "pin")]
    assert "approved definition" in denials[0]["reason"]
    # Approving the recorded definition (an audit record of its own) lets the call through.
    done = _blackbox(tmp_path, sqlite_url, "tools", "approve", "drift", "weather")
    assert done.returncode == 0, done.stderr
    (change,) = docs_of(store, "tool_changed")[:1]
    assert done.stdout.split()[-1] == change["new_hash"]
    assert run_session(tmp_path, sqlite_url, "poisoned", False, *gate)["weather"] == "sunny in Oslo"
    approvals = [d for d in docs_of(store, "decision") if d["method"] == "tools/approve"]
    assert sorted((d["tool"], d["decided_by"]) for d in approvals) == [
        ("rug_pull", "trust_on_first_use"),  # every tool of a pinned server
        ("weather", "trust_on_first_use"),
        ("weather", "user"),
    ]
    assert store.verify() == []
    # A recorded definition can be approved by a prefix of its hash; an unknown one cannot.
    old = change["old_hash"]
    done = _blackbox(tmp_path, sqlite_url, "tools", "approve", "drift", "weather", old[:12])
    assert done.returncode == 0 and done.stdout.split()[-1] == old
    done = _blackbox(tmp_path, sqlite_url, "tools", "approve", "drift", "weather", "ffff0000")
    assert done.returncode == 2 and "no recorded definition" in done.stderr


def test_a_pinned_tool_changed_within_the_session_is_denied(
    tmp_path: Path, sqlite_url: str
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(PIN_POLICY.replace('servers = ["drift"]', "") + RULE_PIN)
    seen = run_session(tmp_path, sqlite_url, "clean", True, "--policy", str(policy))
    assert "changed" in seen["weather_error"]


RULE_PIN = """
[[rule]]
id = "pin-weather"
decision = "allow"
tool = "weather"
pin = true
"""


def test_bad_pin_settings_are_one_line_errors(tmp_path: Path, sqlite_url: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[pin]\nservers = "drift"\ntrust = 1\n')
    done = _blackbox(tmp_path, sqlite_url, "policy", "check", str(policy))
    assert done.returncode == 2 and "unknown key 'trust' in [pin]" in done.stderr
    assert "Traceback" not in done.stderr
    done = _blackbox(tmp_path, sqlite_url, "tools", "approve", "nope", "weather")
    assert done.returncode == 2 and "no definition of 'weather'" in done.stderr


def test_a_pinned_tool_listed_twice_or_beside_a_lookalike_is_denied_and_recorded(
    tmp_path: Path, sqlite_url: str, pinned_on_first_use: Path
) -> None:
    """The sidestep: a `tools/list` naming the pinned `weather` twice — the changed definition
    first, the approved one last — passed, because the pinner kept the last entry; so did a
    poisoned `wеather` (Cyrillic ie) beside the approved one. Both are ambiguous now: the calls
    are denied and the ambiguity is recorded as a change with a finding."""
    policy = tmp_path / "policy.toml"
    policy.write_text(PIN_POLICY)
    gate = ("--policy", str(policy))
    copy_store(pinned_on_first_use, tmp_path)  # the clean definitions, approved on first use
    store = open_store(sqlite_url)
    twice = run_session(tmp_path, sqlite_url, "twice", False, *gate)
    assert list(twice["first"]).count("weather") == 1  # the SDK client keeps one of the two
    assert "weather" not in twice and "ambiguous" in twice["weather_error"]
    assert "'weather' listed 2 times" in twice["weather_error"]
    lookalike = run_session(tmp_path, sqlite_url, "lookalike", False, *gate)
    assert "w\u0435ather" in lookalike["first"]
    assert "weather" not in lookalike and "ambiguous" in lookalike["weather_error"]
    wait_sealed(store, 5)  # the fixture's three, and the two sessions above
    denials = [d for d in docs_of(store, "decision") if d["decision"] == "deny"]
    assert [(d["tool"], d["rule"]) for d in denials] == [("weather", "pin"), ("weather", "pin")]
    changes = [c for c in docs_of(store, "tool_changed") if c["change"] == "ambiguous"]
    assert {c["tool"] for c in changes} == {"weather", "w\u0435ather"}
    assert all(any(f["rule"] == "ambiguous" for f in c["findings"]) for c in changes)
    # Trust on first use approved nothing it could not tell apart.
    approvals = [d["tool"] for d in docs_of(store, "decision") if d["method"] == "tools/approve"]
    assert "w\u0435ather" not in approvals
    shown = _blackbox(tmp_path, sqlite_url, "tools", "--changes")
    assert shown.returncode == 0, shown.stderr
    assert "ambiguous" in shown.stdout
