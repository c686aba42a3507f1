"""An SDK server over Streamable HTTP that tells a client which headers reached it.

python headers_server.py PORT
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("headers")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami(ctx: Context) -> str:
    """The X-Team and Authorization headers of this request."""
    headers = ctx.headers or {}
    return f"team={headers.get('x-team')} auth={headers.get('authorization')}"


if __name__ == "__main__":
    server.run("streamable-http", port=int(sys.argv[1]))
