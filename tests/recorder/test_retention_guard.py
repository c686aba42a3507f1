"""The one sanctioned removal cannot be had by a plain INSERT: each test is a writer of the store's
move, with the append-only triggers in place, on SQLite and on PostgreSQL.

Revision 0001 let a DELETE through for any session listed in `retention_grants`, a table any
writer could INSERT into. The attacker below tries that first (it fails now: the table is gone)
and then the new path: a `retention_applied` record of their own naming the victim, and a
`retention_removals` row pointing at it. What the database still lets through is a whole-session
removal the log records for ever, and `verify` lists it; everything else is refused or found.
"""

from __future__ import annotations

import pytest
from blackbox.recorder.compliance.retention import apply_retention
from blackbox.recorder.log import events as docs
from blackbox.recorder.log.model import Kind, NewEvent, new_session_id
from blackbox.recorder.store import open_store
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from blackbox.cli.main import main
from tests.fixtures.storekit import OF_S, T0, session_events

DAY_NS = 86_400 * 10**9


@pytest.fixture
def victim(store_url):
    """A store holding a sealed session (13 records, seal at seq 13) and another one."""
    store = open_store(store_url)
    events = session_events(calls=4)
    store.append(events)
    store.append(session_events(calls=1, start_ns=T0 + 10**9, name="other"))
    assert store.verify() == []
    yield store, store_url, events[0].session_id
    store.close()


def writer(url: str):  # type: ignore[no-untyped-def]
    """A plain connection to the store's database: the triggers stay on."""
    return create_engine(url.replace("postgresql:", "postgresql+psycopg:", 1))


def try_statement(conn: Connection, sql: str, params: dict) -> bool:
    """Run one statement in a savepoint; whether the database took it."""
    try:
        with conn.begin_nested():
            conn.execute(text(sql), params)
    except DBAPIError:
        return False
    return True


def forge_retention_record(store, victim_sid: str, records: int = 13) -> int:  # type: ignore[no-untyped-def]
    """The attacker's own `retention_applied` record naming the victim, appended through the
    store as any writer may, well chained in a session of its own; returns its log position."""
    sid = new_session_id(T0 + 7 * 10**9)
    raw = docs.encode(
        docs.RetentionApplied(removed=[victim_sid], sessions_removed=1, records_removed=records)
    )
    store.append([NewEvent(sid, 1, T0 + 7 * 10**9, 1, Kind.RETENTION_APPLIED, "-", raw)])
    return next(ev.position for ev in store.read_session(sid))


def grant(conn: Connection, sid: str, position: int | None) -> None:
    """Every grant a writer could try: the old table (gone now) and the new one."""
    try_statement(conn, "INSERT INTO retention_grants (session_id) VALUES (:s)", {"s": sid})
    if position is not None:
        try_statement(
            conn,
            "INSERT INTO retention_removals (session_id, removed_by) VALUES (:s, :p)",
            {"s": sid, "p": position},
        )


def removed_findings(store, sid: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.detail for f in store.verify() if f.session_id == sid and f.problem == "removed"]


def test_a_forged_grant_no_longer_deletes_a_whole_session(victim):
    store, url, sid = victim
    engine = writer(url)
    with engine.connect() as conn:
        grant(conn, sid, None)
        # A removal listed against a record that is not a retention record naming the session.
        assert not try_statement(
            conn,
            "INSERT INTO retention_removals (session_id, removed_by) VALUES (:s, 1)",
            {"s": sid},
        )
        assert not try_statement(conn, f"DELETE FROM events WHERE {OF_S}", {"s": sid})
        conn.commit()
    engine.dispose()
    assert store.session(sid).sealed and store.verify() == []
    assert len(list(store.read_session(sid))) == 13


def test_the_tail_of_a_sealed_session_cannot_be_cut_even_with_a_forged_record(victim):
    store, url, sid = victim
    position = forge_retention_record(store, sid)
    engine = writer(url)
    with engine.connect() as conn:
        grant(conn, sid, position)
        for first in (13, 6, 2):  # the seal alone, the tail with the seal, all but the start
            assert not try_statement(
                conn,
                f"DELETE FROM events WHERE {OF_S} AND seq >= :f",
                {"s": sid, "f": first},
            )
        conn.commit()
    engine.dispose()
    assert len(list(store.read_session(sid))) == 13
    # The forged listing stays, and verify says the log's claim and the store disagree.
    assert any("13 of its records remain" in d for d in removed_findings(store, sid))


def test_a_head_cut_is_refused_or_found(victim):
    """PostgreSQL refuses any DELETE statement that leaves part of a session; SQLite, without
    statement triggers, lets a session's lowest seq go first — and verify names what is left."""
    store, url, sid = victim
    position = forge_retention_record(store, sid)
    engine = writer(url)
    with engine.connect() as conn:
        grant(conn, sid, position)
        cut = try_statement(conn, f"DELETE FROM events WHERE {OF_S} AND seq <= 5", {"s": sid})
        conn.commit()
    engine.dispose()
    assert cut == url.startswith("sqlite")
    left = 8 if cut else 13
    assert any(f"{left} of its records remain" in d for d in removed_findings(store, sid))


def test_a_session_removed_and_put_back_is_found(victim):
    """A whole session removed on a forged record, then its head inserted again (a tail cut in
    two moves): the log says the session is gone, so records of it are tampering."""
    store, url, sid = victim
    position = forge_retention_record(store, sid)
    columns = (
        "sid, seq, wall_ns, mono_ns, kind_code, kind_text, direction_code, direction_text, raw, "
        "raw_size, hash"
    )
    engine = writer(url)
    with engine.connect() as conn:
        kept = conn.execute(
            text(f"SELECT {columns} FROM events WHERE {OF_S} AND seq <= 5 ORDER BY seq"),
            {"s": sid},
        ).all()
        grant(conn, sid, position)
        assert try_statement(conn, f"DELETE FROM events WHERE {OF_S}", {"s": sid})
        for row in kept:
            conn.execute(
                text(
                    f"INSERT INTO events ({columns}) VALUES (:sid, :seq, :wall_ns, :mono_ns, "
                    ":kind_code, :kind_text, :direction_code, :direction_text, :raw, :raw_size, "
                    ":hash)"
                ),
                row._asdict(),
            )
        conn.commit()
    engine.dispose()
    assert any("5 of its records remain" in d for d in removed_findings(store, sid))


def test_a_forged_retention_record_is_permanent_and_listed_by_verify(victim):
    """What a writer can still do — remove a whole session on a record of their own — is a
    removal the log keeps: the record cannot be deleted, and `verify` lists it."""
    store, url, sid = victim
    position = forge_retention_record(store, sid)
    forger = next(ev.session_id for ev in store.read_log() if ev.position == position)
    engine = writer(url)
    with engine.connect() as conn:
        grant(conn, sid, position)
        assert try_statement(conn, f"DELETE FROM events WHERE {OF_S}", {"s": sid})
        assert try_statement(conn, "DELETE FROM sessions WHERE session_id = :s", {"s": sid})
        # Covering the tracks: the record itself, or its session on a record naming it.
        assert not try_statement(conn, "DELETE FROM events WHERE position = :p", {"p": position})
        assert not try_statement(
            conn,
            "INSERT INTO retention_removals (session_id, removed_by) VALUES (:s, :p)",
            {"s": forger, "p": position},
        )
        assert not try_statement(conn, "DELETE FROM retention_removals", {})
        assert not try_statement(
            conn, "UPDATE retention_removals SET removed_by = 1 WHERE session_id = :s", {"s": sid}
        )
        conn.commit()
    engine.dispose()
    assert [ev.kind for ev in store.read_session(forger)] == [Kind.RETENTION_APPLIED]
    assert [tuple(r) for r in store.removals()] == [(sid, position, forger, T0 + 7 * 10**9)]
    out = CliRunner().invoke(main, ["verify", "--store", url])
    assert f"removed by retention: session {sid} (retention_applied record at log position " in (
        out.output
    )
    assert f"session {forger})" in out.output


def test_a_retention_run_records_its_removal_and_verifies(store_url, tmp_path, signing_key):
    store = open_store(store_url)
    old = session_events(calls=2, start_ns=T0)
    store.append(old)
    sid = old[0].session_id
    now = T0 + 100 * DAY_NS
    store.append(session_events(calls=1, start_ns=now - 10**9, name="recent"))
    result = apply_retention(store, 90 * DAY_NS, tmp_path / "archive", now_ns=now)
    assert result.removed == [sid]
    assert store.verify() == []
    applied = [
        docs.decode_as(docs.RetentionApplied, ev.raw)
        for ev in store.read_session(result.event_session)
        if ev.kind == Kind.RETENTION_APPLIED
    ]
    assert [(a.removed, a.records_removed) for a in applied] == [([sid], len(old) + 1)]
    assert [(r.session_id, r.record_session) for r in store.removals()] == [
        (sid, result.event_session)
    ]
    store.close()
