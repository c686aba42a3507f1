"""A journal is shipped only to the store it was written for. The attack: tap A, whose store is
unusable, leaves its journal behind; tap B, with another store, starts and ends in the same
journal directory. B's store must get none of A's records; A's journal stays until `blackbox ship
--store A` ships it to A; `blackbox ship` with B's store lists it as another store's."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from blackbox.recorder.capture.journal import Journal, StoreMark, read_journal, read_store_mark
from blackbox.recorder.capture.leftovers import ship_leftovers
from blackbox.recorder.errors import StoreMissing
from blackbox.recorder.store import open_store, public_url
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.environment import PG_URL
from tests.fixtures.polling import eventually

pytestmark = pytest.mark.timeout(300)

ECHO = [peers.PYTHON, "-c", "import sys\nfor line in sys.stdin: print(line, end='', flush=True)"]


def frame(i: int, marker: str) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"m":"%s"}}\n' % (i, marker.encode())


def run_tap(env: dict[str, str], store: str, marker: str) -> subprocess.CompletedProcess[bytes]:
    argv = peers.record_command(ECHO, "tap", store, "--final-ship-seconds=0.5")
    lines = b"".join(frame(i, marker) for i in range(1, 6))
    done = subprocess.run(argv, input=lines, capture_output=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout == lines, done.stderr
    return done


def stop_hand_off(stderr: bytes) -> None:
    """End the detached shipper the unusable store's tap started (by its pid, which it printed):
    it would retry for minutes."""
    text_ = stderr.decode()
    if "(pid " not in text_:
        return
    pid = int(text_.split("(pid ", 1)[1].split(")", 1)[0])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _dead(pid):
        time.sleep(0.05)


def _dead(pid: int) -> bool:
    """Whether `pid` is gone or a zombie: a killed zombie does nothing more, and the detached
    shipper's parent is init, which here reaps only every two seconds or so."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def frames_with(store_url: str, marker: str) -> int:
    store = open_store(store_url, create=False)
    try:
        return sum(
            marker.encode() in ev.raw
            for info in store.list_sessions()
            for ev in store.read_session(info.session_id)
        )
    finally:
        store.close()


def stored_yet(store_url: str, marker: str) -> int:
    """`frames_with`, while the tap's worker may still be creating the store."""
    try:
        return frames_with(store_url, marker)
    except StoreMissing:
        return -1


def blackbox(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # In this process: the question is what `ship` prints and where it ships, not its process.
    return run_blackbox(*args, env=env)


@pytest.fixture
def missing_pg_database() -> Iterator[str]:
    """The URL of a PostgreSQL database that does not exist yet (a store that cannot be used
    until someone creates it); dropped at the end."""
    admin_url = make_url(PG_URL).set(drivername="postgresql+psycopg")
    name = f"bbmissing_{os.getpid()}_{secrets.token_hex(3)}"
    yield admin_url.set(database=name).render_as_string(hide_password=False)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def create_pg_database(url: str) -> None:
    parsed = make_url(url)
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{parsed.database}"'))
    admin.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_dead_taps_journal_never_lands_in_another_taps_store(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    home = tmp_path / "home"
    env = dict(os.environ, BLACKBOX_HOME=str(home))
    env.pop("BLACKBOX_STORE", None)
    if backend == "sqlite":
        blocker = tmp_path / "blocked"
        blocker.write_text("a file where the store's directory should be")
        store_a = f"sqlite:///{blocker / 'a.db'}"
        store_b = f"sqlite:///{tmp_path / 'b.db'}"

        def make_a_usable() -> None:
            blocker.unlink()
    else:
        store_a = request.getfixturevalue("missing_pg_database")
        store_b = request.getfixturevalue("pg_url")

        def make_a_usable() -> None:
            create_pg_database(store_a)

    tap_a = run_tap(env, store_a, "from-A")
    stop_hand_off(tap_a.stderr)
    journal_dir = home / "journal"
    left = sorted(journal_dir.iterdir())
    assert left, "tap A shipped into an unusable store?"
    assert {read_store_mark(p) for p in left} == {StoreMark.for_url(store_a)}
    records_a = sum(len(list(read_journal(p))) for p in left)
    assert records_a >= 10

    # B ships its own journal (through its worker or a hand-off, which both run the leftovers
    # pass over the directory too) and deletes it: only then is B done with the directory.
    run_tap(env, store_b, "from-B")
    eventually(lambda: stored_yet(store_b, "from-B") == 10, timeout=60, message="B stored")
    eventually(
        lambda: not set(journal_dir.iterdir()) - set(left), timeout=60, message="B's journal gone"
    )
    assert frames_with(store_b, "from-A") == 0
    assert sorted(journal_dir.iterdir()) == left

    listing = blackbox(env, "ship", "--store", store_b)
    assert listing.returncode == 0, listing.stderr
    assert "shipped 0 records from 0 journal(s)" in listing.stdout
    tap_id = left[0].name.split(".")[0]
    mark = StoreMark.for_url(store_a)
    assert f"journal {tap_id} is for another store, {public_url(store_a)}" in listing.stdout
    assert mark.short in listing.stdout
    assert frames_with(store_b, "from-A") == 0
    assert sorted(journal_dir.iterdir()) == left

    make_a_usable()
    shipped = blackbox(env, "ship", "--store", store_a)
    assert shipped.returncode == 0, shipped.stderr
    assert f"shipped {records_a} records from 1 journal(s)" in shipped.stdout
    assert frames_with(store_a, "from-A") == 10
    assert frames_with(store_a, "from-B") == 0
    assert not list(journal_dir.iterdir())
    store = open_store(store_a, create=False)
    assert store.verify() == []


def test_the_store_mark_holds_no_credentials(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = dict(os.environ, BLACKBOX_HOME=str(home))
    url = "postgresql://postgres:hunter2-pw@127.0.0.1:1/x?sslpassword=s3cr3t-ssl&options=-cx%3Dy"
    tap = run_tap(env, url, "secretive")
    stop_hand_off(tap.stderr)
    (segment,) = (home / "journal").iterdir()
    data = segment.read_bytes()
    assert b"hunter2-pw" not in data and b"s3cr3t-ssl" not in data
    mark = read_store_mark(segment)
    assert mark == StoreMark.for_url("postgresql+psycopg://postgres@127.0.0.1:1/x?options=-cx%3Dy")
    assert (
        mark is not None
        and mark.url == "postgresql+psycopg://postgres@127.0.0.1:1/x?options=-cx%3Dy"
    )


def test_spellings_of_one_store_share_a_mark_and_other_stores_do_not(tmp_path: Path) -> None:
    same = [
        f"sqlite:///{tmp_path / 'x.db'}",
        f"sqlite:///{tmp_path / 'sub' / '..' / 'x.db'}?timeout=3",
    ]
    assert len({StoreMark.for_url(u) for u in same}) == 1
    pg = [
        "postgresql://me:one@DB.example/bb",
        "postgresql+psycopg://me:two@db.example:5432/bb",
        "postgresql://me@db.example/bb?password=three",
    ]
    assert len({StoreMark.for_url(u) for u in pg}) == 1
    others = [
        f"sqlite:///{tmp_path / 'y.db'}",
        "postgresql://me@db.example/other",
        "postgresql://me@db.example/bb?options=-csearch_path%3Dt_1",
        "postgresql://me@db.example/bb?options=-csearch_path%3Dt_2",
        "postgresql://me@db.example:5433/bb",
    ]
    marks = {StoreMark.for_url(u) for u in [same[0], pg[0], *others]}
    assert len(marks) == 2 + len(others)


def test_unmarked_journals_wait_for_blackbox_ship(store_url: str, tmp_path: Path) -> None:
    """A journal from before the store mark names no store: a tap's pass leaves it (it may be
    another store's), `blackbox ship` ships it into the store its user names."""
    directory = tmp_path / "journal"
    code = f"""
import os
from pathlib import Path
from blackbox.recorder.errors import StoreMissing
from blackbox.recorder.capture.journal import Journal
j = Journal.create(Path({str(directory)!r}))
j.append("old", "session_started", "-", b'{{"name":"old"}}')
j.append("old", "frame", "c2s", b'{{"jsonrpc":"2.0","id":1,"method":"ping"}}')
os._exit(0)
"""
    subprocess.run([peers.PYTHON, "-c", code], check=True, timeout=30)
    (segment,) = directory.iterdir()
    assert read_store_mark(segment) is None
    store = open_store(store_url)
    tap_pass = ship_leftovers(directory, store)
    assert tap_pass.journals == 0 and [mark for _tap, mark in tap_pass.others] == [None]
    assert store.list_sessions() == [] and segment.exists()
    explicit = ship_leftovers(directory, store, unmarked=True)
    assert explicit.journals == 1 and explicit.records == 2 and explicit.recovered == ["old"]
    assert not segment.exists()
    assert store.verify() == []


def test_every_segment_is_marked_and_readers_skip_the_mark(sqlite_url: str, tmp_path: Path) -> None:
    mark = StoreMark.for_url(sqlite_url)
    journal = Journal.create(tmp_path / "j", segment_bytes=300, store=mark)
    for i in range(20):
        journal.append("s", "frame", "c2s", b'{"jsonrpc":"2.0","id":%d}' % i)
    segments = journal.segments()
    assert len(segments) > 3
    assert all(read_store_mark(p) == mark for p in segments)
    seqs = [ev.seq for p in segments for ev in read_journal(p)]
    assert seqs == list(range(1, 21))
    # A segment whose mark was never completely written holds nothing and reads as unmarked.
    torn = tmp_path / "j" / "0190aaaa-0000-7000-8000-000000000000.000000.journal"
    torn.write_bytes(mark.encode()[:10])
    assert read_store_mark(torn) is None and list(read_journal(torn)) == []
