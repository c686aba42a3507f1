"""Real peers: the official SDK client talks to a real SDK server through `blackbox record`, in
both protocol eras and on both backends; the recorded sessions are redacted at record time
(`--redact`) or at export time, exported, verified offline and retired by retention."""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from blackbox.recorder.compliance.bundle_check import verify_export
from blackbox.recorder.compliance.retention import apply_retention
from blackbox.recorder.log.model import Kind
from blackbox.recorder.store import open_store
from click.testing import CliRunner
from mcp import Client, StdioServerParameters

from blackbox.cli.main import main
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import BLACKBOX, ROOT, backend_store_url
from tests.fixtures.polling import eventually

SERVER = ROOT / "tests" / "recorder" / "servers" / "call_log_server.py"
API_KEY = "sk-proj-Zq8Xw7Vu6Ts5Rq4Po3Nm2"
EMAIL = "carol.ops@example.net"
PASSWORD = "p4ss-w0rd-that-leaks"
RULES = 'keys = ["content"]\n'  # besides the built-ins: file contents never get stored


@dataclass
class Recorded:
    store_url: str
    redacted_sid: str  # recorded with --redact
    plain_sid: str  # recorded without
    server_log: list[dict]
    rules: Path


async def _calls(params: StdioServerParameters, mode: str) -> None:
    with anyio.fail_after(60):
        async with Client(params, mode=mode, read_timeout_seconds=30) as client:
            await client.call_tool("echo", {"message": f"use {API_KEY} and mail {EMAIL}"})
            await client.call_tool(
                "write_file", {"path": "/tmp/app.env", "content": f"password={PASSWORD}"}
            )


def _record(store_url: str, tmp: Path, name: str, mode: str, rules: Path | None) -> str:
    log = tmp / "calls.log"
    redact = ["--redact", str(rules)] if rules else []
    params = StdioServerParameters(
        command=BLACKBOX,
        args=["record", "--name", name, *redact, "--", sys.executable, str(SERVER), str(log)],
        env={"BLACKBOX_STORE": store_url, "BLACKBOX_HOME": str(tmp / "home")},
    )
    anyio.run(_calls, params, mode)
    # On a loaded machine the tap's final shipping can miss the SDK's shutdown window; what it
    # journalled then waits for `blackbox ship`, the documented way to move it (journals of a
    # tap still running are left to that tap).
    run_blackbox("ship", env={**os.environ, **params.env})
    store = open_store(store_url)
    try:  # the tap ships its journal in the background
        found = eventually(
            lambda: [s for s in store.list_sessions(name=name) if s.sealed],
            timeout=60,
            interval=0.2,
            message=f"the tap's session {name} to reach the store",
        )
    finally:
        store.close()
    return found[0].session_id


@pytest.fixture(
    scope="module",
    params=[("legacy", "sqlite"), ("2026-07-28", "postgresql")],
    ids=["legacy-sqlite", "modern-postgresql"],
)
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    mode, backend = request.param
    tmp = tmp_path_factory.mktemp(f"compliance-{backend}")
    with backend_store_url(request, backend, tmp) as store_url:
        rules = tmp / "rules.toml"
        rules.write_text(RULES)
        redacted_sid = _record(store_url, tmp, "calllog-redacted", mode, rules)
        plain_sid = _record(store_url, tmp, "calllog", mode, None)
        log = tmp / "calls.log"
        server_log = [json.loads(line) for line in log.read_text().splitlines()]
        yield Recorded(store_url, redacted_sid, plain_sid, server_log, rules)


def _stored_bytes(store_url: str, sid: str) -> bytes:
    store = open_store(store_url)
    try:
        return b"\n".join(ev.raw for ev in store.read_session(sid))
    finally:
        store.close()


def test_record_time_redaction_keeps_secrets_out_of_the_store(recorded: Recorded) -> None:
    stored = _stored_bytes(recorded.store_url, recorded.redacted_sid)
    for secret in (API_KEY, EMAIL, PASSWORD):
        assert secret.encode() not in stored
    assert b'"name":"echo"' in stored and b"[redacted:" in stored
    # The server still got the calls unchanged: redaction is of the record, not the traffic.
    assert {"tool": "echo", "arguments": {"message": f"use {API_KEY} and mail {EMAIL}"}} in (
        recorded.server_log
    )
    store = open_store(recorded.store_url)
    try:
        assert store.verify(recorded.redacted_sid) == []  # the chain is over what was stored
    finally:
        store.close()


def test_export_redacts_a_plain_recording_and_verifies(
    recorded: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLACKBOX_HOME", str(tmp_path / "home"))
    assert PASSWORD.encode() in _stored_bytes(recorded.store_url, recorded.plain_sid)
    runner = CliRunner()
    out = tmp_path / "bundle"
    result = runner.invoke(
        main,
        ["export", "--out", str(out), "--format", "jsonl", "--store", recorded.store_url],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    docs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert {d["session_id"] for d in docs} == {recorded.plain_sid, recorded.redacted_sid}
    exported = b"\n".join(base64.b64decode(d["raw"]) for d in docs)
    for secret in (API_KEY, EMAIL, PASSWORD):
        assert secret.encode() not in exported
    calls = [
        d for d in docs if d["method"] == "tools/call" and d["session_id"] == recorded.plain_sid
    ]
    assert [d["tool"] for d in calls] == ["echo", "write_file"]
    check = runner.invoke(main, ["verify-export", str(out)], catch_exceptions=False)
    assert check.exit_code == 0, check.output
    report = verify_export(out)
    assert report.records_attested >= 2 and report.records_rehashed > report.records_attested


def test_record_time_and_export_time_fingerprints_agree(recorded: Recorded, tmp_path: Path) -> None:
    """The same rules file redacts the same secret to the same marker at record time (the tap)
    and at export time, so redacted and exported sessions stay joinable."""
    out = tmp_path / "bundle"
    result = CliRunner().invoke(
        main,
        [
            "export",
            "--out",
            str(out),
            "--format",
            "jsonl",
            "--redact",
            str(recorded.rules),
            "--session",
            recorded.plain_sid,
            "--store",
            recorded.store_url,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output

    def echo_markers(raws: list[bytes]) -> list[str]:
        call = next(json.loads(r) for r in raws if b'"name":"echo"' in r and b"tools/call" in r)
        return re.findall(r"\[redacted:[0-9a-f]{16}\]", call["params"]["arguments"]["message"])

    docs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    exported = echo_markers([base64.b64decode(d["raw"]) for d in docs])
    store = open_store(recorded.store_url)
    try:
        stored = echo_markers([ev.raw for ev in store.read_session(recorded.redacted_sid)])
    finally:
        store.close()
    assert len(exported) == 2 and exported == stored


@pytest.mark.usefixtures("signing_key")
def test_retention_archives_real_sessions_in_a_bundle_that_verifies(
    recorded: Recorded, tmp_path: Path
) -> None:
    store = open_store(recorded.store_url)
    try:
        before = {sid: list(store.read_session(sid)) for sid in (recorded.plain_sid,)}
        # Judged a year from now, with the redacted session held: only the plain one goes.
        store.add_hold(recorded.redacted_sid, "under review")
        result = apply_retention(
            store,
            90 * 86_400 * 10**9,
            tmp_path / "archive",
            now_ns=time.time_ns() + 365 * 86_400 * 10**9,
        )
        removed = set(result.removed)
        assert recorded.plain_sid in removed and recorded.redacted_sid not in removed
        report = verify_export(tmp_path / "archive")
        assert report.ok and report.records_attested == 0  # archives are never redacted
        manifest = json.loads((tmp_path / "archive" / "manifest.json").read_text())
        entry = manifest["sessions"][recorded.plain_sid]
        assert entry["head"] == before[recorded.plain_sid][-1].hash.hex()
        assert store.verify() == []
        kinds = {ev.kind for ev in store.read_session(result.event_session)}
        assert Kind.RETENTION_APPLIED in kinds
    finally:
        store.close()
