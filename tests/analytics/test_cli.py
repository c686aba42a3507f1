"""`blackbox report`, `blackbox sql` and `blackbox doctor` as a user runs them: formats, exit
statuses, one-line errors, read-only SQL, the interactive prompt, progress on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blackbox.analytics import parquet
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli import output
from blackbox.cli.main import main
from tests.fixtures.analytics_kit import Session


@pytest.fixture
def store_with_sessions(blackbox_env: dict[str, str], tmp_path: Path) -> tuple[str, dict]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    ids = {}
    good = Session(name="time")
    good.handshake(0)
    good.list_tools(["now"], 5)
    good.call("now", 10, 4.0)
    good.end(20)
    ids["good"] = good.save(store)
    bad = Session(name="files", start_ns=good.start_ns + 10**9)
    bad.handshake(0)
    bad.call("read", 10, 2.0, outcome="tool_error")
    bad.end(20)
    ids["bad"] = bad.save(store)
    store.close()
    return url, ids


def run(*args: str, input: str | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_report_formats(store_with_sessions, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url, _ = store_with_sessions
    doc = json.loads(run("report", "errors", "--store", url, "--format", "json").output)
    assert doc["report"] == "errors" and doc["by"] == "tool"
    assert {r["tool"]: r["error_rate"] for r in doc["sections"]["summary"]} == {
        "now": 0.0,
        "read": 1.0,
    }
    table = run("report", "latency", "--store", url).stdout
    assert table.splitlines()[0] == "Latency by tool (answered calls)"
    assert "p95_ms" in table and "now" in table
    md = run("report", "sessions", "--store", url, "--format", "markdown").stdout
    assert "## Sessions by server" in md and "| server | sessions |" in md
    csv = run("report", "errors", "--by", "server", "--store", url, "--format", "csv").stdout
    assert csv.startswith("# summary\nserver,calls,failed,error_rate\n")
    page = tmp_path / "r.html"
    result = run("report", "permissions", "--store", url, "--html", str(page))
    assert result.exit_code == 0 and f"wrote {page}" in result.stderr
    text = page.read_text()
    assert text.count('<svg class="chart"') == 3
    assert "http://" not in text and "https://" not in text and "<script" not in text


def test_report_errors_are_one_line(store_with_sessions) -> None:  # type: ignore[no-untyped-def]
    url, _ = store_with_sessions
    result = run("report", "latency", "--since", "yesterday-ish", "--store", url)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "blackbox: invalid value for '--since': cannot read time 'yesterday-ish'"
    )
    assert len(result.stderr.strip().splitlines()) == 1
    result = run("report", "sessions", "--by", "tool", "--store", url)
    assert result.exit_code == 2 and "groups by server, day or session" in result.stderr
    result = run("report", "latency", "--session", "zzz", "--store", url)
    assert result.exit_code == 2 and "no session matches 'zzz'" in result.stderr


def test_sql_reads_and_refuses_writes(store_with_sessions) -> None:  # type: ignore[no-untyped-def]
    url, _ = store_with_sessions
    out = run(
        "sql",
        "SELECT server, count(*) AS n FROM calls GROUP BY 1 ORDER BY 1",
        "--store",
        url,
        "--format",
        "csv",
    ).stdout
    assert out.splitlines() == ["server,n", "files,2", "time,3"]
    for write in (
        "DROP VIEW calls",
        "CREATE TABLE x AS SELECT 1",
        "COPY (SELECT * FROM frames) TO 'leak.csv'",
        "INSERT INTO calls SELECT * FROM calls",
        "ATTACH 'other.duckdb'",
        "SELECT 1; DELETE FROM frames",
    ):
        result = run("sql", write, "--store", url)
        assert result.exit_code == 2, write
        assert result.stderr.startswith("blackbox: refused:") and "read-only" in result.stderr
    assert not Path("leak.csv").exists()
    bad = run("sql", "SELECT nope FROM calls", "--store", url)
    assert bad.exit_code == 2 and bad.stderr.startswith("blackbox: ")
    assert "nope" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_sql_prompt_reads_statements_until_eof(store_with_sessions) -> None:  # type: ignore[no-untyped-def]
    url, _ = store_with_sessions
    script = (
        "SELECT count(*) AS sessions\n  FROM sessions;\n"
        "DROP VIEW calls;\n"
        ".tables\n"
        "SELECT outcome FROM calls WHERE tool = 'read';\n"
    )
    result = run("sql", "--store", url, "--format", "csv", input=script)
    assert result.exit_code == 0
    assert result.stdout.split("\n") == [
        "sessions",
        "2",
        "view",
        "calls",
        "decisions",
        "faults",
        "frames",
        "messages",
        "sessions",
        "outcome",
        "tool_error",
        "",
    ]
    assert "refused" in result.stderr


def test_doctor_exit_status(store_with_sessions) -> None:  # type: ignore[no-untyped-def]
    url, ids = store_with_sessions
    ok = run("doctor", ids["good"][:18], "--store", url)
    assert ok.exit_code == 0 and "no findings" in ok.stdout
    bad = run("doctor", ids["bad"], "--store", url, "--format", "json")
    assert bad.exit_code == 1
    assert [f["code"] for f in json.loads(bad.stdout)["findings"]] == ["tool_error"]
    missing = run("doctor", "0000", "--store", url)
    assert missing.exit_code == 2 and missing.stderr == "blackbox: no session matches '0000'\n"


def test_long_refresh_shows_progress(store_with_sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    url, _ = store_with_sessions
    monkeypatch.setattr(parquet, "PROGRESS_EVERY", 5)
    monkeypatch.setattr(output, "QUIET_BELOW", 10)
    result = run("report", "latency", "--store", url)
    lines = [line for line in result.stderr.splitlines() if "updating the analytics copy" in line]
    assert lines and lines[-1].endswith("records")
    again = run("report", "latency", "--store", url)  # nothing new: quiet
    assert "updating" not in again.stderr


def test_default_copy_lives_in_the_data_directory(store_with_sessions) -> None:  # type: ignore[no-untyped-def]
    url, _ = store_with_sessions
    from blackbox import config

    run("report", "latency", "--store", url)
    (copy,) = list(config.analytics_dir().iterdir())
    assert (copy / "state.json").exists() and (copy / "events").is_dir()
