"""The Parquet copy and the views: documented columns on both backends, call pairing and
outcomes, batches, incremental refresh equal to a full rebuild, crash leftovers, retention,
compaction, and stores kept apart."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from blackbox.analytics import parquet
from blackbox.analytics.parquet import ParquetCopy, copy_dir, store_key
from blackbox.analytics.views import COLUMNS, connect
from blackbox.recorder.log.model import NewEvent
from blackbox.recorder.store import open_store

from tests.fixtures.analytics_kit import (
    BASE_NS,
    MS,
    Session,
    copy_for,
    fingerprint,
    refreshed,
    rows,
)
from tests.fixtures.store_templates import sqlite_copy


@pytest.fixture
def sqlite_url(migrated_sqlite_url: str) -> str:
    """conftest's new SQLite store (and `store_url`'s), copied from one migrated per module."""
    return migrated_sqlite_url


def outcome_session() -> tuple[Session, dict[str, int]]:
    """One session with a call of every outcome; returns it and the request seq of each."""
    s = Session(name="files")
    s.handshake(0)
    seqs: dict[str, int] = {}
    seqs["ok"], _ = s.call("read", 10, 25.0, {"path": "a"})
    seqs["tool_error"], _ = s.call("read", 40, 5.0, {"path": "missing"}, outcome="tool_error")
    seqs["rpc_error"], _ = s.call("write", 50, 7.0, outcome="rpc_error")
    seqs["cancelled"], rid = s.call("slow", 60, None)
    s.frame(
        "c2s",
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}},
        70,
    )
    seqs["denied"], rid = s.call("delete", 80, None, {"path": "/"})
    s.decision(
        81,
        decision="deny",
        final="deny",
        rule="no-delete",
        tool="delete",
        request_seq=seqs["denied"],
        args_fingerprint=fingerprint({"path": "/"}),
    )
    s.error(rid, -32001, "denied by policy rule no-delete", 82)
    # The server asks the client with id 1, which the client also used: keyed per direction.
    seqs["server_request"], srid = s.request("roots/list", None, 90, direction="s2c", rpc_id=1)
    s.result(srid, {"roots": []}, 93, direction="c2s")
    seqs["transport_fault"], _ = s.call("hang", 100, None)
    s.fault("broken_pipe", 110)
    s.end(120, outcome="crashed", reason="server_exited", exit_code=1)
    return s, seqs


@pytest.mark.timeout(120)
def test_views_have_documented_columns_and_outcomes(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    s, seqs = outcome_session()
    s.save(store)
    con = refreshed(store, tmp_path / "an")
    for view, columns in COLUMNS.items():
        cursor = con.execute(f"SELECT * FROM {view} LIMIT 0")
        assert [d[0] for d in cursor.description] == columns, view
    calls = {r["request_seq"]: r for r in rows(con, "SELECT * FROM calls")}
    assert {name: calls[seq]["outcome"] for name, seq in seqs.items()} == {
        "ok": "ok",
        "tool_error": "tool_error",
        "rpc_error": "rpc_error",
        "cancelled": "cancelled",
        "denied": "denied",
        "server_request": "ok",
        "transport_fault": "transport_fault",
    }
    ok = calls[seqs["ok"]]
    assert ok["latency_ms"] == pytest.approx(25.0)
    assert ok["server"] == "files" and ok["tool"] == "read" and ok["era"] == "2025-11-25"
    assert ok["args_fingerprint"] == fingerprint({"path": "a"})
    assert calls[seqs["server_request"]]["direction"] == "s2c"
    assert calls[seqs["server_request"]]["latency_ms"] == pytest.approx(3.0)
    assert calls[seqs["rpc_error"]]["error_code"] == -32603
    assert calls[seqs["rpc_error"]]["error_message"] == "internal failure"
    # the seven above and initialize
    assert len(calls) == 8
    (session,) = rows(con, "SELECT * FROM sessions")
    assert session["name"] == "files" and session["server_name"] == "files-server"
    assert session["outcome"] == "crashed" and session["exit_code"] == 1
    assert session["command"] == "python -m srv"
    assert session["duration_s"] == pytest.approx(0.12)
    assert session["frames"] == sum(1 for e in s.events if e.kind == "frame")
    assert session["sealed"] is True
    faults = rows(con, "SELECT * FROM faults")
    assert [(f["fault"], f["stage"], f["origin"]) for f in faults] == [
        ("broken_pipe", "transport", "recorded")
    ]
    (decision,) = rows(con, "SELECT * FROM decisions")
    assert decision["matched_by"] == "request_seq"
    assert decision["call_request_seq"] == seqs["denied"]
    assert decision["call_outcome"] == "denied" and decision["verdict"] == "deny"
    # and the call carries its decision beside it; a call nobody decided carries none
    denied = calls[seqs["denied"]]
    assert (denied["decision"], denied["decision_source"], denied["decision_rule"]) == (
        "deny",
        "policy",
        "no-delete",
    )
    assert calls[seqs["ok"]]["decision"] is None
    frames = rows(con, "SELECT kind, count(*) AS n FROM frames GROUP BY 1")
    assert sum(f["n"] for f in frames) == len(s.events) + 1  # + the store's seal record
    store.close()


def test_batches_are_expanded_and_paired(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    s = Session()
    batch = [
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "a"}},
        {"jsonrpc": "2.0", "id": "7", "method": "tools/call", "params": {"name": "b"}},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
    ]
    s.frame("c2s", batch, 10)
    s.frame(
        "s2c",
        [
            {"jsonrpc": "2.0", "id": "7", "result": {"content": [], "isError": True}},
            {"jsonrpc": "2.0", "id": 7, "result": {"content": []}},
        ],
        30,
    )
    s.save(store)
    con = refreshed(store, tmp_path / "an")
    msgs = rows(con, "SELECT item, msg_type, rpc_id_type FROM messages ORDER BY position, item")
    assert [(m["item"], m["msg_type"]) for m in msgs] == [
        (0, "request"),
        (1, "request"),
        (2, "notification"),
        (0, "response"),
        (1, "response"),
    ]
    calls = rows(con, "SELECT tool, outcome, latency_ms FROM calls ORDER BY tool")
    assert calls == [
        {"tool": "a", "outcome": "ok", "latency_ms": 20.0},
        {"tool": "b", "outcome": "tool_error", "latency_ms": 20.0},
    ]


def result_set(con) -> dict:  # type: ignore[no-untyped-def]
    """Everything a report could see, order-independent."""
    out = {}
    for view in COLUMNS:
        cols = [c for c in COLUMNS[view] if c not in ("raw", "doc", "items", "evidence")]
        got = con.execute(f"SELECT {', '.join(cols)} FROM {view}").fetchall()
        out[view] = sorted(map(repr, got))
    return out


def test_incremental_refresh_equals_full_rebuild(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    first, _ = outcome_session()
    first.save(store)
    # A session still running across refreshes: its open call must be carried in `pending`.
    live = Session(name="live", start_ns=BASE_NS + 3600 * 10**9)
    live.handshake(0)
    _, open_id = live.call("think", 10, None)
    store.append(live.events)
    incremental = copy_for(store, tmp_path / "inc")
    assert incremental.refresh(store).new_records == len(first.events) + 1 + len(live.events)
    pending = incremental.pending_file()
    assert pending is not None and pq.read_table(pending).num_rows == 1
    # More records arrive: the answer to the open call, a later day, a new session.
    n = len(live.events)
    live.result(open_id, {"content": []}, 4000)
    live.end(5000)
    store.append(live.events[n:])
    later = Session(name="tomorrow", start_ns=BASE_NS + 86_400 * 10**9)
    later.handshake(0)
    later.call("read", 5, 12.0)
    later.save(store)
    result = incremental.refresh(store)
    assert result.new_records > 0 and not result.rebuilt
    assert incremental.pending_file() is None
    full = copy_for(store, tmp_path / "full")
    full.refresh(store)
    assert result_set(connect(incremental)) == result_set(connect(full))
    think = rows(connect(incremental), "SELECT * FROM calls WHERE tool = 'think'")
    assert think[0]["outcome"] == "ok" and think[0]["latency_ms"] == pytest.approx(3990.0)
    days = sorted(p.name for p in (incremental.root / "events").glob("day=*"))
    assert days == ["day=2025-11-24", "day=2025-11-25"]


def test_nothing_new_does_not_read_the_log(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    Session().save(store)
    copy = copy_for(store, tmp_path / "an")
    copy.refresh(store)

    class Counting:
        def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
            self.inner, self.reads = inner, 0

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)

        def read_log(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.reads += 1
            return self.inner.read_log(*args, **kwargs)

        def read_log_rows(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.reads += 1
            return self.inner.read_log_rows(*args, **kwargs)

    counting = Counting(store)
    result = copy.refresh(counting)  # type: ignore[arg-type]
    assert (result.new_records, result.files_written, counting.reads) == (0, 0, 0)


def test_progress_is_reported(sqlite_url: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(parquet, "PROGRESS_EVERY", 10)
    store = open_store(sqlite_url)
    s = Session()
    for i in range(20):
        s.call("t", i * 10, 1.0)
    s.save(store)
    seen: list[tuple[int, int]] = []
    copy_for(store, tmp_path / "an").refresh(store, progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (10, len(s.events)) and seen[-1] == (len(s.events), len(s.events))


def test_leftovers_of_an_interrupted_refresh_are_removed(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    Session().save(store)
    copy = copy_for(store, tmp_path / "an")
    copy.refresh(store)
    before = result_set(connect(copy))
    # A refresh that wrote its files and died before committing state.json:
    (day,) = list((copy.root / "events").glob("day=*"))
    (existing,) = list(day.glob("p*.parquet"))
    stray = day / "p000000099999-000000100000.parquet"
    stray.write_bytes(existing.read_bytes())
    (day / "p000000000001-000000000003.parquet.tmp").write_bytes(b"partial")
    s = Session(name="next")
    s.call("t", 1, 2.0)
    s.save(store)
    copy.refresh(store)
    assert not stray.exists() and not list(day.glob("*.tmp"))
    after = connect(copy)
    assert after.execute("SELECT count(*) FROM sessions").fetchone()[0] == 2
    assert len(result_set(after)["frames"]) == len(before["frames"]) + len(s.events)


def test_compaction_merges_small_files_without_changing_answers(
    sqlite_url: str, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(parquet, "COMPACT_FILES", 3)
    store = open_store(sqlite_url)
    copy = copy_for(store, tmp_path / "an")
    for i in range(6):
        s = Session(name=f"s{i}", start_ns=BASE_NS + i * MS * 1000)
        s.call("t", 1, float(i + 1))
        s.save(store)
        copy.refresh(store)
    for dataset in ("events", "calls"):
        files = list((copy.root / dataset).glob("day=*/p*.parquet"))
        assert 1 <= len(files) <= 3, dataset
    full = copy_for(store, tmp_path / "full")
    full.refresh(store)
    assert result_set(connect(copy)) == result_set(connect(full))


def test_retention_rebuilds_the_copy(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    gone, kept = Session(name="gone"), Session(name="kept")
    gone.end(5)
    kept.end(5)
    gone.save(store)
    kept.save(store)
    copy = copy_for(store, tmp_path / "an")
    copy.refresh(store)
    store.remove_sessions([gone.sid])
    marker = Session(name="retention", era=None)
    marker.event("retention_applied", {"removed": [gone.sid]}, 1)
    marker.save(store)
    result = copy.refresh(store)
    assert result.rebuilt
    names = {r["name"] for r in rows(connect(copy), "SELECT name FROM sessions")}
    assert names == {"kept", "retention"}


def test_a_recreated_store_is_not_mixed_with_the_old_copy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    Session(name="old").save(store)
    copy = copy_for(store, tmp_path / "an")
    copy.refresh(store)
    store.close()
    for leftover in tmp_path.glob("store.db*"):
        leftover.unlink()
    store = open_store(url)
    fresh = Session(name="new")
    fresh.call("t", 1, 1.0)
    fresh.call("t", 2, 1.0)
    fresh.save(store)
    assert copy.refresh(store).rebuilt
    assert [r["name"] for r in rows(connect(copy), "SELECT name FROM sessions")] == ["new"]


def test_each_store_has_its_own_copy(tmp_path: Path, pg_url: str, migrated_sqlite: Path) -> None:
    a = sqlite_copy(migrated_sqlite, tmp_path / "a.db")
    b = sqlite_copy(migrated_sqlite, tmp_path / "b.db")
    assert store_key(a) != store_key(b) != store_key(pg_url)
    rel = tmp_path / "x" / ".." / "a.db"
    assert store_key(f"sqlite:///{rel}") == store_key(a)
    sa, sb = open_store(a), open_store(b)
    Session(name="in-a").save(sa)
    Session(name="in-b").save(sb)
    base = tmp_path / "analytics"
    ca, cb = copy_for(sa, base), copy_for(sb, base)
    ca.refresh(sa)
    cb.refresh(sb)
    assert ca.root != cb.root and ca.root.parent == cb.root.parent == base
    assert [r["name"] for r in rows(connect(ca), "SELECT name FROM sessions")] == ["in-a"]
    assert [r["name"] for r in rows(connect(cb), "SELECT name FROM sessions")] == ["in-b"]


def test_parquet_files_carry_the_schema_version(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    Session().save(store)
    copy = ParquetCopy(copy_dir(tmp_path, store.url))
    copy.refresh(store)
    for path in (copy.root / "events").glob("day=*/*.parquet"):
        meta = pq.read_schema(path).metadata
        assert meta[parquet.META_KEY] == str(parquet.SCHEMA_VERSION).encode()
    state = json.loads((copy.root / "state.json").read_text())
    assert state["schema_version"] == parquet.SCHEMA_VERSION
    # An older copy (another schema version) is rebuilt, not misread.
    state["schema_version"] = 0
    (copy.root / "state.json").write_text(json.dumps(state))
    extra = NewEvent("x" * 8, 1, BASE_NS, 0, "frame", "c2s", b"{}")
    store.append([extra])
    assert copy.refresh(store).rebuilt
