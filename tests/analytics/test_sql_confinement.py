"""`blackbox sql` reads the analytics and nothing else, and a query can be stopped and streamed.

Each attack runs through the real `blackbox sql` in a subprocess, on a real analytics copy refreshed
from a real store: reading other files, writing files, reaching the network, loading extensions,
turning the guards back off; then a time limit, Ctrl-C, and a result too large to hold.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest
from blackbox.analytics.parquet import copy_dir
from blackbox.analytics.reports import refreshed_connection
from blackbox.analytics.views import COLUMNS
from blackbox.recorder.store import open_store

from blackbox import config
from tests.fixtures.analytics_kit import Session
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import BLACKBOX

# Runs for hours: 10^12 products.
ENDLESS = "SELECT sum(a.range * b.range % 7) AS s FROM range(1000000) a, range(1000000) b"
# Its first 5000 rows come at once, the next one after ~10^9 more: a result that never ends.
ENDLESS_ROWS = (
    "SELECT range AS n FROM range(100000000000) WHERE range < 5000 OR range = 99999999999"
)


@pytest.fixture
def setup(blackbox_env: dict[str, str], tmp_path: Path) -> dict:
    """A store with two sessions (a call, a tool error, a fault, a decision) and the environment
    of a `blackbox sql` run: its own data directory and its own HOME, where DuckDB would put the
    extensions it downloads."""
    return _made(blackbox_env, tmp_path)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`setup` made once for the attacks, which are all refused before they read or write: one
    store and one analytics copy for all of them. Each attack still checks that nothing was
    written and no extension directory made."""
    tmp = tmp_path_factory.mktemp("attacks")
    env = {**os.environ, "BLACKBOX_HOME": str(tmp / "bbhome")}
    env.pop("BLACKBOX_STORE", None)
    return _made(env, tmp)


def _made(blackbox_env: dict[str, str], tmp_path: Path) -> dict:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    good = Session(name="time")
    good.handshake(0)
    good.list_tools(["now"], 5)
    good.decision(8, tool="now", decision="allow")
    good.call("now", 10, 4.0)
    good.end(20)
    good.save(store)
    bad = Session(name="files", start_ns=good.start_ns + 10**9)
    bad.handshake(0)
    bad.call("read", 10, 2.0, outcome="tool_error")
    bad.fault("broken_pipe", 15)
    bad.end(20)
    bad.save(store)
    store.close()
    home = tmp_path / "home"
    home.mkdir()
    env = {**blackbox_env, "HOME": str(home), "NO_COLOR": "1"}
    return {"url": url, "env": env, "home": home, "tmp": tmp_path}


def sql(setup: dict, *args: str, input: str | None = None, timeout: float = 60):  # type: ignore[no-untyped-def]
    return subprocess.run(
        [BLACKBOX, "sql", *args, "--store", setup["url"]],
        capture_output=True,
        text=True,
        env=setup["env"],
        input=input,
        timeout=timeout,
    )


def _ctrl_c_reaches_it() -> None:
    # A suite started in the background by a shell without job control runs with SIGINT ignored,
    # which every child inherits and Python then keeps (it installs its Ctrl-C handler only over
    # the default): as if typed at a terminal, the signal must reach the command.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popen(setup: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [BLACKBOX, "sql", *args, "--store", setup["url"]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=setup["env"],
        preexec_fn=_ctrl_c_reaches_it,
    )


def read_line(proc: subprocess.Popen, within_s: float) -> bytes:
    """The next line of `proc`'s stdout, or b'' if none comes within `within_s`."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], within_s)
    return proc.stdout.readline() if ready else b""


def copy_root(setup: dict) -> Path:
    return copy_dir(config.analytics_dir(), setup["url"])


ATTACKS = [
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM read_text('file:///etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
    "FROM read_text('/etc/passwd')",
    "SELECT (SELECT count(*) FROM read_text('/etc/passwd')) AS n FROM calls",
    "EXPLAIN ANALYZE SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_text('{copy}/../../../../../../../../etc/passwd')",
    "SELECT * FROM glob('{copy}/../*')",
    # writing a file: COPY and ATTACH were refused as statements already; EXPLAIN ANALYZE ran them
    "COPY (SELECT 1) TO '{tmp}/x.csv'",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{tmp}/x.csv'",
    "EXPLAIN (FORMAT json) COPY (SELECT 1) TO '{tmp}/x.csv'",
    "ATTACH '{tmp}/other.duckdb'",
    # the network and extensions
    "INSTALL httpfs",
    "LOAD httpfs",
    "EXPLAIN ANALYZE INSTALL httpfs",
    "EXPLAIN ANALYZE LOAD httpfs",
    "SELECT * FROM read_parquet('https://example.invalid/x.parquet')",
    "SELECT * FROM read_csv('http://example.invalid/x.csv')",
    # turning the guards back off, then reading
    "SET enable_external_access = true; SELECT * FROM read_text('/etc/passwd')",
    "EXPLAIN ANALYZE SET enable_external_access = true; SELECT * FROM read_text('/etc/passwd')",
    "EXPLAIN ANALYZE SET allowed_directories = ['/etc/']; SELECT * FROM read_text('/etc/passwd')",
    "EXPLAIN ANALYZE RESET allowed_directories",
    "SET lock_configuration = false",
    "PRAGMA enable_profiling",
    "EXPLAIN ANALYZE PRAGMA enable_profiling",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_sql_reads_nothing_but_the_analytics(shared: dict, attack: str) -> None:
    setup = shared
    copy = copy_dir(Path(setup["env"]["BLACKBOX_HOME"]) / "analytics", setup["url"])
    query = attack.format(copy=copy, tmp=setup["tmp"])
    started = time.monotonic()
    # In this process: the guard is the question, not how `blackbox sql` starts (the tests
    # below run the installed command).
    result = run_blackbox("sql", query, "--store", setup["url"], env=setup["env"])
    assert result.returncode == 2, (query, result.stdout, result.stderr)
    assert result.stderr.startswith("blackbox: refused:"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "root:" not in result.stdout and result.stdout == ""
    assert not (setup["tmp"] / "x.csv").exists() and not (setup["tmp"] / "other.duckdb").exists()
    # Refused before any download: DuckDB made no extension directory and did not wait on a socket.
    assert not (setup["home"] / ".duckdb").exists()
    assert time.monotonic() - started < 30


def test_the_connection_itself_is_locked(setup: dict) -> None:
    """Past the statement filter, on the connection the reports and `blackbox sql` share: the
    settings cannot be changed back and nothing outside the copy can be read."""
    store = open_store(setup["url"])
    con, _ = refreshed_connection(store, config.analytics_dir())
    try:
        for statement in (
            "SET enable_external_access = true",
            "SET allowed_directories = ['/']",
            "SET autoinstall_known_extensions = true",
            "SET autoload_known_extensions = true",
            "SET lock_configuration = false",
            "RESET lock_configuration",
            "RESET enable_external_access",
            "PRAGMA enable_profiling",
        ):
            with pytest.raises(duckdb.Error, match="configuration has been locked"):
                con.execute(statement)
        for statement in (
            "SELECT * FROM read_text('/etc/passwd')",
            "COPY (SELECT 1) TO '/dev/null'",
            f"COPY (SELECT 1) TO '{copy_root(setup)}/planted.csv'",
            "LOAD httpfs",
        ):
            with pytest.raises(duckdb.Error):
                con.execute(statement)
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (2,)
    finally:
        con.close()
        store.close()


def test_every_documented_view_still_reads(setup: dict) -> None:
    script = "".join(f"SELECT * FROM {view} LIMIT 1;\n" for view in COLUMNS)
    result = run_blackbox(
        "sql", "--format", "jsonl", "--store", setup["url"], env=setup["env"], input=script
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines() if line]
    assert [list(row) for row in rows] == list(COLUMNS.values())
    counts = run_blackbox(
        "sql",
        "SELECT (SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM calls "
        "WHERE outcome = 'tool_error') AS failed, (SELECT count(*) FROM faults) AS faults, "
        "(SELECT count(*) FROM decisions) AS decisions",
        "--format",
        "json",
        "--store",
        setup["url"],
        env=setup["env"],
    )
    assert counts.returncode == 0, counts.stderr
    assert json.loads(counts.stdout) == [{"sessions": 2, "failed": 1, "faults": 1, "decisions": 1}]


def test_timeout_stops_a_long_query(setup: dict) -> None:
    started = time.monotonic()
    result = sql(setup, ENDLESS, "--timeout", "1s", timeout=60)
    took = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "blackbox: query stopped: it ran longer than its time limit of 1s\n"
    ), result.stderr
    assert took < 15, took
    bad = run_blackbox(
        "sql", "SELECT 1", "--timeout", "0", "--store", setup["url"], env=setup["env"]
    )
    assert bad.returncode == 2 and "not a positive duration" in bad.stderr


def test_ctrl_c_stops_a_running_query(setup: dict) -> None:
    proc = popen(setup, ENDLESS_ROWS, "--format", "csv")
    try:
        assert read_line(proc, 60) == b"n\n"  # the query is running
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=15)
        assert time.monotonic() - sent < 5
        assert proc.returncode == 130
        assert err == b"blackbox: query cancelled (Ctrl-C)\n"
    finally:
        proc.kill()
        proc.wait()


def test_ctrl_c_at_the_prompt_stops_the_query_not_the_prompt(setup: dict) -> None:
    proc = popen(setup, "--format", "csv")
    assert proc.stdin is not None
    try:
        proc.stdin.write(f"{ENDLESS_ROWS};\n".encode())
        proc.stdin.flush()
        assert read_line(proc, 60) == b"n\n"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(b"SELECT 42 AS answer;\n", timeout=15)
        assert proc.returncode == 0
        assert out.endswith(b"answer\n42\n")
        assert b"blackbox: query cancelled (Ctrl-C)\n" in err
    finally:
        proc.kill()
        proc.wait()


def test_rows_stream_as_they_are_produced(setup: dict) -> None:
    """The first rows of a result that never ends reach the output while the query runs."""
    proc = popen(setup, ENDLESS_ROWS, "--format", "jsonl")
    try:
        assert read_line(proc, 60) == b'{"n": 0}\n'
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def peak_rss_mb(setup: dict, query: str) -> tuple[int, int]:
    """(lines printed, peak resident memory of the `blackbox sql` process in MB)."""
    proc = popen(setup, query, "--format", "csv")
    assert proc.stdout is not None and proc.stdin is not None
    proc.stdin.close()
    lines = sum(chunk.count(b"\n") for chunk in iter(lambda: proc.stdout.read(1 << 16), b""))
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    return lines, usage.ru_maxrss // 1024


def test_a_large_result_prints_in_bounded_memory(setup: dict) -> None:
    """3 million rows held whole took 1 GB (2.4 GB for wider rows); streamed, the process stays
    within a small margin of what printing one row costs."""
    _, small = peak_rss_mb(setup, "SELECT 1 AS n")
    lines, large = peak_rss_mb(setup, "SELECT * FROM range(3000000)")
    assert lines == 3_000_001
    assert large - small < 200, (small, large)
