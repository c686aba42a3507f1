"""`make demo`: record a real MCP session into the default store, then list and show it.

The bundled example server (examples/server.py) runs under `blackbox record`, driven by the official
MCP SDK client over stdio (legacy handshake), with a few calls that show what gets recorded: a
result, a tool error, a line printed to stdout by mistake, and a server-to-client request.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import anyio
import mcp_types as types
from blackbox.recorder.store import open_store
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from blackbox import config

HERE = Path(__file__).resolve().parent
BLACKBOX = str(Path(sys.executable).with_name("blackbox"))
CALLS = [
    ("echo", {"message": "hello, flight recorder"}),
    ("fail", {"reason": "the file does not exist"}),
    ("print_stdout", {"text": "DEBUG: a log line printed to stdout by mistake"}),
    ("ask", {}),
]


async def roots(_ctx: object) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///home/demo/project")])


async def drive(store_url: str) -> None:
    server = StdioServerParameters(
        command=BLACKBOX,
        args=["record", "--name", "demo", "--", sys.executable, str(HERE / "server.py")],
        # The SDK gives the server a minimal environment: say where to record explicitly.
        env={"BLACKBOX_STORE": store_url, "BLACKBOX_HOME": str(config.data_dir())},
    )
    with anyio.fail_after(60):
        async with (
            stdio_client(server, errlog=subprocess.DEVNULL) as (read, write),
            ClientSession(read, write, list_roots_callback=roots) as session,
        ):
            init = await session.initialize()
            print(f"connected to {init.server_info.name} ({init.protocol_version})")
            for name, args in CALLS:
                result = await session.call_tool(name, args)
                text = result.content[0].text if result.content else ""
                flag = " (isError)" if result.is_error else ""
                print(f"  {name}: {text}{flag}")


def main() -> None:
    # The SDK client logs a traceback for the stray stdout line; the recording is what we show.
    logging.getLogger("mcp").setLevel(logging.CRITICAL)
    store_url = config.store_url()
    store = open_store(store_url)
    before = {s.session_id for s in store.list_sessions()}
    anyio.run(drive, store_url)
    # The tap ships its last records as it exits; wait for the sealed session.
    deadline = time.monotonic() + 15
    while not any(s.sealed and s.session_id not in before for s in store.list_sessions()):
        if time.monotonic() > deadline:
            subprocess.run([BLACKBOX, "ship"], check=True)
            break
        time.sleep(0.1)
    print(f"\nrecorded into {store.url}\n")
    for args in (["sessions", "--limit", "5"], ["show", "last"], ["verify", "last"]):
        print(f"$ blackbox {' '.join(args)}")
        subprocess.run([BLACKBOX, *args], check=True)
        print()
    print(next_steps(BLACKBOX))


def next_steps(blackbox: str) -> str:
    """How to get `blackbox` on PATH: the demo installed it into its own virtual environment."""
    venv_bin = Path(blackbox).parent
    return (
        f"blackbox is installed in {venv_bin}, not on your PATH. To use the commands above:\n"
        f"  source {venv_bin / 'activate'}      # this shell only\n"
        "  pipx install .   or   uv tool install .      # for your user, from this checkout\n"
        "then: blackbox attach <your host's config>, blackbox where, blackbox sessions"
    )


if __name__ == "__main__":
    main()
