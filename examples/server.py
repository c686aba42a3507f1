"""The bundled example MCP server: a small, real SDK server whose tools produce every behaviour
the recorder has to capture (results, tool errors, exceptions, stdout pollution, crashes,
server-to-client requests, slow calls). Tests, the demo and the benchmarks drive it through
`blackbox record`.

It is built with the official SDK's `MCPServer`, so it speaks both protocol eras: the legacy
`initialize` handshake and the stateless 2026-07-28 mode.

    python examples/server.py            # stdio (what `blackbox record` wraps)
"""

from __future__ import annotations

import asyncio
import os
import sys
import warnings

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import InputRequiredResult, ListRootsRequest, ToolAnnotations

MODERN_ERA = "2026-07-28"

# The SDK protects the wire by diverting fd 1 to stderr once it serves; keep our own handle on
# the real stdout so `print_stdout` can pollute it the way a careless (or non-Python) server does.
_WIRE = os.dup(1)

server = MCPServer("blackbox-example", instructions="Example server for mcp-blackbox.")

# No tool here changes anything outside the process: saying so lets `blackbox replay` run them
# again without asking (a tool without annotations may change something, by the MCP defaults).
READ_ONLY = ToolAnnotations(read_only_hint=True)


@server.tool(annotations=READ_ONLY)
def echo(message: str) -> str:
    """Return the message unchanged."""
    return message


@server.tool(annotations=READ_ONLY)
async def sleep(seconds: float) -> str:
    """Wait, then say how long (a slow call)."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(annotations=READ_ONLY)
def fail(reason: str = "asked to fail") -> str:
    """Return a tool error (a result with isError: true)."""
    raise ToolError(reason)


@server.tool(name="raise", annotations=READ_ONLY)
def raise_(message: str = "boom") -> str:
    """Raise an unexpected exception inside the tool."""
    raise RuntimeError(message)


@server.tool(annotations=READ_ONLY)
def print_stdout(text: str = "debug: this line should have gone to stderr") -> str:
    """Write a non-JSON line to stdout (the most common stdio fault), then answer normally."""
    os.write(_WIRE, (text + "\n").encode())
    return "printed"


@server.tool(annotations=READ_ONLY)
def crash(code: int = 3) -> str:
    """Exit the process in the middle of the call, without answering."""
    sys.stderr.write(f"example server: crashing with exit code {code}\n")
    sys.stderr.flush()
    os._exit(code)


@server.tool(annotations=READ_ONLY)
async def ask(ctx: Context) -> str | InputRequiredResult:
    """Ask the client for its roots: a server-to-client `roots/list` request in the legacy era,
    an `InputRequiredResult` round trip in the 2026-07-28 era."""
    if ctx.protocol_version == MODERN_ERA:
        responses = ctx.input_responses
        if not responses or "roots" not in responses:
            return InputRequiredResult(input_requests={"roots": ListRootsRequest()})
        answer = responses["roots"]
        roots = getattr(answer, "roots", None) or []
    else:
        try:
            with warnings.catch_warnings():  # roots are deprecated in the newest era only
                warnings.simplefilter("ignore")
                roots = (await ctx.session.list_roots()).roots
        except Exception as exc:  # a client without roots support answers with an error
            return f"no roots: {exc}"
    return "roots: " + ", ".join(str(root.uri) for root in roots)


def main() -> None:
    server.run()


if __name__ == "__main__":
    main()
