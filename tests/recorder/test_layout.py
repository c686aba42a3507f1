"""Record format v2 (recorder/store/layout.py): the codes are a format that never changes meaning,
every value the code writes has one, the session id's 16 bytes are the same in Python and in
PostgreSQL, what has no code is kept as text, and the way back from the bytes to a session is
guarded like the log."""

from __future__ import annotations

import sqlite3
import uuid

import pytest
from blackbox.recorder.log import Direction, Kind, NewEvent, derived_columns
from blackbox.recorder.log import events as docs
from blackbox.recorder.store import layout, open_store
from sqlalchemy import create_engine, text

from tests.fixtures.storekit import T0, frame, session_events, tamper

# The on-disk meaning of each code, as written by the first version of the format: a code given
# never changes (a store written then must read the same now). New values take new codes.
PINNED = {
    "kind": {
        "frame": 0, "session_started": 1, "era_detected": 2, "session_ended": 3,
        "session_sealed": 4, "stderr": 5, "fault": 6, "decision": 7, "http_exchange": 8,
        "replay_step": 9, "retention_applied": 10, "policy_loaded": 11, "session_idle": 12,
        "session_resumed": 13, "peer_back": 14, "suite_saved": 15, "tools_listed": 16,
        "tool_changed": 17,
    },
    "direction": {"c2s": 0, "s2c": 1, "-": 2},
    "msg_type": {
        "request": 0, "response": 1, "notification": 2, "error": 3, "batch": 4, "invalid": 5,
    },
    "rpc_id_type": {"number": 0, "string": 1, "null": 2, "boolean": 3, "other": 4},
}  # fmt: skip


def test_no_code_changes_meaning() -> None:
    for column, pinned in PINNED.items():
        codes = layout.CODED[column][1]
        assert {k: codes[k] for k in pinned} == pinned, column
        assert len(set(codes.values())) == len(codes), f"{column}: a code given twice"


def test_every_kind_and_direction_the_code_writes_has_a_code() -> None:
    kinds = {str(k) for k in Kind} | set(docs.DOCUMENTS)
    assert kinds <= set(layout.KIND_CODES), kinds - set(layout.KIND_CODES)
    assert {str(d) for d in Direction} == set(layout.DIRECTION_CODES)
    assert layout.KIND_CODES["frame"] == layout.FRAME


@pytest.mark.parametrize(
    "message",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}',
        b'{"jsonrpc":"2.0","id":"a","result":{}}',
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}',
        b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":[1],"method":"ping"}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        b"not json at all",
        b'{"id":{"a":1}}',
    ],
)
def test_every_derived_value_has_a_code(message: bytes) -> None:
    msg_type, _m, _i, id_type, *_rest = derived_columns(message + b"\n")
    assert msg_type is None or msg_type in layout.MSG_TYPE_CODES
    assert id_type is None or id_type in layout.RPC_ID_TYPE_CODES


IDS = [
    str(uuid.uuid4()),
    "0a000000-0000-7000-8000-00000000000a",
    "0A000000-0000-7000-8000-00000000000A",  # not canonical: hashed, not parsed
    "{0a000000-0000-7000-8000-00000000000a}",
    "hook-claude-1234",
    "é-session",
    "",
]


def test_a_canonical_uuid_is_its_own_bytes_and_anything_else_is_hashed() -> None:
    sid = IDS[0]
    assert layout.sid_bytes(sid) == uuid.UUID(sid).bytes
    keys = [layout.sid_bytes(s) for s in IDS]
    assert all(len(k) == 16 for k in keys)
    assert len(set(keys)) == len(IDS)  # the uppercase and braced spellings are other ids


def test_postgresql_computes_the_same_bytes(pg_url: str) -> None:
    """Migration 0009 converts a PostgreSQL store in the server: its rule must be Python's."""
    engine = create_engine(pg_url.replace("postgresql:", "postgresql+psycopg:", 1))
    try:
        with engine.connect() as conn:
            for sid in IDS:
                got = conn.execute(
                    text(f"SELECT {layout.sid_sql_postgres('CAST(:s AS text)')}"), {"s": sid}
                ).scalar()
                assert bytes(got) == layout.sid_bytes(sid), sid
    finally:
        engine.dispose()


def test_a_kind_and_direction_with_no_code_are_kept_as_text(store_url: str) -> None:
    """The kinds are an open set (a library caller may append its own): such a record is
    stored and read back as it was, and its chain verifies."""
    store = open_store(store_url)
    try:
        events = session_events(calls=1)
        sid = events[0].session_id
        odd = NewEvent(sid, len(events), T0 + 10**9, 10**9, "my_own_kind", "up", b"{}")
        store.append([*events[:-1], odd])
        got = list(store.read_session(sid))[-1]
        assert (got.kind, got.direction, got.raw) == ("my_own_kind", "up", b"{}")
        assert store.verify() == []
    finally:
        store.close()


def test_a_derived_value_with_no_code_is_refused_not_stored_as_another(store_url: str) -> None:
    with pytest.raises(Exception, match="msg_type 'carrier pigeon' is not one this store knows"):
        layout.encode_row(
            ("s", 1, 0, 0, "frame", "c2s", b"", None, "carrier pigeon", *([None] * 8), b"")
        )


def test_a_frame_is_stored_compact(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        store.append(session_events(calls=2))
    finally:
        store.close()
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    try:
        shapes = set(
            db.execute(
                "SELECT length(sid), typeof(kind_code), typeof(direction_code), kind_text "
                "FROM events"
            )
        )
    finally:
        db.close()
    assert shapes == {(16, "integer", "integer", None)}


def test_the_way_back_to_a_session_is_append_only(store_url: str) -> None:
    store = open_store(store_url)
    try:
        store.append(session_events(calls=1))
    finally:
        store.close()
    engine = create_engine(store_url.replace("postgresql:", "postgresql+psycopg:", 1))
    try:
        for statement in (
            "UPDATE session_ids SET session_id = 'someone else'",
            "DELETE FROM session_ids",
        ):
            with engine.connect() as conn, pytest.raises(Exception, match="append-only"):
                conn.execute(text(statement))
    finally:
        engine.dispose()


def test_records_whose_session_id_was_unmapped_are_named(store_url: str) -> None:
    """The attack: behind the triggers' back, delete a session's row from `session_ids`, so
    that no reader (all go through `event_log`) sees its records any more. `verify` still finds
    them in the table and says so."""
    store = open_store(store_url)
    try:
        victim = session_events(calls=2)
        store.append(victim)
        store.append(session_events(calls=1, start_ns=T0 + 10**9))
        sid = victim[0].session_id
        tamper(
            store_url,
            ("DELETE FROM session_ids WHERE session_id = :s", {"s": sid}),
            ("DELETE FROM sessions WHERE session_id = :s", {"s": sid}),
        )
        found = store.verify()
    finally:
        store.close()
    key = layout.sid_bytes(sid).hex()
    assert any(f.session_id == key and "maps to no session" in f.detail for f in found), found


def test_a_row_is_the_record_in_the_table_s_columns() -> None:
    raw = frame({"a": 1})
    row = layout.encode_row(
        ("x", 1, 2, 3, "frame", "c2s", raw, None, "request", "m", "1", "number",
         "t", None, None, "2026-07-28", None, b"h" * 32)
    )  # fmt: skip
    assert dict(zip(layout.ROW_COLUMNS, row, strict=True)) == {
        "sid": layout.sid_bytes("x"), "seq": 1, "wall_ns": 2, "mono_ns": 3,
        "kind_code": 0, "kind_text": None, "direction_code": 0, "direction_text": None,
        "raw": raw, "raw_size": None, "msg_type_code": 0, "method": "m", "rpc_id": "1",
        "rpc_id_type_code": 0, "tool": "t", "is_error": None, "error_code": None,
        "era": "2026-07-28", "degraded": None, "hash": b"h" * 32,
    }  # fmt: skip


def test_the_copy_types_are_the_table_s() -> None:
    """PostgreSQL's binary COPY sends each column as `layout.COPY_TYPES` says: a type that is
    not the table's would be refused, or worse, read as another value."""
    from blackbox.recorder.store.schema import event_rows
    from sqlalchemy.dialects import postgresql

    declared = {
        c: event_rows.c[c].type.compile(dialect=postgresql.dialect()) for c in layout.ROW_COLUMNS
    }
    names = {"BYTEA": "bytea", "BIGINT": "int8", "SMALLINT": "int2", "BOOLEAN": "bool"}
    assert {c: names.get(t, "text") for c, t in declared.items()} == layout.COPY_TYPES


def _retention_doc() -> bytes:
    return docs.encode(docs.RetentionApplied(older_than_ns=None, cutoff_ns=T0, cutoff=None))


def test_retention_records_are_the_rows_event_log_reads_as_retention(store_url: str) -> None:
    """`removals.retention_records` reads the partial index's rows and keeps those whose kind
    reads as `retention_applied` through `event_log`: the same set as the view, whatever mix of
    code and text a row holds (the append writes only the first; the others are rows written
    behind the store's back)."""
    from blackbox.recorder.store import removals

    store = open_store(store_url)
    events = session_events(calls=1)
    store.append(events)
    sid = events[0].session_id
    raw = _retention_doc()
    code = layout.KIND_CODES["retention_applied"]
    columns = "sid, seq, wall_ns, mono_ns, kind_code, kind_text, direction_code, raw, hash"
    rows = [  # (seq, kind_code, kind_text): code, text only, unknown code, another kind's code
        (101, code, None),
        (102, None, "retention_applied"),
        (103, 99, "retention_applied"),
        (104, layout.KIND_CODES["stderr"], "retention_applied"),
        (105, None, "some_future_kind"),
    ]
    tamper(
        store_url,
        *(
            (
                f"INSERT INTO events ({columns}) SELECT sid, :seq, wall_ns, mono_ns, :code, "
                f":text, 2, :raw, hash FROM events WHERE seq = 1 AND "
                "sid = (SELECT sid FROM session_ids WHERE session_id = :sid)",
                {"seq": seq, "code": kind_code, "text": kind_text, "raw": raw, "sid": sid},
            )
            for seq, kind_code, kind_text in rows
        ),
    )
    with store.transaction() as conn:
        found = removals.retention_records(conn)
        viewed = conn.execute(
            text("SELECT position, seq FROM event_log WHERE kind = 'retention_applied'")
        ).all()
    store.close()
    assert sorted(found) == sorted(position for position, _seq in viewed)
    assert sorted(seq for _position, seq in viewed) == [101, 102, 103]


def test_the_retention_records_are_read_through_their_index(store_url: str) -> None:
    """Every `verify` reads the log's retention records: through the partial index of migration
    0010, never a scan of the log (1.4 s warm, 9.3 s cold at 10M records before it). The query
    must state the index's predicate for the planner to use it; the plan shows it does (a scan
    turned off on PostgreSQL, whose planner prefers one on a table this small)."""
    from blackbox.recorder.store import removals
    from sqlalchemy.dialects import postgresql, sqlite

    store = open_store(store_url)
    store.append(session_events(calls=2))
    dialect = sqlite.dialect() if store_url.startswith("sqlite") else postgresql.dialect()
    literal = {"literal_binds": True}
    query = str(removals.retention_query().compile(dialect=dialect, compile_kwargs=literal))
    with store.transaction() as conn:
        if store_url.startswith("sqlite"):
            lines = [str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}")]
            scans = [line for line in lines if line.startswith("SCAN events")]
            unindexed = [line for line in scans if "ix_events_retention" not in line]
        else:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            lines = [str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {query}")]
            scans = [line for line in lines if "ix_events_retention" in line]
            unindexed = [line for line in lines if "Seq Scan on events" in line]
    store.close()
    assert scans and not unindexed, "\n".join(lines)
