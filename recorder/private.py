"""Directories and files only their owner can open, whatever the umask.

Why: the data directory holds the log (raw frames: tool arguments, file contents, tokens), the
signing and fingerprint keys, and copies of the log (analytics, export bundles). A process creates
directories 0777 and files 0666 less its umask, and a umask of 002 or 000 is common (shared
groups, containers, some desktops): everything would be readable by the group or by anyone. So
what this tool creates is made with mode 0700 (directories) or 0600 (files), never wider for a
moment, and then set to exactly that: a umask that takes the owner's own bits away (0277) would
otherwise leave a keys/ folder its owner cannot write the key into.

Files written in place, by a library (SQLite, pyarrow) or by `open()`, are made beforehand with
`private_file`: opening an existing file keeps its mode (and SQLite gives its -wal and -shm files
the main file's mode). A file written under a temporary name and renamed into place is chmodded
to `FILE_MODE` before the rename, so a temporary file left by a crash cannot lend it a wider
mode. What exists already keeps its mode: a directory or store the user made, or chmodded on
purpose, is theirs to decide.

This module is the lowest layer's (recorder/), so the capture side, analytics and the CLI share it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: str | Path) -> Path:
    """Make the directory `path` like `mkdir -p`, each directory made here 0700 (missing parents
    too, as the XDG base directory specification asks of a data directory's); returns it."""
    path = Path(path)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if not path.is_dir():
            raise
    except FileNotFoundError:
        if path.parent == path:
            raise
        private_dir(path.parent)
        private_dir(path)  # the parent exists now (another process may have made `path`)
    else:
        os.chmod(path, DIR_MODE)  # made here: exactly 0700, whatever the umask took away
    return path


def create_private(path: str | Path) -> int:
    """Create the file `path` with mode 0600, and its missing directories with 0700, and return
    a descriptor open for writing; raises FileExistsError when it exists (nothing is overwritten
    here). When the file cannot be made, the directories made for it are removed again, so a key
    that cannot be written leaves no empty keys/ folder behind."""
    path = Path(path)
    made: list[Path] = []
    folder = path.parent
    while not folder.exists() and folder.parent != folder:
        made.append(folder)
        folder = folder.parent
    try:
        private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except OSError:
        for folder in made:  # deepest first; one another process wrote into stays
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    try:
        os.fchmod(fd, FILE_MODE)  # exactly 0600, whatever the umask took away
    except OSError:
        os.close(fd)
        raise
    return fd


def private_file(path: str | Path) -> Path:
    """Make `path` an empty file with mode 0600 unless it exists (then it is left as it is), for
    a library or `open()` to write into; returns it."""
    path = Path(path)
    with contextlib.suppress(FileExistsError):
        os.close(create_private(path))
    return path
