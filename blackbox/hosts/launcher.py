"""What an attached entry runs, so that a config means the same on every machine: the command,
and the options every server is recorded with.

A project config (`.mcp.json`, `.vscode/mcp.json`, `.cursor/mcp.json`) is committed and opened on
other machines, so its entries run plain `blackbox`, found on the PATH of whoever opens it: never
the path of a checkout or a virtual environment, which exists on one machine only. A user config
(Claude Desktop, Windsurf, `~/.claude.json`, `~/.cursor/mcp.json`) belongs to one machine and is
read by hosts started from the desktop, whose PATH rarely has the user's tools; its entries run a
launcher in the data directory (`bin/blackbox`), a small script that finds the installed
`blackbox` each time it starts, so reinstalling the tool elsewhere does not break the config.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from blackbox.hosts.attach_index import write_or_fail
from blackbox.hosts.host_config import AttachError, HostConfig
from blackbox.recorder import private_dir

PLAIN_COMMAND = "blackbox"
# Where installers put console scripts (pipx, pip --user, Homebrew, system packages).
USUAL_PLACES = (
    "$HOME/.local/bin/blackbox",
    "/opt/homebrew/bin/blackbox",
    "/usr/local/bin/blackbox",
    "/usr/bin/blackbox",
)


def is_project_config(config: HostConfig, home: Path | None = None) -> bool:
    """True for a config that lives in a project (and may be committed with it)."""
    path = config.real_path
    if path.name == ".mcp.json":
        return True
    if path.name == "mcp.json" and path.parent.name in (".vscode", ".cursor"):
        user_home = Path(os.path.realpath(home or Path.home()))
        return path.parent.parent != user_home  # ~/.cursor/mcp.json is Cursor's user config
    return False


def project_root(config: HostConfig) -> Path:
    """The directory a project config belongs to (where its host starts servers)."""
    path = config.real_path
    return path.parent if path.name == ".mcp.json" else path.parent.parent


def launcher_path(data_dir: Path) -> Path:
    return data_dir / "bin" / "blackbox"


def launcher_text(installed: str | None) -> str:
    """A POSIX shell script that runs the first `blackbox` it finds: the one attach ran as, then
    the usual install places, then PATH (skipping itself)."""
    candidates = ([shlex.quote(installed)] if installed else []) + [
        f'"{place.replace("$HOME", "${HOME}")}"' for place in USUAL_PLACES
    ]
    lines = [
        "#!/bin/sh",
        "# Written by `blackbox attach`: host configs on this machine run this script, which",
        "# starts the installed blackbox wherever it is now. `blackbox attach` rewrites it.",
        f"for candidate in {' '.join(candidates)}; do",
        '  if [ -x "$candidate" ] && [ "$candidate" != "$0" ]; then exec "$candidate" "$@"; fi',
        "done",
        'self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")',
        "IFS=:",
        "for dir in $PATH; do",
        '  if [ -x "$dir/blackbox" ] && [ "$dir/blackbox" != "$self" ]; then',
        '    exec "$dir/blackbox" "$@"',
        "  fi",
        "done",
        'echo "blackbox: not installed (install mcp-blackbox, then run blackbox attach again)" >&2',
        "exit 127",
        "",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class RecordOptions:
    """What every attached server is recorded with: a policy file, redaction rules, OTel."""

    policy: Path | None = None
    redact: Path | None = None
    otel: bool = False

    def args(self, config: HostConfig, bridge: bool = False) -> list[str]:
        """As options of `blackbox record` (or `blackbox bridge`, which has no --otel)."""
        out: list[str] = []
        if self.policy is not None:
            out += ["--policy", option_path(config, self.policy)]
        if self.redact is not None:
            out += ["--redact", option_path(config, self.redact)]
        if self.otel and not bridge:
            out += ["--otel"]
        return out


def option_path(config: HostConfig, file: Path) -> str:
    """A file as the config names it: inside a project config's project, relative to the
    project (`${workspaceFolder}/...` where the host expands it; Claude Code starts servers in
    the project's directory), so the config keeps working wherever the project is checked out;
    anywhere else, absolute."""
    absolute = Path(os.path.realpath(file))
    if is_project_config(config):
        root = project_root(config)
        if absolute.is_relative_to(root):
            relative = absolute.relative_to(root).as_posix()
            if config.format.name in ("vscode", "cursor"):
                return "${workspaceFolder}/" + relative
            return relative
    return str(absolute)


def entry_command(config: HostConfig, data_dir: Path) -> str:
    """The command an attached entry runs: plain `blackbox` in a project config, the launcher
    in the data directory in a user config (blackbox/hosts/launcher.py says why)."""
    if is_project_config(config) or os.name == "nt":
        return PLAIN_COMMAND
    return str(launcher_path(data_dir))


def install_launcher(data_dir: Path, installed: str | None) -> Path:
    path = launcher_path(data_dir)
    private_dir(data_dir)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise AttachError(f"{path.parent}: cannot create: {exc.strerror}") from None
    write_or_fail(path, launcher_text(installed).encode("utf-8"), 0o755, "launcher")
    return path
