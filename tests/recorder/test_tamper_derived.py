"""What the chain does not cover, `verify` checks against what it does: derived columns edited,
the sessions projection edited, whole sessions deleted.

Each test is the attacker's move: a writer of the database edits rows with raw SQL, the
append-only triggers dropped (`tamper`), then `verify` must name what changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blackbox.recorder.log.model import Kind, NewEvent
from blackbox.recorder.store import EventStore, open_store
from blackbox.recorder.trust.checkpoint import Signer
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from blackbox.cli.main import main
from tests.fixtures.store_templates import sqlite_copy, sqlite_template
from tests.fixtures.storekit import OF_SID, T0, authorise, frame, session_events, tamper


@pytest.fixture
def sqlite_url(migrated_sqlite_url: str) -> str:
    """conftest's new SQLite store (and `store_url`'s), copied from one migrated per module."""
    return migrated_sqlite_url


def append_two_sessions(store: EventStore) -> tuple[str, str]:
    """Append a 4-call session and a 2-call one, check they verify; their ids."""
    first = session_events(calls=4)
    store.append(first)
    second = session_events(calls=2, start_ns=T0 + 10**9, name="other")
    store.append(second)
    assert store.verify() == []
    return first[0].session_id, second[0].session_id


@pytest.fixture(scope="module")
def two_sessions_sqlite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[str, str]]:
    """The two sessions in a SQLite store made once for the module (each test edits a copy of
    its own); the store's path and the sessions' ids."""
    path = tmp_path_factory.mktemp("two_sessions") / "store.db"
    ids = sqlite_template(path, append_two_sessions)
    assert ids is not None
    return path, ids


@pytest.fixture
def two_sessions(store_url, two_sessions_sqlite, tmp_path):
    if store_url.startswith("sqlite"):
        template, ids = two_sessions_sqlite
        store_url = sqlite_copy(template, tmp_path / "store.db")  # over store_url's empty one
        store = open_store(store_url)
    else:
        store = open_store(store_url)
        ids = append_two_sessions(store)
    yield store, store_url, *ids
    store.close()


def found(store, sid=None):  # type: ignore[no-untyped-def]
    return [(f.seq, f.problem, f.detail) for f in store.verify(sid)]


@pytest.mark.parametrize(
    ("seq", "assignment", "column", "stored", "recomputed"),
    [
        # seq 4 calls get_current_time: the analytics would count a call to another tool.
        (4, "tool = 'delete_everything'", "tool", "'delete_everything'", "'get_current_time'"),
        (4, "method = 'tools/list'", "method", "'tools/list'", "'tools/call'"),
        (7, "is_error = NULL", "is_error", "None", "True"),
        (5, "msg_type_code = 3", "msg_type", "'error'", "'response'"),  # 3: error
        (5, "rpc_id = '99'", "rpc_id", "'99'", "'1'"),
    ],
)
def test_an_edited_derived_column_is_named(
    two_sessions, seq, assignment, column, stored, recomputed
):
    store, url, sid, other = two_sessions
    tamper(
        url,
        (
            f"UPDATE events SET {assignment} WHERE {OF_SID} AND seq = :seq",
            {"sid": sid, "seq": seq},
        ),
    )
    assert found(store, sid) == [
        (seq, "derived", f"{column}: stored {stored}, its raw bytes say {recomputed}")
    ]
    assert store.verify(other) == []


def test_an_edited_derived_column_of_a_session_event_is_named(two_sessions):
    store, url, sid, _other = two_sessions
    tamper(
        url,
        (f"UPDATE events SET tool = 'x' WHERE {OF_SID} AND seq = 1", {"sid": sid}),
    )
    assert found(store, sid) == [(1, "derived", "tool: stored 'x', its raw bytes say None")]


@pytest.mark.parametrize(
    ("assignment", "column", "stored", "recomputed"),
    [
        ("name = 'innocent'", "name", "'innocent'", "'time'"),
        ("command = 'true'", "command", "'true'", "'python -m server'"),
        ("outcome = 'ok'", "outcome", "'ok'", "'client_closed'"),
        ("frames = frames - 2", "frames", "8", "10"),
        ("transport = 'http'", "transport", "'http'", "'stdio'"),
        ("era = '2026-07-28'", "era", "'2026-07-28'", "'2025-11-25'"),
        ("last_seq = last_seq + 5", "last_seq", "18", "13"),
        ("sealed_count = NULL", "sealed_count", "None", "12"),
        ("ended_ns = ended_ns + 1", "ended_ns", str(T0 + 12_001), str(T0 + 12_000)),
        ("started_ns = started_ns - 1", "started_ns", str(T0 + 999), str(T0 + 1000)),
    ],
)
def test_an_edited_sessions_row_is_named(two_sessions, assignment, column, stored, recomputed):
    store, url, sid, other = two_sessions
    tamper(url, (f"UPDATE sessions SET {assignment} WHERE session_id = :sid", {"sid": sid}))
    assert (
        None,
        "projection",
        f"sessions.{column}: stored {stored}, the session's records say {recomputed}",
    ) in found(store, sid)
    assert store.verify(other) == []


def test_a_deleted_sessions_row_is_named(two_sessions):
    store, url, sid, _other = two_sessions
    tamper(url, ("DELETE FROM sessions WHERE session_id = :sid", {"sid": sid}))
    assert found(store) == [(None, "projection", "the session's records have no sessions row")]


def delete_session(url: str, sid: str) -> None:
    tamper(
        url,
        (f"DELETE FROM events WHERE {OF_SID}", {"sid": sid}),
        ("DELETE FROM sessions WHERE session_id = :sid", {"sid": sid}),
    )


def test_a_deleted_session_is_found_by_its_missing_positions_on_sqlite(sqlite_url):
    store = open_store(sqlite_url)
    first, second = session_events(calls=4), session_events(calls=2, start_ns=T0 + 10**9)
    store.append(first)
    store.append(second)
    delete_session(sqlite_url, first[0].session_id)
    assert [(f.session_id, f.problem) for f in store.verify()] == [("-", "removed")]
    assert "13 log position(s) missing (first: 1-13)" in store.verify()[0].detail
    result = CliRunner().invoke(main, ["verify", "--store", sqlite_url])
    assert result.exit_code == 1
    assert result.output.startswith("log: removed: 13 log position(s) missing")
    store.close()


def test_retention_that_records_its_removal_verifies_and_one_that_does_not_is_found(store_url):
    """The sanctioned removal leaves a gap in the positions that its `retention_applied` record,
    appended in the same transaction, accounts for; the same removal done behind the store's
    back is reported on SQLite. On PostgreSQL gaps in positions are no evidence (a failed append
    uses them up): there a checkpoint held elsewhere is what finds it."""
    store = open_store(store_url)
    first, second = session_events(calls=4), session_events(calls=2, start_ns=T0 + 10**9)
    third = session_events(calls=1, start_ns=T0 + 2 * 10**9)
    store.append(first)
    store.append(second)
    store.append(third)
    signed = authorise(Signer.generate("example.com/test-log"))
    removed = store.remove_sessions([first[0].session_id], authorise=signed)
    assert removed == 13
    assert store.verify() == []
    tamper(
        store_url,
        (f"DELETE FROM events WHERE {OF_SID}", {"sid": second[0].session_id}),
        ("DELETE FROM sessions WHERE session_id = :sid", {"sid": second[0].session_id}),
    )
    unrecorded = [f.problem for f in store.verify()]
    assert unrecorded == (["removed"] if store_url.startswith("sqlite") else [])
    store.close()


def test_a_failed_append_leaves_a_gap_in_positions_on_postgresql_that_is_not_a_finding(pg_url):
    """Why gaps are not evidence on PostgreSQL: an insert that is rolled back still uses up its
    identity values. verify must not call that tampering."""
    store = open_store(pg_url)
    store.append(session_events(calls=1))
    engine = create_engine(pg_url.replace("postgresql:", "postgresql+psycopg:", 1))
    with engine.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO events (sid, seq, wall_ns, mono_ns, kind_code, direction_code, raw,"
                " hash) VALUES (:sid, 1, 0, 0, 0, 0, :raw, :hash)"
            ),
            {"sid": b"x" * 16, "raw": frame({"jsonrpc": "2.0"}), "hash": b"\0" * 32},
        )
        conn.rollback()
    engine.dispose()
    store.append(session_events(calls=1, start_ns=T0 + 10**9))
    positions = [ev.position for ev in store.read_log()]
    assert positions != list(range(1, len(positions) + 1))  # the gap is there
    assert store.verify() == []
    store.close()


def test_an_edited_chain_head_in_the_sessions_row_is_named(two_sessions):
    """The next append links from `sessions.head_hash`: a forged head would fork the chain."""
    store, url, sid, _other = two_sessions
    tamper(
        url,
        (
            "UPDATE sessions SET head_hash = :h WHERE session_id = :sid",
            {"h": b"\1" * 32, "sid": sid},
        ),
    )
    [(seq, problem, detail)] = found(store, sid)
    assert (seq, problem) == (None, "projection")
    assert detail.startswith(f"sessions.head_hash: stored '{'01' * 32}'")


def test_the_verify_command_reports_a_derived_edit_and_exits_1(two_sessions):
    _store, url, sid, _other = two_sessions
    tamper(url, (f"UPDATE events SET tool = 'rm' WHERE {OF_SID} AND seq = 4", {"sid": sid}))
    result = CliRunner().invoke(main, ["verify", "--store", url, "--format", "json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["findings"] == [
        {
            "session_id": sid,
            "seq": 4,
            "problem": "derived",
            "detail": "tool: stored 'rm', its raw bytes say 'get_current_time'",
        }
    ]
    text_out = CliRunner().invoke(main, ["verify", "--store", url])
    assert (
        text_out.output
        == f"{sid} seq 4: derived: tool: stored 'rm', its raw bytes say 'get_current_time'\n"
    )


def test_a_hash_of_another_type_is_named_not_a_crash(sqlite_url):
    """SQLite keeps any value in any column: a hash rewritten as text is a chain finding, and
    re-deriving the session's records does not stop on it."""
    store = open_store(sqlite_url)
    evs = session_events(calls=2)
    store.append(evs)
    sid = evs[0].session_id
    last = store.head(sid)[0]
    tamper(
        sqlite_url,
        (
            f"UPDATE events SET hash = 'x' WHERE {OF_SID} AND seq = :seq",
            {"sid": sid, "seq": last},
        ),
    )
    assert [(f.seq, f.problem) for f in store.verify(sid)] == [(last, "modified")]
    store.close()


def test_a_nul_stored_before_derived_text_was_fitted_is_no_finding(sqlite_url, monkeypatch):
    """SQLite held NUL in a derived text column before the views were fitted to every store
    (`jsonrpc.fit_text`): such a record still verifies, and a real edit next to it is named."""
    from blackbox.recorder.log import jsonrpc
    from blackbox.recorder.store import sql_append

    events = session_events(calls=0, ended=False)
    sid = events[0].session_id
    raw = b'{"jsonrpc":"2.0","id":"a\\u0000","method":"m\\u0000"}'
    store = open_store(sqlite_url)
    with monkeypatch.context() as patch:
        # The derivation of old: no fitting of text, no `degraded` column (NULL).
        patch.setattr(jsonrpc, "fit_text", lambda value: value)
        patch.setattr(sql_append, "derived_columns", lambda raw: (*jsonrpc.classify(raw)[:8], None))
        store.append([*events, NewEvent(sid, len(events) + 1, T0, 0, Kind.FRAME, "c2s", raw)])
    old = list(store.read_session(sid))[-1]
    assert (old.method, old.rpc_id) == ("m\x00", "a\x00")
    assert store.verify(sid) == []
    tamper(sqlite_url, ("UPDATE events SET method = 'x' WHERE seq = :s", {"s": old.seq}))
    assert found(store, sid) == [
        (old.seq, "derived", "method: stored 'x', its raw bytes say 'm\ufffd'")
    ]
    store.close()


def test_a_long_era_stored_before_eras_were_fitted_is_no_finding(sqlite_url, monkeypatch):
    """SQLite held any era before the views were fitted to the 16 characters of PostgreSQL's
    column (`jsonrpc.fit_era`): such a record still verifies, and a real edit next to it is
    named."""
    from blackbox.recorder.log import jsonrpc
    from blackbox.recorder.store import sql_append

    events = session_events(calls=0, ended=False)
    sid = events[0].session_id
    era = "2025-06-18" * 5
    raw = frame({"jsonrpc": "2.0", "id": 9, "method": "m", "params": {"protocolVersion": era}})
    raw = raw.replace(b'"m"', b'"initialize"')
    store = open_store(sqlite_url)
    with monkeypatch.context() as patch:
        patch.setattr(sql_append, "derived_columns", lambda raw: (*jsonrpc.classify(raw)[:8], None))
        patch.setattr(jsonrpc, "fit_era", lambda value: value if isinstance(value, str) else None)
        store.append([*events, NewEvent(sid, len(events) + 1, T0, 0, Kind.FRAME, "c2s", raw)])
    old = list(store.read_session(sid))[-1]
    assert old.era == era
    assert store.verify(sid) == []
    tamper(sqlite_url, ("UPDATE events SET method = 'x' WHERE seq = :s", {"s": old.seq}))
    assert found(store, sid) == [
        (old.seq, "derived", "method: stored 'x', its raw bytes say 'initialize'")
    ]
    store.close()
