"""A stdio MCP server that answers like a plain one and, asked `tools/call storm`, first writes the
file named by its first argument to stdout verbatim: the hostile lines a test chose (lone
surrogates, NUL, numbers beyond any integer type, invalid UTF-8, deep nesting, a BOM, CRLF, noise).

Every byte it reads is appended to DIR/c2s.bin and every byte it writes to DIR/s2c.bin (DIR, the
second argument): what really crossed, for the test to hold the recorder's store against. Lines it
cannot parse get no answer. Standard library only, so that nothing re-encodes what it writes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

STORM = Path(sys.argv[1]).read_bytes()
LOG = Path(sys.argv[2])
TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object"}},
    {"name": "storm", "inputSchema": {"type": "object"}},
    {
        "name": "lone\ud800",
        "description": "a name no UTF-8 holds",
        "inputSchema": {"type": "object"},
    },
]


def write(data: bytes) -> None:
    with (LOG / "s2c.bin").open("ab") as log:
        log.write(data)
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def answer(rpc_id: object, result: object) -> None:
    write(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}).encode() + b"\n")


def handle(message: dict) -> None:
    method, rpc_id = message.get("method"), message.get("id")
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    if "id" not in message or not isinstance(method, str):
        return  # a notification, or an answer to one of the storm's requests
    if method == "initialize":
        info = {"name": "hostile", "version": "1"}
        answer(
            rpc_id,
            {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": info},
        )
    elif method == "tools/list":
        answer(rpc_id, {"tools": TOOLS})
    elif method == "ping":
        answer(rpc_id, {})
    elif method == "tools/call":
        name = params.get("name")
        if name == "storm":
            write(STORM)
        answer(rpc_id, {"content": [{"type": "text", "text": f"called {name}"}], "isError": False})
    else:
        error = {"code": -32601, "message": "method not found"}
        write(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "error": error}).encode() + b"\n")


def main() -> None:
    for line in sys.stdin.buffer:
        with (LOG / "c2s.bin").open("ab") as log:
            log.write(line)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(message, dict):
            handle(message)


if __name__ == "__main__":
    main()
