"""`blackbox attach` / `blackbox detach`: put every server of a real MCP host config on record.

A host config (Claude Desktop, Claude Code, Cursor, VS Code) is a file the user and the host both
edit, so this module never re-serialises it: it parses the JSON (or VS Code's JSONC) into a tree
that remembers where every value sits in the text, and rewrites only the few spans it must (the
`command` and `args` of a stdio entry, the `url` of an HTTP entry). Indentation, key order, line
endings, comments, `env`, `cwd` and every key it does not know stay byte for byte as they were.

Where the originals are kept: in a sidecar file next to the config
(`<config>.blackbox-attach.json`), never inside the host's own file. Entries are checked
against schemas that forbid unknown keys (the published mcp.json schema does), and hosts that
rewrite their file from what they parsed drop keys they do not know; a sidecar is never touched
by a host. The wrapped entry is also
self-describing (`blackbox record --name KEY -- ORIGINAL COMMAND ARGS...`), so a stdio entry can
still be unwrapped when the sidecar is gone or the host has reformatted the file: then the
restore is exact in meaning rather than in bytes.

Nothing here prints, reads the environment or imports click: the caller passes the wrapper
executable and the options, and renders the returned report.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shlex
import stat
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from recorder.errors import BlackboxError

BACKUP_SUFFIX = ".blackbox-backup"
SIDECAR_SUFFIX = ".blackbox-attach.json"
SIDECAR_FORMAT = "mcp-blackbox attach state"
DEFAULT_PORT_BASE = 7400
# Ports are spread over a window above the base by a hash of the server key, so a server keeps
# its port when other servers are added or removed (a host or a service file may remember it).
PORT_WINDOW = 1000
UNIT_PREFIX = "blackbox-proxy-"


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
# A JSON / JSONC parser that keeps positions


@dataclass
class Node:
    """A JSON value and where it sits in the text: `text[start:end]` is its source."""

    kind: str  # object, array, string, number, literal
    start: int
    end: int
    value: Any = None  # the decoded value for scalars
    members: list[Member] = field(default_factory=list)  # object
    items: list[Node] = field(default_factory=list)  # array

    def get(self, key: str) -> Node | None:
        """The value of `key` in an object (the last one wins, as in JSON.parse)."""
        for member in reversed(self.members):
            if member.key == key:
                return member.value
        return None

    def member(self, key: str) -> Member | None:
        for member in reversed(self.members):
            if member.key == key:
                return member
        return None

    def to_python(self) -> Any:
        if self.kind == "object":
            return {m.key: m.value.to_python() for m in self.members}
        if self.kind == "array":
            return [item.to_python() for item in self.items]
        return self.value


@dataclass
class Member:
    key: str
    key_start: int
    key_end: int
    value: Node


class _ParseError(Exception):
    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


# One pattern for every token. A position where nothing matches is an error, so no character is
# ever skipped silently. (The string pattern is the unrolled form: much faster than (a|b)*.)
_TOKEN = re.compile(
    r"""(?P<ws>[ \t\r\n]+)"""
    r"""|(?P<str>"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*")"""
    r"""|(?P<punct>[{}\[\]:,])"""
    r"""|(?P<num>-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)"""
    r"""|(?P<lit>true|false|null)"""
    r"""|(?P<comment>//[^\n]*|/\*.*?\*/)""",
    re.DOTALL,
)
_LITERALS = {"true": True, "false": False, "null": None}
MAX_DEPTH = 200

# Parser states: what the innermost open container expects next.
_VALUE = 0  # a value (after ':' in an object, after ',' in an array)
_FIRST_KEY = 1  # after '{': a key or '}'
_KEY = 2  # after ',' in an object: a key (or '}', a trailing comma)
_COLON = 3
_NEXT = 4  # after a member or an item: ',' or the closing bracket
_FIRST_ITEM = 5  # after '[': a value or ']'
_ITEM = 6  # after ',' in an array: a value (or ']', a trailing comma)

_EXPECTING = {
    _VALUE: "expecting a value",
    _FIRST_KEY: "expecting a property name in double quotes",
    _KEY: "expecting a property name in double quotes",
    _COLON: "expecting ':' after a property name",
    _FIRST_ITEM: "expecting a value",
    _ITEM: "expecting a value",
}


class _Parser:
    """A table-driven JSON parser over one token pattern, iterative (no recursion limit). Comments
    and trailing commas are accepted (VS Code reads its files with a JSONC parser) and the first
    one seen is remembered, so that a caller can refuse it with its position for a host that
    reads strict JSON."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.first_extension: tuple[int, str] | None = None  # (pos, "comment"|"trailing comma")

    def parse(self) -> Node:
        text = self.text
        n = len(text)
        pos = 1 if text.startswith("\ufeff") else 0
        match = _TOKEN.match
        # Open containers: [node, state, key, key_start, key_end]
        stack: list[list[Any]] = []
        root: Node | None = None
        while True:
            m = match(text, pos)
            if m is None:
                if pos >= n:
                    break
                if text.startswith("/*", pos):
                    raise _ParseError("unterminated /* comment", pos)
                if text[pos] == '"':
                    raise _ParseError("invalid or unterminated string", pos)
                raise _ParseError(self._expecting(stack, root), pos)
            kind = m.lastgroup
            start, pos = pos, m.end()
            if kind == "ws":
                continue
            if kind == "comment":
                self._note(start, "comment")
                continue
            if not stack:
                if root is not None:
                    raise _ParseError("unexpected data after the JSON document", start)
                state = _VALUE
            else:
                frame = stack[-1]
                state = frame[1]
            token = m.group()
            node: Node | None = None
            if state in (_FIRST_KEY, _KEY):
                if kind == "str":
                    frame[2] = token[1:-1] if "\\" not in token else json.loads(token)
                    frame[3], frame[4], frame[1] = start, pos, _COLON
                    continue
                if token != "}":
                    raise _ParseError(_EXPECTING[state], start)
                if state == _KEY:
                    self._note(start, "trailing comma")
                node = stack.pop()[0]
                node.end = pos
            elif state == _COLON:
                if token != ":":
                    raise _ParseError(_EXPECTING[_COLON], start)
                frame[1] = _VALUE
                continue
            elif state == _NEXT:
                container = frame[0]
                if token == ",":
                    frame[1] = _KEY if container.kind == "object" else _ITEM
                    continue
                if token == ("}" if container.kind == "object" else "]"):
                    node = stack.pop()[0]
                    node.end = pos
                elif container.kind == "object":
                    raise _ParseError("expecting ',' or '}' in an object", start)
                else:
                    raise _ParseError("expecting ',' or ']' in an array", start)
            else:  # a value is expected (or, in an array, possibly its end)
                if token == "]" and state in (_FIRST_ITEM, _ITEM):
                    if state == _ITEM:
                        self._note(start, "trailing comma")
                    node = stack.pop()[0]
                    node.end = pos
                elif kind == "str":
                    value = token[1:-1] if "\\" not in token else json.loads(token)
                    node = Node("string", start, pos, value)
                elif kind == "num":
                    is_int = "." not in token and "e" not in token and "E" not in token
                    node = Node("number", start, pos, int(token) if is_int else float(token))
                elif kind == "lit":
                    node = Node("literal", start, pos, _LITERALS[token])
                elif token in "{[":
                    if len(stack) >= MAX_DEPTH:
                        # No host config nests this deep; the limit keeps every later step
                        # (recursive to_python, the C json module) clear of recursion limits.
                        raise _ParseError(f"nested deeper than {MAX_DEPTH} levels", start)
                    if token == "{":
                        stack.append([Node("object", start, start), _FIRST_KEY, None, 0, 0])
                    else:
                        stack.append([Node("array", start, start), _FIRST_ITEM, None, 0, 0])
                    continue
                else:
                    raise _ParseError(_EXPECTING[state], start)
            # A value is complete: hand it to its container, or it is the document.
            if stack:
                frame = stack[-1]
                if frame[0].kind == "object":
                    frame[0].members.append(Member(frame[2], frame[3], frame[4], node))
                else:
                    frame[0].items.append(node)
                frame[1] = _NEXT
            else:
                root = node
        if stack:
            raise _ParseError("unexpected end of file, " + self._expecting(stack, root), n)
        if root is None:
            raise _ParseError("unexpected end of file, expecting a value", n)
        return root

    def _note(self, pos: int, what: str) -> None:
        if self.first_extension is None:
            self.first_extension = (pos, what)

    @staticmethod
    def _expecting(stack: list[list[Any]], root: Node | None) -> str:
        if not stack:
            return "expecting a value" if root is None else "unexpected data after the document"
        frame = stack[-1]
        if frame[1] == _NEXT:
            if frame[0].kind == "object":
                return "expecting ',' or '}' in an object"
            return "expecting ',' or ']' in an array"
        return _EXPECTING[frame[1]]


def line_col(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def parse_json_text(text: str, jsonc: bool, where: str = "<config>") -> Node:
    """The document tree of `text`; `MalformedConfig` naming line and column otherwise."""
    root, extension = _parse_lenient(text, where)
    if not jsonc:
        refuse_extensions(text, extension, where)
    return root


def _parse_lenient(text: str, where: str) -> tuple[Node, tuple[int, str] | None]:
    """The tree with comments and trailing commas allowed, and the first of them seen."""
    parser = _Parser(text)
    try:
        root = parser.parse()
    except _ParseError as exc:
        line, col = line_col(text, exc.pos)
        raise MalformedConfig(
            f"{where}: invalid JSON at line {line}, column {col}: {exc.message}; "
            "the file was left untouched"
        ) from None
    return root, parser.first_extension


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
# Any other file with a top-level `mcpServers` object (Windsurf, Cline, ... share the shape).
GENERIC = HostFormat("mcpServers", "mcpServers", "mcpServers", False)


def detect_format(path: Path, root: Node) -> HostFormat:
    """The host format from the file name, then from the content."""
    name, parent = path.name, path.parent.name
    if name == "claude_desktop_config.json":
        return CLAUDE_DESKTOP
    if name == ".mcp.json":
        return CLAUDE_CODE
    if name == "mcp.json" and parent == ".vscode":
        return VSCODE
    if name == "mcp.json" and parent == ".cursor":
        return CURSOR
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


# ---------------------------------------------------------------------------------------------
# Entries


def is_wrapped(entry: dict) -> bool:
    """True for a stdio entry that already runs under `blackbox record`."""
    command, args = entry.get("command"), entry.get("args")
    if not isinstance(command, str) or not isinstance(args, list):
        return False
    base = re.split(r"[\\/]", command)[-1].lower()
    return base in ("blackbox", "blackbox.exe") and args[:1] == ["record"] and "--" in args


def unwrap_args(args: list) -> list:
    """The original command line inside a wrapped entry's args (everything after `--`)."""
    return list(args[args.index("--") + 1 :])


def wrapped_args(key: str, command: str, args: list, store_url: str | None) -> list[str]:
    head = ["record", "--name", key]
    if store_url:
        head += ["--store", store_url]
    return [*head, "--", command, *args]


def proxy_command(
    wrapper: str, upstream: str, port: int, key: str, store_url: str | None
) -> list[str]:
    argv = [wrapper, "proxy", "--upstream", upstream, "--listen", f"127.0.0.1:{port}"]
    argv += ["--name", key]
    if store_url:
        argv += ["--store", store_url]
    return argv


def proxy_url(port: int, upstream: str) -> str:
    """The URL the host uses instead of `upstream`: `blackbox proxy` forwards paths unchanged to
    the upstream's origin, so the local URL keeps the upstream's path and query (`/mcp` for most
    Streamable HTTP servers, `/sse` for legacy HTTP+SSE ones)."""
    parts = urlsplit(upstream)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return f"http://127.0.0.1:{port}{path}"


def preferred_port(key: str, base: int) -> int:
    return base + zlib.crc32(key.encode("utf-8")) % PORT_WINDOW


def entry_kind(entry: dict) -> tuple[str, str | None]:
    """("stdio"|"http"|"sse"|"skip", reason when skipped)."""
    if isinstance(entry.get("url"), str):
        kind = "sse" if entry.get("type") == "sse" else "http"
        return kind, None
    if isinstance(entry.get("command"), str) and entry["command"]:
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            return "skip", '"args" is not a list of strings'
        return "stdio", None
    return "skip", 'neither a "command" nor a "url"'


# ---------------------------------------------------------------------------------------------
# Text edits


@dataclass
class Edit:
    start: int
    end: int
    text: str


def apply_edits(text: str, edits: list[Edit]) -> str:
    out, last = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        if edit.start < last:
            raise AssertionError("overlapping edits")  # a bug, never a user error
        out.append(text[last : edit.start])
        out.append(edit.text)
        last = edit.end
    out.append(text[last:])
    return "".join(out)


def _dump(value: Any) -> str:
    # ensure_ascii=False keeps non-ASCII names readable, as the hosts themselves write them.
    return json.dumps(value, ensure_ascii=False)


def _trailing_ws(s: str) -> str:
    """The whitespace run at the end of `s` (what indents the next token)."""
    return s[len(s.rstrip(" \t\r\n")) :]


def _leading_ws(s: str) -> str:
    return s[: len(s) - len(s.lstrip(" \t\r\n"))]


def format_array_like(text: str, old: Node | None, values: list[str]) -> str:
    """`values` as a JSON array laid out like the array `old` was (one line or one per line)."""
    if old is None or not old.items or "\n" not in text[old.start : old.end]:
        sep = ", "
        if old is not None and len(old.items) > 1:
            between = text[old.items[0].end : old.items[1].start]
            sep = "," + _trailing_ws(between) if "\n" not in between else ", "
        return "[" + sep.join(_dump(v) for v in values) + "]"
    first, last = old.items[0], old.items[-1]
    opening = _trailing_ws(text[old.start + 1 : first.start]) or "\n"
    closing = _leading_ws(text[last.end : old.end - 1])
    if len(old.items) > 1:
        sep = "," + _trailing_ws(text[old.items[0].end : old.items[1].start])
    else:
        sep = "," + opening
    return "[" + opening + sep.join(_dump(v) for v in values) + closing + "]"


def set_member_edits(text: str, obj: Node, key: str, new_value: str, after: str) -> list[Edit]:
    """Edits that set `key` of `obj` to the JSON text `new_value`, inserting the member after the
    member `after` (in that member's indentation) when it is absent."""
    member = obj.member(key)
    if member is not None:
        return [Edit(member.value.start, member.value.end, new_value)]
    anchor = obj.member(after)
    if anchor is None:
        raise AssertionError(f"no member {after!r} to insert after")
    index = obj.members.index(anchor)
    before = obj.start + 1 if index == 0 else obj.members[index - 1].value.end
    indent = _trailing_ws(text[before : anchor.key_start])
    colon = text[anchor.key_end : anchor.value.start]
    if "\n" not in indent:
        # A one-line object: space like its other members do, else like its colon does.
        if len(obj.members) > 1:
            indent = _trailing_ws(text[obj.members[0].value.end : obj.members[1].key_start])
        else:
            indent = " " if colon.endswith(" ") else ""
    return [Edit(anchor.value.end, anchor.value.end, f",{indent}{_dump(key)}{colon}{new_value}")]


def remove_member_edits(obj: Node, key: str) -> list[Edit]:
    """Edits that delete member `key` together with the comma and spacing that belong to it."""
    member = obj.member(key)
    if member is None:
        return []
    index = obj.members.index(member)
    if index > 0:
        return [Edit(obj.members[index - 1].value.end, member.value.end, "")]
    if len(obj.members) > 1:
        return [Edit(member.key_start, obj.members[1].key_start, "")]
    return [Edit(obj.start + 1, obj.end - 1, "")]


# ---------------------------------------------------------------------------------------------
# The sidecar


def sidecar_path(config: HostConfig) -> Path:
    return config.real_path.with_name(config.real_path.name + SIDECAR_SUFFIX)


def backup_path(config: HostConfig) -> Path:
    return config.real_path.with_name(config.real_path.name + BACKUP_SUFFIX)


def read_sidecar(path: Path) -> dict:
    """The attach state next to a config; an empty state when there is none."""
    try:
        state = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {"format": SIDECAR_FORMAT, "version": 1, "entries": {}}
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


def _write_or_fail(path: Path, data: bytes, mode: int | None, what: str) -> None:
    try:
        atomic_write(path, data, mode)
    except OSError as exc:
        raise AttachError(f"{path}: cannot write the {what}: {exc.strerror}") from None


def _check_unchanged(config: HostConfig) -> None:
    try:
        now = config.real_path.read_bytes()
    except OSError:
        now = None
    if now != config.raw:
        raise ConfigChanged(
            f"{config.path}: changed on disk while being processed (is the host saving it?); "
            "nothing was written, try again"
        )


# ---------------------------------------------------------------------------------------------
# systemd user units


def systemd_quote(arg: str) -> str:
    """One ExecStart word: quoted when needed; `%` and `$` escaped (systemd expands them)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_@+=:,./%$-]+", escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_name(key: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]", "-", key)
    if slug != key or not slug:
        # Different keys may slug alike ("a b", "a/b"): keep them apart.
        slug = f"{slug}-{zlib.crc32(key.encode('utf-8')):08x}"
    return f"{UNIT_PREFIX}{slug}.service"


def unit_text(key: str, upstream: str, argv: list[str]) -> str:
    # systemd expands %-specifiers in Description too (URLs often hold %XX): escape them.
    description = f"mcp-blackbox recording proxy for MCP server {key!r} ({upstream!r})"
    return (
        "# Written by `blackbox attach --install-service`; `blackbox detach` says how to remove.\n"
        "[Unit]\n"
        f"Description={description.replace('%', '%%')}\n"
        "After=network-online.target\n"
        "\n"
        "[Service]\n"
        f"ExecStart={' '.join(systemd_quote(a) for a in argv)}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


# ---------------------------------------------------------------------------------------------
# Plans and reports


@dataclass
class EntryChange:
    """What attach or detach does (or did) to one server entry."""

    key: str
    action: str  # attach: wrapped, proxied, attached (already), skipped; detach: restored, kept
    detail: str = ""
    exact: bool = True  # detach: byte-exact restore (False: rebuilt from the wrapped entry)
    port: int | None = None
    upstream: str | None = None
    proxy_argv: list[str] | None = None
    unit_path: str | None = None


@dataclass
class Report:
    """The outcome of attach or detach, for the CLI to render."""

    path: str
    format: str
    changes: list[EntryChange]
    before: str
    after: str
    dry_run: bool
    operation: str = "attached"
    written: bool = False
    backup: str | None = None
    sidecar: str | None = None
    units: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        """A unified diff of the config from before to after (GNU diff's marker for a last line
        without a newline, so the diff never runs into what is printed after it)."""
        lines = difflib.unified_diff(
            self.before.splitlines(keepends=True),
            self.after.splitlines(keepends=True),
            fromfile=f"{self.path} (current)",
            tofile=f"{self.path} ({self.operation})",
        )
        return "".join(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            for line in lines
        )

    def by_action(self, action: str) -> list[EntryChange]:
        return [c for c in self.changes if c.action == action]


# ---------------------------------------------------------------------------------------------
# attach


def attach(
    path: str | os.PathLike[str],
    *,
    wrapper: str,
    store_url: str | None = None,
    dry_run: bool = False,
    port_base: int = DEFAULT_PORT_BASE,
    service_dir: str | os.PathLike[str] | None = None,
) -> Report:
    """Wrap every stdio server of a host config in `blackbox record` and point every HTTP server
    at a local `blackbox proxy`; idempotent; `dry_run` computes the same report and writes
    nothing."""
    if not 1 <= port_base <= 65535 - PORT_WINDOW:
        raise AttachError(f"--proxy-port-base must be between 1 and {65535 - PORT_WINDOW}")
    config = load_config(path)
    state_path = sidecar_path(config)
    state = read_sidecar(state_path)
    records: dict = state["entries"]
    text = config.text
    edits: list[Edit] = []
    changes: list[EntryChange] = []
    new_records: dict[str, dict] = {}
    expected: dict[str, Any] = {}  # what each rewritten entry must parse back to

    members = config.servers.members
    if not members:
        raise NoServers(f'{config.path}: "{config.format.section}" is empty: nothing to attach')
    # Ports already promised to attached servers stay theirs; new servers probe from their hash.
    taken = {r["port"] for r in records.values() if r.get("port") is not None}
    last_of = {m.key: m for m in members}  # with duplicate keys the host reads the last one

    for member in members:
        key, node = member.key, member.value
        if last_of[key] is not member:
            changes.append(
                EntryChange(key, "skipped", "duplicate key: the host reads the last one")
            )
            continue
        if node.kind != "object":
            changes.append(EntryChange(key, "skipped", "the entry is not a JSON object"))
            continue
        entry = node.to_python()
        entry_text = text[node.start : node.end]
        record = records.get(key)
        kind, reason = entry_kind(entry)
        if kind == "skip":
            changes.append(EntryChange(key, "skipped", reason or ""))
            continue
        if kind == "stdio":
            if is_wrapped(entry):
                changes.append(EntryChange(key, "attached", "already runs under blackbox record"))
                continue
            new_args = wrapped_args(key, entry["command"], entry.get("args", []), store_url)
            args_node = node.get("args")
            entry_edits = [Edit(node.get("command").start, node.get("command").end, _dump(wrapper))]
            entry_edits += set_member_edits(
                text, node, "args", format_array_like(text, args_node, new_args), after="command"
            )
            wrapped_text = _rebase(text, node, entry_edits)
            edits += entry_edits
            new_records[key] = {"kind": "stdio", "original": entry_text, "wrapped": wrapped_text}
            expected[key] = {**entry, "command": wrapper, "args": new_args}
            shown = shlex.join([entry["command"], *entry.get("args", [])])
            changes.append(EntryChange(key, "wrapped", shown))
            continue
        # HTTP (Streamable HTTP or legacy SSE)
        url = entry["url"]
        if record and record.get("kind") in ("http", "sse") and record.get("local_url") == url:
            changes.append(
                EntryChange(
                    key,
                    "attached",
                    f"already points at the proxy for {record['upstream']}",
                    port=record.get("port"),
                    upstream=record.get("upstream"),
                    proxy_argv=proxy_command(
                        wrapper, record["upstream"], record["port"], key, store_url
                    ),
                    unit_path=record.get("unit"),
                )
            )
            continue
        if not url.startswith(("http://", "https://")):
            changes.append(EntryChange(key, "skipped", f"not an http(s) URL: {url}"))
            continue
        if "${" in url:
            changes.append(
                EntryChange(
                    key, "skipped", "the URL uses host variables (${...}) the proxy cannot see"
                )
            )
            continue
        if record and record.get("port") is not None:
            taken.discard(record["port"])  # a stale record of this key: its port is free again
        port = preferred_port(key, port_base)
        while port in taken:
            port = port_base + (port - port_base + 1) % PORT_WINDOW
        taken.add(port)
        local = proxy_url(port, url)
        url_node = node.get("url")
        entry_edits = [Edit(url_node.start, url_node.end, _dump(local))]
        wrapped_text = _rebase(text, node, entry_edits)
        edits += entry_edits
        expected[key] = {**entry, "url": local}
        argv = proxy_command(wrapper, url, port, key, store_url)
        new_records[key] = {
            "kind": kind,
            "original": entry_text,
            "wrapped": wrapped_text,
            "upstream": url,
            "port": port,
            "local_url": local,
            "unit": None,
        }
        changes.append(
            EntryChange(
                key, "proxied", f"{url} -> {local}", port=port, upstream=url, proxy_argv=argv
            )
        )

    after = apply_edits(text, edits)
    verify_rewrite(config, after, expected)
    report = Report(str(config.path), config.format.label, changes, text, after, dry_run)
    if service_dir is not None:
        unit_dir = Path(service_dir)
        for change in changes:
            if change.proxy_argv and change.upstream:
                change.unit_path = str(unit_dir / unit_name(change.key))
    if dry_run:
        return report

    # Units only on request; one already installed with the same text is not rewritten, so
    # attaching twice changes nothing here either.
    units_to_write = [
        c
        for c in changes
        if service_dir is not None
        and c.unit_path
        and c.proxy_argv
        and not _same_file(Path(c.unit_path), _unit_bytes(c))
    ]
    if not edits and not units_to_write:
        return report

    if edits:
        _check_unchanged(config)
        backup = backup_path(config)
        # The backup holds the config as it was before blackbox first touched it: keep it while
        # entries are attached, refresh it when attaching a config that has nothing attached.
        if not backup.exists() or not records:
            _write_or_fail(backup, config.raw, config.mode, "backup")
        report.backup = str(backup)
        for key, record in new_records.items():
            records[key] = record
        for change in units_to_write:
            if change.key in records:
                records[change.key]["unit"] = change.unit_path
        state["config"] = config.real_path.name
        state["section"] = config.format.section
        state["host"] = config.format.name
        # The sidecar first: if we die before the config is replaced, detach finds records whose
        # wrapped text is not in the file and ignores them; the other order could lose originals.
        _write_state(state_path, state)
        report.sidecar = str(state_path)
        _write_or_fail(config.real_path, after.encode("utf-8"), config.mode, "config")
        report.written = True
    elif units_to_write:
        for change in units_to_write:
            if change.key in records:
                records[change.key]["unit"] = change.unit_path
        _write_state(state_path, state)
        report.sidecar = str(state_path)

    for change in units_to_write:
        unit_path = Path(change.unit_path or "")
        try:
            unit_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AttachError(f"{unit_path.parent}: cannot create: {exc.strerror}") from None
        _write_or_fail(unit_path, _unit_bytes(change), 0o644, "service unit")
        report.units.append(str(unit_path))
    return report


def _unit_bytes(change: EntryChange) -> bytes:
    return unit_text(change.key, change.upstream or "", change.proxy_argv or []).encode("utf-8")


def _same_file(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def verify_rewrite(config: HostConfig, after: str, expected: dict[str, Any]) -> None:
    """Parse the rewritten text and check it means exactly the config with `expected` entries
    swapped in: a last guard, before anything is written, that a text edit never loses data."""
    want = config.root.to_python()
    want[config.format.section] = {**want[config.format.section], **expected}
    try:
        got = _loads(after, config.format.jsonc)
    except MalformedConfig:
        got = None
    if got != want:
        raise AttachError(
            f"{config.path}: the rewritten config would not say what was planned (a bug in "
            "blackbox; please report it with the file); nothing was written"
        )


def _rebase(text: str, node: Node, edits: list[Edit]) -> str:
    """The text of `node` after `edits` (which all fall inside it)."""
    local = [Edit(e.start - node.start, e.end - node.start, e.text) for e in edits]
    return apply_edits(text[node.start : node.end], local)


def _write_state(path: Path, state: dict) -> None:
    data = (json.dumps(state, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    _write_or_fail(path, data, 0o600, "attach state")


# ---------------------------------------------------------------------------------------------
# detach


def detach(path: str | os.PathLike[str], *, dry_run: bool = False) -> Report:
    """Restore every attached entry of a host config: byte for byte when the entry is as attach
    left it, else rebuilt from the wrapped entry (stdio) or the recorded upstream (HTTP)."""
    config = load_config(path)
    state_path = sidecar_path(config)
    state = read_sidecar(state_path)
    records: dict = state["entries"]
    text = config.text
    edits: list[Edit] = []
    changes: list[EntryChange] = []
    done: set[str] = set()
    expected: dict[str, Any] = {}
    last_of = {m.key: m for m in config.servers.members}

    for member in config.servers.members:
        key, node = member.key, member.value
        record = records.get(key)
        if node.kind != "object" or last_of[key] is not member:
            continue
        entry_text = text[node.start : node.end]
        if record and entry_text == record.get("wrapped"):
            edits.append(Edit(node.start, node.end, record["original"]))
            expected[key] = _parse_fragment(record["original"])
            done.add(key)
            changes.append(_restored(key, record, exact=True))
            continue
        entry = node.to_python()
        kind, _ = entry_kind(entry)
        if kind == "stdio" and is_wrapped(entry):
            inner = unwrap_args(entry["args"])
            if not inner:
                changes.append(EntryChange(key, "kept", "wrapped entry names no command after --"))
                continue
            entry_edits = [
                Edit(node.get("command").start, node.get("command").end, _dump(inner[0]))
            ]
            had_args = True
            if record:
                original = _parse_fragment(record.get("original", ""))
                had_args = not isinstance(original, dict) or "args" in original
            expected[key] = {**entry, "command": inner[0], "args": inner[1:]}
            if not inner[1:] and not had_args:
                entry_edits += remove_member_edits(node, "args")
                del expected[key]["args"]
            else:
                entry_edits += set_member_edits(
                    text,
                    node,
                    "args",
                    format_array_like(text, node.get("args"), inner[1:]),
                    "command",
                )
            edits += entry_edits
            done.add(key)
            changes.append(EntryChange(key, "restored", shlex.join(inner), exact=False))
            continue
        if kind in ("http", "sse") and record and record.get("local_url") == entry.get("url"):
            url_node = node.get("url")
            edits.append(Edit(url_node.start, url_node.end, _dump(record["upstream"])))
            expected[key] = {**entry, "url": record["upstream"]}
            done.add(key)
            changes.append(_restored(key, record, exact=False))
            continue
        if record:
            # Attached once, but the host or the user has changed the entry since: theirs now.
            changes.append(EntryChange(key, "kept", "changed since attach; left as it is"))
            done.add(key)
        elif kind in ("http", "sse") and entry["url"].startswith("http://127.0.0.1:"):
            changes.append(
                EntryChange(key, "kept", "points at a local URL with no attach record; left as is")
            )

    after = apply_edits(text, edits)
    verify_rewrite(config, after, expected)
    report = Report(
        str(config.path), config.format.label, changes, text, after, dry_run, operation="detached"
    )
    report.units = [r["unit"] for k, r in records.items() if k in done and r.get("unit")]
    if dry_run or (not edits and not (records.keys() & done)):
        return report
    remaining = {k: r for k, r in records.items() if k not in done and _still_present(config, k)}
    if edits:
        _check_unchanged(config)
        _write_or_fail(config.real_path, after.encode("utf-8"), config.mode, "config")
        report.written = True
    if remaining:
        state["entries"] = remaining
        _write_state(state_path, state)
        report.sidecar = str(state_path)
    else:
        with contextlib.suppress(FileNotFoundError):
            state_path.unlink()
    return report


def _still_present(config: HostConfig, key: str) -> bool:
    return config.servers.get(key) is not None


def _restored(key: str, record: dict, exact: bool) -> EntryChange:
    if record.get("kind") in ("http", "sse"):
        return EntryChange(
            key,
            "restored",
            f"{record.get('local_url')} -> {record.get('upstream')}",
            exact=exact,
            port=record.get("port"),
            upstream=record.get("upstream"),
            unit_path=record.get("unit"),
        )
    original = _parse_fragment(record.get("original", ""))
    shown = ""
    if isinstance(original, dict) and isinstance(original.get("command"), str):
        shown = shlex.join([original["command"], *original.get("args", [])])
    return EntryChange(key, "restored", shown, exact=exact)


def _loads(text: str, jsonc: bool) -> Any:
    """The value of a document: the C parser when it can (strict JSON), ours for JSONC."""
    try:
        return json.loads(text.removeprefix("\ufeff"))
    except ValueError:
        if not jsonc:
            raise MalformedConfig("not JSON") from None
    return parse_json_text(text, jsonc=True).to_python()


def _parse_fragment(fragment: str) -> Any:
    try:
        return _loads(fragment, jsonc=True)
    except MalformedConfig:
        return None
