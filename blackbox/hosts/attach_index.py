"""Where `attach` keeps what it knows of each config in the data directory: the backup of the
config as it was before blackbox touched it, the attach state `detach` needs (the original text
of every rewritten entry), and the config's path, so `blackbox where` can list the configs
attached from here. Keyed by the config's real path, never next to the config, where a project
would commit it with its `.mcp.json`; the state also names the hash of the config's content as
attach left it, so a project moved to another directory is still found by what it says.

Configs attached by earlier versions have their state beside the config
(`<config>.blackbox-attach.json`): it is still read, and moved here on the next write."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from blackbox.hosts.host_config import AttachError, HostConfig
from blackbox.recorder import private_dir

SIDECAR_FORMAT = "mcp-blackbox attach state"
BACKUP_SUFFIX = ".blackbox-backup"
LEGACY_SIDECAR_SUFFIX = ".blackbox-attach.json"
STATE_NAME = "state.json"
INDEX_NAME = "config.json"


def attach_dir(data_dir: Path, config_path: Path) -> Path:
    """Where attach keeps what it knows of one config in the data directory (its backup, its
    state and the config's path), keyed by the config's real path."""
    digest = hashlib.sha256(str(config_path).encode("utf-8", "surrogateescape")).hexdigest()
    return data_dir / "attached" / digest[:20]


def content_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def backup_path(config: HostConfig, data_dir: Path) -> Path:
    return attach_dir(data_dir, config.real_path) / (config.real_path.name + BACKUP_SUFFIX)


def state_path(data_dir: Path, config_path: Path) -> Path:
    """The attach state of the config at `config_path`."""
    return attach_dir(data_dir, config_path) / STATE_NAME


def legacy_sidecar(config_path: Path) -> Path:
    """Where earlier versions kept the attach state: beside the config."""
    return config_path.with_name(config_path.name + LEGACY_SIDECAR_SUFFIX)


def state_by_content(data_dir: Path, digest: str) -> Path | None:
    """The state of a config attached elsewhere whose content was, as attach left it, `digest`
    (the same project moved to another directory)."""
    for path in sorted((data_dir / "attached").glob(f"*/{STATE_NAME}")):
        try:
            doc = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("content_sha256") == digest:
            return path
    return None


def attached_configs(data_dir: Path) -> list[tuple[str, str, bool]]:
    """(config path, host, still attached) of every config attached from this data directory."""
    found = []
    for index in sorted((data_dir / "attached").glob(f"*/{INDEX_NAME}")):
        try:
            doc = json.loads(index.read_text("utf-8"))
            path = Path(doc["config"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        attached = (index.parent / STATE_NAME).exists() or legacy_sidecar(path).exists()
        found.append((str(path), str(doc.get("host", "")), attached))
    return found


# ---------------------------------------------------------------------------------------------
# The attach state


def empty_state() -> dict:
    return {"format": SIDECAR_FORMAT, "version": 2, "entries": {}}


def load_state(config: HostConfig, data_dir: Path) -> tuple[dict, Path | None]:
    """The attach state of a config and the file it was read from: its own in the data
    directory, else the sidecar an earlier version left beside it, else the state of a config
    attached elsewhere with the same content (the project was moved); an empty state when
    there is none."""
    own = state_path(data_dir, config.real_path)
    for candidate in (own, legacy_sidecar(config.real_path)):
        if candidate.exists():
            return read_sidecar(candidate), candidate
    moved = state_by_content(data_dir, content_hash(config.raw))
    if moved is not None:
        return read_sidecar(moved), moved
    return empty_state(), None


def save_state(
    config: HostConfig, data_dir: Path, state: dict, after: bytes, read_from: Path | None
) -> Path:
    """Write the state into the data directory (noting the hash of the config's content as
    attach leaves it); a sidecar an earlier version left beside the config is then removed."""
    own = state_path(data_dir, config.real_path)
    private_dir(own.parent)  # 0700, and so is a data directory made for it
    state["version"] = 2
    state["config_path"] = str(config.real_path)
    state["content_sha256"] = content_hash(after)
    _write_state(own, state)
    if read_from is not None and read_from.name.endswith(LEGACY_SIDECAR_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            read_from.unlink()
    return own


def register(config: HostConfig, data_dir: Path) -> None:
    """Note the config as attached, for `blackbox where`."""
    place = attach_dir(data_dir, config.real_path)
    private_dir(place)  # 0700, and so is a data directory made for it
    doc = {"config": str(config.real_path), "host": config.format.label}
    write_or_fail(place / "config.json", json.dumps(doc).encode("utf-8"), 0o600, "attach index")


def read_sidecar(path: Path) -> dict:
    """The attach state in `path`; an empty state when there is none."""
    try:
        state = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return empty_state()
    except (OSError, ValueError) as exc:
        raise AttachError(f"{path}: unreadable attach state ({exc}); move it aside") from None
    if not isinstance(state, dict) or state.get("format") != SIDECAR_FORMAT:
        raise AttachError(f"{path}: not an mcp-blackbox attach state file; move it aside")
    state.setdefault("entries", {})
    return state


# ---------------------------------------------------------------------------------------------
# Writing


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write through a temporary file in the same directory and `os.replace`, so a reader (the
    host) sees the old file or the new one, never half of one; keep the file's mode."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_or_fail(path: Path, data: bytes, mode: int | None, what: str) -> None:
    try:
        atomic_write(path, data, mode)
    except OSError as exc:
        raise AttachError(f"{path}: cannot write the {what}: {exc.strerror}") from None


def _write_state(path: Path, state: dict) -> None:
    data = (json.dumps(state, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    write_or_fail(path, data, 0o600, "attach state")
