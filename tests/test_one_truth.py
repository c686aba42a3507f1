"""One session, every surface, the same numbers (issue 36: one read model).

A real server (tests/fixtures/every_kind_server.py) is recorded through `blackbox record` with
every kind of traffic: the handshake, tools/list, notifications, a ping each way, tool results, an
isError result, a JSON-RPC error, stderr lines and a crash. Then `sessions`, `show`, `tail`,
`report sessions`, a replay suite's JUnit, the compliance export, the UI's JSON and the page a
browser shows, and the OTel export are read back, and each must give the same counts and outcome:
calls (requests either way, pings included), errors split into isError results, JSON-RPC errors
and transport faults, notifications, pings. `report` has no notification count; it is filled in as
expected for it.

A second session ends normally (the client closes) after an isError result and a JSON-RPC error:
its stored ending is a normal one and every surface must call it `errors`, as `sessions` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from blackbox.recorder.otel.batch import export
from blackbox.recorder.otel.sdk import Target
from blackbox.recorder.otel.watermark import Watermark
from blackbox.recorder.store import open_store
from playwright.sync_api import expect, sync_playwright
from starlette.testclient import TestClient

from blackbox.ui.app import unguarded_app
from blackbox.ui.context import Context
from blackbox.ui.server import serve_in_thread
from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import ROOT
from tests.fixtures.otlp import Receiver, attrs
from tests.fixtures.taps import INIT, INITIALIZED, call, wait_sealed

pytestmark = pytest.mark.timeout(120)

SERVER = [sys.executable, str(ROOT / "tests" / "fixtures" / "every_kind_server.py")]
TRAFFIC = [
    INIT,
    INITIALIZED,
    b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n',
    b'{"jsonrpc":"2.0","id":3,"method":"ping"}\n',
    call(4, "echo", {"message": "a"}),
    call(5, "echo", {"message": "b"}),
    call(6, "fail", {}),
    call(7, "nope", {}),
    call(8, "crash", {}),
]
# 8 requests from the client and the server's ping (never answered: the client is raw lines).
EXPECTED = {
    "calls": 9,
    "is_error": 1,
    "rpc_errors": 1,
    "faults": 1,
    "notifications": 2,
    "pings": 2,
    "outcome": "crashed",
}
KEYS = list(EXPECTED)


# The second session: no crash, the client closes after the JSON-RPC error.
ENDED_NORMALLY = {
    "calls": 8,
    "is_error": 1,
    "rpc_errors": 1,
    "faults": 0,
    "notifications": 2,
    "pings": 2,
    "outcome": "errors",
}
CHROMIUM = "/usr/bin/chromium"


def _record(tmp: Path, traffic: list[bytes], crashes: bool) -> tuple[str, str, dict[str, str]]:
    """(store URL, session id, the environment of the CLI) of one session recorded in a new
    store."""
    url = f"sqlite:///{tmp / 'store.sqlite'}"
    env = {**os.environ, "BLACKBOX_HOME": str(tmp / "home"), "BLACKBOX_STORE": url}
    tap = subprocess.Popen(
        peers.record_command(SERVER, "every-kind"),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert tap.stdin is not None
    tap.stdin.write(b"".join(traffic))
    tap.stdin.flush()
    if crashes:
        # The client keeps its end open: the server dies under it with a call outstanding.
        tap.wait(60)
        tap.stdin.close()
    else:
        tap.stdin.close()
        tap.wait(60)
    store = open_store(url)
    try:
        (info,) = wait_sealed(store)
    finally:
        store.close()
    return url, info.session_id, env


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, str]]:
    """The session with every kind of traffic, ending in a crash."""
    return _record(tmp_path_factory.mktemp("one-truth"), TRAFFIC, crashes=True)


@pytest.fixture(scope="module")
def ended_normally(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, str]]:
    """A session with error replies whose client closed it: a normal stored ending."""
    return _record(tmp_path_factory.mktemp("one-truth-ok"), TRAFFIC[:-1], crashes=False)


def _cli(env: dict[str, str], *args: str) -> str:
    done = run_blackbox(*args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _junit(env: dict[str, str], sid: str, tmp: Path) -> dict:
    """The recording's counts and outcome in a replay suite's JUnit testcase. The suite refuses
    to re-run the server's unannotated tools without --allow-writes: the session is an `error`
    testcase, replayed nowhere, and still says what the recording held."""
    path = tmp / "replay.xml"
    done = run_blackbox("replay", sid, "--junit", str(path), env=env)
    assert done.returncode == 1, done.stderr
    (case,) = ET.parse(path).getroot().iter("testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    got = {k: props.get(f"recorded.{k}") for k in KEYS}
    return {k: v if k == "outcome" or v is None else int(v) for k, v in got.items()}


def _exported(env: dict[str, str], sid: str, tmp: Path) -> dict:
    """The session's row in a compliance bundle's sessions file."""
    out = tmp / "bundle"
    _cli(env, "export", "--session", sid, "--format", "jsonl", "--out", str(out))
    (row,) = [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines()]
    return {k: row.get(k) for k in KEYS}


def _report(env: dict[str, str]) -> dict:
    report = json.loads(_cli(env, "report", "sessions", "--by", "session", "--format", "json"))
    (summary,) = report["sections"]["sessions"]
    (outcome,) = report["sections"]["outcomes"]
    (beats,) = report["sections"]["heartbeats"]
    # `report` has no notification count.
    got = {k: summary.get(k) for k in KEYS if k not in ("notifications", "pings", "outcome")}
    return {**got, "pings": beats["pings"], "outcome": outcome["outcome"]}


def _session_span(store_url: str, tmp: Path) -> tuple[dict, bool]:
    """The OTel session span's attributes and whether its status is an error."""
    store = open_store(store_url)
    try:
        with Receiver() as receiver:
            export(store, Watermark(tmp / "wm.sqlite", store_url), Target(receiver.url))
            spans = [span for _res, _scope, span in receiver.spans()]
    finally:
        store.close()
    (span,) = [s for s in spans if "mcp_blackbox.outcome" in attrs(s)]
    return attrs(span), span.status.code == 2  # STATUS_CODE_ERROR


def _from_records(records: list[dict], outcome: str) -> dict:
    """The counts as anyone would count a surface's per-record rows."""
    frames = [r for r in records if r["kind"] == "frame"]
    return {
        "calls": sum(r["msg_type"] == "request" for r in frames),
        "is_error": sum(r["msg_type"] == "response" and bool(r["is_error"]) for r in frames),
        "rpc_errors": sum(r["msg_type"] == "error" for r in frames),
        "faults": sum(r["kind"] == "fault" for r in records),
        "notifications": sum(r["msg_type"] == "notification" for r in frames),
        "pings": sum(r["msg_type"] == "request" and r["method"] == "ping" for r in frames),
        "outcome": outcome,
    }


def test_every_surface_gives_the_same_counts_and_outcome(recorded, tmp_path: Path) -> None:
    url, sid, env = recorded
    seen: dict[str, dict] = {}

    (row,) = json.loads(_cli(env, "sessions", "--format", "json"))
    seen["sessions"] = {k: row[k] for k in KEYS}
    assert row["errors"] == EXPECTED["is_error"] + EXPECTED["rpc_errors"]

    # `show` and `tail` print records: their rows, counted, must give the same numbers.
    shown = json.loads(_cli(env, "show", sid, "--format", "json"))
    show_rows = [{**r, "msg_type": r["type"], "is_error": r["error"] == "isError"} for r in shown]
    seen["show"] = _from_records(show_rows, row["outcome"])
    tailed = _cli(env, "tail", "-n", "100", "--format", "jsonl").splitlines()
    seen["tail"] = _from_records([json.loads(line) for line in tailed], row["outcome"])

    seen["report"] = {**_report(env), "notifications": EXPECTED["notifications"]}
    seen["export"] = _exported(env, sid, tmp_path)

    store = open_store(url)
    try:
        with TestClient(unguarded_app(Context(store, None, tmp_path / "analytics", "-"))) as ui:
            (listed,) = ui.get("/api/sessions").json()["sessions"]
            counted = ui.get("/api/counts", params={"ids": sid, "sealed": sid}).json()[sid]
        assert listed["id"] == sid
        assert listed["outcome"] == EXPECTED["outcome"]
        seen["ui"] = {k: counted[k] for k in KEYS}

        with Receiver() as receiver:
            export(store, Watermark(tmp_path / "wm.sqlite", url), Target(receiver.url))
            spans = [attrs(span) for _res, _scope, span in receiver.spans()]
    finally:
        store.close()
    (session_span,) = [a for a in spans if "mcp_blackbox.outcome" in a]
    seen["otel"] = {k: session_span.get(f"mcp_blackbox.{k}") for k in KEYS}
    # One span per call, whatever its direction.
    assert len([a for a in spans if "mcp.method.name" in a]) == EXPECTED["calls"]

    # Last: a suite stores nothing here (its one session is refused), but it runs the CLI.
    seen["junit"] = _junit(env, sid, tmp_path)

    assert seen == dict.fromkeys(seen, EXPECTED), json.dumps(seen, indent=1)


def test_a_session_ended_normally_with_error_replies_is_errors_on_every_surface(
    ended_normally, tmp_path: Path
) -> None:
    url, sid, env = ended_normally
    (row,) = json.loads(_cli(env, "sessions", "--format", "json"))
    assert row["ended"] in ("ok", "server_exited", None), row  # a normal stored ending
    seen: dict[str, dict] = {"sessions": {k: row[k] for k in KEYS}}
    seen["report"] = {**_report(env), "notifications": ENDED_NORMALLY["notifications"]}
    seen["export"] = _exported(env, sid, tmp_path)

    store = open_store(url)
    try:
        with TestClient(unguarded_app(Context(store, None, tmp_path / "analytics", "-"))) as ui:
            (listed,) = ui.get("/api/sessions").json()["sessions"]
            kept = ui.get("/api/sessions", params={"outcome": "errors"}).json()["sessions"]
            ended = ui.get("/api/sessions", params={"outcome": row["ended"] or "ok"}).json()
    finally:
        store.close()
    assert listed["outcome"] == "errors"
    assert [s["id"] for s in kept] == [sid]  # the filter keeps the derived outcome
    assert ended["sessions"] == []  # not the stored ending

    span, failed = _session_span(url, tmp_path)
    seen["otel"] = {k: span.get(f"mcp_blackbox.{k}") for k in KEYS}
    assert failed and span["error.type"] == "errors"  # the span fails as the session did
    seen["junit"] = _junit(env, sid, tmp_path)

    assert seen == dict.fromkeys(seen, ENDED_NORMALLY), json.dumps(seen, indent=1)


def test_the_ui_shows_the_read_models_counts_and_outcome(recorded, tmp_path: Path) -> None:
    """In a real browser: the session's row in the list and its own page show the numbers
    `blackbox sessions` gives."""
    url, sid, env = recorded
    (row,) = json.loads(_cli(env, "sessions", "--format", "json"))
    store = open_store(url)
    ui = serve_in_thread(store, None, tmp_path / "analytics")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"{ui.url.split('/?')[0]}/sessions?token={ui.token}", wait_until="load")
            tr = page.locator(f'#sessions tbody tr[data-id="{sid}"]')
            for key in ("calls", "errors", "faults", "outcome"):
                expect(tr.locator(f"td.{key}")).to_have_text(str(row[key]), timeout=15_000)

            page.goto(f"{ui.url.split('/?')[0]}/sessions/{sid}", wait_until="load")
            counts = page.locator("#session-counts")
            for key in (*KEYS, "errors"):
                shown = counts.locator(f'[data-count="{key}"] b')
                expect(shown).to_have_text(str(row[key]), timeout=15_000)
            browser.close()
    finally:
        ui.stop()
        store.close()
