"""The recording proxy `blackbox attach` puts in front of an HTTP server, and its service file.

An HTTP entry of a host config is pointed at a local `blackbox proxy`: this module picks its port
(stable per server key), spells its command line and the URL the host uses instead, and writes
the systemd user unit that keeps it running (`attach --install-service`). Nothing here reads or
edits the host's config; blackbox/hosts/attach.py does that and calls in here.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from urllib.parse import urlsplit

from blackbox.recorder import is_loopback

DEFAULT_PORT_BASE = 7400
# Ports are spread over a window above the base by a hash of the server key, so a server keeps
# its port when other servers are added or removed (a host or a service file may remember it).
PORT_WINDOW = 1000
UNIT_PREFIX = "blackbox-proxy-"


def proxy_command(
    wrapper: str, upstream: str, port: int, key: str, store_url: str | None
) -> list[str]:
    argv = [wrapper, "proxy", "--upstream", upstream, "--listen", f"127.0.0.1:{port}"]
    argv += ["--name", key]
    if store_url:
        argv += ["--store", store_url]
    if not is_loopback(urlsplit(upstream).hostname or ""):
        # A remote server is virtual-hosted as a rule: it must see its own name in Host, not
        # the proxy's 127.0.0.1:PORT (`blackbox proxy --help`, --rewrite-host). Loopback by the
        # rule `blackbox proxy` itself uses to say so.
        argv.append("--rewrite-host")
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


def free_port(key: str, base: int, taken: set[int]) -> int:
    """The port for `key`: its preferred one, else the next one up (wrapping in the window) that
    no other server holds; the port is added to `taken`."""
    port = preferred_port(key, base)
    while port in taken:
        port = base + (port - base + 1) % PORT_WINDOW
    taken.add(port)
    return port


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


def is_installed(path: Path, data: bytes) -> bool:
    """True when `path` already holds exactly `data` (a unit installed before is not rewritten)."""
    try:
        return path.read_bytes() == data
    except OSError:
        return False
