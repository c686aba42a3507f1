"""One redaction for every way out (issue 35, point 3): a session recorded without `--redact`
holds a secret in its store; `show`, `tail`, the web UI's JSON and a replay suite's JUnit file
redact it as `export` does (the built-in rules, keyed per store, by default), and so does a
replay's report; `--no-redact` shows what is stored, which proves the redaction is what hid it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx2
import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures import peers
from tests.fixtures.environment import BLACKBOX
from tests.fixtures.replay_kit import SERVERS, record_session

pytestmark = pytest.mark.timeout(120)

SECRET = "sk-proj-Ways7Out9Secret2Value4Leak8Here"
MESSAGE = f"use {SECRET} for the call"
CHANGED = f"{peers.PYTHON} {SERVERS / 'variant.py'} louder"  # echoes louder: the replay diverges


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    """(store URL, session id, home): one echo of the secret, recorded with no --redact."""
    home = tmp_path_factory.mktemp("ways-out")
    url = f"sqlite:///{home / 'store.db'}"
    store = open_store(url)
    try:
        sid = record_session(
            store, url, home, peers.EXAMPLE_SERVER, [("echo", {"message": MESSAGE})], "legacy", "s"
        )
        assert any(SECRET.encode() in ev.raw for ev in store.read_session(sid))  # stored in clear
    finally:
        store.close()
    return url, sid, home


def cli(home: Path, *args: str) -> tuple[int, bytes]:
    result = CliRunner(env={"BLACKBOX_HOME": str(home)}).invoke(main, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout_bytes


def test_show_redacts_what_export_would(recorded: tuple[str, str, Path]) -> None:
    url, sid, home = recorded
    for args in (("--format", "json"), ("--full",), ()):
        code, out = cli(home, "show", sid, "--store", url, "--no-pager", *args)
        assert code == 0
        assert SECRET.encode() not in out and b"[redacted:" in out, args
    code, out = cli(home, "show", sid, "--store", url, "--format", "json", "--no-redact")
    assert code == 0 and SECRET.encode() in out


def test_tail_redacts_what_export_would(recorded: tuple[str, str, Path]) -> None:
    url, sid, home = recorded
    for args in (("--format", "jsonl"), ()):  # jsonl: each record's whole text
        code, out = cli(home, "tail", sid, "--store", url, "-n", "100", *args)
        assert code == 0
        assert SECRET.encode() not in out, args
    code, out = cli(home, "tail", sid, "--store", url, "-n", "100", "--format", "jsonl")
    assert b"[redacted:" in out
    code, out = cli(home, "tail", sid, "--store", url, "--format", "jsonl", "--no-redact")
    assert code == 0 and SECRET.encode() in out


def test_the_ui_json_redacts_what_export_would(recorded: tuple[str, str, Path]) -> None:
    url, sid, home = recorded
    ui = subprocess.Popen(
        [BLACKBOX, "ui", "--listen", "127.0.0.1:0", "--no-open", "--store", url],
        stdout=subprocess.PIPE,
        env={**os.environ, "BLACKBOX_HOME": str(home)},
    )
    try:
        assert ui.stdout is not None
        base, _, token = ui.stdout.readline().decode().strip().partition("/?token=")
        with httpx2.Client(base_url=base, params={"token": token}, timeout=30) as client:
            page = client.get(f"/api/sessions/{sid}/records")
            assert page.status_code == 200
            seqs = [r["seq"] for r in page.json()["records"] if r["kind"] == "frame"]
            details = [client.get(f"/api/sessions/{sid}/records/{seq}") for seq in seqs]
        served = page.content + b"".join(d.content for d in details)
        assert all(d.status_code == 200 for d in details)
        assert SECRET.encode() not in served and b"[redacted:" in served
    finally:
        ui.terminate()
        ui.wait(timeout=10)


def test_a_suite_s_junit_redacts_what_export_would(
    recorded: tuple[str, str, Path], tmp_path: Path
) -> None:
    url, sid, home = recorded
    junit = tmp_path / "replay.xml"
    args = ("replay", sid, "--against", CHANGED, "--junit", str(junit), "--store", url)
    code, out = cli(home, *args, "--jobs", "1")
    assert code == 1  # diverged: the failure's message quotes the replayed answer
    xml = junit.read_bytes()
    assert b"<failure" in xml and b"[redacted:" in xml
    assert SECRET.encode() not in xml and SECRET.encode() not in out


def test_a_replay_report_redacts_what_export_would(recorded: tuple[str, str, Path]) -> None:
    url, sid, home = recorded
    code, out = cli(home, "replay", sid, "--against", CHANGED, "--store", url, "--no-pager")
    assert code == 1 and b"diverged" in out  # the report quotes both answers
    assert SECRET.encode() not in out and b"[redacted:" in out
