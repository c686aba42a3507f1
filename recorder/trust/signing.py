"""Signing checkpoints over the log: sequence what is committed, check the new tree head is
consistent with every checkpoint signed before it, sign, keep, publish.

A checkpoint (recorder/trust/checkpoint.py) is worth something only if it is kept where the
database's administrator cannot rewrite it: each one goes to the store's `checkpoints` table (for
`verify`), is appended to a checkpoints file in the data directory, and with `publish` is handed to
a directory or a command of the user's choosing (another volume, a git repository, an upload). Two
checkpoints are never signed unless the second is consistent with the first: the tree's leaves
never move (recorder/store/tree.py), and before signing the stored tree at the previous size must
give the previous root, else signing is refused. The shipper calls `AutoCheckpoints.after_append`
after each batch when a key is configured.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from blackbox.recorder import private_dir, private_file
from blackbox.recorder.log import Kind, NewEvent
from blackbox.recorder.store import EventStore, tree, tree_check
from blackbox.recorder.trust import keys
from blackbox.recorder.trust.checkpoint import (
    EM_DASH,
    Checkpoint,
    CheckpointError,
    Signer,
    open_note,
    parse_checkpoint,
    sign_checkpoint,
)

CHECKPOINTS_DIR = "checkpoints"  # in the data directory: <log id>.txt per log
EVERY_ENV = "BLACKBOX_CHECKPOINT_EVERY"  # seconds between checkpoints while records arrive
AUTO_ENV = "BLACKBOX_CHECKPOINTS"  # "off" stops the shipper's own checkpoints
PUBLISH_ENV = "BLACKBOX_CHECKPOINT_PUBLISH"  # a directory or a command for every new checkpoint
DEFAULT_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class Issued:
    """A signed checkpoint: its note, size and root, and whether it is new (False: the log had
    not grown since the last one, which is returned)."""

    note: str
    size: int
    root: bytes
    new: bool


def checkpoints_file(data_dir: Path, log: str) -> Path:
    """The file every checkpoint signed over the log `log` (its `tree.log_id`) is appended to:
    one per log, so stores sharing a data directory each keep their own."""
    return data_dir / CHECKPOINTS_DIR / f"{log}.txt"


def split_notes(text: str) -> list[str]:
    """The signed notes of a checkpoints file (each note: its text, a blank line, its signature
    lines; notes separated by one more blank line)."""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    return [
        f"{blocks[i]}\n\n{blocks[i + 1].rstrip(chr(10))}\n" for i in range(0, len(blocks) - 1, 2)
    ]


def note_checkpoint(note: str) -> Checkpoint | None:
    """The checkpoint a note's text states, its signature not checked (our own files)."""
    body, sep, _sigs = note.rpartition("\n\n")
    checkpoint, _problem = parse_checkpoint(body + "\n") if sep else (None, None)
    return checkpoint


# The last note of a checkpoints file is found in its tail: the file grows by a note per session
# end, and the shipper reads it before every checkpoint.
_TAIL_BYTES = 8192


def _last_note(data: bytes, whole: bool) -> Checkpoint | None:
    """The last checkpoint in `data`, the file's tail (`whole`: the entire file)."""
    blocks = [b for b in data.decode("utf-8", "replace").split("\n\n") if b.strip()]
    if not whole:
        blocks = blocks[1:]  # the first block may be cut
    while blocks and blocks[0].startswith(EM_DASH):
        blocks = blocks[1:]  # a signature block whose note was cut: start at a note's text
    notes = split_notes("\n\n".join(blocks))
    return note_checkpoint(notes[-1]) if notes else None


def _tail(handle: BinaryIO) -> tuple[bytes, bool]:
    size = os.fstat(handle.fileno()).st_size
    handle.seek(max(0, size - _TAIL_BYTES))
    return handle.read(), size <= _TAIL_BYTES


def _last_in_file(path: Path) -> Checkpoint | None:
    try:
        with open(path, "rb") as handle:
            return _last_note(*_tail(handle))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"cannot read the checkpoints file {path}: {exc}") from None


def _refusal(conn, previous: Checkpoint, where: str, head: tree.TreeHead) -> str | None:
    if previous.size > head.size:
        return (
            f"the log's tree holds {head.size} records, fewer than the {previous.size} of the "
            f"last checkpoint ({where}): records were removed or the database was rolled back; "
            "refusing to sign"
        )
    if tree.root_at(conn, previous.size) != previous.root_hash:
        # Whose fault: the records' own hashes, or only the cache of the tree built over them?
        if tree_check.leaf_roots(conn, [previous.size])[previous.size] == previous.root_hash:
            return (
                f"the store's cached tree at {previous.size} records differs from the last "
                f"checkpoint ({where}), but the records agree with it: the tree's tables were "
                "edited; refusing to sign (run verify)"
            )
        return (
            f"the log's tree at {previous.size} records differs from the last checkpoint "
            f"({where}): records before it were rewritten; refusing to sign"
        )
    return None


def issue(
    store: EventStore,
    signer: Signer,
    data_dir: Path | None = None,
    publish: str | None = None,
) -> Issued:
    """Sign a checkpoint over the log as it stands (a new one only when it grew), store it, append
    it to this log's checkpoints file under `data_dir` and hand it to `publish`. Refuses
    (CheckpointError) a tree inconsistent with the last checkpoint in the store or in that file,
    naming which."""
    with store.transaction(write=True) as conn:
        file = checkpoints_file(data_dir, tree.log_id(conn)) if data_dir is not None else None
        issued = _sign_if_grown(conn, signer, file)
    if issued.new and file is not None:
        append_to_file(file, issued.note, issued.size)
    if publish:
        # Also when nothing new was signed: a publication place set up after the last
        # checkpoint gets the latest now (`--publish` never exits 0 having written nothing).
        try:
            publish_note(publish, issued.note, issued.size)
        except PublishError as exc:
            exc.issued = issued
            raise
    return issued


def _sign_if_grown(conn: Any, signer: Signer, file: Path | None) -> Issued:
    """In the caller's write transaction (`conn`, the store's connection: SQLAlchemy stays in
    the store): the last checkpoint when the log has not grown since, else a new one, signed
    and stored; refusals as `issue` says."""
    from_file = _last_in_file(file) if file is not None else None  # a tail: a few KiB
    head = tree.sequence(conn)
    last = tree.stored_checkpoints(conn, last=True)
    if from_file is not None:
        problem = _refusal(conn, from_file, f"in {file}", head)
        if problem:
            raise CheckpointError(problem)
    trusted = None
    if last:
        previous = Checkpoint(signer.name, last[0].size, last[0].root_hash)
        problem = _refusal(conn, previous, "in the store", head)
        if problem:
            raise CheckpointError(problem)
        opened, _ = open_note(last[0].note, [signer.verifier])
        if last[0].size == head.size and opened is not None:
            return Issued(last[0].note, head.size, head.root, False)
        if opened is not None:
            trusted = (last[0].size, last[0].root_hash)
    # Never sign the cache's word: the root is checked against the leaves (those after the
    # last checkpoint this key signed; all of them without one).
    try:
        tree_check.checked_root(conn, head.size, trusted, claimed=head.root, fresh=head.fresh)
    except tree.TreeDamaged as exc:
        raise CheckpointError(f"{exc}; refusing to sign") from None
    note = sign_checkpoint(Checkpoint(signer.name, head.size, head.root), signer)
    tree.store_checkpoint(conn, head.size, head.root, note)
    return Issued(note, head.size, head.root, True)


def append_to_file(path: Path, note: str, size: int) -> None:
    """Append `note` to the checkpoints file, under a lock, unless a larger one is already last
    (two shippers finishing in the other order: the file's sizes only grow)."""
    # 0600 like everything in the data directory, which is made 0700 if this makes it
    # (recorder/private.py); what `publish` hands out is the user's to place.
    private_file(private_dir(path.parent) / path.name)
    with open(path, "a+b") as out:
        fcntl.flock(out, fcntl.LOCK_EX)
        last = _last_note(*_tail(out))
        if last is not None and last.size >= size:
            return
        out.write((note + "\n").encode("utf-8"))
        out.flush()
        os.fsync(out.fileno())


class PublishError(CheckpointError):
    """The checkpoint was signed and kept, but could not be handed to `--publish`'s target;
    `issued` is the checkpoint (set by `issue`)."""

    issued: Issued | None = None


def publish_note(target: str, note: str, size: int) -> None:
    """Hand a new checkpoint to `target`: an existing directory gets `checkpoint-<size>.txt` and
    `checkpoint.txt` (the latest, replaced atomically); anything else is a command run with the
    note on its standard input (split like a shell would, not run by one)."""
    directory = Path(target).expanduser()
    argv = shlex.split(target) if not directory.is_dir() else []
    # A path that names no directory is a mistake, not a command to run: a trailing slash, or a
    # single word with a slash in it that is not a program.
    looks_like_dir = target.endswith("/") or (
        len(argv) == 1
        and ("/" in argv[0] or argv[0].startswith("~"))
        and not os.access(Path(argv[0]).expanduser(), os.X_OK)
    )
    if not directory.is_dir() and looks_like_dir:
        raise PublishError(
            f"--publish {target}: no such directory (make it first; a command is run with the "
            "note on its standard input)"
        )
    if directory.is_dir():
        (directory / f"checkpoint-{size:012d}.txt").write_text(note, encoding="utf-8")
        latest = directory / "checkpoint.txt"
        partial = directory / ".checkpoint.txt.tmp"
        partial.write_text(note, encoding="utf-8")
        os.replace(partial, latest)
        return
    if not argv:
        raise PublishError("--publish names no directory and no command")
    try:
        done = subprocess.run(
            argv,
            input=note,
            text=True,
            capture_output=True,
            timeout=60,
            env={**os.environ, "BLACKBOX_CHECKPOINT_SIZE": str(size)},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PublishError(f"publishing the checkpoint with {argv[0]} failed: {exc}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise PublishError(f"publishing the checkpoint with {argv[0]} failed: {why}")


class AutoCheckpoints:
    """The shipper's own checkpoints: after a batch that ended a session, and otherwise at most
    every `every` seconds while records arrive. Off when no key is configured or `BLACKBOX_
    CHECKPOINTS=off`. A failure never stops shipping: it is said once on stderr and retried
    with the next batch."""

    def __init__(self, signer: Signer | None, every: float, publish: str | None = None) -> None:
        self.signer = signer
        self.every = every
        self.publish = publish
        self._last = time.monotonic()
        self._said: str | None = None

    @classmethod
    def configured(cls) -> AutoCheckpoints:
        """From the environment: the key (`BLACKBOX_KEY_FILE` or the data directory's), the
        interval (`BLACKBOX_CHECKPOINT_EVERY`), the switch and the publish target."""
        signer = None
        if os.environ.get(AUTO_ENV, "").lower() not in ("off", "0", "no", "false"):
            with contextlib.suppress(CheckpointError):
                signer = keys.configured_signer()
        try:
            every = float(os.environ.get(EVERY_ENV, DEFAULT_EVERY_SECONDS))
        except ValueError:
            every = DEFAULT_EVERY_SECONDS
        return cls(signer, every, os.environ.get(PUBLISH_ENV) or None)

    def after_append(self, store: EventStore, batch: Sequence[NewEvent]) -> None:
        """Checkpoint now if the batch sealed a session or the interval has passed."""
        if self.signer is None:
            return
        now = time.monotonic()
        sealed = any(ev.kind == Kind.SESSION_ENDED for ev in batch)
        if not sealed and now - self._last < self.every:
            return
        self._last = now
        try:
            issue(store, self.signer, keys.data_dir(), self.publish)
            self._said = None
        except Exception as exc:  # never stop shipping for a checkpoint
            message = f"blackbox: no checkpoint signed: {exc}"
            if message != self._said:
                print(message, file=sys.stderr, flush=True)
                self._said = message


def note_for_export(store: EventStore) -> str | None:
    """The checkpoint an export bundle carries: a fresh one when a signing key is configured
    (so it covers every exported record), else the newest the store keeps, else None."""
    signer = None
    with contextlib.suppress(CheckpointError):
        signer = keys.configured_signer()
    if signer is not None:
        return issue(store, signer, keys.data_dir()).note
    with store.transaction() as conn:
        kept = tree.stored_checkpoints(conn, last=True)
    return kept[0].note if kept else None
