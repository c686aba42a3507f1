"""Tamper evidence: each way of editing the log behind the store's back is found and named.

The tests disable the append-only triggers inside the test, as an attacker with database access
would, then edit rows with raw SQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blackbox.recorder.store import EventStore, open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.store_templates import sqlite_copy, sqlite_template
from tests.fixtures.storekit import OF_SID, session_events, tamper


@pytest.fixture
def sqlite_url(migrated_sqlite_url: str) -> str:
    """conftest's new SQLite store (and `store_url`'s), copied from one migrated per module."""
    return migrated_sqlite_url


def split_verify(monkeypatch: pytest.MonkeyPatch, runs: int) -> list[tuple[int, int]]:
    """Verify even short sessions as `runs` runs (child processes on SQLite, connections on
    PostgreSQL), as a long session is; returns the list the SQLite child starts are noted in."""
    from blackbox.recorder.store import sql_verify, sqlite

    started: list[tuple[int, int]] = []
    start = sqlite._start_run_check

    def noted(database, session_id, run):  # type: ignore[no-untyped-def]
        started.append(run)
        return start(database, session_id, run)

    monkeypatch.setattr(sql_verify, "PARALLEL_VERIFY_RECORDS", 1)
    monkeypatch.setattr(sql_verify, "verify_cores", lambda: runs)
    monkeypatch.setattr(sqlite, "_start_run_check", noted)
    return started


@pytest.fixture(params=["one run", "split runs"])
def recorded(store_url, request, monkeypatch, recorded_sqlite, tmp_path):
    """Two sessions; each tamper test runs with the chain checked in one pass and as three runs
    on as many cores, so a finding in any run (the store's own or a child's) is named."""
    if request.param == "split runs":
        split_verify(monkeypatch, 3)
    if store_url.startswith("sqlite"):
        template, ids = recorded_sqlite
        store_url = sqlite_copy(template, tmp_path / "store.db")  # over store_url's empty one
        store = open_store(store_url)
    else:
        store = open_store(store_url)
        ids = two_sessions(store)
    yield store, store_url, *ids
    store.close()


def two_sessions(store: EventStore) -> tuple[str, str]:
    """Append a 4-call session and a 2-call one; their ids."""
    events = session_events(calls=4)
    store.append(events)
    other = session_events(calls=2, start_ns=events[0].wall_ns + 10**9)
    store.append(other)
    return events[0].session_id, other[0].session_id


@pytest.fixture(scope="module")
def recorded_sqlite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[str, str]]:
    """The two sessions in a SQLite store made once for the module (each test tampers with a
    copy of its own); the store's path and the sessions' ids."""
    path = tmp_path_factory.mktemp("recorded") / "store.db"
    ids = sqlite_template(path, two_sessions)
    assert ids is not None
    return path, ids


def problems(store, sid):
    return [(f.seq, f.problem) for f in store.verify(sid)]


def test_intact_store_verifies(recorded):
    store, _, _sid, _other = recorded
    assert store.verify() == []


def test_intact_chain_is_confirmed_in_one_pass_on_each_backend(store_url, monkeypatch):
    """An intact session is confirmed by the fast check alone (in PostgreSQL's own sha256 on that
    backend, which must compute exactly `chain.link`'s bytes), never by the slower diagnosis. The
    session has an oversize frame (raw_size set), non-ASCII bytes and a seal."""
    from dataclasses import replace

    from blackbox.recorder.log import chain

    store = open_store(store_url)
    events = session_events(calls=3)
    prefix = b'{"jsonrpc":"2.0","id":9,"result":{"text":"caf\xc3\xa9 \xe2\x82\xac'
    events[5] = replace(events[5], raw=prefix, raw_size=len(prefix) + 10**6)
    store.append(events)

    def no_diagnosis(*_args, **_kwargs):
        raise AssertionError("an intact chain fell through to the diagnosis")

    monkeypatch.setattr(chain, "verify_session", no_diagnosis)
    assert store.verify() == []
    monkeypatch.undo()
    tamper(
        store_url,
        (
            f"UPDATE events SET raw_size = raw_size + 1 WHERE {OF_SID} AND seq = 6",
            {"sid": events[0].session_id},
        ),
    )
    assert problems(store, events[0].session_id) == [(6, "modified")]
    store.close()


def intact_session(store_url: str):  # type: ignore[no-untyped-def]
    """A store holding one 10-call session that verifies: (store, session id, last seq)."""
    store = open_store(store_url)
    events = session_events(calls=10)
    store.append(events)
    sid = events[0].session_id
    assert store.verify(sid) == []
    return store, sid, store.head(sid)[0]


def test_a_split_verify_checks_runs_in_child_processes(store_url, monkeypatch):
    """A long session's chain is checked as runs at once; on SQLite each run after the first in
    a child process, whose verdict counts: a record modified in the last run is named."""
    started = split_verify(monkeypatch, 3)
    store, sid, last = intact_session(store_url)
    if store_url.startswith("sqlite"):
        assert len(started) == 2 and started[-1][1] == last
    tamper(
        store_url,
        (
            f"UPDATE events SET mono_ns = mono_ns + 1 WHERE {OF_SID} AND seq = :seq",
            {"sid": sid, "seq": last - 2},
        ),
    )
    assert problems(store, sid) == [(last - 2, "modified")]
    store.close()


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_run_whose_child_cannot_start_is_checked_by_the_store(store_url, monkeypatch):
    from blackbox.recorder.store import sqlite

    split_verify(monkeypatch, 3)
    monkeypatch.setattr(sqlite, "_start_run_check", lambda *_args: None)
    store, sid, last = intact_session(store_url)
    tamper(
        store_url,
        (
            f"DELETE FROM events WHERE {OF_SID} AND seq = :seq",
            {"sid": sid, "seq": last - 3},
        ),
    )
    assert problems(store, sid) == [(last - 3, "missing")]
    store.close()


def test_modified_record_is_named(recorded):
    store, url, sid, other = recorded
    tamper(
        url,
        (
            f"UPDATE events SET raw = :raw WHERE {OF_SID} AND seq = 6",
            {
                "raw": b'{"jsonrpc":"2.0","id":2,"result":{"content":[],"isError":false}}',
                "sid": sid,
            },
        ),
    )
    assert problems(store, sid) == [(6, "modified")]
    assert store.verify(other) == []


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("edit", "found"),
    [
        ("raw = CAST(raw AS TEXT) || ' '", [6]),  # SQLite keeps TEXT in a BLOB column
        ("wall_ns = 'yesterday'", [6]),
        ("raw_size = 1.5", [6]),
        # As with any edited hash, the next record no longer links from the stored one either.
        ("hash = hex(hash)", [6, 7]),
        ("hash = randomblob(32)", [6, 7]),
    ],
)
def test_a_value_of_another_type_is_named_not_a_crash(recorded, edit, found):
    """SQLite keeps any value in any column: an edit that changes a value's type is a modified
    record like any other, never a failed check."""
    store, url, sid, other = recorded
    tamper(url, (f"UPDATE events SET {edit} WHERE {OF_SID} AND seq = 6", {"sid": sid}))
    assert problems(store, sid) == [(seq, "modified") for seq in found]
    assert store.verify(other) == []


def test_missing_record_is_named(recorded):
    store, url, sid, _ = recorded
    tamper(url, (f"DELETE FROM events WHERE {OF_SID} AND seq = 5", {"sid": sid}))
    assert problems(store, sid) == [(5, "missing")]


# A record's columns in the log's table, the ones a copy of it needs.
COPIED = (
    "sid, seq, wall_ns, mono_ns, kind_code, kind_text, direction_code, direction_text, raw, hash"
)


def test_inserted_record_is_named(recorded):
    store, url, sid, _ = recorded
    # make room at seq 5 (two steps so no UNIQUE clash), then slip in a copy of record 4
    tamper(
        url,
        (f"UPDATE events SET seq = -seq WHERE {OF_SID} AND seq >= 5", {"sid": sid}),
        (f"UPDATE events SET seq = 1 - seq WHERE {OF_SID} AND seq < 0", {"sid": sid}),
        (
            f"INSERT INTO events ({COPIED}) SELECT {COPIED.replace('seq', '5')} FROM events"
            f" WHERE {OF_SID} AND seq = 4",
            {"sid": sid},
        ),
    )
    assert problems(store, sid) == [(5, "inserted")]


def test_reordered_records_are_named(recorded):
    store, url, sid, _ = recorded
    tamper(
        url,
        (f"UPDATE events SET seq = -1 WHERE {OF_SID} AND seq = 4", {"sid": sid}),
        (f"UPDATE events SET seq = 4 WHERE {OF_SID} AND seq = 5", {"sid": sid}),
        (f"UPDATE events SET seq = 5 WHERE {OF_SID} AND seq = -1", {"sid": sid}),
    )
    assert problems(store, sid) == [(4, "reordered")]


def test_truncated_tail_is_named(recorded):
    store, url, sid, _ = recorded
    last = store.head(sid)[0]
    tamper(
        url,
        (f"DELETE FROM events WHERE {OF_SID} AND seq >= :s", {"sid": sid, "s": last - 3}),
    )
    findings = store.verify(sid)
    assert [f.problem for f in findings] == ["truncated"]
    assert "sealed with" in findings[0].detail


def test_truncation_before_a_surviving_seal_is_named(recorded):
    store, url, sid, _ = recorded
    last = store.head(sid)[0]
    tamper(
        url,
        (f"DELETE FROM events WHERE {OF_SID} AND seq = :s", {"sid": sid, "s": last - 1}),
    )
    assert [f.problem for f in store.verify(sid)] == ["truncated"]


def test_verify_command_exit_codes_and_json(recorded):
    _store, url, sid, _ = recorded
    runner = CliRunner()
    ok = runner.invoke(main, ["verify", "--store", url])
    assert ok.exit_code == 0 and "intact: 2 session(s)" in ok.output
    tamper(url, (f"DELETE FROM events WHERE {OF_SID} AND seq = 3", {"sid": sid}))
    bad = runner.invoke(main, ["verify", "--store", url, "--format", "json"])
    assert bad.exit_code == 1
    doc = json.loads(bad.output)
    assert doc["intact"] is False
    assert doc["findings"] == [
        {"session_id": sid, "seq": 3, "problem": "missing", "detail": "seq 3 removed"}
    ]
    text_out = runner.invoke(main, ["verify", sid[:13], "--store", url])
    assert text_out.exit_code == 1 and f"{sid} seq 3: missing" in text_out.output


def test_a_record_below_seq_1_is_named(recorded):
    """The chain check asks the index for a session's lowest and highest seq rather than
    counting its rows: a copy of the first record slipped in at seq 0 is still found."""
    store, url, sid, _ = recorded
    tamper(
        url,
        (
            f"INSERT INTO events ({COPIED}) SELECT {COPIED.replace('seq', '0')} FROM events"
            f" WHERE {OF_SID} AND seq = 1",
            {"sid": sid},
        ),
    )
    # the diagnosis reads the session in seq order: record 1 no longer follows what precedes it
    assert problems(store, sid) == [(1, "inserted")]


def test_a_correctly_chained_record_after_the_seal_is_named(recorded):
    """A record forged after the seal and linked from it (anyone can compute SHA-256): the
    chain is intact, so only the seal, found in the same pass as the chain check, tells."""
    from blackbox.recorder.log import Direction, Kind, NewEvent, chain
    from blackbox.recorder.store.layout import ROW_COLUMNS, encode_row
    from blackbox.recorder.store.projection import events_row
    from sqlalchemy import create_engine, text

    store, url, sid, _ = recorded
    sealed = [ev for ev in store.read_session(sid) if ev.kind == Kind.SESSION_SEALED]
    assert len(sealed) == 1
    seal = sealed[0]
    raw = b'{"jsonrpc":"2.0","id":99,"result":{"content":[],"isError":false}}'
    forged = NewEvent(
        sid, seal.seq + 1, seal.wall_ns + 1, seal.mono_ns + 1, Kind.FRAME,
        Direction.SERVER_TO_CLIENT, raw,
    )  # fmt: skip
    row = encode_row(events_row(forged, chain.link(seal.hash, forged)))
    names = ", ".join(ROW_COLUMNS)
    marks = ", ".join(f":{c}" for c in ROW_COLUMNS)
    tamper(
        url,
        (
            f"INSERT INTO events ({names}) VALUES ({marks})",
            dict(zip(ROW_COLUMNS, row, strict=True)),
        ),
    )
    engine = create_engine(url.replace("postgresql:", "postgresql+psycopg:", 1))
    with engine.connect() as conn:  # the forged row is in the log as the record it claims
        assert (
            conn.execute(
                text("SELECT count(*) FROM event_log WHERE session_id = :s AND seq = :q"),
                {"s": sid, "q": seal.seq + 1},
            ).scalar_one()
            == 1
        )
    engine.dispose()
    findings = store.verify(sid)
    assert (seal.seq + 1, "inserted") in [(f.seq, f.problem) for f in findings]
    assert any("after the seal" in f.detail for f in findings)
