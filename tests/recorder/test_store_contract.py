"""The contract every store backend meets: one abstract suite, run unchanged by a SQLite class and a
PostgreSQL class (as eventsourcing's recorder tests are), neither ever skipped."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import sqlite3

import psycopg
import pytest
from blackbox.recorder.errors import AmbiguousSession, AppendRefused, SessionNotFound, StoreError
from blackbox.recorder.log.chain import genesis, link
from blackbox.recorder.log.model import Direction, Kind, NewEvent, StoredEvent, new_session_id
from blackbox.recorder.query import listing
from blackbox.recorder.store import open_store, tree
from blackbox.recorder.store.postgres import PostgresEventStore
from blackbox.recorder.store.sql import SqlEventStore
from blackbox.recorder.store.sqlite import WAL_BYTES, SqliteEventStore
from blackbox.recorder.trust.checkpoint import Signer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from tests.fixtures import independent_verifier as spec
from tests.fixtures.storekit import T0, authorise, frame, session_events

# -- what a peer may send: the lines of the property test below ---------------------------------

# Characters a string may hold: JSON's specials, NUL, BOM, U+FFFD, an astral one, lone surrogates.
HOSTILE_CHARS = ["a", "/", '"', "\\", "\x00", "\x1f", "\x7f", "\u00e9", "\u2028", "\ufeff"]
HOSTILE_CHARS += ["\ufffd", "\U0001f600", "\ud800", "\udbff", "\udc00", "\udfff"]
# Numbers beyond a double, beyond 64 bits either way, and what Python's parser takes and JSON's
# grammar does not.
HOSTILE_NUMBERS = ["0", "-0", "1.5", "1e400", "-1e400", "1E-400", "NaN", "-Infinity"]
HOSTILE_NUMBERS += ["1" + "0" * 400, "-" + "9" * 400, str(2**63), str(-(2**63) - 1)]
HOSTILE_NUMBERS += [str(2**70), str(-(2**70))]
BOM = b"\xef\xbb\xbf"


# The strategies below are built once (functools.cache): `rpc_documents` draws from them many
# times per example, and a strategy built anew is validated anew, which cost more than the
# store's work. The same objects draw the same values.
@functools.cache
def json_strings() -> st.SearchStrategy[str]:
    """String literals, escaped by json.dumps (a lone surrogate becomes the escape "\\ud800") or
    raw (a raw lone surrogate is then written with surrogatepass: not UTF-8)."""
    chars = st.lists(st.sampled_from(HOSTILE_CHARS), max_size=6).map("".join)
    escaped = st.sampled_from([True, True, True, False])
    return st.builds(lambda s, escape: json.dumps(s, ensure_ascii=escape), chars, escaped)


@functools.cache
def nested() -> st.SearchStrategy[str]:
    """Arrays or objects nested n deep, across every parser's limit (jsonrpc.FALLBACK_DEPTH, the
    standard parser's recursion, orjson's 1024): between 1900 and 2150 levels the classifier
    once answered by its caller's stack, and `verify` found untouched frames changed."""
    depth = st.one_of(st.integers(1, 500), st.integers(300, 2200), st.integers(1900, 5000))
    return st.builds(
        lambda n, obj: '{"a":' * n + "0" + "}" * n if obj else "[" * n + "]" * n,
        depth,
        st.booleans(),
    )


@functools.cache
def json_values() -> st.SearchStrategy[str]:
    literals = st.sampled_from(["true", "false", "null", "{}", "[]"])
    numbers = st.sampled_from(HOSTILE_NUMBERS) | st.integers(-(2**80), 2**80).map(str)
    return st.one_of(json_strings(), json_strings(), numbers, numbers, literals, nested())


@st.composite
def rpc_documents(draw: st.DrawFn) -> bytes:
    """A request, error or result written by hand, so that it holds what no encoder writes: a
    hostile value where the store derives a column from (method, id, tool name, error code,
    protocol version), a key sent twice, a key spelt with an escape."""

    def value(plain: str) -> str:
        return plain if draw(st.integers(0, 2)) < 2 else draw(json_values())

    def obj(members: list[tuple[str, str]]) -> str:
        keys = [
            draw(st.sampled_from([json.dumps(k), f'"\\u{ord(k[0]):04x}{k[1:]}"']))
            for k, _ in members
        ]
        return "{" + ",".join(f"{k}:{v}" for k, (_, v) in zip(keys, members, strict=True)) + "}"

    members = [("jsonrpc", '"2.0"'), ("id", value("7"))]
    shape = draw(st.sampled_from(["call", "initialize", "error", "result"]))
    if shape == "call":
        params = obj([("name", value('"get_time"')), ("arguments", "{}")])
        members += [("method", value('"tools/call"')), ("params", params)]
    elif shape == "initialize":
        meta = obj([("io.modelcontextprotocol/protocolVersion", value('"2026-07-28"'))])
        params = obj([("protocolVersion", value('"2025-11-25"')), ("_meta", meta)])
        members += [("method", value('"initialize"')), ("params", params)]
    elif shape == "error":
        members += [("error", obj([("code", value("-32601")), ("message", '"x"')]))]
    else:
        members += [("result", obj([("protocolVersion", value('"2025-11-25"'))]))]
    if draw(st.booleans()):  # a duplicate key: the parsers keep the last
        name = draw(st.sampled_from([name for name, _ in members]))
        members.insert(draw(st.integers(0, len(members))), (name, draw(json_values())))
    text = obj(draw(st.permutations(members)))
    if draw(st.integers(0, 4)) == 0:
        text = f"[{text},{text}]"
    return text.encode("utf-8", "surrogatepass")


@st.composite
def peer_lines(draw: st.DrawFn) -> bytes:
    """One line a peer may send: any bytes or a hand-written document, now and then behind a
    BOM or before a CR; never a newline, which ends a frame."""
    before = draw(st.sampled_from([b""] * 7 + [BOM]))
    body = draw(st.one_of(st.binary(max_size=48), rpc_documents(), rpc_documents()))
    after = draw(st.sampled_from([b""] * 7 + [b"\r"]))
    return (before + body + after).replace(b"\n", b"")


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def as_jsonrpc(raw: bytes) -> tuple[bool, str | None]:
    """(is a request, tool name as its column holds it), from JSON-RPC's definitions and the
    standard parser: a request is one object with a string method and an id; a tools/call names
    its tool in params.name, NUL and lone surrogates shown as U+FFFD."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False, None
    if not isinstance(doc, dict) or not isinstance(doc.get("method"), str):
        return False, None
    params = doc.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    tool = name if doc["method"] == "tools/call" and isinstance(name, str) else None
    return "id" in doc, None if tool is None else _UNSTORABLE.sub("\ufffd", tool)


class EventStoreContract:
    """The suite itself; a backend's class below names its store class and gives a fresh URL."""

    backend: type[SqlEventStore]

    @pytest.fixture
    def store_url(self) -> str:
        raise NotImplementedError("a backend's suite gives a fresh store URL")

    @pytest.fixture
    def store(self, store_url):
        s = open_store(store_url)
        yield s
        s.close()

    def test_open_store_picks_the_backend(self, store):
        assert type(store) is self.backend

    def test_append_stores_every_field_and_derives_from_raw(self, store):
        events = session_events(calls=2)
        assert store.append(events) == len(events)
        stored = list(store.read_session(events[0].session_id))
        # the producer's records, then the seal the store adds
        assert [e.seq for e in stored] == list(range(1, len(events) + 2))
        for new, got in zip(events, stored, strict=False):
            assert (got.session_id, got.seq, got.wall_ns, got.mono_ns, got.kind, got.direction) == (
                new.session_id,
                new.seq,
                new.wall_ns,
                new.mono_ns,
                new.kind,
                new.direction,
            )
            assert got.raw == new.raw
        init, init_reply, call = stored[1], stored[2], stored[3]
        assert (init.msg_type, init.method, init.rpc_id, init.rpc_id_type) == (
            "request",
            "initialize",
            "0",
            "number",
        )
        assert init.era == "2025-11-25" and init_reply.msg_type == "response"
        assert call.tool == "get_current_time"
        assert stored[6].is_error is True and stored[4].is_error is False

    def test_reappending_a_batch_is_a_no_op(self, store):
        events = session_events()
        store.append(events[:4])
        assert store.append(events[:4]) == 0
        assert store.append(events) == len(events) - 4
        assert store.append(events) == 0
        assert [e.seq for e in store.read_session(events[0].session_id)][-1] == len(events) + 1

    def test_a_gap_in_seq_is_refused(self, store):
        events = session_events()
        store.append(events[:2])
        with pytest.raises(AppendRefused, match="gap"):
            store.append(events[3:5])

    def test_a_refusal_midway_through_a_batch_stores_none_of_it(self, store):
        """The rows are made as the driver takes them: a gap found after other rows went in
        still refuses the whole batch, and the store takes the next one."""
        ok = session_events(calls=2)
        gapped = session_events(calls=2, start_ns=T0 + 5)
        with pytest.raises(AppendRefused, match="gap"):
            store.append([*ok, *gapped[:2], *gapped[3:]])
        assert store.list_sessions() == [] and store.max_position() == 0
        assert store.append(ok + gapped) == len(ok) + len(gapped)
        assert store.verify() == []

    def test_session_end_seals_and_refuses_later_records(self, store):
        events = session_events()
        store.append(events)
        sid = events[0].session_id
        info = store.session(sid)
        assert info.sealed and info.outcome == "client_closed"
        seal = list(store.read_session(sid))[-1]
        assert seal.kind == Kind.SESSION_SEALED
        late = NewEvent(sid, len(events) + 2, T0, 0, Kind.STDERR, "-", b'{"line":"x"}')
        with pytest.raises(AppendRefused, match="sealed"):
            store.append([late])

    def test_hash_chain_links_every_record(self, store):
        events = session_events()
        store.append(events)
        sid = events[0].session_id
        prev = genesis(sid)
        for got in store.read_session(sid):
            assert got.hash == link(prev, got)
            prev = got.hash
        assert store.head(sid) == (len(events) + 1, prev)
        assert store.verify(sid) == []

    def test_sessions_projection_and_listing_newest_first(self, store):
        old = session_events(start_ns=T0, name="old")
        new = session_events(start_ns=T0 + 10**9, name="new", ended=False)
        store.append(old + new)
        listed = store.list_sessions()
        assert [s.name for s in listed] == ["new", "old"]
        assert listed[0].frames == len(new) - 1 and listed[0].outcome is None
        assert listed[1].command == "python -m server" and listed[1].era == "2025-11-25"
        assert store.list_sessions(limit=1)[0].name == "new"

    def test_resolve_full_prefix_last_and_errors(self, store):
        a = session_events(session_id="aaaa1111-0000-7000-8000-000000000001", start_ns=T0)
        b = session_events(session_id="aaaa2222-0000-7000-8000-000000000002", start_ns=T0 + 5)
        store.append(a + b)
        assert store.resolve("last") == b[0].session_id
        assert store.resolve("aaaa1") == a[0].session_id
        assert store.resolve(b[0].session_id) == b[0].session_id
        with pytest.raises(AmbiguousSession, match="several"):
            store.resolve("aaaa")
        with pytest.raises(SessionNotFound):
            store.resolve("zzzz")
        with pytest.raises(SessionNotFound):
            store.resolve("a%")  # LIKE wildcards are matched literally

    def test_read_log_is_in_position_order_and_incremental(self, store):
        a, b = session_events(calls=1), session_events(calls=1, start_ns=T0 + 7)
        store.append(a)
        mark = store.max_position()
        store.append(b)
        later = list(store.read_log(after_position=mark))
        assert {e.session_id for e in later} == {b[0].session_id}
        positions = [e.position for e in store.read_log()]
        assert positions == sorted(positions) and len(positions) == len(a) + len(b) + 2

    def test_update_and_delete_are_refused_by_the_database(self, store, store_url):
        store.append(session_events())
        engine = create_engine(store_url.replace("postgresql:", "postgresql+psycopg:", 1))
        with engine.connect() as conn:
            with pytest.raises(Exception, match="append-only"):
                conn.execute(text("UPDATE events SET raw = :r"), {"r": b"x"})
            conn.rollback()
            with pytest.raises(Exception, match="append-only"):
                conn.execute(text("DELETE FROM events"))
            conn.rollback()
        engine.dispose()

    def test_retention_path_removes_only_unheld_sessions(self, store):
        keep, drop = session_events(name="keep"), session_events(name="drop", start_ns=T0 + 9)
        store.append(keep + drop)
        store.add_hold(keep[0].session_id, "litigation")
        assert store.list_holds()[0][:2] == (keep[0].session_id, "litigation")
        with pytest.raises(AppendRefused, match="hold"):
            store.remove_sessions([keep[0].session_id])
        signed = authorise(Signer.generate("example.com/test-log"))
        removed = store.remove_sessions([drop[0].session_id], authorise=signed)
        assert removed == len(drop) + 1
        assert [s.name for s in store.list_sessions()] == ["retention", "keep"]
        assert [r.session_id for r in store.removals()] == [drop[0].session_id]
        assert store.verify() == []
        assert store.remove_hold(keep[0].session_id) and store.list_holds() == []

    def test_stored_event_is_frozen(self, store):
        events = session_events(calls=1)
        store.append(events)
        got = next(store.read_session(events[0].session_id))
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.raw = b""  # type: ignore[misc]

    def test_era_detected_overrides_the_era_of_an_earlier_frame(self, store):
        """A client in auto mode offers 2026-07-28 through server/discover, is refused, and falls
        back: the tap's era_detected verdict is the session's era, even when it comes in a later
        batch."""
        events = session_events(calls=0, ended=False)
        sid = events[0].session_id
        discover = NewEvent(
            sid,
            2,
            T0,
            0,
            Kind.FRAME,
            "c2s",
            b'{"jsonrpc":"2.0","id":9,"method":"server/discover","params":{"_meta":'
            b'{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}',
        )
        store.append([events[0], discover])
        assert store.session(sid).era == "2026-07-28"
        verdict = NewEvent(sid, 3, T0, 0, Kind.ERA_DETECTED, "-", b'{"era":"2025-11-25"}')
        store.append([verdict])
        assert store.session(sid).era == "2025-11-25"

    def test_read_log_rows_are_read_log_as_batches_of_tuples(self, store):
        a, b = session_events(calls=3), session_events(calls=2, start_ns=T0 + 7)
        store.append(a)
        mark = store.max_position()
        store.append(b)
        expected = [dataclasses.astuple(e) for e in store.read_log()]
        batches = list(store.read_log_rows(batch_size=4))
        assert [len(batch) for batch in batches[:-1]] == [4] * (len(batches) - 1)
        rows = [row for batch in batches for row in batch]
        # the same values in StoredEvent field order; is_error may be 0/1 (SQLite), so compare bool
        fields = [f.name for f in dataclasses.fields(StoredEvent)]
        flag = fields.index("is_error")

        def norm(row: tuple) -> tuple:
            return (*row[:flag], None if row[flag] is None else bool(row[flag]), *row[flag + 1 :])

        assert [norm(tuple(r)) for r in rows] == expected
        assert all(type(r[fields.index("raw")]) is bytes and type(r[-1]) is bytes for r in rows)
        later = [row for batch in store.read_log_rows(after_position=mark) for row in batch]
        assert {row[fields.index("session_id")] for row in later} == {b[0].session_id}
        first_two = [row for batch in store.read_log_rows(mark - 1, limit=2) for row in batch]
        assert [row[0] for row in first_two] == [mark, mark + 1]
        assert list(store.read_log_rows(store.max_position())) == []

    # -- hostile frames: the attacker's move is one frame a peer sends; the append must store it
    # byte-exact whatever its derived columns hold, and `verify` must find the log intact.

    @pytest.mark.parametrize(
        ("raw", "derived"),
        [
            # error codes outside signed 64 bits: the BIGINT column holds NULL, the raw the value
            (
                b'{"jsonrpc":"2.0","id":1,"error":{"code":18446744073709551615,"message":"x"}}',
                {"msg_type": "error", "error_code": None},
            ),
            (
                b'{"jsonrpc":"2.0","id":1,"error":{"code":9223372036854775808,"message":"x"}}',
                {"msg_type": "error", "error_code": None},
            ),
            (
                b'{"jsonrpc":"2.0","id":1,"error":{"code":9223372036854775807,"message":"x"}}',
                {"msg_type": "error", "error_code": 2**63 - 1},
            ),
            (
                b'{"jsonrpc":"2.0","id":1,"error":{"code":-9223372036854775808}}',
                {"msg_type": "error", "error_code": -(2**63)},
            ),
            # an id beyond 64 bits sends the classifier to its exact parser, codes included
            (
                b'{"jsonrpc":"2.0","id":123456789012345678901234,'
                b'"error":{"code":-9223372036854775809}}',
                {"rpc_id": "123456789012345678901234", "error_code": None},
            ),
            (
                b'{"jsonrpc":"2.0","id":1e999999,"error":{"code":-1' + b"0" * 40 + b"}}",
                {"msg_type": "error", "error_code": None},
            ),
            # NUL in the text columns (PostgreSQL text cannot hold it): U+FFFD in the view
            (
                b'{"jsonrpc":"2.0","id":1,"method":"tools/\\u0000list"}',
                {"method": "tools/\ufffdlist"},
            ),
            (
                b'{"jsonrpc":"2.0","id":"a\\u0000b","result":{}}',
                {"rpc_id": "a\ufffdb", "rpc_id_type": "string"},
            ),
            (
                b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"\\u0000"}}',
                {"tool": "\ufffd", "method": "tools/call"},
            ),
            (
                b'[{"jsonrpc":"2.0","id":2,"method":"\\u0000\\u0000"}]',
                {"msg_type": "batch", "method": "\ufffd\ufffd"},
            ),
            # an era that is no protocol version (the column holds 16 characters): NULL
            (
                b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":'
                b'{"io.modelcontextprotocol/protocolVersion":"' + b"9" * 4000 + b'"}}}',
                {"method": "x", "era": None},
            ),
            (
                b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-\\u0000"}}',
                {"era": "2025-\ufffd"},
            ),
        ],
    )
    def test_a_hostile_frame_is_stored_byte_exact_and_verifies(self, store, raw, derived):
        events = session_events(calls=1, ended=False)
        sid = events[0].session_id
        hostile = NewEvent(sid, len(events) + 1, T0, 0, Kind.FRAME, "s2c", raw)
        assert store.append([*events, hostile]) == len(events) + 1
        got = list(store.read_session(sid))[-1]
        assert got.raw == raw and got.seq == hostile.seq
        assert {name: getattr(got, name) for name in derived} == derived
        assert store.verify(sid) == []
        assert store.session(sid).era == "2025-11-25"

    def test_an_empty_protocol_version_names_no_era(self, store):
        """A peer that announces "" first and a real version later: the append and `verify`
        agree on the session's era (the first one named), with no finding."""
        events = session_events(calls=0, ended=False)[:1]  # started, no handshake yet
        sid = events[0].session_id
        frames = [
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":""}}',
            b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18"}}',
        ]
        store.append(
            [
                *events,
                *(
                    NewEvent(sid, len(events) + i, T0, 0, Kind.FRAME, "c2s", raw)
                    for i, raw in enumerate(frames, start=1)
                ),
            ]
        )
        assert [e.era for e in store.read_session(sid)][-2:] == [None, "2025-06-18"]
        assert store.session(sid).era == "2025-06-18"
        assert store.verify(sid) == []

    def test_a_hostile_session_record_is_stored_and_verifies(self, store):
        """Session records carry text a peer chose too (a tool name, an era it announced)."""
        events = session_events(calls=0, ended=False)
        sid = events[0].session_id
        decision = b'{"tool":"t\\u0000","method":"tools/call\\u0000","verdict":"deny"}'
        era = b'{"era":"' + b"2" * 100 + b'","server_info":{"name":"\\u0000"}}'
        hostile = [
            NewEvent(sid, len(events) + 1, T0, 0, Kind.DECISION, "-", decision),
            NewEvent(sid, len(events) + 2, T0, 0, Kind.ERA_DETECTED, "-", era),
        ]
        assert store.append([*events, *hostile]) == len(events) + 2
        got = list(store.read_session(sid))[-2:]
        assert [e.raw for e in got] == [decision, era]
        assert (got[0].tool, got[0].method, got[1].era) == ("t\ufffd", "tools/call\ufffd", None)
        assert store.verify(sid) == []

    @settings(
        max_examples=50,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        lines=st.lists(
            st.tuples(
                peer_lines(),
                st.sampled_from([Direction.CLIENT_TO_SERVER, Direction.SERVER_TO_CLIENT]),
            ),
            min_size=1,
            max_size=5,
        ),
        split=st.integers(0, 8),
    )
    def test_any_line_a_peer_sends_is_stored_chained_in_the_tree_and_counted(
        self, store, lines, split
    ):
        """Each example is a session of its own in the test's store (started, the lines as
        frames, ended), appended in two batches; the chain and the tree's leaves are recomputed
        with the independent verifier's code (docs/trust.md)."""
        sid = new_session_id(T0)
        started = session_events(sid, calls=0, ended=False)[0]
        frames = [
            NewEvent(sid, seq, T0 + seq, seq, Kind.FRAME, direction, raw)
            for seq, (raw, direction) in enumerate(lines, start=2)
        ]
        end = len(lines) + 2
        reason = frame({"reason": "client_closed"})
        ended = NewEvent(sid, end, T0 + end, end, Kind.SESSION_ENDED, Direction.NONE, reason)
        events = [started, *frames, ended]
        assert store.append(events[:split]) + store.append(events[split:]) == len(events)

        stored = list(store.read_session(sid))
        assert [(e.kind, e.direction, e.raw) for e in stored[:-1]] == [
            (e.kind, e.direction, e.raw) for e in events
        ]
        assert stored[-1].kind == Kind.SESSION_SEALED
        assert store.verify(sid) == []

        prev = spec.genesis(sid)
        for got in stored:
            prev = spec.chain_hash(prev, dataclasses.asdict(got))
            assert got.hash == prev
        with store.transaction(write=True) as conn:
            head = tree.sequence(conn)
            leaves = tree.session_leaves(conn, sid)
            proofs = [tree.inclusion_proof(conn, leaf.index, head.size) for leaf in leaves]
            key, first_leaf = conn.execute(
                text("SELECT key, first_leaf FROM commitment_keys WHERE id = 1")
            ).one()
        assert [leaf.seq for leaf in leaves] == [e.seq for e in stored]
        for got, leaf, proof in zip(stored, leaves, proofs, strict=True):
            # the leaf is SHA-256(0x00 || chain hash || C), folded up to the store's root
            d = spec.store_leaf_input(
                dataclasses.asdict(got), got.hash, leaf.index, (bytes(key), first_leaf)
            )
            assert len(d) == 64
            assert spec.verify_inclusion(d, leaf.index, head.size, proof, head.root)

        info = store.session(sid)
        assert (info.frames, info.last_seq, info.sealed, info.outcome) == (
            len(lines),
            len(events) + 1,
            True,
            "client_closed",
        )
        expected = [as_jsonrpc(raw) for raw, _ in lines]
        assert [(e.msg_type == "request", e.tool) for e in stored[1:-2]] == expected
        calls = listing.count_records(store, [sid])[sid]["calls"]
        assert calls == sum(request for request, _ in expected)

    def test_a_driver_error_on_append_is_the_stores_error(self, store, monkeypatch):
        def refuse(_conn, _rows):
            raise self.driver_error

        monkeypatch.setattr(store, "_insert_events", refuse)
        with pytest.raises(StoreError, match="refused by the driver"):
            store.append(session_events(calls=0))


class TestSqliteStore(EventStoreContract):
    backend = SqliteEventStore
    driver_error = sqlite3.DataError("refused by the driver")

    @pytest.fixture
    def store_url(self, migrated_sqlite_url: str) -> str:
        # A copy of a new store is a new store: each test still has a file of its own.
        return migrated_sqlite_url

    def test_the_write_ahead_log_stays_near_its_limit_while_the_store_is_open(
        self, store_url: str
    ) -> None:
        # A shipper keeps its store open for days: SQLite never shrinks the WAL file on its own,
        # so whatever it once reached stays on disk beside the records. 64 MiB of frames in
        # 4 MiB batches must leave at most the limit plus about one batch, not all 64 MiB.
        store = open_store(store_url)
        started = session_events(calls=0, ended=False)[:1]
        store.append(started)
        sid, megabyte = started[0].session_id, b"x" * (1 << 20)
        frames = [
            NewEvent(sid, seq, T0 + seq, seq, Kind.FRAME, "c2s", megabyte) for seq in range(2, 66)
        ]
        for i in range(0, len(frames), 4):
            store.append(frames[i : i + 4])
        wal = store_url.split("///", 1)[1] + "-wal"
        assert os.path.getsize(wal) <= WAL_BYTES + 8 * (1 << 20)
        assert store.head(sid)[0] == 65
        store.close()


class TestPostgresStore(EventStoreContract):
    backend = PostgresEventStore
    driver_error = psycopg.DataError("refused by the driver")

    @pytest.fixture
    def store_url(self, pg_url: str) -> str:
        return pg_url
