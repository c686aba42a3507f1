"""An MCP server built with the official SDK, served over HTTP for the proxy tests.

Run as `python sdk_server.py PORT [streamable-http|sse] [--json]`: Streamable HTTP on /mcp
(both eras), or the 2024-11-05 HTTP+SSE transport on /sse. Its tools exercise what a proxy must
carry: plain results, progress notifications on an SSE reply, a tool error, and a question to the
user (a server-to-client request in the handshake era, an InputRequiredResult round trip in
2026-07-28).
"""

from __future__ import annotations

import sys
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel

mcp = MCPServer("proxy-test-server")


@mcp.tool()
def echo(message: str) -> str:
    """Echo the message back."""
    return message


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool()
async def countdown(n: int, ctx: Context) -> str:
    """Report progress n times, then finish (several SSE events on one reply)."""
    for i in range(n):
        await ctx.report_progress(i + 1, n, f"step {i + 1}")
        await anyio.sleep(0.01)
    return f"counted {n}"


@mcp.tool()
def fail(reason: str) -> str:
    """Always fails (a tool error, isError: true)."""
    raise ValueError(reason)


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@mcp.tool()
def greet(who: Annotated[Name, Resolve(ask_name)]) -> str:
    """Ask the user's name, then greet (elicitation / InputRequiredResult)."""
    return f"hello {who.name}"


def main() -> None:
    port = int(sys.argv[1])
    transport = sys.argv[2] if len(sys.argv) > 2 else "streamable-http"
    if transport == "sse":
        mcp.run("sse", host="127.0.0.1", port=port)
    else:
        mcp.run("streamable-http", host="127.0.0.1", port=port, json_response="--json" in sys.argv)


if __name__ == "__main__":
    main()
