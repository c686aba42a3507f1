"""The store commands as a user meets them: listings, formats, session references, and the errors
(one line on stderr, exit status 2, no traceback)."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store

from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import BLACKBOX, PG_URL
from tests.fixtures.storekit import T0, session_events


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command in this process (what it prints and exits with is the question here; the
    installed command is run by the stdio tap's tests)."""
    return run_blackbox(*args, env=env)


def assert_one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("blackbox: ") and needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.fixture
def filled(store_url):
    store = open_store(store_url)
    a = session_events(session_id="0a000000-0000-7000-8000-00000000000a", start_ns=T0, name="a")
    b = session_events(session_id="0b000000-0000-7000-8000-00000000000b", start_ns=T0 + 10**9)
    store.append(a + b)
    store.close()
    return store_url, a, b


def test_sessions_in_every_format(filled):
    url, a, b = filled
    table = run("sessions", "--store", url)
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        *["handle", "name", "server", "started", "duration_s"],
        *["calls", "errors", "faults", "outcome"],
    ]
    rows = json.loads(run("sessions", "--store", url, "--format", "json").stdout)
    assert lines[2].startswith(rows[0]["handle"]) and lines[3].startswith(rows[1]["handle"])
    assert [r["handle"] for r in rows] == ["00000b", "00000a"]
    assert [r["id"] for r in rows] == [b[0].session_id, a[0].session_id]
    assert rows[0]["frames"] == 8 and rows[0]["outcome"] == "client_closed"
    jsonl = run("sessions", "--store", url, "--format", "jsonl").stdout.splitlines()
    assert json.loads(jsonl[1])["name"] == "a"
    parsed = list(
        csv.DictReader(io.StringIO(run("sessions", "--store", url, "--format", "csv").stdout))
    )
    assert parsed[1]["server"] == "python -m server"


def test_show_by_prefix_and_last(filled):
    url, a, b = filled
    shown = json.loads(run("show", "0a", "--store", url, "--format", "json").stdout)
    assert [r["seq"] for r in shown] == list(range(1, len(a) + 2))
    assert shown[1]["method"] == "initialize" and shown[1]["direction"] == "c2s"
    assert shown[3]["id"] == "1" and "tools/call" in shown[3]["payload"]
    # The answer names its request, carries its tool, and took the recorded time.
    assert shown[4]["re"] == shown[3]["seq"] and shown[4]["tool"] == "get_current_time"
    assert shown[4]["latency_ms"] is not None and shown[4]["error"] is None
    last = run("show", "last", "--store", url, "--format", "jsonl").stdout.splitlines()
    assert len(last) == len(b) + 1


def test_ambiguous_and_unknown_prefixes_are_one_line_errors(filled):
    url, _, _ = filled
    assert_one_line_error(run("show", "0", "--store", url), "matches several sessions")
    assert_one_line_error(run("show", "ff", "--store", url), "no session matches 'ff'")


def test_malformed_and_unsupported_store_urls(tmp_path):
    assert_one_line_error(run("sessions", "--store", "::not a url::"), "malformed store URL")
    assert_one_line_error(run("sessions", "--store", "mysql://x@h/db"), "unsupported store")


def test_store_from_environment(filled, blackbox_env):
    url, _a, _ = filled
    env = dict(blackbox_env, BLACKBOX_STORE=url)
    listed = json.loads(run("sessions", "--format", "json", env=env).stdout)
    assert len(listed) == 2


def test_default_store_lives_in_the_data_directory(blackbox_env):
    proc = run("db", "upgrade", env=blackbox_env)  # a writer creates it; readers never do
    assert proc.returncode == 0, proc.stderr
    proc = run("sessions", env=blackbox_env)
    assert proc.returncode == 0 and "(no rows)" in proc.stdout
    assert (Path(blackbox_env["BLACKBOX_HOME"]) / "blackbox.db").exists()
    db = sqlite3.connect(Path(blackbox_env["BLACKBOX_HOME"]) / "blackbox.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # Records are ~1 KiB: a new store takes 16 KiB pages (inserts cost 1.6-1.9x with 4 KiB).
    assert db.execute("PRAGMA page_size").fetchone()[0] == 16384


def test_postgresql_unreachable():
    proc = run("sessions", "--store", "postgresql://postgres@127.0.0.1:1/test")
    assert_one_line_error(proc, "unreachable")


def test_a_postgresql_database_that_does_not_exist_is_not_called_unreachable():
    """The server answers and says the database is missing: it was reported as unreachable."""
    url = PG_URL.rsplit("/", 1)[0] + "/bb_no_such_database"
    proc = run("sessions", "--store", url)
    assert_one_line_error(proc, "database 'bb_no_such_database' does not exist there")
    assert "unreachable" not in proc.stderr and "createdb bb_no_such_database" in proc.stderr


def test_sqlite_locked(tmp_path):
    path = tmp_path / "locked.db"
    open_store(f"sqlite:///{path}").close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        proc = run("db", "upgrade", "--store", f"sqlite:///{path}?timeout=0.2")
        # upgrade only reads the revision when current; a write must wait for the lock
        assert proc.returncode == 0
        from blackbox.recorder.errors import StoreLocked

        store = open_store(f"sqlite:///{path}?timeout=0.2")
        with pytest.raises(StoreLocked, match="locked by another process"):
            store.append(session_events())
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_sqlite_read_only(tmp_path):
    path = tmp_path / "ro.db"
    store = open_store(f"sqlite:///{path}")
    store.append(session_events())
    store.close()
    # root ignores file modes, so make the file immutable instead
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        listed = run("sessions", "--store", f"sqlite:///{path}", "--format", "json")
        assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 1
        from blackbox.recorder.errors import StoreReadOnly

        with pytest.raises(StoreReadOnly, match="read-only"):
            open_store(f"sqlite:///{path}").append(session_events(start_ns=T0 + 5))
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_disk_full(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)], check=True)
    try:
        from blackbox.recorder.errors import StoreFull

        store = open_store(f"sqlite:///{mount / 'full.db'}")
        with pytest.raises(StoreFull, match="disk is full"):
            for i in range(200):
                store.append(session_events(calls=50, start_ns=T0 + i))
        store.close()
        proc = run("sessions", "--store", f"sqlite:///{mount / 'full.db'}")
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_schema_too_new_is_one_line(tmp_path):
    path = tmp_path / "new.db"
    open_store(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'zzzz'")
    assert_one_line_error(run("sessions", "--store", f"sqlite:///{path}"), "newer than")


def test_help_teaches_with_examples():
    for command in ("sessions", "show", "verify"):
        proc = run(command, "--help")
        assert proc.returncode == 0 and "Example:" in proc.stdout
    assert os.path.exists(BLACKBOX)
