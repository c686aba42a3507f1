"""Replay suites end to end: real SDK sessions recorded through `blackbox record`, replayed many
at once by the CLI against the example server changed in one way (one session diverges: exit 1,
JUnit with the failure on that session's test case), and sessions of mcp-server-time and
server-everything replayed against themselves (exit 0), selected by a saved suite."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import junitparser
import pytest
from blackbox.recorder.query import session_handle
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures import peers
from tests.fixtures.replay_kit import SERVERS, record_session

CHANGED = f"{peers.PYTHON} {SERVERS / 'variant.py'} louder"


def handle(url: str, session_id: str) -> str:
    """The session's handle, as `blackbox sessions` prints it."""
    store = open_store(url)
    try:
        return session_handle(store, session_id)
    finally:
        store.close()


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def example_sessions(sqlite_url: str, tmp_path: Path) -> tuple[str, str, str]:
    """Two example-server sessions: `echo-*` (diverges against the changed build) and
    `fail-only` (the same against it), recorded in both eras."""
    store = open_store(sqlite_url)
    server = peers.EXAMPLE_SERVER
    echo = record_session(
        store, sqlite_url, tmp_path, server, [("echo", {"message": "hi"})], "legacy", "echo-a"
    )
    fail = record_session(
        store, sqlite_url, tmp_path, server, [("fail", {"reason": "no"})], "modern", "fail-only"
    )
    echo2 = record_session(
        store, sqlite_url, tmp_path, server, [("echo", {"message": "x"})], "modern", "echo-b"
    )
    store.close()
    return echo, fail, echo2


def test_a_suite_with_one_diverging_session_exits_1_with_junit_on_that_case(
    sqlite_url: str, tmp_path: Path, example_sessions: tuple[str, str, str]
) -> None:
    echo, fail, _echo2 = example_sessions
    h_echo, h_fail = handle(sqlite_url, echo), handle(sqlite_url, fail)
    junit = tmp_path / "replay.xml"
    code, out, err = cli(
        "replay", echo, fail, "--against", CHANGED, "--jobs", "2", "--junit", str(junit),
        "--store", sqlite_url,
    )  # fmt: skip
    assert code == 1, out + err
    lines = out.splitlines()
    assert len(lines) == 3  # one line per session, then the summary
    assert lines[0].startswith(f"FAIL {h_echo}") and "echo" in lines[0]
    assert "$.result.content[0].text" in lines[0]
    assert lines[1].startswith(f"ok   {h_fail}")
    assert lines[2].startswith("2 session(s): 1 diverged, 1 equivalent")
    assert "[2/2]" in err

    tree = ET.parse(junit)  # a JUnit reader: the standard library's parser
    (suite,) = tree.getroot().iter("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == {f"echo-a [{h_echo}]", f"fail-only [{h_fail}]"}
    failure = cases[f"echo-a [{h_echo}]"].find("failure")
    assert failure is not None and cases[f"fail-only [{h_fail}]"].find("failure") is None
    message = failure.get("message") or ""
    assert message.startswith("step ") and "tools/call echo: diverged" in message
    assert 'replayed "hi!"' in message  # the replayed value
    assert "verdict: diverged" in (failure.text or "")  # the whole explanation

    # and as a CI's JUnit reader sees it
    report = junitparser.JUnitXml.fromfile(str(junit))
    results = {case.name: case.result for ts in report for case in ts}
    assert results[f"fail-only [{h_fail}]"] == []
    (bad,) = results[f"echo-a [{h_echo}]"]
    assert isinstance(bad, junitparser.Failure) and bad.message == message

    code, out, _ = cli(
        "replay", "--name", "echo-*", "--against", CHANGED, "--format", "github",
        "--store", sqlite_url,
    )  # fmt: skip
    assert code == 1
    errors = [line for line in out.splitlines() if line.startswith("::error title=replay")]
    assert len(errors) == 2  # echo-a and echo-b, not fail-only
    assert all("%0A" in line and "\n" not in line for line in errors)

    code, out, _ = cli("replay", "--name", "fail-*", "--format", "json", "--store", sqlite_url)
    doc = json.loads(out)
    assert code == 0 and doc["counts"] == {"equivalent": 1}
    assert doc["results"][0]["session"] == fail


def test_usage_errors_exit_2(sqlite_url: str) -> None:
    open_store(sqlite_url).close()
    code, _, err = cli("replay", "--jobs", "2", "--store", sqlite_url)
    assert code == 2 and "name sessions" in err
    code, _, err = cli("replay", "--suite", "nope", "--store", sqlite_url)
    assert code == 2 and "no suite named 'nope'" in err
    code, _, err = cli("replay", "--name", "none-*", "--store", sqlite_url)
    assert code == 2 and "no session selected" in err


def test_saved_suite_of_third_party_servers_replays_equivalent(
    sqlite_url: str, tmp_path: Path
) -> None:
    store = open_store(sqlite_url)
    convert = (
        "convert_time",
        {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
    )
    time_sid = record_session(
        store, sqlite_url, tmp_path, peers.TIME_SERVER, [convert], "modern", "time"
    )
    everything = record_session(
        store,
        sqlite_url,
        tmp_path,
        peers.EVERYTHING_SERVER,
        [("echo", {"message": "suite"})],
        "legacy",
        "everything",
    )
    store.close()
    code, out, _ = cli("suite", "add", "peers", time_sid[:13], everything, "--store", sqlite_url)
    assert code == 0 and "2 session(s)" in out
    code, out, _ = cli("suite", "show", "peers", "--store", sqlite_url)
    assert out.split() == [time_sid, everything]
    code, out, _ = cli("suite", "list", "--store", sqlite_url)
    assert out.startswith("peers\t2 session(s)")
    junit = tmp_path / "peers.xml"
    code, out, err = cli("replay", "--suite", "peers", "--junit", str(junit), "--store", sqlite_url)
    assert code == 0, out + err
    root = ET.parse(junit).getroot()
    assert [c.get("name") for c in root.iter("testcase")] == [
        f"time [{handle(sqlite_url, time_sid)}]",
        f"everything [{handle(sqlite_url, everything)}]",
    ]
    assert root.find("testsuite").get("failures") == "0"  # type: ignore[union-attr]
    # a suite's own record session is not a recorded session to replay
    code, _, err = cli("replay", "--name", "suite:*", "--store", sqlite_url)
    assert code == 2 and "no session selected" in err


def test_saved_suites_on_both_backends(store_url: str) -> None:
    from blackbox.replay.suite import list_suites, load_suite, save_suite, select_sessions

    from tests.fixtures.replay_kit import c2s, s2c, store_session

    store = open_store(store_url)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}
    a = store_session(store, [c2s(call), s2c(answer, 1)], name="a")
    b = store_session(store, [c2s(call), s2c(answer, 1)], name="b")
    save_suite(store, "nightly", [b, a, b])
    assert load_suite(store, "nightly") == [b, a]
    save_suite(store, "nightly", [a])  # saving again replaces
    assert load_suite(store, "nightly") == [a]
    assert list_suites(store)[0][:2] == ("nightly", 1)
    chosen = select_sessions(store, [b], suite="nightly")
    assert [s.session_id for s in chosen] == [b, a]
    assert [s.session_id for s in select_sessions(store, name_glob="*")] == [a, b]
    store.close()
