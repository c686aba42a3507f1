"""The shipper: journal records reach the store in order, segments are trimmed, outages are retried,
and leftovers of dead taps are shipped and closed as recovered."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from blackbox.recorder.capture.journal import Journal
from blackbox.recorder.capture.leftovers import ship_leftovers
from blackbox.recorder.capture.shipper import Shipper
from blackbox.recorder.errors import StoreUnavailable
from blackbox.recorder.log import events
from blackbox.recorder.store import open_store


def test_ships_everything_in_order_and_trims_segments(store_url: str, tmp_path: Path) -> None:
    journal = Journal.create(tmp_path / "j", segment_bytes=4000)
    notices: list[str] = []
    shipper = Shipper(journal, lambda: open_store(store_url), notices.append, batch_records=50)
    shipper.start()
    journal.append("s1", "session_started", "-", b'{"name":"t","transport":"stdio"}')
    raws = [json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}).encode() for i in range(300)]
    for raw in raws:
        journal.append("s1", "frame", "c2s", raw)
    assert shipper.flush(30)
    assert len(journal.segments()) <= 2  # fully shipped segments were deleted while running
    journal.append("s1", "session_ended", "-", b'{"reason":"client_closed","outcome":"ok"}')
    journal.close()
    assert shipper.stop(30)
    assert not list((tmp_path / "j").iterdir())
    store = open_store(store_url)
    stored = list(store.read_session("s1"))
    assert [ev.raw for ev in stored if ev.kind == "frame"] == raws
    assert [ev.seq for ev in stored] == list(range(1, 304))
    assert store.session("s1").sealed
    assert store.verify("s1") == []
    assert notices == []


def test_outage_is_reported_once_and_retried(sqlite_url: str, tmp_path: Path) -> None:
    journal = Journal.create(tmp_path / "j")
    notices: list[str] = []
    up = threading.Event()

    def factory():  # type: ignore[no-untyped-def]
        if not up.is_set():
            raise StoreUnavailable("store X is unreachable (is PostgreSQL running there?)")
        return open_store(sqlite_url)

    shipper = Shipper(journal, factory, notices.append, poll_seconds=0.01)
    shipper.start()
    for i in range(20):
        journal.append("s", "frame", "c2s", b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % i)
    assert not shipper.flush(0.8)
    assert len(notices) == 1 and "unreachable" in notices[0] and "retrying" in notices[0]
    up.set()
    assert shipper.flush(15)
    assert len(notices) == 2 and "store back" in notices[1]
    assert len(list(open_store(sqlite_url).read_session("s"))) == 20
    journal.close()
    assert shipper.stop(5)


def test_observer_sees_each_record_once(sqlite_url: str, tmp_path: Path) -> None:
    journal = Journal.create(tmp_path / "j")
    seen: list[int] = []
    shipper = Shipper(
        journal,
        lambda: open_store(sqlite_url),
        lambda _m: None,
        lambda b: seen.extend(e.seq for e in b),
    )
    for i in range(10):
        journal.append("s", "frame", "c2s", b"{}" * i)
    shipper.observe_rest()
    shipper.start()
    journal.append("s", "frame", "c2s", b"{}")
    assert shipper.flush(10)
    shipper.observe_rest()
    assert seen == list(range(1, 12))
    journal.close()
    assert shipper.stop(5)


def test_a_failure_outside_the_store_is_told_and_the_journal_kept(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Only the store's failures are retried; anything else that stops the shipping thread
    (here its observer) is one notice naming the journal, not a thread's traceback."""
    journal = Journal.create(tmp_path / "j")
    notices: list[str] = []

    def observer(_batch) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("the observer broke")

    shipper = Shipper(journal, lambda: open_store(sqlite_url), notices.append, observer)
    shipper.start()
    journal.append("s", "frame", "c2s", b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    journal.close()
    assert not shipper.stop(5)
    assert len(notices) == 1
    assert notices[0].startswith("shipping stopped: RuntimeError: the observer broke")
    assert str(tmp_path / "j") in notices[0]
    assert journal.segments(), "the unshipped records stay in the journal"


def test_ship_leftovers_ships_dead_journals_and_skips_live_ones(
    store_url: str, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    code = f"""
import os
from pathlib import Path
from blackbox.recorder.capture.journal import Journal, StoreMark
j = Journal.create(Path({str(directory)!r}), 500, StoreMark.for_url({store_url!r}))
j.append("dead", "session_started", "-", b'{{"name":"dead","transport":"stdio"}}')
for i in range(40):
    j.append("dead", "frame", "c2s", b'{{"jsonrpc":"2.0","id":%d,"method":"ping"}}' % i)
j.append("done", "session_started", "-", b'{{"name":"done"}}')
j.append("done", "session_ended", "-", b'{{"reason":"client_closed","outcome":"ok"}}')
os._exit(0)  # dies without closing or shipping: the files stay behind
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    live = Journal.create(directory)
    live.append("live", "frame", "c2s", b"{}")
    assert len(list(directory.iterdir())) > 3
    store = open_store(store_url)
    progress: list[str] = []
    report = ship_leftovers(directory, store, progress.append)
    assert report.journals == 1 and report.live == 1
    assert report.records == 43
    assert report.recovered == ["dead"]
    assert sorted(directory.iterdir()) == live.segments()
    dead = list(store.read_session("dead"))
    assert [ev.kind for ev in dead][-2:] == ["session_ended", "session_sealed"]
    assert json.loads(dead[-2].raw)["reason"] == "recovered"
    assert store.session("dead").outcome == "recovered"
    assert store.session("done").outcome == "ok"
    assert store.verify() == []
    assert progress and "43" in progress[0]
    # idempotent: nothing left to do
    assert ship_leftovers(directory, store).journals == 0


def test_ship_leftovers_on_missing_directory(sqlite_url: str, tmp_path: Path) -> None:
    report = ship_leftovers(tmp_path / "nothing", open_store(sqlite_url))
    assert report.journals == 0 and report.records == 0


def test_worker_process_ships_and_is_replaced_when_it_dies(sqlite_url: str, tmp_path: Path) -> None:
    journal = Journal.create(tmp_path / "j")
    notices: list[str] = []
    shipper = Shipper(
        journal,
        lambda: open_store(sqlite_url),
        notices.append,
        poll_seconds=0.01,
        worker_url=sqlite_url,
    )
    shipper.start()
    for i in range(10):
        journal.append("w", "frame", "c2s", b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % i)
    assert shipper.flush(60)
    worker = shipper._worker
    assert worker is not None
    worker.proc.kill()
    worker.proc.wait(10)
    for i in range(10, 20):
        journal.append("w", "frame", "c2s", b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % i)
    assert shipper.flush(60)
    assert shipper._worker is not worker
    stored = list(open_store(sqlite_url).read_session("w"))
    assert [ev.seq for ev in stored] == list(range(1, 21))
    assert len(notices) == 2 and "exited" in notices[0] and "store back" in notices[1]
    journal.close()
    assert shipper.stop(10)
    assert not list((tmp_path / "j").iterdir())


def test_worker_process_observes_what_it_ships(sqlite_url: str, tmp_path: Path) -> None:
    """With a worker, the observer runs in the worker process: its events come back to this
    process's journal, and the outstanding requests are taken over at the end."""
    from blackbox.recorder.capture.observer import FrameObserver

    journal = Journal.create(tmp_path / "j", segment_bytes=2000)
    emitted: list[tuple[str, str, dict]] = []

    def emit(sid: str, doc: events.Document) -> None:
        emitted.append((sid, doc.KIND, events.as_dict(doc)))
        journal.append(sid, doc.KIND, "-", events.encode(doc))

    observer = FrameObserver(emit)
    shipper = Shipper(
        journal, lambda: open_store(sqlite_url), lambda _m: None, observer, worker_url=sqlite_url
    )
    shipper.start()
    call = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo"}}'
    for i in range(1, 40):  # several segments
        journal.append("o", "frame", "c2s", call % i)
        journal.append("o", "frame", "s2c", b'{"jsonrpc":"2.0","id":%d,"result":{}}' % i)
    journal.append("o", "frame", "s2c", b"a log line on stdout")
    assert shipper.flush(60)
    journal.append("o", "frame", "c2s", call % 40)  # not shipped yet: observed at the end
    shipper.observe_rest()
    assert [(kind, doc["fault"]) for _sid, kind, doc in emitted] == [("fault", "stdout_pollution")]
    pending = observer.outstanding()
    assert [(p["id"], p["method"], p["tool"]) for p in pending] == [("40", "tools/call", "echo")]
    journal.close()
    assert shipper.stop(30)
    stored = list(open_store(sqlite_url).read_session("o"))
    assert [ev.seq for ev in stored] == list(range(1, len(stored) + 1))
    assert any(ev.kind == "fault" for ev in stored)
