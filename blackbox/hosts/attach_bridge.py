"""How `attach` turns an HTTP entry of a host config into a stdio `blackbox bridge URL` entry.

Every host attach knows starts stdio servers itself, so an HTTP server rewritten into a stdio
entry that runs the bridge (recorder/capture/taps/bridge.py) works the moment the host restarts,
with no proxy to start by hand. The entry's `headers` go into the entry's `env`, one
`BLACKBOX_BRIDGE_HEADER_<n>` variable per header (`Name: value`; the host expands its variables
there as it did in `headers`), never into the arguments, where every local user reads them with
`ps`; `url` becomes `command` and `args`, `type` says stdio; every other member keeps its text. A
legacy HTTP+SSE server is not bridged: the bridge speaks Streamable HTTP only, so attach names it
as skipped and says what to do instead.
"""

from __future__ import annotations

import json
import re
from typing import Any

from blackbox.hosts.jsonc import dump


def is_bridged(entry: dict) -> bool:
    """True for an HTTP server attach turned into a stdio `blackbox bridge URL` entry."""
    command, args = entry.get("command"), entry.get("args")
    if not isinstance(command, str) or not isinstance(args, list):
        return False
    base = re.split(r"[\\/]", command)[-1].lower()
    return base in ("blackbox", "blackbox.exe") and args[:1] == ["bridge"]


HEADER_ENV_PREFIX = "BLACKBOX_BRIDGE_HEADER_"
URL_KEYS = ("url", "serverUrl")  # serverUrl: Windsurf's name for it


def url_key(entry: dict) -> str | None:
    """The member holding an HTTP entry's URL, None for an entry without one."""
    return next((k for k in URL_KEYS if isinstance(entry.get(k), str)), None)


def bridge_args(key: str, url: str, kind: str, options: list[str]) -> list[str]:
    """`bridge --name KEY [--transport sse] OPTIONS... URL` (the options: --policy, --redact)."""
    transport = ["--transport", "sse"] if kind == "sse" else []
    return ["bridge", "--name", key, *transport, *options, url]


def bridge_env(headers: dict[str, str]) -> dict[str, str]:
    """The entry's headers as the bridge's environment: `BLACKBOX_BRIDGE_HEADER_1` = `Name:
    value`, and so on, in the entry's order."""
    return {
        f"{HEADER_ENV_PREFIX}{i}": f"{name}: {value}"
        for i, (name, value) in enumerate(headers.items(), start=1)
    }


def env_headers(env: dict[str, str]) -> list[str]:
    """The `Name: value` headers a bridge's environment carries, in their numbered order."""
    numbered = []
    for name, value in env.items():
        suffix = name.removeprefix(HEADER_ENV_PREFIX)
        if suffix != name and suffix.isdigit():
            numbered.append((int(suffix), value))
    return [value for _, value in sorted(numbered)]


def rebuild_entry_text(text: str, node: Any, replace: dict[str, list[tuple[str, Any]]]) -> str:
    """The entry `node` with each member named in `replace` swapped for the given members (none:
    removed); every other member keeps its text, and the entry keeps its layout (one member a
    line, or all on one line)."""
    members = node.members
    first = members[0].key_start if members else node.end - 1
    indent = text[node.start + 1 : first]
    closing = text[members[-1].value.end : node.end - 1] if members else ""
    closing = _trailing_ws(closing) if "\n" in closing else ""
    parts = []
    for m in members:
        if m.key in replace:
            parts += [f"{dump(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in replace[m.key]]
        else:
            parts.append(text[m.key_start : m.value.end])
    if "\n" in indent:
        return "{" + indent + ("," + indent).join(parts) + closing + "}"
    return "{" + indent + ", ".join(parts) + (" " if indent else "") + "}"


def bridged_entry_text(
    text: str, node: Any, wrapper: str, args: list[str], entry: dict, env: dict[str, str]
) -> str:
    """An HTTP entry as a stdio entry running the bridge: `url` becomes `command` and `args`,
    `headers` become `env` variables (beside any the entry had), `type` says stdio."""
    replace: dict[str, list[tuple[str, Any]]] = {
        url_key(entry) or "url": [("command", wrapper), ("args", args)],
        "headers": [],
    }
    if env:
        existing = entry.get("env")
        if isinstance(existing, dict):
            replace["env"] = [("env", {**existing, **env})]
        else:
            replace["headers"] = [("env", env)]
    replace["type"] = [("type", "stdio")]
    return rebuild_entry_text(text, node, replace)


def unbridged_entry_text(text: str, node: Any, entry: dict, key: str = "url") -> str:
    """A bridge entry back as the HTTP entry it was made from (when the attach state is gone):
    the URL and the headers are read from the bridge's arguments; `key` names the URL's member
    (`serverUrl` in Windsurf's file)."""
    args = entry["args"]
    found = entry.get("env")
    env: dict[str, str] = found if isinstance(found, dict) else {}
    # Headers from the environment (attach's way), or from `--header` arguments (before it).
    lines = env_headers(env) + [
        args[i] for i in range(1, len(args) - 1) if args[i - 1] == "--header"
    ]
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip()] = value.strip()
    replace: dict[str, list[tuple[str, Any]]] = {"command": [(key, args[-1])]}
    replace["args"] = [("headers", headers)] if headers else []
    sse = any(args[i : i + 2] == ["--transport", "sse"] for i in range(len(args) - 1))
    replace["type"] = [("type", "sse" if sse else "http")]
    if "env" in entry:
        rest = {k: v for k, v in env.items() if not k.startswith(HEADER_ENV_PREFIX)}
        replace["env"] = [("env", rest)] if rest else []
    return rebuild_entry_text(text, node, replace)


def _trailing_ws(s: str) -> str:
    return s[len(s.rstrip()) :]


def bridge_plan(
    key: str, entry: dict, kind: str, options: list[str]
) -> tuple[list[str] | None, dict[str, str], str]:
    """(the bridge's args, its environment, "") for an entry the bridge can serve, else (None,
    {}, why not)."""
    headers = entry.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        return None, {}, '"headers" is not an object of strings'
    if any(not k or any(c.isspace() or c == ":" for c in k) for k in headers):
        return None, {}, '"headers" has a name that is not a header name'
    env = entry.get("env")
    if env is not None and not (
        isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
    ):
        return None, {}, '"env" is not an object of strings'
    url = entry[url_key(entry) or "url"]
    return bridge_args(key, url, kind, options), bridge_env(headers), ""
