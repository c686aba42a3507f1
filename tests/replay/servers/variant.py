"""Builds of the example server for replay tests, made by changing the example itself (so they
differ from it in exactly one way each):

    python variant.py changed [http PORT]   echo answers differently; the `sleep` tool is gone
    python variant.py fixed   [http PORT]   `crash` no longer exits the process
    python variant.py louder  [http PORT]   echo answers differently; every other tool the same
    python variant.py same    [http PORT]   the example unchanged (over HTTP when asked)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from mcp_types import ToolAnnotations

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "server.py"


def load_example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("example_server", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.server


def build(kind: str):  # type: ignore[no-untyped-def]
    server = load_example()
    if kind == "changed":
        server.remove_tool("echo")
        server.remove_tool("sleep")

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def echo(message: str) -> str:
            """Return the message unchanged."""
            return message + "!"

    elif kind == "louder":
        server.remove_tool("echo")

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def echo(message: str) -> str:
            """Return the message unchanged."""
            return message + "!"

    elif kind == "fixed":
        server.remove_tool("crash")

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def crash(code: int = 3) -> str:
            """Exit the process in the middle of the call, without answering."""
            return f"no longer crashing (code {code})"

    elif kind != "same":
        raise SystemExit(f"unknown variant {kind!r}")
    return server


if __name__ == "__main__":
    server = build(sys.argv[1])
    if len(sys.argv) > 3 and sys.argv[2] == "http":
        server.run("streamable-http", port=int(sys.argv[3]))
    else:
        server.run()
