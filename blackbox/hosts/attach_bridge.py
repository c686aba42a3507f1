"""How `attach` turns an HTTP entry of a host config into a stdio `blackbox bridge URL` entry.

Every host attach knows starts stdio servers itself, so an HTTP server rewritten into a stdio
entry that runs the bridge (recorder/capture/taps/bridge.py) works the moment the host restarts,
with no proxy to start by hand. The entry's `headers` go into the bridge's arguments (the host
expands its variables there as it did in `headers`), `url` becomes `command` and `args`, `type` says
stdio; every other member keeps its text. A legacy HTTP+SSE server is not bridged: the bridge
speaks Streamable HTTP only, so attach names it as skipped and says what to do instead.
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


def bridge_args(
    key: str, url: str, headers: dict, store_url: str | None, home: str | None
) -> list[str]:
    args = ["bridge", "--name", key]
    if store_url:
        args += ["--store", store_url]
    if home:
        args += ["--home", home]
    for name, value in headers.items():
        args += ["--header", f"{name}: {value}"]
    return [*args, url]


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


def bridged_entry_text(text: str, node: Any, wrapper: str, args: list[str]) -> str:
    """An HTTP entry as a stdio entry running the bridge: `url` becomes `command` and `args`,
    `headers` go (they are in the args), `type` says stdio."""
    replace = {"url": [("command", wrapper), ("args", args)], "headers": []}
    replace["type"] = [("type", "stdio")]
    return rebuild_entry_text(text, node, replace)


def unbridged_entry_text(text: str, node: Any, entry: dict) -> str:
    """A bridge entry back as the HTTP entry it was made from (when the attach state is gone):
    the URL and the headers are read from the bridge's arguments."""
    args = entry["args"]
    headers = {}
    for i, arg in enumerate(args[:-1]):
        if i and args[i - 1] == "--header":
            name, _, value = arg.partition(":")
            headers[name.strip()] = value.strip()
    replace: dict[str, list[tuple[str, Any]]] = {"command": [("url", args[-1])]}
    replace["args"] = [("headers", headers)] if headers else []
    replace["type"] = [("type", "http")]
    return rebuild_entry_text(text, node, replace)


def _trailing_ws(s: str) -> str:
    return s[len(s.rstrip()) :]


def bridge_plan(
    key: str, entry: dict, kind: str, store_url: str | None, home: str | None
) -> tuple[list[str] | None, str]:
    """(the bridge's args, "") for an entry the bridge can serve, else (None, why not)."""
    if kind == "sse":
        return None, (
            "a legacy HTTP+SSE server: the stdio bridge speaks Streamable HTTP only; attach "
            "with --http proxy to record it through a `blackbox proxy` you keep running"
        )
    headers = entry.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        return None, '"headers" is not an object of strings'
    if any(not k or any(c.isspace() or c == ":" for c in k) for k in headers):
        return None, '"headers" has a name that is not a header name'
    return bridge_args(key, entry["url"], headers, store_url, home), ""
