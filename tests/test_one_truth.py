"""One session, every surface, the same numbers (issue 36: one read model).

A real server (tests/fixtures/every_kind_server.py) is recorded through `blackbox record` with
every kind of traffic: the handshake, tools/list, notifications, a ping each way, tool results, an
isError result, a JSON-RPC error, stderr lines and a crash. Then `sessions`, `show`, `tail`,
`report sessions`, the UI's JSON and the OTel export are read back, and each must give the same
counts and outcome: calls (requests either way, pings included), errors split into isError
results, JSON-RPC errors and transport faults, notifications, pings. `report` shows calls, pings
and the outcome only; the others are filled in as expected for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from blackbox.recorder.otel.batch import export
from blackbox.recorder.otel.sdk import Target
from blackbox.recorder.otel.watermark import Watermark
from blackbox.recorder.store import open_store
from starlette.testclient import TestClient

from blackbox.ui.app import unguarded_app
from blackbox.ui.context import Context
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


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, str]]:
    """(store URL, session id, the environment of the CLI) of the one recorded session."""
    tmp = tmp_path_factory.mktemp("one-truth")
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
    tap.stdin.write(b"".join(TRAFFIC))
    tap.stdin.flush()
    # The client keeps its end open: the server dies under it with a call outstanding.
    tap.wait(60)
    tap.stdin.close()
    store = open_store(url)
    try:
        (info,) = wait_sealed(store)
    finally:
        store.close()
    return url, info.session_id, env


def _cli(env: dict[str, str], *args: str) -> str:
    done = run_blackbox(*args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


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

    report = json.loads(_cli(env, "report", "sessions", "--by", "session", "--format", "json"))
    (summary,) = report["sections"]["sessions"]
    (outcome,) = report["sections"]["outcomes"]
    (beats,) = report["sections"]["heartbeats"]
    seen["report"] = {**EXPECTED, "calls": summary["calls"], "pings": beats["pings"]}
    seen["report"]["outcome"] = outcome["outcome"]

    store = open_store(url)
    try:
        with TestClient(unguarded_app(Context(store, None, tmp_path / "analytics", "-"))) as ui:
            (listed,) = ui.get("/api/sessions").json()["sessions"]
            counted = ui.get("/api/counts", params={"ids": sid, "sealed": sid}).json()[sid]
        assert listed["id"] == sid
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

    assert seen == dict.fromkeys(seen, EXPECTED), json.dumps(seen, indent=1)
