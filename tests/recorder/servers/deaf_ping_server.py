"""A stdio MCP server that stops answering pings while it still answers tool calls: what a server
with a broken ping handler (or a wedged keepalive path) looks like on the wire. Written by hand on
purpose: the SDK servers always answer pings. Tools: `echo`, `go_deaf` (pings go unanswered from
now on), `wake_up` (pings are answered again)."""

from __future__ import annotations

import json
import sys

deaf = False


def answer(rid: object, result: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict:
    return {"content": [{"type": "text", "text": value}], "isError": False}


for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue  # a notification
    if method == "initialize":
        answer(
            rid,
            {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "deaf-ping", "version": "1"},
            },
        )
    elif method == "ping":
        if not deaf:
            answer(rid, {})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "go_deaf":
            deaf = True
        elif name == "wake_up":
            deaf = False
        answer(rid, text(msg["params"].get("arguments", {}).get("message", name)))
    else:
        sys.stdout.write(
            json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
            + "\n"
        )
        sys.stdout.flush()
