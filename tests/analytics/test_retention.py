"""Retention removes exactly the old, unheld, sealed sessions, after archiving them in a bundle
that verifies; abandoned sessions are sealed first; the remaining chains still verify and the
append-only triggers still refuse any other deletion."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from blackbox.recorder.compliance.bundle_check import verify_export
from blackbox.recorder.compliance.export import ExportError
from blackbox.recorder.compliance.retention import (
    RetentionError,
    add_hold,
    apply_retention,
    list_holds,
    remove_hold,
)
from blackbox.recorder.log.model import Kind
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import DAY_NS, record_session
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from tests.fixtures.storekit import OF_S

HOUR_NS = DAY_NS // 24
# Retention signs each removal with the log's key (docs/trust.md, signed removals).
pytestmark = pytest.mark.usefixtures("signing_key")


@pytest.fixture
def aged(store_url: str):
    """Sessions of every age and state, on each backend."""
    store = open_store(store_url)
    now = time.time_ns()
    s = {
        "old": record_session(store, now - 120 * DAY_NS),
        "old_modern": record_session(store, now - 95 * DAY_NS, era="2026-07-28", secrets=True),
        "old_held": record_session(store, now - 100 * DAY_NS),
        "old_abandoned": record_session(store, now - 100 * DAY_NS, ended=False),
        "recent": record_session(store, now - 10 * DAY_NS),
        "recent_abandoned": record_session(store, now - 5 * DAY_NS, ended=False),
        "open": record_session(store, now - HOUR_NS, ended=False),
    }
    add_hold(store, s["old_held"], "litigation 2026-114")
    yield store, store_url, s, now
    store.close()


def _ids(store) -> set[str]:
    return {i.session_id for i in store.list_sessions()}


def test_retention_removes_exactly_the_old_unheld_sessions(aged, tmp_path: Path) -> None:
    store, url, s, now = aged
    before = {sid: list(store.read_session(sid)) for sid in _ids(store)}
    result = apply_retention(store, 90 * DAY_NS, tmp_path / "archive", now_ns=now)

    removed = {s["old"], s["old_modern"], s["old_abandoned"]}
    assert set(result.removed) == removed
    assert result.records_removed == sum(len(before[sid]) for sid in removed) + 2  # + end + seal
    assert set(result.plan.held) == {s["old_held"]}
    assert set(result.plan.abandoned) == {s["old_abandoned"], s["recent_abandoned"]}
    remaining = _ids(store)
    assert not remaining & removed
    assert remaining >= {s["old_held"], s["recent"], s["recent_abandoned"], s["open"]}
    assert store.verify() == []  # every remaining chain, the retention session's included

    # The archive holds exactly the removed sessions, whole, and verifies offline.
    report = verify_export(tmp_path / "archive")
    assert report.ok, [f.message() for f in report.findings]
    manifest = json.loads((tmp_path / "archive" / "manifest.json").read_text())
    assert set(manifest["sessions"]) == removed
    assert manifest["redaction"]["applied"] is False
    for sid in (s["old"], s["old_modern"]):
        assert manifest["sessions"][sid]["records"] == len(before[sid])
        assert manifest["sessions"][sid]["head"] == before[sid][-1].hash.hex()

    # The abandoned session was sealed as such before it was archived.
    entry = manifest["sessions"][s["old_abandoned"]]
    assert entry["records"] == len(before[s["old_abandoned"]]) + 2
    assert entry["sealed_count"] == len(before[s["old_abandoned"]]) + 1

    # One retention_applied record, in a session of its own, names the removal and the archive.
    event = store.session(result.event_session)
    assert event.name == "retention" and event.sealed
    records = list(store.read_session(result.event_session))
    applied = [r for r in records if r.kind == Kind.RETENTION_APPLIED]
    assert len(applied) == 1
    doc = json.loads(applied[0].raw)
    assert set(doc["removed"]) == removed
    assert doc["records_removed"] == result.records_removed
    manifest_bytes = (tmp_path / "archive" / "manifest.json").read_bytes()
    assert doc["archive_manifest_sha256"] == hashlib.sha256(manifest_bytes).hexdigest()
    assert doc["held_kept"] == [s["old_held"]]

    # The triggers still refuse a deletion outside retention.
    engine = create_engine(url.replace("postgresql:", "postgresql+psycopg:", 1))
    with pytest.raises(DBAPIError), engine.begin() as conn:
        conn.execute(text(f"DELETE FROM events WHERE {OF_S}"), {"s": s["recent"]})
    engine.dispose()
    assert len(list(store.read_session(s["recent"]))) == len(before[s["recent"]])


def test_idle_unsealed_sessions_are_sealed_as_abandoned(aged, tmp_path: Path) -> None:
    store, _url, s, now = aged
    apply_retention(store, 90 * DAY_NS, tmp_path / "a", now_ns=now)
    info = store.session(s["recent_abandoned"])
    assert info.sealed and info.outcome == "abandoned"
    records = list(store.read_session(s["recent_abandoned"]))
    end = records[-2]
    assert end.kind == Kind.SESSION_ENDED and records[-1].kind == Kind.SESSION_SEALED
    doc = json.loads(end.raw)
    assert doc["reason"] == "abandoned" and doc["outcome"] == "abandoned"
    assert end.wall_ns == records[-3].wall_ns  # dated at the last activity
    assert doc["sealed_at_ns"] == now
    assert not store.session(s["open"]).sealed  # active within the idle threshold: untouched


def test_dry_run_changes_nothing(aged, tmp_path: Path) -> None:
    store, _url, s, now = aged
    before = {sid: store.head(sid) for sid in _ids(store)}
    result = apply_retention(store, 90 * DAY_NS, tmp_path / "a", dry_run=True, now_ns=now)
    assert {i.session_id for i in result.plan.remove} == {
        s["old"],
        s["old_modern"],
        s["old_abandoned"],
    }
    assert result.removed == [] and result.as_dict()["sessions_removed"] == 0
    assert {sid: store.head(sid) for sid in _ids(store)} == before
    assert not (tmp_path / "a").exists()
    assert not store.session(s["old_abandoned"]).sealed


def test_held_session_is_kept_until_released(aged, tmp_path: Path) -> None:
    store, _url, s, now = aged
    assert [h["session_id"] for h in list_holds(store)] == [s["old_held"]]
    apply_retention(store, 90 * DAY_NS, tmp_path / "a1", now_ns=now)
    assert s["old_held"] in _ids(store)
    assert remove_hold(store, s["old_held"][:13]) == s["old_held"]
    with pytest.raises(RetentionError, match="not on hold"):
        remove_hold(store, s["old_held"])
    result = apply_retention(store, 90 * DAY_NS, tmp_path / "a2", now_ns=now)
    assert result.removed == [s["old_held"]]
    assert s["old_held"] not in _ids(store)
    assert verify_export(tmp_path / "a2").ok


def test_hold_needs_a_reason_and_a_session(aged) -> None:
    store, _url, s, _now = aged
    with pytest.raises(RetentionError, match="reason"):
        add_hold(store, s["old"], "  ")
    with pytest.raises(Exception, match="no session"):
        add_hold(store, "ffffffff", "x")


def test_nothing_is_removed_when_the_archive_cannot_be_written(aged, tmp_path: Path) -> None:
    store, _url, s, now = aged
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "other.txt").write_text("x")
    with pytest.raises(ExportError, match="not empty"):
        apply_retention(store, 90 * DAY_NS, tmp_path / "a", now_ns=now)
    assert {s["old"], s["old_modern"]} <= _ids(store)


def test_retention_sessions_are_never_removed(aged, tmp_path: Path) -> None:
    store, _url, _s, now = aged
    first = apply_retention(store, 90 * DAY_NS, tmp_path / "a1", now_ns=now)
    later = now + 400 * DAY_NS
    second = apply_retention(store, 90 * DAY_NS, tmp_path / "a2", now_ns=later)
    assert first.event_session not in second.removed
    assert first.event_session in _ids(store)


def test_a_session_whose_chain_is_broken_is_kept(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    now = time.time_ns()
    good = record_session(store, now - 100 * DAY_NS)
    bad = record_session(store, now - 100 * DAY_NS)
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TRIGGER events_no_update"))
        conn.execute(
            text(f"UPDATE events SET raw = :r WHERE {OF_S} AND seq = 2"),
            {"r": b'{"jsonrpc":"2.0","id":1,"method":"initialize"}', "s": bad},
        )
    engine.dispose()
    result = apply_retention(store, 90 * DAY_NS, tmp_path / "a", now_ns=now)
    assert result.removed == [good]
    assert result.plan.broken == [bad]
    assert bad in _ids(store)


def test_a_session_active_again_is_not_sealed(sqlite_url: str) -> None:
    from blackbox.recorder.compliance.retention import seal_abandoned

    store = open_store(sqlite_url)
    now = time.time_ns()
    sid = record_session(store, now - 3 * DAY_NS, ended=False)
    head = store.head(sid)
    # Judged idle three days ago, but its last record is newer than the idle threshold now.
    assert seal_abandoned(store, sid, now, idle_ns=5 * DAY_NS) is False
    assert store.head(sid) == head and not store.session(sid).sealed
    assert seal_abandoned(store, sid, now, idle_ns=DAY_NS) is True
    assert store.session(sid).outcome == "abandoned"
    assert seal_abandoned(store, sid, now, idle_ns=DAY_NS) is False  # already sealed
