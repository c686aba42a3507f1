"""Where `attach` keeps what it knows of each config in the data directory: the backup of the
config as it was before blackbox touched it, and the config's path, so `blackbox where` can list
the configs attached from here. Keyed by the config's real path, never next to the config, where
a backup would be committed with a project's `.mcp.json`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blackbox.hosts.host_config import HostConfig

BACKUP_SUFFIX = ".blackbox-backup"
SIDECAR_SUFFIX = ".blackbox-attach.json"


def attach_dir(data_dir: Path, config_path: Path) -> Path:
    """Where attach keeps what it knows of one config in the data directory (its backup and the
    config's path), keyed by the config's real path: never next to the config, where a backup
    would be committed with a project's `.mcp.json`."""
    digest = hashlib.sha256(str(config_path).encode("utf-8", "surrogateescape")).hexdigest()
    return data_dir / "attached" / digest[:20]


def backup_path(config: HostConfig, data_dir: Path) -> Path:
    return attach_dir(data_dir, config.real_path) / (config.real_path.name + BACKUP_SUFFIX)


def attached_configs(data_dir: Path) -> list[tuple[str, str, bool]]:
    """(config path, host, still attached) of every config attached from this data directory."""
    found = []
    for index in sorted((data_dir / "attached").glob("*/config.json")):
        try:
            doc = json.loads(index.read_text("utf-8"))
            path = Path(doc["config"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
        found.append((str(path), str(doc.get("host", "")), sidecar.exists()))
    return found
