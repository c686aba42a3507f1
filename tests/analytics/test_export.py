"""Export bundles round-trip and verify offline, on both store backends and in every format; each
kind of tampering with a bundle is caught and named."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from blackbox.recorder.compliance.bundle_check import verify_export
from blackbox.recorder.compliance.export import (
    FORMATS,
    ExportError,
    Selection,
    export_bundle,
    read_rows,
)
from blackbox.recorder.compliance.export import RECORD_COLUMNS as COLS
from blackbox.recorder.log.model import Direction, Kind, NewEvent, new_session_id
from blackbox.recorder.privacy.redact import Redactor
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import DAY_NS, SECRETS, record_session

from tests.fixtures.storekit import OF_S


@pytest.fixture
def three_sessions(store_url: str):
    store = open_store(store_url)
    now = time.time_ns()
    ids = [
        record_session(store, now - 3 * DAY_NS, era="2025-11-25", calls=2),
        record_session(store, now - 2 * DAY_NS, era="2026-07-28", secrets=True),
        record_session(store, now - DAY_NS, era="2026-07-28", ended=False, name="git"),
    ]
    yield store, ids
    store.close()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("redact", [False, True], ids=["plain", "redacted"])
def test_round_trip_verifies_and_carries_every_field(
    three_sessions, tmp_path: Path, fmt: str, redact: bool
) -> None:
    store, ids = three_sessions
    redactor = Redactor.default(key=b"k") if redact else None
    result = export_bundle(store, tmp_path / "bundle", fmt=fmt, redactor=redactor)

    report = verify_export(tmp_path / "bundle")
    assert report.ok, [f.message() for f in report.findings]
    assert report.sessions_checked == 3
    stored = [ev for sid in ids for ev in store.read_session(sid)]
    assert report.records_checked == len(stored) == result.records
    rows = list(read_rows(tmp_path / "bundle" / f"records.{fmt}", COLS, fmt))
    assert [(r["session_id"], r["seq"]) for r in rows] == [(e.session_id, e.seq) for e in stored]
    for row, ev in zip(rows, stored, strict=True):
        for name, _ in COLS:
            if name in ("raw", "hash", "redacted", "salt", "commitments"):
                continue
            assert row[name] == getattr(ev, name), name
        assert row["hash"] == ev.hash.hex()
        if not row["redacted"]:
            assert row["raw"] == ev.raw  # exact bytes, not a re-serialisation
            # the record's salt disclosed, nothing withheld
            assert len(bytes.fromhex(row["salt"])) == 32 and row["commitments"] is None
        else:
            # one entry per token shown, no salt of the whole record
            assert row["salt"] is None and json.loads(row["commitments"])
    redacted = [r for r in rows if r["redacted"]]
    if redact:
        assert redacted and all(r["session_id"] == ids[1] for r in redacted)
        assert report.records_attested == len(redacted)
        assert result.manifest["chain_coverage"]["records_attested"] == len(redacted)
    else:
        assert not redacted and report.records_attested == 0

    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["tool"]["name"] == "mcp-blackbox" and manifest["schema_version"]
    assert manifest["counts"] == {
        "sessions": 3,
        "records": len(stored),
        "decisions": 4,
        "redacted_records": len(redacted),
    }
    for sid in ids:
        last_seq, head = store.head(sid)
        entry = manifest["sessions"][sid]
        assert entry["head"] == head.hex() and entry["last_seq"] == last_seq
    assert manifest["sessions"][ids[0]]["sealed_count"] == store.head(ids[0])[0] - 1
    assert manifest["sessions"][ids[2]]["sealed_count"] is None  # still open
    for name, meta in manifest["files"].items():
        digest = hashlib.sha256((tmp_path / "bundle" / name).read_bytes()).hexdigest()
        assert meta["sha256"] == digest
    assert manifest["time_range"]["first_ns"] == min(e.wall_ns for e in stored)
    assert manifest["time_range"]["last_ns"] == max(e.wall_ns for e in stored)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_a_degraded_frame_keeps_its_degraded_column(
    sqlite_url: str, tmp_path: Path, fmt: str
) -> None:
    """A frame whose derived values had to be fitted (a NUL in its method, a lone surrogate in
    its tool) says so in `degraded`; the bundle row carries it (it was written null)."""
    store = open_store(sqlite_url)
    sid = new_session_id(time.time_ns())
    raw = b'{"jsonrpc":"2.0","id":1,"method":"tools/call\\u0000x","params":{"name":"a\\ud800"}}'
    store.append([NewEvent(sid, 1, 1, 1, Kind.FRAME, Direction.CLIENT_TO_SERVER, raw)])
    (stored,) = store.read_session(sid)
    assert stored.degraded
    export_bundle(store, tmp_path / "b", fmt=fmt, manifest_signer=None)
    (row,) = read_rows(tmp_path / "b" / f"records.{fmt}", COLS, fmt)
    assert row["degraded"] == stored.degraded
    assert verify_export(tmp_path / "b").ok


def test_parquet_bundle_is_plain_parquet(three_sessions, tmp_path: Path) -> None:
    store, ids = three_sessions
    export_bundle(store, tmp_path / "b", fmt="parquet")
    table = pq.read_table(tmp_path / "b" / "records.parquet")
    assert table.num_rows == sum(1 for sid in ids for _ in store.read_session(sid))
    assert set(table.column("kind").to_pylist()) >= {"frame", "session_started", "decision"}
    decisions = pq.read_table(tmp_path / "b" / "decisions.parquet").to_pylist()
    assert {d["tool"] for d in decisions} == {"get_current_time"}
    sessions = pq.read_table(tmp_path / "b" / "sessions.parquet").to_pylist()
    assert [s["session_id"] for s in sessions] == ids


def test_selection_by_time_server_and_session(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    now = time.time_ns()
    old = record_session(store, now - 40 * DAY_NS)
    mid = record_session(store, now - 10 * DAY_NS, name="git")
    new = record_session(store, now - DAY_NS)
    r = export_bundle(store, tmp_path / "a", Selection(since_ns=now - 30 * DAY_NS))
    assert r.sessions == [mid, new]
    r = export_bundle(store, tmp_path / "b", Selection(until_ns=now - 5 * DAY_NS))
    assert r.sessions == [old, mid]
    r = export_bundle(store, tmp_path / "c", Selection(server="time"))
    assert r.sessions == [old, new]
    r = export_bundle(store, tmp_path / "d", Selection(session_ids=(new, old)))
    assert r.sessions == [old, new]
    assert r.manifest["selection"]["sessions"] == [new, old]
    assert verify_export(tmp_path / "d").ok


def test_export_refuses_a_non_empty_directory(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    record_session(store, time.time_ns())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not empty"):
        export_bundle(store, tmp_path / "b")
    assert (tmp_path / "b" / "notes.txt").read_text() == "keep me"


def test_progress_is_reported_per_session(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    now = time.time_ns()
    for i in range(3):
        record_session(store, now - i * DAY_NS)
    seen = []
    export_bundle(store, tmp_path / "b", fmt="jsonl", progress=seen.append)
    assert [(p.sessions_done, p.sessions_total) for p in seen] == [(1, 3), (2, 3), (3, 3)]
    assert seen[-1].records == sum(1 for _ in (tmp_path / "b" / "records.jsonl").open())


# -- tampering --------------------------------------------------------------------------------


@pytest.fixture
def bundle(sqlite_url: str, tmp_path: Path):
    """A JSONL bundle of two sealed sessions and one open one; returns (dir, ids)."""
    store = open_store(sqlite_url)
    now = time.time_ns()
    ids = [
        record_session(store, now - 2 * DAY_NS, calls=2),
        record_session(store, now - DAY_NS, era="2026-07-28", secrets=True),
        record_session(store, now, ended=False),
    ]
    export_bundle(store, tmp_path / "b", fmt="jsonl")
    store.close()
    assert verify_export(tmp_path / "b").ok
    return tmp_path / "b", ids


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(bundle_dir: Path, name: str, docs: list[dict], rehash: bool) -> None:
    """Rewrite a JSONL file; with `rehash` also fix its sha256 and rows in the manifest, as a
    tamperer who knows the format would."""
    text = "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs)
    (bundle_dir / name).write_text(text)
    if rehash:
        mpath = bundle_dir / "manifest.json"
        manifest = json.loads(mpath.read_text())
        manifest["files"][name]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
        manifest["files"][name]["rows"] = len(docs)
        mpath.write_text(json.dumps(manifest, indent=2))


def _problems(bundle_dir: Path) -> list[tuple[str, str | None, int | None]]:
    report = verify_export(bundle_dir)
    assert not report.ok
    return [(f.problem, f.session_id, f.seq) for f in report.findings]


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_byte_changed_is_a_file_hash_mismatch(
    sqlite_url: str, tmp_path: Path, fmt: str
) -> None:
    store = open_store(sqlite_url)
    record_session(store, time.time_ns())
    export_bundle(store, tmp_path / "b", fmt=fmt)
    path = tmp_path / "b" / f"records.{fmt}"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    problems = _problems(tmp_path / "b")
    assert ("file_hash_mismatch", None, None) in problems


def test_one_byte_changed_in_a_raw_payload_names_the_record(bundle) -> None:
    bdir, ids = bundle
    docs = _lines(bdir / "records.jsonl")
    target = next(d for d in docs if d["session_id"] == ids[0] and d["kind"] == "frame")
    raw = bytearray(base64.b64decode(target["raw"]))
    raw[raw.index(b"Europe/Paris") if b"Europe/Paris" in raw else 10] ^= 0x20
    target["raw"] = base64.b64encode(bytes(raw)).decode()
    _write(bdir, "records.jsonl", docs, rehash=False)
    problems = _problems(bdir)
    assert ("file_hash_mismatch", None, None) in problems
    assert ("modified", ids[0], target["seq"]) in problems


def test_record_modified_with_its_file_hash_recomputed(bundle) -> None:
    bdir, ids = bundle
    docs = _lines(bdir / "records.jsonl")
    target = next(d for d in docs if d["session_id"] == ids[1] and d["method"] == "tools/call")
    doc = json.loads(base64.b64decode(target["raw"]))
    doc["params"]["arguments"]["timezone"] = "America/New_York"
    target["raw"] = base64.b64encode(json.dumps(doc).encode()).decode()
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert _problems(bdir) == [("modified", ids[1], target["seq"])]


def test_record_removed(bundle) -> None:
    bdir, ids = bundle
    docs = _lines(bdir / "records.jsonl")
    victim = next(d for d in docs if d["session_id"] == ids[0] and d["seq"] == 5)
    docs.remove(victim)
    _write(bdir, "records.jsonl", docs, rehash=False)
    problems = _problems(bdir)
    assert ("file_hash_mismatch", None, None) in problems
    assert ("missing", ids[0], 5) in problems
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert ("missing", ids[0], 5) in _problems(bdir)


def test_tail_removed_from_an_open_session_is_truncation(bundle) -> None:
    bdir, ids = bundle
    docs = [
        d
        for d in _lines(bdir / "records.jsonl")
        if not (d["session_id"] == ids[2] and d["seq"] >= 8)
    ]
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert _problems(bdir) == [("truncated", ids[2], 8)]


def test_seal_and_tail_removed_is_truncation(bundle) -> None:
    bdir, ids = bundle
    docs = _lines(bdir / "records.jsonl")
    last = max(d["seq"] for d in docs if d["session_id"] == ids[0])
    docs = [d for d in docs if not (d["session_id"] == ids[0] and d["seq"] >= last - 1)]
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert next(p for p, sid, _ in _problems(bdir) if sid == ids[0]) == "truncated"


def test_reordered_records(bundle) -> None:
    bdir, ids = bundle
    docs = _lines(bdir / "records.jsonl")
    i = next(i for i, d in enumerate(docs) if d["session_id"] == ids[0] and d["seq"] == 4)
    docs[i], docs[i + 1] = docs[i + 1], docs[i]
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert _problems(bdir) == [("reordered", ids[0], 4)]


def test_records_swapped_with_their_seq_kept(bundle) -> None:
    """The two records trade places but keep the seq of the place: the chain names it."""
    bdir, ids = bundle
    docs = _lines(bdir / "records.jsonl")
    i = next(i for i, d in enumerate(docs) if d["session_id"] == ids[0] and d["seq"] == 4)
    a, b = docs[i], docs[i + 1]
    for key in ("position", "seq"):
        a[key], b[key] = b[key], a[key]
    docs[i], docs[i + 1] = b, a
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert ("reordered", ids[0], 4) in _problems(bdir)


@pytest.mark.parametrize("stem", ["records", "sessions", "decisions"])
def test_file_missing(bundle, stem: str) -> None:
    bdir, _ = bundle
    (bdir / f"{stem}.jsonl").unlink()
    assert ("file_missing", None, None) in _problems(bdir)
    report = verify_export(bdir)
    assert any(f.file == f"{stem}.jsonl" for f in report.findings)


def test_manifest_missing(bundle) -> None:
    bdir, _ = bundle
    (bdir / "manifest.json").unlink()
    assert _problems(bdir) == [("manifest_missing", None, None)]


def test_derived_field_modified_is_caught(bundle) -> None:
    bdir, ids = bundle
    docs = _lines(bdir / "records.jsonl")
    target = next(d for d in docs if d["session_id"] == ids[0] and d["tool"])
    target["tool"] = "delete_everything"
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert _problems(bdir) == [("field_modified", ids[0], target["seq"])]


def test_session_removed_whole(bundle) -> None:
    bdir, ids = bundle
    docs = [d for d in _lines(bdir / "records.jsonl") if d["session_id"] != ids[1]]
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert ("session_missing", ids[1], None) in _problems(bdir)


def test_decision_row_altered(bundle) -> None:
    bdir, _ids = bundle
    docs = _lines(bdir / "decisions.jsonl")
    docs[0]["final"] = "deny"
    _write(bdir, "decisions.jsonl", docs, rehash=True)
    assert _problems(bdir) == [("decisions_mismatch", docs[0]["session_id"], docs[0]["seq"])]


def test_sessions_row_altered(bundle) -> None:
    bdir, ids = bundle
    docs = _lines(bdir / "sessions.jsonl")
    docs[0]["records"] = 3
    _write(bdir, "sessions.jsonl", docs, rehash=True)
    assert _problems(bdir) == [("sessions_mismatch", ids[0], None)]


# -- redacted bundles -------------------------------------------------------------------------


@pytest.fixture
def redacted_bundle(sqlite_url: str, tmp_path: Path):
    store = open_store(sqlite_url)
    sid = record_session(store, time.time_ns(), era="2026-07-28", secrets=True, calls=2)
    export_bundle(store, tmp_path / "r", fmt="jsonl", redactor=Redactor.default(key=b"k"))
    store.close()
    return tmp_path / "r", sid


def test_redacted_bundle_hides_secrets_and_verifies(redacted_bundle) -> None:
    bdir, _ = redacted_bundle
    text = b"".join(base64.b64decode(d["raw"]) for d in _lines(bdir / "records.jsonl")) + b"".join(
        p.read_bytes() for p in bdir.iterdir()
    )
    for secret in SECRETS.values():
        assert secret.encode() not in text
    report = verify_export(bdir)
    assert report.ok and report.records_attested > 0 and report.records_rehashed > 0


def test_redacted_bundle_still_catches_an_unredacted_record_modified(redacted_bundle) -> None:
    bdir, sid = redacted_bundle
    docs = _lines(bdir / "records.jsonl")
    target = next(d for d in docs if not d["redacted"] and d["kind"] == Kind.STDERR)
    target["raw"] = base64.b64encode(b'{"line":"all good"}').decode()
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert _problems(bdir) == [("modified", sid, target["seq"])]


def test_redacted_record_removed_is_caught(redacted_bundle) -> None:
    bdir, sid = redacted_bundle
    docs = _lines(bdir / "records.jsonl")
    victim = next(d for d in docs if d["redacted"])
    docs.remove(victim)
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert ("missing", sid, victim["seq"]) in _problems(bdir)


def test_redacted_record_with_a_forged_hash_is_caught(redacted_bundle) -> None:
    bdir, sid = redacted_bundle
    docs = _lines(bdir / "records.jsonl")
    i = next(i for i, d in enumerate(docs) if d["redacted"])
    docs[i]["hash"] = hashlib.sha256(b"forged").hexdigest()
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert ("modified", sid, docs[i + 1]["seq"]) in _problems(bdir)


def test_marking_a_changed_record_as_redacted_is_caught(redacted_bundle) -> None:
    bdir, sid = redacted_bundle
    docs = _lines(bdir / "records.jsonl")
    target = next(d for d in docs if not d["redacted"] and d["kind"] == Kind.STDERR)
    target["raw"] = base64.b64encode(b'{"line":"nothing happened"}').decode()
    target["redacted"] = True
    _write(bdir, "records.jsonl", docs, rehash=True)
    assert _problems(bdir) == [("redaction_mismatch", sid, None)]


def test_a_session_broken_in_the_store_is_refused_or_exported_and_flagged(
    sqlite_url: str, tmp_path: Path
) -> None:
    from sqlalchemy import create_engine, text

    store = open_store(sqlite_url)
    now = time.time_ns()
    good = record_session(store, now - DAY_NS)
    bad = record_session(store, now)
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TRIGGER events_no_update"))
        conn.execute(
            text(f"UPDATE events SET raw = :r WHERE {OF_S} AND seq = 3"),
            {"r": b'{"jsonrpc":"2.0","id":1,"result":{}}', "s": bad},
        )
    engine.dispose()
    with pytest.raises(ExportError, match=f"1 session.s. fail verification .*{bad}.*modified"):
        export_bundle(store, tmp_path / "refused", fmt="jsonl")
    assert not (tmp_path / "refused").exists()
    result = export_bundle(store, tmp_path / "b", fmt="jsonl", include_broken=True)
    assert result.broken == [bad]
    assert result.manifest["sessions"][bad]["chain_intact_at_export"] is False
    assert result.manifest["sessions"][good]["chain_intact_at_export"] is True
    assert result.manifest["chain_coverage"]["broken_in_store"] == [bad]
    # The raw no longer matches its hash, nor the fields the store derived from the original.
    assert result.manifest["sessions"][bad]["store_findings"][0]["problem"] == "modified"
    assert _problems(tmp_path / "b") == [
        ("broken_in_store", bad, 3),
        ("modified", bad, 3),
        ("field_modified", bad, 3),
    ]


def test_unwritable_destination_is_one_clear_error(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    record_session(store, time.time_ns())
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ExportError, match="exists and is not a directory"):
        export_bundle(store, tmp_path / "file.txt")
    with pytest.raises(ExportError, match="cannot create"):
        export_bundle(store, tmp_path / "file.txt" / "bundle")


def test_a_record_stored_before_the_derived_views_were_fitted_exports_and_verifies(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite store of an older version holds NUL in a derived text and an era of any length;
    its bundle verifies, as `blackbox verify` does in the store, and a real edit is still caught."""
    from blackbox.recorder.log import jsonrpc
    from blackbox.recorder.log.model import NewEvent
    from blackbox.recorder.store import sql_append

    store = open_store(sqlite_url)
    sid = record_session(store, time.time_ns() - DAY_NS, ended=False)
    head = store.head(sid)[0]
    era = "2025-06-18" * 5
    odd = [
        b'{"jsonrpc":"2.0","id":"a\\u0000","method":"m\\u0000"}',
        b'{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"%s"}}'
        % era.encode(),
    ]
    with monkeypatch.context() as patch:  # the derivation as it was
        patch.setattr(jsonrpc, "fit_text", lambda value: value)
        patch.setattr(sql_append, "derived_columns", lambda raw: (*jsonrpc.classify(raw)[:8], None))
        patch.setattr(jsonrpc, "fit_era", lambda value: value if isinstance(value, str) else None)
        store.append(
            [
                NewEvent(sid, head + i, time.time_ns(), i, Kind.FRAME, "c2s", raw)
                for i, raw in enumerate(odd, start=1)
            ]
        )
    stored = list(store.read_session(sid))[-2:]
    assert [(e.method, e.era) for e in stored] == [("m\x00", None), ("initialize", era)]
    export_bundle(store, tmp_path / "b", Selection(session_ids=(sid,)), fmt="jsonl")
    assert verify_export(tmp_path / "b").ok
    docs = _lines(tmp_path / "b" / "records.jsonl")
    target = next(d for d in docs if d["seq"] == head + 2)
    target["method"] = "tools/call"
    _write(tmp_path / "b", "records.jsonl", docs, rehash=True)
    assert _problems(tmp_path / "b") == [("field_modified", sid, head + 2)]
