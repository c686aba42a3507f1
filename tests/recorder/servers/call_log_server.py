"""A tiny MCP server (official SDK, stdio, both eras) that appends every tool call it receives to
the file named by its first argument: the server's own log, which proves a denied call never
reached it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

LOG = Path(sys.argv[1])
server = MCPServer("call-log")


def _log(tool: str, args: dict) -> None:
    with LOG.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "arguments": args}, sort_keys=True) + "\n")


@server.tool()
def echo(message: str) -> str:
    """Echo a message back."""
    _log("echo", {"message": message})
    return message


@server.tool()
def write_file(path: str, content: str) -> str:
    """Pretend to write a file (only logs the call)."""
    _log("write_file", {"path": path, "content": content})
    return f"wrote {len(content)} bytes to {path}"


@server.tool()
def delete_all(confirm: bool = False) -> str:
    """Pretend to delete everything (only logs the call)."""
    _log("delete_all", {"confirm": confirm})
    return "deleted"


if __name__ == "__main__":
    server.run()
