"""Fixtures shared by the whole suite; the helpers tests import live in tests/fixtures/.

PostgreSQL is not optional: the suite fails, never skips, when it cannot reach the server named by
BLACKBOX_TEST_PG_URL (default: the local server, trust auth, database `test`). Each test gets its
own schema inside one database made for this run, dropped at the end.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from blackbox.recorder.trust import keys
from blackbox.recorder.trust.checkpoint import Signer
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.fixtures.environment import PG_URL, pg_schema
from tests.fixtures.store_templates import sqlite_copy, sqlite_template

pytest_plugins = ["pytester"]  # tests/replay/test_pytest_plugin.py runs pytest in a project


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A PostgreSQL database made for this test run; its URL."""
    admin_url = make_url(PG_URL).set(drivername="postgresql+psycopg")
    name = f"bbtest_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # the PostgreSQL tests must run: fail loudly, never skip
        pytest.fail(f"PostgreSQL at {PG_URL} is required for the test suite: {exc}")
    yield admin_url.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    """A store URL on PostgreSQL with a schema of its own for this test."""
    with pg_schema(pg_database) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """A fresh store URL on each backend in turn (`sqlite_url` or `pg_url`, so a module that
    overrides `sqlite_url` changes both)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture(scope="module")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new SQLite store, its schema laid down once for the module."""
    path = tmp_path_factory.mktemp("migrated") / "store.db"
    sqlite_template(path)
    return path


@pytest.fixture
def migrated_sqlite_url(migrated_sqlite: Path, tmp_path: Path) -> str:
    """A new SQLite store of this test's own, copied from the module's migrated one: a module
    whose tests each want a fresh store overrides `sqlite_url` with this."""
    return sqlite_copy(migrated_sqlite, tmp_path / "store.db")


@pytest.fixture
def blackbox_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment whose data directory (default store, journals) is this test's own."""
    home = tmp_path / "bbhome"
    monkeypatch.setenv("BLACKBOX_HOME", str(home))
    monkeypatch.delenv("BLACKBOX_STORE", raising=False)
    env = dict(os.environ)
    env["BLACKBOX_HOME"] = str(home)
    return env


@pytest.fixture
def signing_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Signer:
    """The log's signing key, configured through BLACKBOX_KEY_FILE (for this process and the
    commands it starts): checkpoints and retention's signed removals use it."""
    signer = keys.init_key(tmp_path / "keys" / "log.key", "example.com/test-log")
    monkeypatch.setenv(keys.KEY_ENV, str(tmp_path / "keys" / "log.key"))
    return signer
