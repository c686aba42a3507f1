"""A bundle never vouches for what the store cannot: `export` runs verify's checks first and
refuses a session that fails them; with --include-broken the manifest marks it and
`verify-export` fails on it. Each test is the attacker's move, on SQLite and PostgreSQL.

Before, a session whose tail and seal were cut, whose `sessions` row was edited or whose derived
columns were rewritten exported as `chain_intact_at_export: true` and passed `verify-export`:
the exported records are consistent with each other, and only the store knew better.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blackbox.recorder.compliance.bundle_check import verify_export
from blackbox.recorder.compliance.export import ExportError, Selection, export_bundle
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.storekit import OF_SID, T0, session_events, tamper

# Each attack: (what a writer runs, the problem verify names). The projection edit needs no
# privilege (the sessions table has no trigger); the others drop the triggers first.
ATTACKS = {
    "tail and seal cut": (
        f"DELETE FROM events WHERE {OF_SID} AND seq >= 8",
        "truncated",
    ),
    "projection edited": (
        "UPDATE sessions SET name = 'innocent', outcome = 'ok' WHERE session_id = :sid",
        "projection",
    ),
    "derived column edited": (
        f"UPDATE events SET tool = 'read_file' WHERE {OF_SID} AND seq = 4",
        "derived",
    ),
}


@pytest.fixture(params=list(ATTACKS))
def attacked(request, store_url):
    store = open_store(store_url)
    victim = session_events(calls=4)
    bystander = session_events(calls=1, start_ns=T0 + 10**9, name="other")
    store.append(victim)
    store.append(bystander)
    sid = victim[0].session_id
    sql, problem = ATTACKS[request.param]
    tamper(store_url, (sql, {"sid": sid}))
    assert problem in {f.problem for f in store.verify(sid)}
    yield store, store_url, sid, bystander[0].session_id, problem
    store.close()


def test_export_refuses_a_session_that_fails_verify(attacked, tmp_path: Path) -> None:
    store, _url, sid, bystander, problem = attacked
    with pytest.raises(ExportError, match=f"session {sid}: {problem}"):
        export_bundle(store, tmp_path / "b", fmt="jsonl")
    assert not (tmp_path / "b").exists()
    # The session next to it still exports and verifies.
    export_bundle(store, tmp_path / "only", Selection(session_ids=(bystander,)), fmt="jsonl")
    assert verify_export(tmp_path / "only").ok


def test_include_broken_marks_the_session_and_verify_export_fails(attacked, tmp_path: Path) -> None:
    store, _url, sid, bystander, problem = attacked
    result = export_bundle(store, tmp_path / "b", fmt="jsonl", include_broken=True)
    assert result.broken == [sid]
    entry = result.manifest["sessions"][sid]
    assert entry["chain_intact_at_export"] is False
    assert problem in {f["problem"] for f in entry["store_findings"]}
    assert result.manifest["sessions"][bystander]["chain_intact_at_export"] is True
    assert result.manifest["sessions"][bystander]["store_findings"] == []
    report = verify_export(tmp_path / "b")
    assert not report.ok
    marked = [f for f in report.findings if f.problem == "broken_in_store"]
    assert [f.session_id for f in marked] == [sid]
    assert problem in marked[0].detail


def test_the_commands_refuse_then_mark_then_fail(attacked, tmp_path: Path) -> None:
    _store, url, sid, _bystander, problem = attacked
    runner = CliRunner()
    refused = runner.invoke(main, ["export", "--store", url, "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2
    assert f"session {sid}: {problem}" in refused.output
    assert "Traceback" not in refused.output
    args = ["export", "--store", url, "--out", str(tmp_path / "b"), "--include-broken"]
    marked = runner.invoke(main, [*args, "--no-redact"])
    assert marked.exit_code == 0, marked.output
    assert "marked broken" in marked.output
    checked = runner.invoke(main, ["verify-export", str(tmp_path / "b"), "--format", "json"])
    assert checked.exit_code == 1
    doc = json.loads(checked.output)
    assert ("broken_in_store", sid) in {(f["problem"], f["session_id"]) for f in doc["findings"]}
