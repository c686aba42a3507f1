"""A batch the store refuses is salvaged: the refused record is found, the rest is stored, and the
refused record is kept (as a `store_refused` fault with its bytes, or in a refused file), on both
databases. The refusal is forced here (a monkeypatched derivation raising for one frame), since
no frame is refused any more by construction; the hostile frames themselves are driven through
the real taps in test_hostile_frames.py."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from blackbox.recorder.capture import salvage
from blackbox.recorder.capture.salvage import append_salvaging, keep_unstored, refused_files
from blackbox.recorder.errors import StoreUnavailable
from blackbox.recorder.log.model import Direction, Kind, NewEvent
from blackbox.recorder.store import open_store, sql_append
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.documents import document
from tests.fixtures.storekit import T0, session_events

POISON = b'{"jsonrpc":"2.0","id":99,"method":"poison"}'


def poisoned(real):  # type: ignore[no-untyped-def]
    def derive(raw: bytes) -> tuple:  # type: ignore[type-arg]
        if raw == POISON:
            raise ValueError("a row this database will not take")
        return real(raw)

    return derive


def test_one_refused_record_costs_neither_its_batch_nor_its_session(store_url, monkeypatch):
    store = open_store(store_url)
    first = session_events(calls=2, ended=False)
    other = session_events(calls=2, ended=True, start_ns=T0 + 1)
    sid = first[0].session_id
    bad = NewEvent(sid, len(first) + 1, T0 + 5, 5, Kind.FRAME, Direction.CLIENT_TO_SERVER, POISON)
    tail = session_events(session_id=sid, calls=3, ended=True)[len(first) :]
    assert [e.kind for e in tail][-1] == Kind.SESSION_ENDED and len(tail) == 3
    after = [
        NewEvent(sid, len(first) + 1 + i, T0 + 6 + i, 6 + i, e.kind, e.direction, e.raw)
        for i, e in enumerate(tail, start=1)
    ]
    batch = [*first, bad, *after, *other]
    monkeypatch.setattr(sql_append, "derived_columns", poisoned(sql_append.derived_columns))
    with pytest.raises(Exception, match="will not take"):
        store.append(batch)  # the attack: one record used to fail the whole batch
    result = append_salvaging(store, batch)
    assert result.stored == len(batch) - 1
    assert [(s, q) for s, q, _why in result.substituted] == [(sid, bad.seq)]
    assert result.unstored == []
    assert "will not take" in result.summary()
    mine = list(store.read_session(sid))
    # Every record of the session, the fault in the refused one's place, and the store's seal.
    assert [e.seq for e in mine] == list(range(1, len(first) + 1 + len(after) + 2))
    fault = mine[bad.seq - 1]
    assert fault.kind == Kind.FAULT
    doc = document(fault)
    assert doc["fault"] == "store_refused" and doc["seq"] == bad.seq
    assert base64.b64decode(doc["raw_base64"]) == POISON
    assert mine[-1].kind == Kind.SESSION_SEALED  # the session went on and was closed
    assert store.session(other[0].session_id).sealed
    assert store.verify() == []
    store.close()


def test_a_record_no_store_takes_is_kept_in_a_refused_file(store_url, tmp_path: Path):
    store = open_store(store_url)
    events = session_events(calls=1, ended=True)
    store.append(events)
    sid = events[0].session_id
    sealed_seq = store.session(sid).last_seq
    late = NewEvent(sid, sealed_seq + 1, T0 + 9, 9, Kind.FRAME, Direction.SERVER_TO_CLIENT, b"{}")
    result = append_salvaging(store, [late])
    assert result.stored == 0 and result.substituted == []
    assert [ev for ev, _why in result.unstored] == [late]
    kept = keep_unstored(tmp_path / "refused", result.unstored)
    assert kept is not None and refused_files(tmp_path / "refused") == [kept]
    assert kept.stat().st_mode & 0o777 == 0o600
    (line,) = kept.read_text().splitlines()
    doc = json.loads(line)
    assert (doc["session_id"], doc["seq"]) == (sid, late.seq)
    assert base64.b64decode(doc["raw_base64"]) == b"{}"
    assert "sealed" in doc["why"]
    assert store.verify() == []
    store.close()


def test_a_store_that_is_down_is_not_blamed_on_a_record():
    class Down:
        url = "sqlite:///nowhere"

        def append(self, batch):  # type: ignore[no-untyped-def]
            raise StoreUnavailable("the store is down")

    with pytest.raises(StoreUnavailable):
        append_salvaging(Down(), session_events(calls=1))  # type: ignore[arg-type]
    assert salvage.REFUSED_DIR == "refused"


def test_ship_stores_around_a_refused_record_and_where_and_doctor_name_what_no_store_took(
    store_url, tmp_path: Path, monkeypatch
):
    """The journal of a dead tap holding a record the store refuses (poisoned here) and one it
    can never take (a frame of a session the store has sealed): `ship` exits 0, says what it
    degraded, the journal is gone (not retried forever), and `where` and `doctor` name the
    refused file."""
    home = tmp_path / "home"
    closed = session_events(calls=1, ended=True)  # stored and sealed before the tap died
    done = closed[0].session_id
    open_store(store_url).append(closed)
    code = f"""
import os
from pathlib import Path
from blackbox.recorder.capture.journal import Journal, StoreMark
j = Journal.create(Path({str(home / "journal")!r}), 500, StoreMark.for_url({store_url!r}))
j.append("dead", "session_started", "-", b'{{"name":"dead","transport":"stdio"}}')
j.append("dead", "frame", "c2s", {POISON!r})
j.append("dead", "frame", "c2s", b'{{"jsonrpc":"2.0","id":1,"method":"ping"}}')
for i in range({len(closed) + 2}):  # seq past the store's seal: one the store never takes
    j.append({done!r}, "frame", "s2c", b'{{"jsonrpc":"2.0","id":7,"result":{{}}}}')
os._exit(0)  # dies without closing or shipping: the files stay behind
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    monkeypatch.setenv("BLACKBOX_HOME", str(home))
    monkeypatch.setenv("BLACKBOX_STORE", store_url)
    monkeypatch.setattr(sql_append, "derived_columns", poisoned(sql_append.derived_columns))
    shipped = CliRunner().invoke(main, ["ship"])
    assert shipped.exit_code == 0, shipped.output
    degraded = [line for line in shipped.output.splitlines() if line.startswith("degraded:")]
    assert len(degraded) == 2, shipped.output
    assert not any(p.is_file() for p in (home / "journal").iterdir()), "the journal is done"
    store = open_store(store_url)
    dead = list(store.read_session("dead"))
    assert document(dead[1])["fault"] == "store_refused"
    assert base64.b64decode(document(dead[1])["raw_base64"]) == POISON
    assert dead[2].raw == b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    assert store.verify() == []
    where = CliRunner().invoke(main, ["where"])
    assert where.exit_code == 0 and "refused:   1 file(s)" in where.output, where.output
    doctor = CliRunner().invoke(main, ["doctor", "dead"])
    assert "store_refused" in doctor.output, doctor.output
    assert "1 file(s) of records no store would take" in doctor.output, doctor.output
    assert CliRunner().invoke(main, ["ship"]).exit_code == 0  # nothing stuck: a second run is calm
