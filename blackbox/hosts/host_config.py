"""Host configs as `blackbox attach` reads them: which host wrote the file, and its parsed tree.

Recognising a host (Claude Desktop, Claude Code, Cursor, VS Code, any other `mcpServers` file)
and refusing a file it cannot safely edit, each with one clear error naming the line and column,
is apart from rewriting it (blackbox/hosts/attach.py); the errors of both live here so that each
module raises the same `AttachError` family.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blackbox.hosts.jsonc import JSONCError, Node, line_col, parse
from blackbox.recorder import BlackboxError

# ---------------------------------------------------------------------------------------------
# Errors


class AttachError(BlackboxError):
    """A host config cannot be attached or detached as asked; nothing was written."""


class ConfigNotFound(AttachError):
    pass


class MalformedConfig(AttachError):
    pass


class UnknownConfigFormat(AttachError):
    pass


class NoServers(AttachError):
    pass


class ConfigChanged(AttachError):
    """The file changed on disk between reading and writing (the host may be saving it)."""


# ---------------------------------------------------------------------------------------------
# Parsing a config (the parser itself is blackbox/hosts/jsonc.py)


def parse_json_text(text: str, jsonc: bool, where: str = "<config>") -> Node:
    """The document tree of `text`; `MalformedConfig` naming line and column otherwise."""
    root, extension = _parse_lenient(text, where)
    if not jsonc:
        refuse_extensions(text, extension, where)
    return root


def _parse_lenient(text: str, where: str) -> tuple[Node, tuple[int, str] | None]:
    """The tree with comments and trailing commas allowed, and the first of them seen."""
    try:
        return parse(text)
    except JSONCError as exc:
        line, col = line_col(text, exc.pos)
        raise MalformedConfig(
            f"{where}: invalid JSON at line {line}, column {col}: {exc.message}; "
            "the file was left untouched"
        ) from None


def refuse_extensions(text: str, extension: tuple[int, str] | None, where: str) -> None:
    if extension is not None:
        pos, what = extension
        line, col = line_col(text, pos)
        raise MalformedConfig(
            f"{where}: invalid JSON at line {line}, column {col}: a {what} is not JSON and this "
            "host reads strict JSON; the file was left untouched"
        )


# ---------------------------------------------------------------------------------------------
# Host formats


@dataclass(frozen=True)
class HostFormat:
    name: str  # claude-desktop, claude-code, cursor, vscode, mcpServers
    label: str
    section: str  # the top-level key holding the servers
    jsonc: bool  # the host reads comments and trailing commas


CLAUDE_DESKTOP = HostFormat("claude-desktop", "Claude Desktop", "mcpServers", False)
CLAUDE_CODE = HostFormat("claude-code", "Claude Code", "mcpServers", False)
# VS Code reads mcp.json as JSONC. Cursor, a VS Code fork, is given the same leniency: comments
# already in the file are the user's choice and are kept, not a reason to refuse the file.
CURSOR = HostFormat("cursor", "Cursor", "mcpServers", True)
VSCODE = HostFormat("vscode", "VS Code", "servers", True)
# Windsurf's ~/.codeium/windsurf/mcp_config.json: strict JSON, HTTP servers under `serverUrl`.
WINDSURF = HostFormat("windsurf", "Windsurf", "mcpServers", False)
# Any other file with a top-level `mcpServers` object (Cline and others share the shape).
GENERIC = HostFormat("mcpServers", "mcpServers", "mcpServers", False)


def detect_format(path: Path, root: Node) -> HostFormat:
    """The host format from the file name, then from the content."""
    name, parent = path.name, path.parent.name
    if name == "claude_desktop_config.json":
        return CLAUDE_DESKTOP
    if name in (".mcp.json", ".claude.json"):
        return CLAUDE_CODE
    if name == "mcp.json" and parent == ".vscode":
        return VSCODE
    if name == "mcp.json" and parent == ".cursor":
        return CURSOR
    if name == "mcp_config.json" and parent == "windsurf":
        return WINDSURF
    if root.kind == "object":
        servers, mcp_servers = root.get("servers"), root.get("mcpServers")
        if mcp_servers is not None and mcp_servers.kind == "object":
            return CURSOR if name == "mcp.json" else GENERIC
        if servers is not None and servers.kind == "object":
            return VSCODE  # VS Code's user-profile mcp.json lives outside .vscode
    raise UnknownConfigFormat(
        f'{path}: not a known MCP host config (no top-level "mcpServers" or "servers" '
        "object; expected Claude Desktop, Claude Code, Cursor or VS Code)"
    )


@dataclass
class HostConfig:
    """A config file as read: its bytes, its tree and its format."""

    path: Path  # as the user named it
    real_path: Path  # symlinks followed: where writes go, so a linked dotfile stays a link
    raw: bytes
    text: str
    root: Node
    format: HostFormat
    servers: Node
    mode: int


def load_config(path: str | os.PathLike[str]) -> HostConfig:
    """Read and parse a host config; every failure is one clear `AttachError`."""
    shown = Path(path)
    real = Path(os.path.realpath(shown))
    try:
        raw = real.read_bytes()
        mode = stat.S_IMODE(real.stat().st_mode)
    except FileNotFoundError:
        raise ConfigNotFound(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise ConfigNotFound(f"{shown}: is a directory, not a config file") from None
    except OSError as exc:
        raise AttachError(f"{shown}: cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise MalformedConfig(
            f"{shown}: not UTF-8 at line {line} (byte {exc.start}); the file was left untouched"
        ) from None
    # Parse leniently first: the format (strict or JSONC) may only be known from the content.
    root, extension = _parse_lenient(text, str(shown))
    fmt = detect_format(shown, root)
    if not fmt.jsonc:
        refuse_extensions(text, extension, str(shown))
    if root.kind != "object":
        raise UnknownConfigFormat(
            f"{shown}: not a known MCP host config (the top level is not a JSON object)"
        )
    servers = root.get(fmt.section)
    if servers is None or servers.kind != "object":
        raise NoServers(f'{shown}: no "{fmt.section}" object: nothing to attach')
    return HostConfig(shown, real, raw, text, root, fmt, servers, mode)


def load_document(text: str, jsonc: bool) -> Any:
    """The value of a document: the C parser when it can (strict JSON), ours for JSONC."""
    try:
        return json.loads(text.removeprefix("\ufeff"))
    except ValueError:
        if not jsonc:
            raise MalformedConfig("not JSON") from None
    return parse_json_text(text, jsonc=True).to_python()


def parse_fragment(fragment: str) -> Any:
    """A JSON or JSONC fragment's value, None when it does not parse."""
    try:
        return load_document(fragment, jsonc=True)
    except MalformedConfig:
        return None
