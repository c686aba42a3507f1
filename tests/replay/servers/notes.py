"""A small notes server on the official SDK whose tools say what they do, as real servers'
annotations do: `read_note` is read-only, `write_note` destructive, `touch_note` writes but is
idempotent and not destructive, `count_notes` says nothing, `delete_note` is destructive and asks
the client to confirm first (a server-to-client elicitation, as careful writing tools do).

    python notes.py DIR [http PORT]
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel

root = Path(sys.argv[1])
server = MCPServer("notes")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(name: str) -> str:
    """The text of a note."""
    return (root / name).read_text()


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def write_note(name: str, text: str) -> str:
    """Replace a note's text."""
    (root / name).write_text(text)
    return f"wrote {len(text)} characters"


@server.tool(
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
)
def touch_note(name: str) -> str:
    """Create a note if it does not exist."""
    (root / name).touch()
    return "ok"


@server.tool()
def count_notes() -> int:
    """How many notes there are."""
    return len(list(root.iterdir()))


class Confirmation(BaseModel):
    sure: bool


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
async def delete_note(name: str, ctx: Context) -> str:
    """Delete a note once the client confirms."""
    answer = await ctx.elicit(f"delete {name}?", Confirmation)
    if answer.action != "accept" or not answer.data.sure:
        return "kept"
    (root / name).unlink(missing_ok=True)
    return "deleted"


if __name__ == "__main__":
    if sys.argv[2:3] == ["http"]:
        server.run("streamable-http", port=int(sys.argv[3]))
    else:
        server.run()
