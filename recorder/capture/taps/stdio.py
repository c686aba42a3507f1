"""The stdio tap behind `blackbox record`: a byte-exact relay between an MCP host and a server
process, journalling every line before it forwards it.

Why it is built this way: recording must be invisible. The relay is one thread running a `poll()`
loop over raw file descriptors (host stdin, the child's stdout and stderr, a pidfd for the child's
exit, a signal wake-up pipe): it reads what is there, cuts it at newlines, appends each frame to
the journal with one `writev()`, then forwards the whole chunk with one `write()`. It never parses
JSON, hashes or talks to the database. With a store URL (the CLI) all of that runs in the store
worker process (`blackbox.recorder.capture.ship_worker`), which also runs the frame observer
(`blackbox.recorder.capture.observer`, era and content faults): the tap's only other thread just
hands it journal ranges, so no thread of the relay's process holds the GIL for long. Without one
(library use) a shipper thread does it. Writes are non-blocking with per-direction buffers, so a
slow reader on one side can never deadlock the other; above a high-water mark the relay stops
reading the side that feeds it (back-pressure).

Faults the relay itself sees are journalled as they happen: EOF in the middle of a frame, a broken
pipe, oversize frames (forwarded intact, stored as a prefix plus length and sha256), a server that
exits while requests are outstanding. A journal that cannot be written stops forwarding: traffic
never passes unrecorded.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from blackbox.recorder import BlackboxError
from blackbox.recorder.capture.idle import IdleWatch
from blackbox.recorder.capture.journal import Journal, JournalError, StoreMark
from blackbox.recorder.capture.leftovers import hand_off_leftovers, ship_leftovers_quietly
from blackbox.recorder.capture.observer import FrameObserver
from blackbox.recorder.capture.ship_worker import lower_thread_priority
from blackbox.recorder.capture.shipper import POLL_SECONDS, Shipper
from blackbox.recorder.gate import ToolWatch, pinning
from blackbox.recorder.log import Direction, Kind, NewEvent, events, new_session_id
from blackbox.recorder.store import EventStore

DEFAULT_MAX_FRAME = 8 * 1024 * 1024
OVERSIZE_PREFIX = 64 * 1024
READ_SIZE = 1024 * 1024
HIGH_WATER = 16 * 1024 * 1024
FINAL_SHIP_SECONDS = 2.5
DRAIN_AFTER_EXIT_SECONDS = 2.0
SWITCH_INTERVAL = 0.0002
SHUTDOWN_GRACE_SECONDS = 2.0
SHIPPER_NICE = 15
WORKER_POLL_SECONDS = 0.2
# The most redaction may take per frame on the relay's path (`record --redact-budget`); past it
# the frame is forwarded and stored withheld, as its keyed fingerprint and length.
REDACT_BUDGET_SECONDS = 0.05
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_POLLIN = select.POLLIN | select.POLLPRI


class TapError(BlackboxError):
    """The tap cannot run the server (bad command) or cannot record (journal unwritable)."""


class Gate(Protocol):
    def check(self, server: str | None, raw: bytes) -> Any: ...


class Redactor(Protocol):
    def redact_frame_within(self, raw: bytes, budget_s: float) -> tuple[bytes, str | None]: ...


@dataclass
class TapConfig:
    """Everything `run_tap` needs; the CLI fills it from flags and `blackbox.config`."""

    command: list[str]
    journal_dir: Path
    store_factory: Callable[[], EventStore]
    on_notice: Callable[[str], None]
    name: str | None = None
    cwd: str | None = None
    env_names: Sequence[str] = ()
    max_frame: int = DEFAULT_MAX_FRAME
    quarantine_noise: bool = False
    policy: Gate | None = None
    redactor: Redactor | None = None
    redact_budget_s: float = REDACT_BUDGET_SECONDS
    final_ship_seconds: float = FINAL_SHIP_SECONDS
    ship_leftovers: bool = True
    extra_started: dict[str, Any] = field(default_factory=dict)
    # When set, store appends run in a child process (no store work in the relay's process);
    # `store_factory` still serves the rare in-process needs (leftovers, closing after a failure).
    store_url: str | None = None
    # After this long without a frame: a `session_idle` record (blackbox.recorder.capture.idle);
    # None: never.
    idle_after_s: float | None = None


@dataclass
class TapResult:
    """How the session ended; `exit_status` is what the tap process should exit with."""

    session_id: str
    exit_status: int
    reason: str
    outcome: str
    shipped: bool


class _Out:
    """A non-blocking output with a buffer for what the peer has not taken yet."""

    __slots__ = ("buf", "closed", "fd", "name")

    def __init__(self, fd: int, name: str) -> None:
        self.fd = fd
        self.name = name
        self.buf = bytearray()
        self.closed = False


def run_tap(
    config: TapConfig, stdin_fd: int = 0, stdout_fd: int = 1, stderr_fd: int = 2
) -> TapResult:
    """Run the server under the tap until it exits; returns how it ended."""
    return _Tap(config, stdin_fd, stdout_fd, stderr_fd).run()


class _Tap:
    def __init__(self, config: TapConfig, stdin_fd: int, stdout_fd: int, stderr_fd: int) -> None:
        self.config = config
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.stderr_fd = stderr_fd
        self.session_id = new_session_id()
        self.signals: list[int] = []
        self.host_closed_first = False
        self.failure: str | None = None
        self._store_lock = threading.Lock()

    # -- the session -------------------------------------------------------------------------------

    def run(self) -> TapResult:
        cfg = self.config
        try:
            # The journal names its store: if it is left behind, only that store gets it.
            mark = StoreMark.for_url(cfg.store_url) if cfg.store_url is not None else None
            self.journal = Journal.create(cfg.journal_dir, store=mark)
        except JournalError as exc:
            raise TapError(f"{exc}; not starting the server unrecorded") from None
        self.sid = self.session_id
        self.append = self.journal.append
        started = events.started_here(
            name=cfg.name,
            transport="stdio",
            command=list(cfg.command),
            cwd=cfg.cwd,
            env_names=sorted(cfg.env_names),
            max_frame=cfg.max_frame,
            quarantine_noise=cfg.quarantine_noise,
            policy=cfg.policy is not None,
            redaction=cfg.redactor is not None,
            **cfg.extra_started,
        )
        self.journal.append(self.sid, Kind.SESSION_STARTED, Direction.NONE, events.encode(started))
        # A live policy records each version it puts in force.
        if cfg.policy is not None and hasattr(cfg.policy, "watch"):
            cfg.policy.watch(lambda doc: self._emit(self.sid, doc))
        # Tool drift is watched here too, off the relay's path (in the store worker with a URL).
        tools = ToolWatch(self._emit, self._open_store) if cfg.store_url is None else None
        self.observer = FrameObserver(self._emit, cfg.quarantine_noise, tools)
        self.shipper = Shipper(
            self.journal,
            self._open_store,
            cfg.on_notice,
            self.observer,
            nice=SHIPPER_NICE,
            # With the worker, fewer and larger ranges: every hand-off takes the GIL for a
            # moment in this process; records reach the store at most this much later.
            poll_seconds=WORKER_POLL_SECONDS if cfg.store_url is not None else POLL_SECONDS,
            worker_url=cfg.store_url,
            leftovers_dir=cfg.journal_dir if cfg.ship_leftovers else None,
        )
        self.shipper.start()
        if cfg.policy is not None:
            pinning.attach(cfg.policy, self._open_store, self.journal, cfg.name)
        self.leftovers: threading.Thread | None = None
        if cfg.ship_leftovers and cfg.store_url is None:  # else the store worker ships them
            self.leftovers = threading.Thread(target=self._ship_leftovers, daemon=True)
            self.leftovers.start()
        try:
            proc = subprocess.Popen(
                cfg.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                cwd=cfg.cwd,
            )
        except OSError as exc:
            why = exc.strerror or str(exc)
            self._event(
                Kind.FAULT,
                {
                    "fault": "spawn_failed",
                    "stage": "transport",
                    "detail": f"cannot start {cfg.command[0]!r}: {why}",
                    "seq": None,
                },
            )
            self._event(
                Kind.SESSION_ENDED,
                {"reason": "spawn_failed", "outcome": "crashed", "exit_code": None, "signal": None},
            )
            self._finish()
            raise TapError(f"cannot start {cfg.command[0]!r}: {why}") from None
        self.proc = proc
        self.idle = IdleWatch.started(cfg.idle_after_s, lambda d: self._emit(self.sid, d))
        old_handlers = self._install_signals()
        # An in-process shipper thread works in Python (classify, hash, SQL); when it holds the
        # GIL the relay waits up to the switch interval for it (5 ms by default), which sets the
        # relay's p99. The store worker process removes that work; this bounds what is left (the
        # leftovers pass at start, the library mode's shipper).
        switch = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        try:
            self._relay()
        except JournalError as exc:
            self.failure = str(exc)
            self._stop_child()
        finally:
            sys.setswitchinterval(switch)
            self._restore_signals(old_handlers)
        return self._close()

    def _open_store(self) -> EventStore:
        # One store opening at a time in this process: two threads migrating a fresh PostgreSQL
        # schema at once were seen to hang inside Alembic.
        with self._store_lock:
            return self.config.store_factory()

    def _ship_leftovers(self) -> None:
        lower_thread_priority(SHIPPER_NICE)
        ship_leftovers_quietly(self.config.journal_dir, self._open_store)

    def _event(self, kind: str, doc: dict[str, Any]) -> int:
        raw = events.encode(events.from_dict(kind, doc))
        return self.journal.append(self.sid, kind, Direction.NONE, raw)

    def _emit(self, session_id: str, doc: events.Document) -> None:
        # Called from the shipper thread by the observer; the journal serialises appends.
        with contextlib.suppress(JournalError):
            self.journal.append(session_id, doc.KIND, Direction.NONE, events.encode(doc))

    # -- signals -----------------------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        self.wake_r, self.wake_w = os.pipe()
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        old: dict[int, Any] = {}
        with contextlib.suppress(ValueError):  # not the main thread (tests): no signal handling
            signal.set_wakeup_fd(self.wake_w)
            for sig in FORWARDED_SIGNALS:
                old[sig] = signal.signal(sig, self._on_signal)
            # A full disk under RLIMIT_FSIZE must be an error from write(), not a kill.
            old[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            old[signal.SIGPIPE] = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        return old

    def _restore_signals(self, old: dict[int, Any]) -> None:
        # The host may still SIGTERM the process group while the journal is flushed: stay alive
        # (forwarding is moot, the child is gone) so nothing is lost.
        for sig in FORWARDED_SIGNALS:
            if sig in old:
                signal.signal(sig, lambda _s, _f: None)
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
        os.close(self.wake_r)
        os.close(self.wake_w)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signals.append(signum)
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signum)

    # -- the relay ---------------------------------------------------------------------------------

    def _relay(self) -> None:  # one loop, kept in one place on purpose
        cfg = self.config
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        child_in = proc.stdin.fileno()
        child_out = proc.stdout.fileno()
        child_err = proc.stderr.fileno()
        host_in = self.stdin_fd
        os.set_blocking(child_in, False)
        host_blocking = os.get_blocking(self.stdout_fd)
        os.set_blocking(self.stdout_fd, False)
        self.to_child = _Out(child_in, "server stdin")
        self.to_host = _Out(self.stdout_fd, "host stdout")
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            pidfd = -1

        poller = select.poll()
        masks: dict[int, int] = {}

        def watch(fd: int, mask: int) -> None:
            if masks.get(fd) == mask:
                return
            if mask == 0:
                if fd in masks:
                    poller.unregister(fd)
                    del masks[fd]
                return
            if fd in masks:
                poller.modify(fd, mask)
            else:
                poller.register(fd, mask)
            masks[fd] = mask

        reading_host = True
        reading_child = True
        reading_err = True
        watch(host_in, _POLLIN)
        watch(child_out, _POLLIN)
        watch(child_err, _POLLIN)
        watch(self.wake_r, _POLLIN)
        if pidfd >= 0:
            watch(pidfd, _POLLIN)
        # One preallocated read buffer: os.read(fd, 1 MiB) would allocate (mmap) and shrink a
        # 1 MiB object on every read, a cost on the scale of the relay's own work.
        rbuf = bytearray(READ_SIZE)
        rview = memoryview(rbuf)

        def read(fd: int) -> bytes | None:
            """What is there; b"" at EOF (a read error ends the stream the same way); None when
            nothing is there after all."""
            try:
                n = os.readv(fd, (rbuf,))
            except BlockingIOError:
                return None
            except OSError:
                return b""
            return bytes(rview[:n])

        c2s_partial = bytearray()
        s2c_partial = bytearray()
        err_partial = bytearray()
        exited_at: float | None = None
        # Plain str constants: Enum members hash through a Python-level __hash__.
        append, sid, frame_kind = self.journal.append, self.sid, str(Kind.FRAME)
        gated = cfg.policy is not None or cfg.redactor is not None or cfg.quarantine_noise
        max_frame = cfg.max_frame
        C2S, S2C = str(Direction.CLIENT_TO_SERVER), str(Direction.SERVER_TO_CLIENT)
        touch = self.idle.touch if self.idle is not None else None

        def relay(data: bytes, partial: bytearray, direction: str, dest: Any) -> None:
            """Journal each complete frame of `data`, then forward them; keep an incomplete
            tail in `partial` (one function for both directions of the relay)."""
            if touch is not None:
                touch(direction)
            if partial:  # a long frame: accumulate, O(n) overall
                partial += data
                if b"\n" not in data:
                    return
                data = bytes(partial)
                partial.clear()
            last = data.rfind(b"\n")
            if last < 0:
                partial += data
                return
            if gated:
                self._frames_gated(data, last, direction)
            else:
                start = 0
                while start <= last:
                    nl = data.find(b"\n", start)
                    if nl - start > max_frame:
                        self._oversize(data[start:nl], direction)
                    elif nl > start:
                        append(sid, frame_kind, direction, data[start:nl])
                    start = nl + 1
                self._send(dest, data[: last + 1] if last + 1 < len(data) else data)
            if last + 1 < len(data):
                partial += data[last + 1 :]

        last_state: tuple = ()
        host_eof_at: float | None = None
        terminated = False
        try:
            while True:
                # Back-pressure: stop reading a side while what it sent is not taken.
                want_host = reading_host and len(self.to_child.buf) < HIGH_WATER
                want_child = reading_child and len(self.to_host.buf) < HIGH_WATER
                # Whether each buffer holds anything, not the buffer: a buffer that emptied must
                # drop its POLLOUT, or poll() answers "writable" at once, forever (a busy loop).
                state = (
                    want_host,
                    want_child,
                    reading_err,
                    bool(self.to_child.buf),
                    bool(self.to_host.buf),
                )
                if state != last_state:  # usually nothing changed: skip the bookkeeping
                    last_state = state
                    watch(host_in, _POLLIN if want_host else 0)
                    watch(child_out, _POLLIN if want_child else 0)
                    watch(child_err, _POLLIN if reading_err else 0)
                    watch(child_in, select.POLLOUT if self.to_child.buf else 0)
                    watch(self.stdout_fd, select.POLLOUT if self.to_host.buf else 0)
                if exited_at is not None:
                    if not reading_child and not reading_err and not self.to_host.buf:
                        break
                    left = exited_at + DRAIN_AFTER_EXIT_SECONDS - time.monotonic()
                    if left <= 0:
                        break  # a grandchild holds the pipes open; the server itself is gone
                    timeout_ms = int(left * 1000) + 1
                elif host_eof_at is not None:
                    # Like an MCP client: the server had its stdin closed; give it the grace
                    # period, then SIGTERM, then SIGKILL (a host that went away will not).
                    waited = time.monotonic() - host_eof_at
                    if waited >= 2 * SHUTDOWN_GRACE_SECONDS:
                        with contextlib.suppress(ProcessLookupError):
                            proc.kill()
                        timeout_ms = 100
                    elif waited >= SHUTDOWN_GRACE_SECONDS:
                        if not terminated:
                            terminated = True
                            with contextlib.suppress(ProcessLookupError):
                                proc.terminate()
                        timeout_ms = int((2 * SHUTDOWN_GRACE_SECONDS - waited) * 1000) + 1
                    else:
                        timeout_ms = int((SHUTDOWN_GRACE_SECONDS - waited) * 1000) + 1
                    if pidfd < 0:
                        timeout_ms = min(timeout_ms, 100)
                elif pidfd < 0:
                    timeout_ms = 100
                else:
                    timeout_ms = -1
                try:
                    events = poller.poll(timeout_ms)
                except InterruptedError:
                    continue
                if pidfd < 0 and exited_at is None and proc.poll() is not None:
                    exited_at = time.monotonic()
                for fd, _ev in events:
                    if fd == child_out:
                        data = read(fd)
                        if data is None:
                            continue
                        if data:
                            relay(data, s2c_partial, S2C, self.to_host)
                        else:
                            reading_child = False
                            watch(child_out, 0)
                            if s2c_partial:
                                self._eof_mid_frame(bytes(s2c_partial), S2C)
                                self._send(self.to_host, bytes(s2c_partial))
                                s2c_partial.clear()
                    elif fd == host_in:
                        data = read(fd)
                        if data is None:
                            continue
                        if data:
                            relay(data, c2s_partial, C2S, self.to_child)
                        else:
                            reading_host = False
                            watch(host_in, 0)
                            if exited_at is None:
                                self.host_closed_first = True
                                host_eof_at = time.monotonic()
                            if c2s_partial:
                                self._eof_mid_frame(bytes(c2s_partial), C2S)
                                self._send(self.to_child, bytes(c2s_partial))
                                c2s_partial.clear()
                            if not self.to_child.buf:
                                self._close_child_stdin()
                    elif fd == child_err:
                        data = read(fd)
                        if data is None:
                            continue
                        if data:
                            _write_all(self.stderr_fd, data)
                            err_partial += data
                            if b"\n" in data:
                                *lines, rest = bytes(err_partial).split(b"\n")
                                err_partial[:] = rest
                                for line in lines:
                                    self._stderr_line(line)
                        else:
                            reading_err = False
                            watch(child_err, 0)
                            if err_partial:
                                self._stderr_line(bytes(err_partial))
                                err_partial.clear()
                    elif fd == child_in:
                        self._flush(self.to_child)
                        if not reading_host and not self.to_child.buf:
                            self._close_child_stdin()
                    elif fd == self.stdout_fd:
                        self._flush(self.to_host)
                    elif fd == pidfd:
                        watch(pidfd, 0)
                        exited_at = time.monotonic()
                    elif fd == self.wake_r:
                        with contextlib.suppress(BlockingIOError):
                            while os.read(self.wake_r, 512):
                                pass
        finally:
            if pidfd >= 0:
                os.close(pidfd)
            with contextlib.suppress(OSError):
                os.set_blocking(self.stdout_fd, host_blocking)
            self.leftover_host = bytes(c2s_partial)

    # -- frames ------------------------------------------------------------------------------------

    def _frames_gated(self, data: bytes, last: int, direction: str) -> None:
        """The slow path, used only with --policy, --redact or --quarantine-noise: decide frame by
        frame what to journal and what to forward."""
        cfg = self.config
        out = self.to_child if direction == Direction.CLIENT_TO_SERVER else self.to_host
        forward: list[bytes] = []
        start = 0
        while start <= last:
            nl = data.find(b"\n", start)
            frame = data[start:nl]
            start = nl + 1
            if not frame:
                forward.append(b"\n")
                continue
            if len(frame) > cfg.max_frame:
                self._oversize(frame, direction)
                forward.append(frame + b"\n")
                continue
            withheld = None
            if cfg.redactor is None:
                stored = frame
            else:
                stored, withheld = cfg.redactor.redact_frame_within(frame, cfg.redact_budget_s)
            if withheld is None:
                self.append(self.sid, Kind.FRAME, direction, stored)
            else:
                self._withheld(frame, stored, withheld, direction)
            pinner = pinning.pinner_of(cfg.policy) if cfg.policy is not None else None
            if direction == Direction.SERVER_TO_CLIENT:
                if pinner is not None:
                    # As recorded: the hashes approvals name. A withheld frame's definitions
                    # were never recorded, so the pinner judges the frame itself: changed
                    # tools are then drift, never silently unseen.
                    pinner.server_frame(stored if withheld is None else frame)
                if cfg.quarantine_noise and _is_noise(frame):
                    _write_all(self.stderr_fd, frame + b"\n")
                    continue
                forward.append(frame + b"\n")
                continue
            if pinner is not None:
                pinner.client_frame(frame)
            verdict = cfg.policy.check(cfg.name, frame) if cfg.policy is not None else None
            if verdict is None:
                forward.append(frame + b"\n")
                continue
            for doc in verdict.decision_docs:
                self.append(self.sid, Kind.DECISION, Direction.NONE, doc)
            if verdict.allowed:
                forward.append(frame + b"\n")
            elif verdict.reply is not None:
                self.append(self.sid, Kind.FRAME, Direction.SERVER_TO_CLIENT, verdict.reply)
                self._send(self.to_host, verdict.reply + b"\n")
        if forward:
            self._send(out, b"".join(forward))

    def _oversize(self, frame: bytes, direction: str) -> None:
        size = len(frame)
        seq = self.append(self.sid, Kind.FRAME, direction, frame[:OVERSIZE_PREFIX], raw_size=size)
        self._event(
            Kind.FAULT,
            {
                "fault": "oversize_frame",
                "stage": "transport",
                "detail": f"a {size}-byte frame is over the {self.config.max_frame}-byte limit: "
                f"forwarded intact, stored as its first {OVERSIZE_PREFIX} bytes",
                "seq": seq,
                "direction": direction,
                "size": size,
                "sha256": hashlib.sha256(frame).hexdigest(),
                "stored_bytes": min(size, OVERSIZE_PREFIX),
            },
        )

    def _withheld(self, frame: bytes, marker: bytes, rule: str, direction: str) -> None:
        """A frame redaction could not finish within its budget: stored as the marker with the
        frame's keyed fingerprint, `raw_size` its length, and a fault naming the rule."""
        size = len(frame)
        seq = self.append(self.sid, Kind.FRAME, direction, marker, raw_size=size)
        budget_ms = round(self.config.redact_budget_s * 1000, 3)
        self._event(
            Kind.FAULT,
            {
                "fault": "redaction_over_budget",
                "stage": "transport",
                "detail": f"redacting a {size}-byte frame ran past the {budget_ms} ms budget "
                f"in rule {rule}: forwarded unchanged, stored withheld (its keyed fingerprint "
                "and length)",
                "seq": seq,
                "direction": direction,
                "size": size,
                "rule": rule,
                "budget_ms": budget_ms,
                "stored": marker.decode("ascii", "replace"),
            },
        )

    def _eof_mid_frame(self, partial: bytes, direction: str) -> None:
        seq = self.append(self.sid, Kind.FRAME, direction, partial[: self.config.max_frame])
        side = "server" if direction == Direction.SERVER_TO_CLIENT else "client"
        self._event(
            Kind.FAULT,
            {
                "fault": "eof_mid_frame",
                "stage": "transport",
                "detail": f"the {side} closed its stream in the middle of a frame "
                f"({len(partial)} bytes without a newline)",
                "seq": seq,
                "direction": direction,
                "size": len(partial),
            },
        )

    def _stderr_line(self, line: bytes) -> None:
        text = line.decode("utf-8", errors="replace").rstrip("\r")
        self.append(self.sid, Kind.STDERR, Direction.NONE, events.encode(events.Stderr(line=text)))

    # -- output ------------------------------------------------------------------------------------

    def _send(self, out: _Out, data: bytes) -> None:
        if out.closed:
            return
        if out.buf:
            out.buf += data
            return
        try:
            n = os.write(out.fd, data)
        except BlockingIOError:
            n = 0
        except OSError as exc:
            self._broken(out, exc)
            return
        if n < len(data):
            out.buf += data[n:]

    def _flush(self, out: _Out) -> None:
        if out.closed or not out.buf:
            return
        try:
            n = os.write(out.fd, out.buf)
        except BlockingIOError:
            return
        except OSError as exc:
            self._broken(out, exc)
            return
        del out.buf[:n]

    def _broken(self, out: _Out, exc: OSError) -> None:
        out.closed = True
        lost = len(out.buf)
        out.buf.clear()
        if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
            detail = f"writing to the {out.name} failed: {exc.strerror}"
        else:
            who = "server" if out is self.to_child else "host"
            detail = f"the {who} closed its end of the pipe; frames could not be delivered"
        self._event(
            Kind.FAULT,
            {
                "fault": "broken_pipe",
                "stage": "transport",
                "detail": detail,
                "seq": None,
                "direction": Direction.CLIENT_TO_SERVER
                if out is self.to_child
                else Direction.SERVER_TO_CLIENT,
                "undelivered_bytes": lost,
            },
        )

    def _close_child_stdin(self) -> None:
        if self.to_child.closed:
            return
        self.to_child.closed = True
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def _stop_child(self) -> None:
        """The journal failed: stop forwarding. Close the server's stdin and let it go."""
        self._close_child_stdin()
        self._release_host_stdout()
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    # -- the end -----------------------------------------------------------------------------------

    def _release_host_stdout(self) -> None:
        """Let the host see EOF now, not after the final ship: put /dev/null on our stdout (the
        descriptor stays valid, so nothing opened later can land on it)."""
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stdout_fd)
            os.close(devnull)

    def _close(self) -> TapResult:
        proc = self.proc
        if self.config.policy is not None and hasattr(self.config.policy, "stop"):
            self.config.policy.stop()
        if self.idle is not None:
            self.idle.stop()
        self._release_host_stdout()
        try:
            code = proc.wait(DRAIN_AFTER_EXIT_SECONDS if self.failure is None else 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(5)
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        sig = -code if code < 0 else None
        sig_name = signal.Signals(sig).name if sig is not None else None
        exit_status = 128 + sig if sig is not None else code
        if self.failure is not None:
            reason, outcome = "journal_failed", "interrupted"
            self.config.on_notice(
                f"{self.failure}; stopped forwarding so nothing passes unrecorded"
            )
            shipped = self._finish()
            if shipped:
                self._end_in_store(
                    {
                        "reason": reason,
                        "outcome": outcome,
                        "exit_code": code if sig is None else None,
                        "signal": sig_name,
                        "detail": self.failure,
                    }
                )
            return TapResult(self.sid, 2, reason, outcome, shipped)
        if self.host_closed_first:
            # The MCP stdio shutdown: the client closes stdin, waits, then SIGTERMs. A server
            # that needed the signal still ended the way the client asked.
            reason = "client_closed"
            outcome = (
                "ok" if code == 0 or sig in (signal.SIGTERM, signal.SIGINT) else "server_exited"
            )
        elif self.signals:
            reason, outcome = "interrupted", "interrupted"
        else:
            reason = "server_exited"
            outcome = "server_exited" if code == 0 else "crashed"
        try:
            self.shipper.observe_rest()
            if reason == "server_exited":
                pending = self.observer.outstanding()
                how = f"signal {sig_name}" if sig_name else f"exit code {code}"
                if pending:
                    names = ", ".join(
                        f"{p['method']}{' ' + p['tool'] if p.get('tool') else ''} (id {p['id']})"
                        for p in pending
                    )
                    self._event(
                        Kind.FAULT,
                        {
                            "fault": "exit_with_outstanding",
                            "stage": "execution",
                            "detail": f"the server exited ({how}) with {len(pending)} "
                            f"request(s) unanswered: {names}",
                            "seq": pending[0]["seq"],
                            "outstanding": pending,
                            "exit_code": code if sig is None else None,
                            "signal": sig_name,
                        },
                    )
                elif code != 0:
                    self._event(
                        Kind.FAULT,
                        {
                            "fault": "server_exited",
                            "stage": "transport",
                            "detail": f"the server exited on its own ({how})",
                            "seq": None,
                            "exit_code": code if sig is None else None,
                            "signal": sig_name,
                        },
                    )
            ended: dict[str, Any] = {
                "reason": reason,
                "outcome": outcome,
                "exit_code": code if sig is None else None,
                "signal": sig_name,
            }
            if self.signals:
                ended["tap_signals"] = [signal.Signals(s).name for s in self.signals]
            self._event(Kind.SESSION_ENDED, ended)
        except JournalError as exc:
            self.config.on_notice(str(exc))
        shipped = self._finish()
        return TapResult(self.sid, exit_status, reason, outcome, shipped)

    def _end_in_store(self, doc: dict[str, Any]) -> None:
        """Close the session straight in the store: the journal cannot take another record, and
        everything it held is shipped."""
        try:
            store = self._open_store()
            try:
                last_seq, _head = store.head(self.sid)
                store.append(
                    [
                        NewEvent(
                            self.sid,
                            last_seq + 1,
                            time.time_ns(),
                            self.journal.mono_offset(self.sid),
                            Kind.SESSION_ENDED,
                            Direction.NONE,
                            events.encode(events.from_dict(Kind.SESSION_ENDED, doc)),
                        )
                    ]
                )
            finally:
                store.close()
        except BlackboxError as exc:
            self.config.on_notice(f"could not close the session in the store: {exc}")

    def _finish(self) -> bool:
        self.journal.close()
        deadline = time.monotonic() + self.config.final_ship_seconds
        shipped = self.shipper.stop(self.config.final_ship_seconds)
        if self.leftovers is not None:
            # Leftovers of dead taps get the rest of the same budget; unfinished, they stay put.
            self.leftovers.join(max(0.0, deadline - time.monotonic()))
        if not shipped:
            where = f"they are kept in the journal {self.config.journal_dir}"
            if self.config.store_url is not None:
                pid = hand_off_leftovers(
                    self.config.store_url, self.config.journal_dir, os.getpid()
                )
                where += f" and a background shipper (pid {pid}) stores them once this tap exits"
            else:
                where += " for the next tap or `blackbox ship`"
            self.config.on_notice(f"the store did not take every record in time; {where}")
        return shipped


def _write_all(fd: int, data: bytes) -> None:
    """Blocking write for stderr pass-through (diagnostics; never the protocol stream)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        except OSError:
            return
        view = view[n:]


def _is_noise(frame: bytes) -> bool:
    """Whether a server line is not JSON at all (what --quarantine-noise diverts)."""
    head = frame.lstrip()[:1]
    if head not in (b"{", b"["):
        return True
    try:
        json.loads(frame)
    except ValueError:
        return True
    return False


__all__ = ["DEFAULT_MAX_FRAME", "TapConfig", "TapError", "TapResult", "run_tap"]
