"""The checkpoint signing key on disk: made once, mode 0600, never overwritten, never in the store.

The private key signs the log's checkpoints (recorder/trust/signing.py); whoever holds the verifier
key (`vkey`, printed by `blackbox keys init` and `keys show`) checks them. The key lives in a file
of its own — in the data directory unless `--key-file` or `BLACKBOX_KEY_FILE` says where — because a
key kept in the database would be the database administrator's to use. Its text is Go's
note.GenerateKey form (recorder/trust/checkpoint.py), so Go's tools read it too.
"""

from __future__ import annotations

import os
import re
import socket
import stat
from pathlib import Path

from blackbox.recorder import create_private
from blackbox.recorder.trust.checkpoint import (
    CheckpointError,
    Signer,
    parse_private_key,
    valid_key_name,
)

KEY_ENV = "BLACKBOX_KEY_FILE"
HOME_ENV = "BLACKBOX_HOME"


def data_dir() -> Path:
    """The user's data directory: `BLACKBOX_HOME`, else `$XDG_DATA_HOME/mcp-blackbox` (default
    `~/.local/share/mcp-blackbox`). blackbox/config.py asks here."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "mcp-blackbox"


def key_file(flag: str | Path | None = None) -> Path:
    """The signing key's file: `--key-file`, else `BLACKBOX_KEY_FILE`, else the data directory's."""
    chosen = flag or os.environ.get(KEY_ENV)
    if chosen:
        return Path(chosen).expanduser()
    return data_dir() / "keys" / "checkpoint.key"


def default_origin() -> str:
    """A log name for this machine: `<host name>/mcp-blackbox` (no spaces, no plus)."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "localhost"
    return f"{host}/mcp-blackbox"


def init_key(path: Path, origin: str | None = None) -> Signer:
    """Make a new Ed25519 signing key named `origin` in `path` (mode 0600); refuses to replace a
    file that exists."""
    name = origin or default_origin()
    if not valid_key_name(name):
        raise CheckpointError(f"{name!r} cannot name a key: no spaces, no plus sign, not empty")
    signer = Signer.generate(name)
    try:
        fd = create_private(path)  # 0600, in keys/ (0700) and a data directory made for it
    except FileExistsError:
        raise CheckpointError(
            f"{path} exists: a signing key is never overwritten (`blackbox keys show` prints "
            "its verifier key; move it away yourself to start a new one)"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"cannot create {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(signer.private_key_text() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return signer


def load_signer(path: Path) -> Signer:
    """The signing key in `path`; refuses a file others can read (the secret would be theirs)."""
    try:
        info = path.stat()
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise CheckpointError(
            f"no signing key at {path}: make one with `blackbox keys init`, or point "
            f"--key-file / {KEY_ENV} at yours"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read the signing key {path}: {exc}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CheckpointError(
            f"the signing key {path} can be read by others (mode {stat.S_IMODE(info.st_mode):o}):"
            f" run `chmod 600 {path}`"
        )
    signer, problem = parse_private_key(text)
    if signer is None:
        raise CheckpointError(f"{path} is not a signing key: {problem}")
    return signer


def configured_signer(flag: str | Path | None = None) -> Signer | None:
    """The signing key when one is configured (the flag, the variable, or a key in the data
    directory), else None: what the shipper asks before checkpointing by itself."""
    path = key_file(flag)
    if not path.exists():
        if flag or os.environ.get(KEY_ENV):
            return load_signer(path)  # named but missing: say so
        return None
    return load_signer(path)
