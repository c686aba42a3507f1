"""Read-only commands never create a store: a mistyped `--store` is one line and exit 2, not a
new empty database listing "(no rows)". An empty file stays empty, a foreign SQLite file stays as
it was, and a PostgreSQL database without the schema gets no tables. Writers still create."""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import BLACKBOX, PG_URL, pg_schema

pytestmark = pytest.mark.timeout(300)


def readers(tmp_path: Path) -> list[list[str]]:
    """Every command that only reads the store, with the arguments it needs."""
    return [
        ["sessions"],
        ["show", "last"],
        ["verify"],
        ["report", "latency"],
        ["sql", "SELECT 1"],
        ["doctor", "last"],
        ["export", "--out", str(tmp_path / "bundle")],
        ["disclose", "last", "1"],
        ["replay", "last"],
        ["serve", "last"],
        ["hold", "list"],
        ["hold", "add", "last", "--reason", "case 1"],
        ["retention", "apply", "--older-than", "90d"],
    ]


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The command in this process: what each reader does to the store is the question, not how
    a process starts (the reported typo below runs the installed command)."""
    return run_blackbox(*args, env=env)


def run_installed(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BLACKBOX, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def assert_no_store(proc: subprocess.CompletedProcess[str], url: str, why: str = "") -> None:
    assert proc.returncode == 2, (proc.args, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"blackbox: no store at {url}"), lines[0]
    assert why in lines[0], lines[0]
    assert "(no rows)" not in proc.stdout


def test_the_reported_typo_creates_nothing(blackbox_env: dict[str, str]) -> None:
    url = "sqlite:////typo/x.db"
    assert not Path("/typo").exists()
    try:
        proc = run_installed(blackbox_env, "sessions", "--store", url)
        assert not Path("/typo").exists(), "a reader created the directory"
        assert_no_store(proc, url)
    finally:
        if Path("/typo").is_dir():  # the old code made it: leave the machine as it was
            shutil.rmtree("/typo")


def test_no_reader_creates_a_missing_sqlite_store(
    tmp_path: Path, blackbox_env: dict[str, str]
) -> None:
    database = tmp_path / "typo" / "x.db"
    url = f"sqlite:///{database}"
    for args in readers(tmp_path):
        proc = run(blackbox_env, *args, "--store", url)
        assert not database.parent.exists(), f"{args[0]} created {database.parent}"
        assert_no_store(proc, url)


def test_the_default_store_is_not_created_by_a_reader(
    tmp_path: Path, blackbox_env: dict[str, str]
) -> None:
    home = Path(blackbox_env["BLACKBOX_HOME"])
    proc = run(blackbox_env, "sessions")
    assert proc.returncode == 2 and "no store at sqlite:///" in proc.stderr
    assert not list(home.rglob("*.db")), "a reader created the default store"


def test_an_empty_file_is_left_empty(tmp_path: Path, blackbox_env: dict[str, str]) -> None:
    database = tmp_path / "empty.db"
    database.touch()
    url = f"sqlite:///{database}"
    for args in readers(tmp_path):
        proc = run(blackbox_env, *args, "--store", url)
        assert_no_store(proc, url, "the file is empty")
        assert database.stat().st_size == 0, f"{args[0]} wrote into the empty file"
        assert not list(tmp_path.glob("empty.db-*")), f"{args[0]} opened the file as a database"


def test_a_foreign_sqlite_file_is_not_turned_into_a_store(
    tmp_path: Path, blackbox_env: dict[str, str]
) -> None:
    database = tmp_path / "notes.db"
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")
    before = database.read_bytes()
    url = f"sqlite:///{database}"
    for args in (["sessions"], ["verify"], ["sql", "SELECT 1"]):
        proc = run(blackbox_env, *args, "--store", url)
        assert_no_store(proc, url, "no mcp-blackbox schema")
    assert database.read_bytes() == before
    with sqlite3.connect(database) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert tables == {"notes"}


def _tables(url: str) -> list[str]:
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    text(
                        "SELECT table_schema || '.' || table_name FROM information_schema.tables "
                        "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
                    )
                ).scalars()
            )
    finally:
        engine.dispose()


@pytest.fixture
def empty_pg_database() -> Iterator[str]:
    """A PostgreSQL database made for this test and nothing in it."""
    admin_url = make_url(PG_URL).set(drivername="postgresql+psycopg")
    name = f"bbempty_{os.getpid()}_{secrets.token_hex(3)}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_no_reader_creates_tables_in_an_empty_postgresql_database(
    tmp_path: Path, blackbox_env: dict[str, str], empty_pg_database: str
) -> None:
    url = empty_pg_database
    shown = make_url(url).set(drivername="postgresql+psycopg").render_as_string(hide_password=True)
    for args in readers(tmp_path):
        proc = run(blackbox_env, *args, "--store", url)
        assert_no_store(proc, shown, "no mcp-blackbox schema")
        assert _tables(url) == [], f"{args[0]} created tables"


def test_no_reader_creates_tables_in_an_empty_postgresql_schema(
    tmp_path: Path, blackbox_env: dict[str, str], pg_database: str
) -> None:
    with pg_schema(pg_database) as url:
        for args in (["sessions"], ["verify"], ["sql", "SELECT 1"], ["export", "--out", "x"]):
            proc = run(blackbox_env, *args, "--store", url)
            assert proc.returncode == 2 and "no store at" in proc.stderr, proc.stderr
        schema = url.rsplit("%3D", 1)[1]
        assert not [t for t in _tables(url) if t.startswith(f"{schema}.")]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_writers_still_create_the_store(
    backend: str, tmp_path: Path, blackbox_env: dict[str, str], request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        urls = [f"sqlite:///{tmp_path / 'a' / 'new.db'}", f"sqlite:///{tmp_path / 'b' / 'new.db'}"]
    else:
        urls = [request.getfixturevalue("pg_url")]
        urls.append(request.getfixturevalue("empty_pg_database"))
    upgraded, shipped = urls
    assert run(blackbox_env, "db", "upgrade", "--store", upgraded).returncode == 0
    assert run(blackbox_env, "ship", "--store", shipped).returncode == 0
    for url in urls:
        proc = run(blackbox_env, "sessions", "--store", url)
        assert proc.returncode == 0 and "(no rows)" in proc.stdout, proc.stderr
        assert open_store(url, create=False).list_sessions() == []
