"""An HTTP upstream for the hostile-frames test: an ordinary MCP server (official SDK, Streamable
HTTP) on /mcp, and on /hostile a raw endpoint that answers `tools/call frame {"i": N}` with line N
of the frames file as its whole JSON body, verbatim, and `tools/call storm` with an SSE stream of
every frame an SSE data line can carry. Each request body that reaches /hostile is appended to the
log file in hex, one a line: what the proxy let through.

Run as `python hostile_server.py PORT FRAMES_FILE LOG_FILE`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import MCPServer

PORT = int(sys.argv[1])
FRAMES = Path(sys.argv[2]).read_bytes()[:-1].split(b"\n")
LOG = Path(sys.argv[3])
SESSION_ID = b"hostile-session"

neighbour = MCPServer("neighbour")


@neighbour.tool()
def echo(message: str) -> str:
    """Echo the message back."""
    return message


sdk_app = neighbour.streamable_http_app(host="127.0.0.1")


async def _body(receive) -> bytes:  # type: ignore[no-untyped-def]
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _reply(send, status: int, body: bytes, content_type: bytes, *headers) -> None:  # type: ignore[no-untyped-def]
    head = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*head, *headers]})
    await send({"type": "http.response.body", "body": body})


def _result(rpc_id: object, result: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}).encode()


async def hostile(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    body = await _body(receive)
    if scope["method"] != "POST":
        await _reply(send, 200 if scope["method"] == "DELETE" else 405, b"", b"text/plain")
        return
    with LOG.open("a") as log:
        log.write(body.hex() + "\n")
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        await _reply(send, 400, b"unreadable", b"text/plain")
        return
    if not isinstance(message, dict) or "id" not in message:
        await _reply(send, 202, b"", b"text/plain")
        return
    rpc_id, method = message["id"], message.get("method")
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    json_type = b"application/json"
    if method == "initialize":
        info = {"name": "hostile", "version": "1"}
        result = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": info,
        }
        await _reply(send, 200, _result(rpc_id, result), json_type, (b"mcp-session-id", SESSION_ID))
    elif method == "tools/call" and params.get("name") == "frame":
        await _reply(send, 200, FRAMES[params["arguments"]["i"]], json_type)
    elif method == "tools/call" and params.get("name") == "storm":
        done = _result(rpc_id, {"content": [], "isError": False})
        events = [b"event: message\ndata: " + f + b"\n\n" for f in FRAMES if b"\r" not in f]
        stream = b"".join([*events, b"event: message\ndata: " + done + b"\n\n"])
        await _reply(send, 200, stream, b"text/event-stream")
    else:
        text = f"called {params.get('name', method)}"
        await _reply(
            send, 200, _result(rpc_id, {"content": [{"type": "text", "text": text}]}), json_type
        )


async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] == "http" and scope["path"] == "/hostile":
        await hostile(scope, receive, send)
    else:
        await sdk_app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
