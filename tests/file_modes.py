"""What the file-mode tests share: running code under a given umask, in this process or in a
child, and listing what under a directory is not private (directories 0700, files 0600)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

# A permissive umask (what shared machines and containers use) and one that takes the owner's
# own bits away: modes must come out exactly 0700 and 0600 under both.
UMASKS = [pytest.param(0o000, id="umask000"), pytest.param(0o277, id="umask277")]


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """This process's umask is `mask` inside the block."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def under_umask(mask: int, argv: Sequence[str]) -> list[str]:
    """`argv` run by a shell that sets the umask first (for a child the test does not fork)."""
    return ["sh", "-c", f'umask {mask:03o}; exec "$@"', "sh", *argv]


def not_private(root: Path) -> list[str]:
    """`root` and everything under it that is not private, as "<mode> <path>" lines: a
    directory must be exactly 0700, a file exactly 0600."""
    found = []
    for path in [root, *sorted(root.rglob("*"))]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        want = 0o700 if path.is_dir() else 0o600
        if mode != want:
            found.append(f"{mode:o} {path.relative_to(root.parent)}")
    return found
