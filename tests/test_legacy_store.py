"""A log written before record documents had a schema version still reads, verifies, replays,
reports and exports: tests/fixtures/store-v0.sqlite was written by the code of that time and is
never regenerated (its README says what it holds)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from blackbox.recorder.log import events
from blackbox.recorder.store import open_store

from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "store-v0.sqlite"

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def legacy(tmp_path: Path, blackbox_env: dict[str, str]) -> tuple[str, dict[str, str]]:
    db = tmp_path / "legacy.db"
    shutil.copyfile(FIXTURE, db)
    env = dict(blackbox_env, BLACKBOX_STORE=f"sqlite:///{db}")
    return f"sqlite:///{db}", env


def run(env: dict[str, str], *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return run_blackbox(*args, env=env, cwd=cwd)


def sessions(env: dict[str, str], *flags: str) -> dict[str, dict]:
    out = run(env, "sessions", "--replays", "--format", "json", *flags)
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout)}


def test_every_record_of_the_old_log_decodes(legacy: tuple[str, dict[str, str]]) -> None:
    url, _env = legacy
    store = open_store(url)
    try:
        kinds = set()
        for ev in store.read_log():
            kinds.add(ev.kind)
            if ev.kind != "frame":
                _doc, problem = events.decode(ev.kind, ev.raw)
                assert problem is None, (ev.kind, ev.raw[:120], problem)
    finally:
        store.close()
    # Kinds born at version 1 (no upgrade steps) came after the old log was written.
    assert kinds >= {kind for kind in events.DOCUMENTS if kind in events.UPGRADES}


def test_old_log_lists_and_verifies(legacy: tuple[str, dict[str, str]]) -> None:
    _url, env = legacy
    rows = sessions(env)
    # The hook's decisions are traffic; retention's own records are a background session.
    assert set(rows) == {"demo", "gated", "remote", "cursor:abc", "replay of demo"}
    assert set(sessions(env, "--all")) == {*rows, "retention"}
    # It ended normally, but its server polluted stdout: the listing says so.
    assert rows["demo"]["ended"] == "ok" and rows["demo"]["outcome"] == "faults"
    assert rows["demo"]["frames"] == 16
    assert rows["remote"]["frames"] == 7
    verified = run(env, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "intact" in verified.stdout


def test_old_log_replays_equivalent(legacy: tuple[str, dict[str, str]]) -> None:
    _url, env = legacy
    demo = sessions(env)["demo"]["id"]
    server = f"{sys.executable} examples/server.py"
    # Recorded before the example server annotated its tools: its calls may change something,
    # and the annotations are all that differs.
    out = run(
        env, "replay", demo, "--against", server, "--allow-writes", "--ignore", "$..annotations"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verdict: equivalent" in out.stdout


def test_old_log_reports_decisions_and_doctor(legacy: tuple[str, dict[str, str]]) -> None:
    _url, env = legacy
    perms = run(env, "report", "permissions", "--format", "json")
    assert perms.returncode == 0, perms.stderr
    assert "no-crash" in perms.stdout
    doctor = run(env, "doctor", sessions(env)["demo"]["id"])
    assert doctor.returncode in (0, 1), doctor.stderr
    assert "stdout" in doctor.stdout  # the recorded stdout pollution is named


def test_old_log_exports_and_the_bundle_verifies(
    legacy: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    _url, env = legacy
    out_dir = tmp_path / "bundle"
    exported = run(env, "export", "--out", str(out_dir))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    checked = run(env, "verify-export", str(out_dir))
    assert checked.returncode == 0, checked.stdout + checked.stderr
