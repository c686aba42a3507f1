"""`blackbox attach` / `blackbox detach`: put every server of a real MCP host config on record.

A host config (Claude Desktop, Claude Code, Cursor, VS Code) is a file the user and the host both
edit, so this module never re-serialises it: it parses the JSON (or VS Code's JSONC) into a tree
that remembers where every value sits in the text, and rewrites only the few spans it must (the
`command` and `args` of a stdio entry, the `url` of an HTTP entry). Indentation, key order, line
endings, comments, `env`, `cwd` and every key it does not know stay byte for byte as they were.

What an entry runs is portable: plain `blackbox` in a project config, a launcher in the data
directory in a user config (blackbox/hosts/launcher.py), and never a store or a data directory:
those come from the user's configuration or environment on the machine where the host runs, so
a committed `.mcp.json` records on every machine that has the tool installed.

Where the originals are kept: in the attach state in the user's data directory, keyed by the
config's path and the hash of its content (blackbox/hosts/attach_index.py), never inside the
host's own file (entries are checked against schemas that forbid unknown keys, and hosts that
rewrite their file from what they parsed drop keys they do not know) nor beside it, where a
project would commit it. The wrapped entry is also self-describing (`blackbox record --name KEY
-- ORIGINAL COMMAND ARGS...`), so a stdio entry can still be unwrapped when the state is gone or
the host has reformatted the file: then the restore is exact in meaning rather than in bytes.

Nothing here prints, reads the environment or imports click: the caller passes the options and
the installed executable, and renders the returned report. Reading and recognising the host's
file is blackbox/hosts/host_config.py, the position-keeping parser and span edits
blackbox/hosts/jsonc.py, the local proxy of an HTTP server and its service unit
blackbox/proxy_service.py.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blackbox import (
    DEFAULT_PORT_BASE,
    PORT_WINDOW,
    free_port,
    is_installed,
    proxy_command,
    proxy_url,
    unit_name,
    unit_text,
)
from blackbox.hosts.attach_bridge import (
    bridge_plan,
    bridged_entry_text,
    is_bridged,
    unbridged_entry_text,
    url_key,
)
from blackbox.hosts.attach_index import (
    backup_path,
    load_state,
    register,
    save_state,
    state_path,
    write_or_fail,
)
from blackbox.hosts.host_config import (
    WINDSURF,
    AttachError,
    ConfigChanged,
    HostConfig,
    MalformedConfig,
    NoServers,
    load_config,
    load_document,
    parse_fragment,
)
from blackbox.hosts.jsonc import (
    Edit,
    apply_edits,
    dump,
    format_array_like,
    rebase,
    remove_member_edits,
    set_member_edits,
)
from blackbox.hosts.launcher import (
    RecordOptions,
    entry_command,
    install_launcher,
    is_project_config,
)
from blackbox.recorder import private_dir

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


def wrapped_args(key: str, command: str, args: list, options: Sequence[str] = ()) -> list[str]:
    """`record --name KEY OPTIONS... -- COMMAND ARGS...` (never a store or a data directory)."""
    return ["record", "--name", key, *options, "--", command, *args]


def entry_kind(entry: dict) -> tuple[str, str | None]:
    """("stdio"|"http"|"sse"|"skip", reason when skipped)."""
    if url_key(entry) is not None:
        kind = "sse" if entry.get("type") == "sse" else "http"
        return kind, None
    if isinstance(entry.get("command"), str) and entry["command"]:
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            return "skip", '"args" is not a list of strings'
        return "stdio", None
    return "skip", 'neither a "command" nor a "url"'


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
    bridge_env: dict[str, str] | None = None  # the bridge's headers, as the entry's env
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
    wrapper: str | None = None,
    installed: str | None = None,
    options: RecordOptions | None = None,
    dry_run: bool = False,
    port_base: int = DEFAULT_PORT_BASE,
    service_dir: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    http: str = "bridge",
) -> Report:
    """Wrap every stdio server of a host config in `blackbox record` (with `options`) and turn
    every HTTP server into a stdio `blackbox bridge URL` entry; idempotent, and an entry wrapped
    with other options (or by an earlier version, with a store pinned) is brought up to date;
    `dry_run` computes the same report and writes nothing. `wrapper` overrides the command the
    entries run (default: `entry_command`); a user config's launcher tries `installed` first.
    The backup and the attach state go into `data_dir` (default: the data directory of this
    environment). `http="proxy"` points HTTP entries at a local `blackbox proxy` the user runs
    instead of bridging them."""
    if http not in ("bridge", "proxy"):
        raise AttachError(f"--http must be bridge or proxy, not {http!r}")
    if data_dir is None:
        from blackbox import data_dir as default_data_dir

        data_dir = default_data_dir()
    data_dir = Path(data_dir)
    if not 1 <= port_base <= 65535 - PORT_WINDOW:
        raise AttachError(f"--proxy-port-base must be between 1 and {65535 - PORT_WINDOW}")
    config = load_config(path)
    state, read_from = load_state(config, data_dir)
    records: dict = state["entries"]
    options = options or RecordOptions()
    launcher = wrapper is None and not is_project_config(config) and os.name != "nt"
    wrapper = wrapper or entry_command(config, data_dir)
    # A proxy the user runs (or a unit of this machine) names the installed blackbox: it is
    # never written into the config.
    local_command = installed or wrapper
    record_args = options.args(config)
    bridge_options = options.args(config, bridge=True)
    text = config.text
    edits: list[Edit] = []
    changes: list[EntryChange] = []
    new_records: dict[str, dict] = {}
    expected: dict[str, Any] = {}  # what each rewritten entry must parse back to

    found = server_members(config)
    if not found:
        raise NoServers(f'{config.path}: "{config.format.section}" is empty: nothing to attach')
    # Ports already promised to attached servers stay theirs; new servers probe from their hash.
    taken = {r["port"] for r in records.values() if r.get("port") is not None}
    where: dict[str, tuple[tuple[str, ...], str]] = {}

    for section, member, last in found:
        name, node = member.key, member.value
        key = scoped_key(section, name)
        where[key] = (section, name)
        if not last:
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
            if is_wrapped(entry) and unwrap_args(entry["args"]):
                inner = unwrap_args(entry["args"])
                new_args = wrapped_args(name, inner[0], inner[1:], record_args)
                if entry["command"] == wrapper and entry["args"] == new_args:
                    changes.append(
                        EntryChange(key, "attached", "already runs under blackbox record")
                    )
                    continue
                # Wrapped with other options, or by an earlier version with a pinned store and
                # an absolute command: rewrap the same server as this attach would.
                entry_edits = [
                    Edit(node.get("command").start, node.get("command").end, dump(wrapper))
                ]
                entry_edits += set_member_edits(
                    text,
                    node,
                    "args",
                    format_array_like(text, node.get("args"), new_args),
                    after="command",
                )
                edits += entry_edits
                if record and record.get("kind") == "stdio":
                    new_records[key] = {**record, "wrapped": rebase(text, node, entry_edits)}
                expected[key] = {**entry, "command": wrapper, "args": new_args}
                changes.append(EntryChange(key, "updated", shlex.join(new_args[: -len(inner)])))
                continue
            if is_bridged(entry):
                changes.append(EntryChange(key, "attached", "already runs through blackbox bridge"))
                continue
            new_args = wrapped_args(name, entry["command"], entry.get("args", []), record_args)
            args_node = node.get("args")
            entry_edits = [Edit(node.get("command").start, node.get("command").end, dump(wrapper))]
            entry_edits += set_member_edits(
                text, node, "args", format_array_like(text, args_node, new_args), after="command"
            )
            wrapped_text = rebase(text, node, entry_edits)
            edits += entry_edits
            new_records[key] = {"kind": "stdio", "original": entry_text, "wrapped": wrapped_text}
            expected[key] = {**entry, "command": wrapper, "args": new_args}
            shown = shlex.join([entry["command"], *entry.get("args", [])])
            changes.append(EntryChange(key, "wrapped", shown))
            continue
        # HTTP (Streamable HTTP or legacy SSE)
        member = url_key(entry) or "url"
        url = entry[member]
        if record and record.get("kind") in ("http", "sse") and record.get("local_url") == url:
            changes.append(
                EntryChange(
                    key,
                    "attached",
                    f"already points at the proxy for {record['upstream']}",
                    port=record.get("port"),
                    upstream=record.get("upstream"),
                    proxy_argv=proxy_command(
                        local_command, record["upstream"], record["port"], key, None
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
        if http == "bridge":
            change = _bridge_entry(name, entry, kind, bridge_options)
            change.key = key
            changes.append(change)
            if change.action == "bridged":
                new_text = bridged_entry_text(
                    text, node, wrapper, change.proxy_argv or [], entry, change.bridge_env or {}
                )
                edits.append(Edit(node.start, node.end, new_text))
                expected[key] = parse_fragment(new_text)
                new_records[key] = {
                    "kind": "bridge",
                    "original": entry_text,
                    "wrapped": new_text,
                    "upstream": url,
                }
                change.proxy_argv = change.bridge_env = None
            continue
        if record and record.get("port") is not None:
            taken.discard(record["port"])  # a stale record of this key: its port is free again
        port = free_port(key, port_base, taken)
        local = proxy_url(port, url)
        url_node = node.get(member)
        entry_edits = [Edit(url_node.start, url_node.end, dump(local))]
        wrapped_text = rebase(text, node, entry_edits)
        edits += entry_edits
        expected[key] = {**entry, member: local}
        argv = proxy_command(local_command, url, port, key, None)
        argv += ["--otel"] if options.otel else []
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
    verify_rewrite(config, after, expected, where)
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
        and not is_installed(Path(c.unit_path), _unit_bytes(c))
    ]
    if not edits and not units_to_write:
        return report

    if edits:
        _check_unchanged(config)
        backup = backup_path(config, data_dir)
        private_dir(backup.parent)  # 0700, and so is a data directory made for it
        # The backup holds the config as it was before blackbox first touched it: keep it while
        # entries are attached, refresh it when attaching a config that has nothing attached.
        if not backup.exists() or not records:
            write_or_fail(backup, config.raw, config.mode, "backup")
        report.backup = str(backup)
        for key, record in new_records.items():
            records[key] = record
        for change in units_to_write:
            if change.key in records:
                records[change.key]["unit"] = change.unit_path
        state["config"] = config.real_path.name
        state["section"] = config.format.section
        state["host"] = config.format.name
        if launcher:
            install_launcher(data_dir, installed)
        # The state first: if we die before the config is replaced, detach finds records whose
        # wrapped text is not in the file and ignores them; the other order could lose originals.
        raw_after = after.encode("utf-8")
        report.sidecar = str(save_state(config, data_dir, state, raw_after, read_from))
        write_or_fail(config.real_path, raw_after, config.mode, "config")
        report.written = True
        register(config, data_dir)
    elif units_to_write:
        for change in units_to_write:
            if change.key in records:
                records[change.key]["unit"] = change.unit_path
        report.sidecar = str(save_state(config, data_dir, state, config.raw, read_from))

    for change in units_to_write:
        unit_path = Path(change.unit_path or "")
        try:
            unit_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AttachError(f"{unit_path.parent}: cannot create: {exc.strerror}") from None
        write_or_fail(unit_path, _unit_bytes(change), 0o644, "service unit")
        report.units.append(str(unit_path))
    return report


def server_members(config: HostConfig) -> list[tuple[tuple[str, ...], Any, bool]]:
    """(where the section is, member, whether the host reads it) for every server entry: the
    format's own section, then, in Claude Code's ~/.claude.json, each project's `mcpServers`
    (`projects.<dir>.mcpServers`). With duplicate keys the host reads the last one."""
    sections: list[tuple[tuple[str, ...], Any]] = [((config.format.section,), config.servers)]
    projects = config.root.get("projects") if config.root.kind == "object" else None
    if projects is not None and projects.kind == "object":
        for project in projects.members:
            servers = project.value.get("mcpServers") if project.value.kind == "object" else None
            if servers is not None and servers.kind == "object":
                sections.append((("projects", project.key, "mcpServers"), servers))
    found = []
    for section, node in sections:
        last_of = {m.key: m for m in node.members}
        found += [(section, m, last_of[m.key] is m) for m in node.members]
    return found


def scoped_key(section: tuple[str, ...], name: str) -> str:
    """How attach names an entry (and keeps its state): the server key, prefixed with its
    project's directory for a per-project server of ~/.claude.json."""
    return name if len(section) == 1 else f"{section[1]}: {name}"


def _bridge_entry(key: str, entry: dict, kind: str, options: list[str]) -> EntryChange:
    """The change that makes an HTTP entry a stdio bridge entry, or why it cannot be one (the
    bridge's argv rides in `proxy_argv` until the caller has rewritten the entry)."""
    args, env, why = bridge_plan(key, entry, kind, options)
    if args is None:
        return EntryChange(key, "skipped", why)
    url = entry[url_key(entry) or "url"]
    era = " (legacy HTTP+SSE)" if kind == "sse" else ""
    change = EntryChange(key, "bridged", f"{url} -> stdio bridge{era}", upstream=url)
    change.proxy_argv, change.bridge_env = args, env
    return change


def _unit_bytes(change: EntryChange) -> bytes:
    return unit_text(change.key, change.upstream or "", change.proxy_argv or []).encode("utf-8")


def verify_rewrite(
    config: HostConfig,
    after: str,
    expected: dict[str, Any],
    where: dict[str, tuple[tuple[str, ...], str]] | None = None,
) -> None:
    """Parse the rewritten text and check it means exactly the config with `expected` entries
    swapped in (`where` places a key outside the format's section): a last guard, before
    anything is written, that a text edit never loses data."""
    want = config.root.to_python()
    for key, value in expected.items():
        section, name = (where or {}).get(key, ((config.format.section,), key))
        place = want
        for step in section:
            place = place[step]
        place[name] = value
    try:
        got = load_document(after, config.format.jsonc)
    except MalformedConfig:
        got = None
    if got != want:
        raise AttachError(
            f"{config.path}: the rewritten config would not say what was planned (a bug in "
            "blackbox; please report it with the file); nothing was written"
        )


# ---------------------------------------------------------------------------------------------
# detach


def detach(
    path: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    data_dir: str | os.PathLike[str] | None = None,
) -> Report:
    """Restore every attached entry of a host config: byte for byte when the entry is as attach
    left it, else rebuilt from the wrapped entry (stdio) or the recorded upstream (HTTP). The
    attach state is read from `data_dir` (default: this environment's data directory), or from
    beside the config where an earlier version kept it."""
    if data_dir is None:
        from blackbox import data_dir as default_data_dir

        data_dir = default_data_dir()
    data_dir = Path(data_dir)
    config = load_config(path)
    state, read_from = load_state(config, data_dir)
    records: dict = state["entries"]
    text = config.text
    edits: list[Edit] = []
    changes: list[EntryChange] = []
    done: set[str] = set()
    expected: dict[str, Any] = {}
    where: dict[str, tuple[tuple[str, ...], str]] = {}

    for section, member, last in server_members(config):
        name, node = member.key, member.value
        key = scoped_key(section, name)
        where[key] = (section, name)
        record = records.get(key)
        if node.kind != "object" or not last:
            continue
        entry_text = text[node.start : node.end]
        if record and entry_text == record.get("wrapped"):
            edits.append(Edit(node.start, node.end, record["original"]))
            expected[key] = parse_fragment(record["original"])
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
            entry_edits = [Edit(node.get("command").start, node.get("command").end, dump(inner[0]))]
            had_args = True
            if record:
                original = parse_fragment(record.get("original", ""))
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
        if record and record.get("kind") == "bridge" and kind == "stdio" and is_bridged(entry):
            # The host reformatted the entry since attach: it is still ours, put the original back.
            edits.append(Edit(node.start, node.end, record["original"]))
            expected[key] = parse_fragment(record["original"])
            done.add(key)
            changes.append(_restored(key, record, exact=False))
            continue
        if not record and kind == "stdio" and is_bridged(entry) and len(entry["args"]) > 1:
            member = "serverUrl" if config.format == WINDSURF else "url"
            new_text = unbridged_entry_text(text, node, entry, member)
            edits.append(Edit(node.start, node.end, new_text))
            expected[key] = parse_fragment(new_text)
            done.add(key)
            changes.append(EntryChange(key, "restored", f"-> {entry['args'][-1]}", exact=False))
            continue
        member = url_key(entry) or "url"
        if kind in ("http", "sse") and record and record.get("local_url") == entry.get(member):
            url_node = node.get(member)
            edits.append(Edit(url_node.start, url_node.end, dump(record["upstream"])))
            expected[key] = {**entry, member: record["upstream"]}
            done.add(key)
            changes.append(_restored(key, record, exact=False))
            continue
        if record:
            # Attached once, but the host or the user has changed the entry since: theirs now.
            changes.append(EntryChange(key, "kept", "changed since attach; left as it is"))
            done.add(key)
        elif kind in ("http", "sse") and entry[member].startswith("http://127.0.0.1:"):
            changes.append(
                EntryChange(key, "kept", "points at a local URL with no attach record; left as is")
            )

    after = apply_edits(text, edits)
    verify_rewrite(config, after, expected, where)
    report = Report(
        str(config.path), config.format.label, changes, text, after, dry_run, operation="detached"
    )
    report.units = [r["unit"] for k, r in records.items() if k in done and r.get("unit")]
    if dry_run or (not edits and not (records.keys() & done)):
        return report
    remaining = {k: r for k, r in records.items() if k not in done and _still_present(config, k)}
    if edits:
        _check_unchanged(config)
        write_or_fail(config.real_path, after.encode("utf-8"), config.mode, "config")
        report.written = True
    if remaining:
        state["entries"] = remaining
        saved = save_state(config, data_dir, state, after.encode("utf-8"), read_from)
        report.sidecar = str(saved)
    else:
        for place in {state_path(data_dir, config.real_path), read_from}:
            if place is not None:
                with contextlib.suppress(FileNotFoundError):
                    place.unlink()
    return report


def _still_present(config: HostConfig, key: str) -> bool:
    return any(scoped_key(sec, m.key) == key for sec, m, _ in server_members(config))


def _restored(key: str, record: dict, exact: bool) -> EntryChange:
    if record.get("kind") == "bridge":
        return EntryChange(
            key, "restored", f"stdio bridge -> {record.get('upstream')}", exact=exact
        )
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
    original = parse_fragment(record.get("original", ""))
    shown = ""
    if isinstance(original, dict) and isinstance(original.get("command"), str):
        shown = shlex.join([original["command"], *original.get("args", [])])
    return EntryChange(key, "restored", shown, exact=exact)
