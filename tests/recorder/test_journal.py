"""The journal: one write per record, gapless seq per session, torn tails tolerated, fail closed."""

from __future__ import annotations

import fcntl
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from blackbox.recorder.capture.journal import HEADER, Journal, JournalError, read_journal


def test_append_assigns_gapless_seq_per_session_and_reads_back(tmp_path: Path) -> None:
    journal = Journal.create(tmp_path / "j")
    assert journal.path.parent == tmp_path / "j"
    assert journal.next_seq("a") == 1
    assert journal.append("a", "frame", "c2s", b'{"x":1}', wall_ns=10, mono_ns=0) == 1
    assert journal.append("b", "frame", "s2c", b"not json \xff") == 1
    assert journal.append("a", "fault", "-", b"{}", raw_size=99) == 2
    assert journal.next_seq("a") == 3
    journal.close()
    events = list(read_journal(journal.path))
    assert [(e.session_id, e.seq, e.kind, e.direction, e.raw) for e in events] == [
        ("a", 1, "frame", "c2s", b'{"x":1}'),
        ("b", 1, "frame", "s2c", b"not json \xff"),
        ("a", 2, "fault", "-", b"{}"),
    ]
    assert events[0].wall_ns == 10 and events[0].mono_ns == 0
    assert events[0].raw_size is None and events[2].raw_size == 99
    assert events[2].mono_ns >= 0


def test_torn_last_record_is_ignored(tmp_path: Path) -> None:
    journal = Journal.create(tmp_path)
    journal.append("s", "frame", "c2s", b"a" * 100)
    journal.append("s", "frame", "c2s", b"b" * 100)
    journal.close()
    size = journal.path.stat().st_size
    record = size // 2
    for cut in (size - 1, size - 60, record + HEADER.size - 1, record + 1):
        with open(journal.path, "r+b") as f:
            f.truncate(cut)
        assert [e.raw for e in read_journal(journal.path)] == [b"a" * 100]


def test_big_frame_kept_intact(tmp_path: Path) -> None:
    journal = Journal.create(tmp_path)
    big = os.urandom(4 * 1024 * 1024)
    journal.append("s", "frame", "s2c", big)
    assert next(read_journal(journal.path)).raw == big


def test_file_is_locked_while_the_journal_lives(tmp_path: Path) -> None:
    journal = Journal.create(tmp_path)
    with open(journal.path, "rb") as f, pytest.raises(BlockingIOError):
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_rotation_and_release_trim_segments(tmp_path: Path) -> None:
    journal = Journal.create(tmp_path, segment_bytes=1000)
    for _ in range(30):
        journal.append("s", "frame", "c2s", b"x" * 200)
    segments = journal.segments()
    assert len(segments) > 3
    seqs = [e.seq for p in segments for e in read_journal(p)]
    assert seqs == list(range(1, 31))
    journal.release(segments[0])
    assert not segments[0].exists()
    journal.release(segments[-1])  # the live segment is never released
    assert segments[-1].exists()


def test_unwritable_directory_is_a_journal_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        blocker = tmp_path / "file"
        blocker.write_text("")
        with pytest.raises(JournalError, match="cannot write the journal"):
            Journal.create(blocker / "sub")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        with pytest.raises(JournalError, match="permission denied"):
            Journal.create(ro)


def test_file_size_limit_fails_closed_and_leaves_no_torn_record(tmp_path: Path) -> None:
    # RLIMIT_FSIZE stands in for a full disk: the write fails with EFBIG.
    code = f"""
import resource, signal, sys
from pathlib import Path
from blackbox.recorder.capture.journal import Journal, JournalError, read_journal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (5000, 5000))
j = Journal.create(Path({str(tmp_path)!r}))
n = 0
try:
    for _ in range(100):
        j.append("s", "frame", "c2s", b"y" * 700)
        n += 1
except JournalError as exc:
    print(n, exc)
try:
    j.append("s", "frame", "c2s", b"z")
except JournalError:
    print("still failed")
print(len(list(read_journal(j.path))))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    ).stdout.splitlines()
    written = int(out[0].split()[0])
    assert 0 < written < 10
    assert "file size limit" in out[0]
    assert out[1] == "still failed"
    assert int(out[2]) == written
    assert resource and signal  # imported for the child's benefit only


def test_reading_in_chunks_gives_every_record_once_across_chunk_edges_and_limits(
    tmp_path: Path,
) -> None:
    """A reader takes the file a chunk at a time (`READ_CHUNK`) and parses records in place: a
    record that straddles a chunk's end, one larger than a chunk, names that differ only in where
    session id, kind and direction split, and every limit (records, bytes, `until`) give the same
    records as writing them, in order, once."""
    from blackbox.recorder.capture.journal import READ_CHUNK, JournalReader

    journal = Journal.create(tmp_path / "j")
    written = []
    sizes = [1, 100, READ_CHUNK - 70, 3, READ_CHUNK + 5, 7, 2 * READ_CHUNK, 0, 50_000] * 3
    for i, size in enumerate(sizes):
        sid, kind = ("ab", "c") if i % 2 else ("a", "bc")  # same bytes, another split
        raw = bytes([i % 251]) * size
        journal.append(sid, kind, "d", raw)
        written.append((sid, kind, raw))
    ends = []  # each record's end offset, for `until`
    reader = JournalReader(journal.path)
    while reader.read(1):
        ends.append(reader.offset)
    for max_records, max_bytes in ((1000, 8 << 20), (1, 8 << 20), (4, 1), (1000, 60_000)):
        for until in (None, ends[len(ends) // 2]):
            reader = JournalReader(journal.path)
            got = []
            while batch := reader.read(max_records, max_bytes, until=until):
                assert len(batch) <= max_records
                got += [(e.session_id, e.kind, e.raw) for e in batch]
            expected = written if until is None else written[: len(ends) // 2 + 1]
            assert got == expected, (max_records, max_bytes, until)
            assert not reader.torn


def test_a_torn_record_past_a_chunk_is_left_for_the_next_read(tmp_path: Path) -> None:
    """A record cut anywhere (being written now, or the tap died) is not returned, `torn` says so,
    and once the rest is there the next read returns it."""
    from blackbox.recorder.capture.journal import READ_CHUNK, JournalReader

    journal = Journal.create(tmp_path / "j")
    journal.append("s", "frame", "c2s", b"a" * (READ_CHUNK - 10))
    journal.append("s", "frame", "c2s", b"b" * 300)
    journal.close()
    whole = journal.path.read_bytes()
    for cut in (len(whole) - 1, len(whole) - 300, len(whole) - 310, len(whole) - 330):
        journal.path.write_bytes(whole[:cut])
        reader = JournalReader(journal.path)
        assert [e.raw[:1] for e in reader.read()] == [b"a"]
        assert reader.torn
        journal.path.write_bytes(whole)
        assert [e.raw for e in reader.read()] == [b"b" * 300]


def test_a_reader_of_many_sessions_forgets_their_names_and_still_reads_them_right(
    tmp_path: Path,
) -> None:
    """A proxy's journal holds a session per client: the reader keeps the decoded names of at
    most `NAMES_KEPT` between reads, and a record read after they were forgotten is named as it
    was written."""
    from blackbox.recorder.capture.journal import NAMES_KEPT, JournalReader

    journal = Journal.create(tmp_path / "j")
    sessions = [f"s-{i}" for i in range(NAMES_KEPT + 500)]
    for sid in sessions:
        journal.append(sid, "frame", "c2s", sid.encode())
    for sid in sessions:
        journal.append(sid, "frame", "s2c", sid.encode())
    reader = JournalReader(journal.path)
    got = []
    while batch := reader.read(1000):
        got += [(e.session_id, e.direction, e.raw) for e in batch]
        assert len(reader._names) <= NAMES_KEPT + 1000
    assert got == [(s, d, s.encode()) for d in ("c2s", "s2c") for s in sessions]
