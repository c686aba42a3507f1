"""The local write-ahead journal a tap appends every record to before it forwards a frame.

Why it exists: the store may be slow, remote or down, but a tap must never delay traffic for it nor
lose what it forwarded. So a tap writes each record to a local file with ONE `os.writev()` call
(no fsync, no parsing, no hashing), and a shipper (`blackbox.recorder.capture.shipper`) moves
records into the store later. A tap killed with SIGKILL leaves its journal behind; the next tap or
`blackbox ship` ships it.

Layout: one journal per tap process, a sequence of segment files `<tap>.<n>.journal` in one
directory (`<tap>` is a time-ordered id, `<n>` counts from 0). The writer holds an exclusive flock
on every segment it still has open: that is how `ship_leftovers` tells a live tap's files from a
dead one's. When a segment grows past `segment_bytes` the writer rotates to the next one, so the
shipper can delete a segment once everything in it is committed (trimming) while the tap writes.

Store mark: each segment of a journal written for a known store begins with one header naming that
store, so a journal is only ever shipped to the store it was written for
(`blackbox.recorder.capture.leftovers`):

    magic b"\\xbb\\x02" | length u16 | fingerprint (64 hex) | "\\n" | store URL

The fingerprint is the sha256 of the store's URL without credentials
(`blackbox.recorder.store.public_url`), which is the URL kept here. A segment without the header
(written before it existed, or by a library caller that named no store URL) is unmarked: only
`blackbox ship` ships it, into the store its user names. Readers skip the header.

Record format (big-endian), chosen so a reader can skip a torn tail without parsing any payload:

    magic b"\\xbb\\x01" | kind_len u8 | dir_len u8 | sid_len u16 | raw_len u32 |
    seq i64 | wall_ns i64 | mono_ns i64 | raw_size i64 (-1: raw is complete) |
    session id | kind | direction | raw

A record that ends past the end of the file is a torn write (the tap died mid-write, or is writing
it right now); readers stop before it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from blackbox.recorder import BlackboxError, private_dir
from blackbox.recorder.log import NewEvent, new_session_id

MAGIC = b"\xbb\x01"
HEADER = struct.Struct(">2sBBHIqqqq")
MARK_MAGIC = b"\xbb\x02"
MARK_HEADER = struct.Struct(">2sH")
SUFFIX = ".journal"
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
MAX_RAW = 0xFFFFFFFF
# What a reader takes from the file at a time (more when one record is larger).
READ_CHUNK = 256 * 1024
# How many decoded (session id, kind, direction) a reader keeps between reads.
NAMES_KEPT = 4096


class JournalError(BlackboxError):
    """The journal cannot be written (disk full, permission, file too large): the tap must stop
    forwarding rather than let traffic through unrecorded."""


@dataclass(frozen=True)
class StoreMark:
    """The store a journal was written for: `fingerprint`, the sha256 of `url`, the store's URL
    without credentials."""

    fingerprint: str
    url: str

    @classmethod
    def for_url(cls, url: str) -> StoreMark:
        """The mark of the store at `url` (any spelling of it `open_store` takes)."""
        from blackbox.recorder.store import public_url

        public = public_url(url)
        return cls(hashlib.sha256(public.encode()).hexdigest(), public)

    @property
    def short(self) -> str:
        return self.fingerprint[:12]

    def encode(self) -> bytes:
        payload = f"{self.fingerprint}\n{self.url}".encode()[:0xFFFF]
        return MARK_HEADER.pack(MARK_MAGIC, len(payload)) + payload


def _mark_at_start(head: bytes) -> tuple[StoreMark | None, int | None]:
    """The store mark at the start of a segment and where its records begin; (None, 0) when it
    starts with a record (unmarked), (None, None) when the start is not complete yet."""
    if len(head) < len(MARK_MAGIC):
        return None, None
    if head[:2] != MARK_MAGIC:
        return None, 0
    if len(head) < MARK_HEADER.size:
        return None, None
    _magic, length = MARK_HEADER.unpack_from(head)
    end = MARK_HEADER.size + length
    if len(head) < end:
        return None, None
    fingerprint, _nl, url = head[MARK_HEADER.size : end].decode("utf-8", "replace").partition("\n")
    return StoreMark(fingerprint, url), end


def read_store_mark(path: Path) -> StoreMark | None:
    """The store a segment was written for; None when it is unmarked (or has no complete header:
    then it holds no record either)."""
    try:
        with open(path, "rb") as f:
            head = f.read(MARK_HEADER.size + 0xFFFF)
    except OSError:
        return None
    return _mark_at_start(head)[0]


def segment_name(tap_id: str, number: int) -> str:
    return f"{tap_id}.{number:06d}{SUFFIX}"


def parse_segment_name(path: Path) -> tuple[str, int] | None:
    """(tap id, segment number) of a journal file name, or None for a foreign file."""
    name = path.name
    if not name.endswith(SUFFIX):
        return None
    stem = name[: -len(SUFFIX)]
    tap_id, dot, number = stem.rpartition(".")
    if not dot or not tap_id or not number.isdigit():
        return None
    return tap_id, int(number)


def _describe(exc: OSError, path: Path) -> str:
    if exc.errno == errno.ENOSPC:
        why = "the disk is full"
    elif exc.errno == errno.EFBIG:
        why = "the file size limit was reached"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = "permission denied"
    elif exc.errno == errno.EDQUOT:
        why = "the disk quota is exceeded"
    else:
        why = exc.strerror or str(exc)
    return f"cannot write the journal {path}: {why}"


@dataclass
class _Segment:
    number: int
    path: Path
    fd: int
    size: int


class Journal:
    """One append-only journal per tap process: `<directory>/<tap>.<n>.journal` segment files.

    It may hold records of several sessions (the HTTP proxy records many); seq is assigned per
    session here, gapless from 1. `append` is safe to call from several threads.
    """

    def __init__(
        self,
        directory: Path,
        tap_id: str,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        store: StoreMark | None = None,
    ) -> None:
        self.directory = directory
        self.tap_id = tap_id
        self.segment_bytes = segment_bytes
        self.store = store
        self._mark_bytes = store.encode() if store is not None else b""
        self._lock = threading.Lock()
        self._seqs: dict[str, int] = {}
        self._mono_base: dict[str, int] = {}
        self._prefix: dict[tuple[str, str, str], bytes] = {}
        self._segments: list[_Segment] = []
        self._closed = False
        self._failed: str | None = None
        self.appended = 0  # records written by this process, for progress messages
        self._open_segment(0)

    @classmethod
    def create(
        cls,
        directory: Path,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        store: StoreMark | None = None,
    ) -> Journal:
        """Make the directory, create the first segment and lock it exclusively. `store` marks
        every segment with the store the journal is for (see the module's docstring)."""
        try:
            private_dir(directory)  # 0700, and so is a data directory made for it
        except OSError as exc:
            raise JournalError(_describe(exc, directory)) from None
        return cls(directory, new_session_id(), segment_bytes, store)

    # -- segments ------------------------------------------------------------------------------

    def _open_segment(self, number: int) -> None:
        path = self.directory / segment_name(self.tap_id, number)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        except OSError as exc:
            raise JournalError(_describe(exc, path)) from None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        size = 0
        if self._mark_bytes:
            try:  # one write, before the segment is listed: no reader sees it half written
                size = os.write(fd, self._mark_bytes)
                if size != len(self._mark_bytes):
                    raise OSError(errno.ENOSPC, "No space left on device")
            except OSError as exc:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(path)
                raise JournalError(_describe(exc, path)) from None
        self._segments.append(_Segment(number, path, fd, size))
        self._path = path

    @property
    def path(self) -> Path:
        """The segment being written now (the last one written, once closed)."""
        return self._path

    def mark(self) -> tuple[int, int]:
        """(segment number, size) of the end of what was written so far: a shipper that has
        committed up to here has everything appended before this call."""
        with self._lock:
            seg = self._segments[-1] if self._segments else None
            return (seg.number, seg.size) if seg is not None else (-1, 0)

    @property
    def closed(self) -> bool:
        return self._closed

    def segments(self) -> list[Path]:
        """The segments not yet released, oldest first (the last is being written)."""
        with self._lock:
            return [seg.path for seg in self._segments]

    def extents(self) -> list[tuple[int, Path, int]]:
        """(number, path, size) of each segment not yet released, oldest first. A size covers
        complete records only, and every segment but the last is final: a shipper can hand these
        ranges to another process without reading a byte of them here."""
        with self._lock:
            return [(seg.number, seg.path, seg.size) for seg in self._segments]

    def release(self, path: Path) -> None:
        """Delete a fully shipped segment (never the one being written)."""
        with self._lock:
            for i, seg in enumerate(self._segments[:-1]):
                if seg.path == path:
                    del self._segments[i]
                    break
            else:
                return
        # Unlink before unlocking, so no other process can take a lock on a file still listed.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(seg.path)
        os.close(seg.fd)

    # -- writing -------------------------------------------------------------------------------

    def mono_offset(self, session_id: str) -> int:
        """Now, as a monotonic offset within the session (what `append` uses by default)."""
        now = time.monotonic_ns()
        return now - self._mono_base.get(session_id, now)

    def next_seq(self, session_id: str) -> int:
        """The seq the next record of this session will get."""
        return self._seqs.get(session_id, 0) + 1

    def append(
        self,
        session_id: str,
        kind: str,
        direction: str,
        raw: bytes,
        wall_ns: int | None = None,
        mono_ns: int | None = None,
        raw_size: int | None = None,
    ) -> int:
        """Append one record with one write; returns its seq. Raises `JournalError`.

        `mono_ns` is the offset within the session; by default the time since this journal's first
        record of the session. No fsync: the page cache survives the tap being killed, and a
        machine crash is outside what a per-frame fsync could afford to cover.
        """
        if wall_ns is None:
            wall_ns = time.time_ns()
        now = time.monotonic_ns()
        key = (session_id, kind, direction)
        with self._lock:
            if self._failed is not None:
                raise JournalError(self._failed)
            if self._closed:
                raise JournalError(f"the journal {self.path} is closed")
            seq = self._seqs.get(session_id, 0) + 1
            if mono_ns is None:
                base = self._mono_base.setdefault(session_id, now)
                mono_ns = now - base
            prefix = self._prefix.get(key)
            if prefix is None:
                prefix = session_id.encode() + kind.encode() + direction.encode()
                self._prefix[key] = prefix
            size = len(raw)
            if size > MAX_RAW:
                raise JournalError(f"a record of {size} bytes is too large for the journal")
            header = HEADER.pack(
                MAGIC,
                len(kind),
                len(direction),
                len(session_id),
                size,
                seq,
                wall_ns,
                mono_ns,
                -1 if raw_size is None else raw_size,
            )
            seg = self._segments[-1]
            if seg.size >= self.segment_bytes:
                self._rotate()
                seg = self._segments[-1]
            total = HEADER.size + len(prefix) + size
            try:
                written = os.writev(seg.fd, (header, prefix, raw))
                if written != total:
                    # A short write (disk filling up): finish it or undo it, never leave a torn
                    # record in the middle of a live journal.
                    written += self._finish(seg.fd, header + prefix + raw, written)
            except OSError as exc:
                self._undo(seg)
                self._failed = _describe(exc, seg.path)
                raise JournalError(self._failed) from None
            seg.size += total
            self._seqs[session_id] = seq
            self.appended += 1
            return seq

    def _finish(self, fd: int, record: bytes, done: int) -> int:
        view = memoryview(record)
        total = 0
        while done + total < len(record):
            n = os.write(fd, view[done + total :])
            if n <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            total += n
        return total

    def _undo(self, seg: _Segment) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(seg.fd, seg.size)

    def _rotate(self) -> None:
        self._open_segment(self._segments[-1].number + 1)

    def close(self) -> None:
        """Stop writing; files stay (locked until the process ends or they are released)."""
        with self._lock:
            self._closed = True

    def discard(self) -> None:
        """Delete every segment: only once everything in them is committed to the store."""
        with self._lock:
            self._closed = True
            segs, self._segments = self._segments, []
        for seg in segs:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(seg.path)
            os.close(seg.fd)


# -- reading ------------------------------------------------------------------------------------


class JournalReader:
    """Reads one segment file incrementally: a tailing shipper calls `read()` repeatedly.

    An incomplete record at the end is left for the next call (it may still be being written);
    `torn` says whether one was seen at the end. A store mark at the start is skipped.
    """

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.torn = False
        self._file = open(path, "rb")  # noqa: SIM115 - kept open while tailing
        # (session id, kind, direction) by their bytes: a journal holds few of them.
        self._names: dict[tuple[int, int, bytes], tuple[str, str, str]] = {}

    def read(
        self, max_records: int = 1000, max_bytes: int = 8 * 1024 * 1024, until: int | None = None
    ) -> list[NewEvent]:
        """The next complete records (at most `max_records`, about `max_bytes`, and none that
        starts at or past offset `until`)."""
        out: list[NewEvent] = []
        f = self._file
        self.torn = False
        if self.offset == 0:
            f.seek(0)
            head = f.read(MARK_HEADER.size + 0xFFFF)
            _mark, start = _mark_at_start(head)
            if start is None:  # the header is being written, or the writer died before it
                self.torn = bool(head)
                return out
            self.offset = start
        # One read for many records, parsed in place: a system call a chunk instead of two a
        # record, and each (session id, kind, direction) decoded once, not once a record. A
        # proxy's journal holds many sessions: the names are forgotten past NAMES_KEPT.
        if len(self._names) > NAMES_KEPT:
            self._names.clear()
        want = max_bytes if until is None else min(max_bytes, until - self.offset)
        if want <= 0:
            return out
        f.seek(self.offset)
        buf = f.read(min(want, READ_CHUNK))
        pos, got, hsize = 0, 0, HEADER.size
        unpack, names = HEADER.unpack_from, self._names
        while len(out) < max_records and got < max_bytes:
            if until is not None and self.offset >= until:
                break
            if len(buf) - pos < hsize:
                buf = buf[pos:] + f.read(max(hsize, READ_CHUNK))
                pos = 0
                if len(buf) < hsize:
                    self.torn = bool(buf)
                    break
            magic, klen, dlen, slen, rlen, seq, wall, mono, rsize = unpack(buf, pos)
            if magic != MAGIC:
                self.torn = True  # garbage after a crash: nothing past it can be trusted
                break
            body_len = slen + klen + dlen + rlen
            at = pos + hsize
            end = at + body_len
            if end > len(buf):  # a record longer than what was read: read the rest of it
                buf = buf[pos:] + f.read(max(end - len(buf), READ_CHUNK))
                pos, at, end = 0, hsize, hsize + body_len
                if end > len(buf):
                    self.torn = True
                    break
            names_end = at + slen + klen + dlen
            key = (slen, klen, buf[at:names_end])  # the lengths too: the split is not in the bytes
            decoded = names.get(key)
            if decoded is None:
                text = key[2]
                decoded = names[key] = (
                    text[:slen].decode(),
                    text[slen : slen + klen].decode(),
                    text[slen + klen :].decode(),
                )
            sid, kind, direction = decoded
            out.append(
                NewEvent(
                    sid,
                    seq,
                    wall,
                    mono,
                    kind,
                    direction,
                    buf[names_end:end],
                    None if rsize < 0 else rsize,
                )
            )
            self.offset += hsize + body_len
            got += body_len
            pos = end
        return out

    def close(self) -> None:
        self._file.close()


def read_journal(path: Path) -> Iterator[NewEvent]:
    """Every complete record of one segment file, in order; a torn last record is ignored."""
    reader = JournalReader(path)
    try:
        while True:
            batch = reader.read()
            if not batch:
                return
            yield from batch
    finally:
        reader.close()
