"""Shared helpers for tests that drive real MCP peers over stdio, directly or through `blackbox
record`: the commands of the example server, `mcp-server-time` and `server-everything`, and async
helpers that run the official SDK client in both eras (the legacy `initialize` handshake and the
stateless 2026-07-28 mode).

`StdioServerParameters(env=...)` is laid over a MINIMAL environment (HOME, PATH, ...), so a tap
under test must get BLACKBOX_HOME / BLACKBOX_STORE explicitly: use `tap_env`.

Run as a script, this module is also an independent second capture for byte-exactness tests:
`python tests/peers.py capture DIR -- CMD...` relays stdio to CMD the plain way (two threads) and
writes what crossed into DIR/c2s.bin and DIR/s2c.bin.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BLACKBOX = str(Path(sys.executable).with_name("blackbox"))
NODE_BIN = ROOT / "node_modules" / ".bin"

EXAMPLE_SERVER = [PYTHON, str(ROOT / "examples" / "server.py")]
TIME_SERVER = [PYTHON, "-m", "mcp_server_time", "--local-timezone", "UTC"]
EVERYTHING_SERVER = [str(NODE_BIN / "mcp-server-everything"), "stdio"]
MODERN = "2026-07-28"


def record_command(
    server: Sequence[str], name: str = "test", store_url: str | None = None, *extra: str
) -> list[str]:
    """`blackbox record` wrapped around a server command."""
    store = ["--store", store_url] if store_url else []
    return [BLACKBOX, "record", "--name", name, *store, *extra, "--", *server]


def capture_command(server: Sequence[str], directory: Path) -> list[str]:
    """A plain relay in front of `server` that writes the bytes that crossed into `directory`."""
    return [PYTHON, str(Path(__file__).resolve()), "capture", str(directory), "--", *server]


def tap_env(home: Path, store_url: str | None = None, **extra: str) -> dict[str, str]:
    """The environment a tap needs on top of the SDK's minimal one."""
    env = {"BLACKBOX_HOME": str(home), **extra}
    if store_url:
        env["BLACKBOX_STORE"] = store_url
    return env


def params(argv: Sequence[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=argv[0], args=list(argv[1:]), env=env)


@dataclass
class Outcome:
    """What a client saw: the negotiated version, the server's name, the tool names and each
    call's result (as plain JSON)."""

    protocol_version: str | None = None
    server_name: str | None = None
    tools: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)


async def _roots(_ctx: Any) -> Any:
    import mcp_types as types

    return types.ListRootsResult(roots=[types.Root(uri="file:///blackbox/test-root")])


def _plain(result: Any) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run_legacy(
    server_params: Any, calls: Sequence[tuple[str, dict[str, Any]]], timeout: float = 60
) -> Outcome:
    """`ClientSession.initialize()` (the handshake era), list tools, then each call in turn."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    out = Outcome()
    with anyio.fail_after(timeout):
        async with (
            stdio_client(server_params) as (read, write),
            ClientSession(read, write, list_roots_callback=_roots) as session,
        ):
            init = await session.initialize()
            out.protocol_version = init.protocol_version
            out.server_name = init.server_info.name
            out.tools = sorted(t.name for t in (await session.list_tools()).tools)
            for name, args in calls:
                out.results.append(_plain(await session.call_tool(name, args)))
    return out


async def run_modern(
    server_params: Any,
    calls: Sequence[tuple[str, dict[str, Any]]],
    timeout: float = 60,
    mode: str = MODERN,
) -> Outcome:
    """`mcp.Client(..., mode="2026-07-28")`: no handshake, `_meta` on every request. With
    mode="auto" the client probes `server/discover` and falls back to the handshake (how a modern
    client meets a legacy-only server such as server-everything)."""
    import anyio
    from mcp import Client

    out = Outcome()
    with anyio.fail_after(timeout):
        async with Client(server_params, mode=mode, list_roots_callback=_roots) as client:
            out.protocol_version = client.protocol_version
            info = client.server_info
            out.server_name = info.name if info is not None else None
            out.tools = sorted(t.name for t in (await client.list_tools()).tools)
            for name, args in calls:
                out.results.append(_plain(await client.call_tool(name, args)))
    return out


def run_client(
    era: str, server_params: Any, calls: Sequence[tuple[str, dict[str, Any]]]
) -> Outcome:
    """Run a client to completion: `era` is "legacy", "modern" or "auto"."""
    import anyio

    if era == "legacy":
        return anyio.run(run_legacy, server_params, calls)
    return anyio.run(run_modern, server_params, calls, 60, MODERN if era == "modern" else "auto")


# -- the independent capture relay ---------------------------------------------------------------


def _pump(src: int, dst: int, log: Any) -> None:
    while True:
        data = os.read(src, 65536)
        if not data:
            break
        log.write(data)
        log.flush()
        view = memoryview(data)
        while view:
            try:
                n = os.write(dst, view)
            except OSError:
                return
            view = view[n:]


def _capture(directory: Path, argv: list[str]) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    with open(directory / "c2s.bin", "wb") as c2s, open(directory / "s2c.bin", "wb") as s2c:
        down = threading.Thread(target=_pump, args=(proc.stdout.fileno(), 1, s2c))
        down.start()
        _pump(0, proc.stdin.fileno(), c2s)
        proc.stdin.close()
        down.join(30)
    return proc.wait(30)


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "capture" and sys.argv[3] == "--":
        sys.exit(_capture(Path(sys.argv[2]), sys.argv[4:]))
    sys.exit("usage: peers.py capture DIR -- CMD [ARGS...]")
