"""Fixture sessions for the analytics tests, built through the store API with known timings and
outcomes (what a tap would write: frames as raw JSON lines, session events as JSON documents)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from blackbox.analytics.parquet import ParquetCopy, copy_dir
from blackbox.analytics.views import connect
from blackbox.recorder.log.model import NewEvent, new_session_id
from blackbox.recorder.store import EventStore

MS = 1_000_000
BASE_NS = 1_764_000_000_000_000_000  # 2025-11-24T16:00:00Z


def fingerprint(arguments: Any) -> str:
    """The decision producers' expression, written out independently of
    blackbox.analytics.parquet."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class Session:
    """One recording session under construction; times are milliseconds from its start."""

    def __init__(
        self,
        name: str | None = "srv",
        start_ns: int = BASE_NS,
        transport: str = "stdio",
        era: str | None = "2025-11-25",
        started: bool = True,
    ) -> None:
        self.sid = new_session_id(start_ns)
        self.start_ns = start_ns
        self.events: list[NewEvent] = []
        self.next_id = 1
        if started:
            self.event(
                "session_started",
                {
                    "name": name,
                    "transport": transport,
                    "command": ["python", "-m", "srv"],
                    "cwd": "/",
                    "env_names": [],
                    "tap_version": "test",
                    "pid": 1,
                    "replay_of": None,
                },
                0,
            )
        if era is not None:
            self.event(
                "era_detected",
                {
                    "era": era,
                    "client_info": {"name": "client", "version": "1.0"},
                    "server_info": {"name": f"{name}-server", "version": "2.0"},
                },
                0,
            )

    @property
    def seq(self) -> int:
        return len(self.events)

    def _append(self, kind: str, direction: str, raw: bytes, at_ms: float) -> int:
        seq = len(self.events) + 1
        at_ns = int(at_ms * MS)
        self.events.append(
            NewEvent(self.sid, seq, self.start_ns + at_ns, at_ns, kind, direction, raw)
        )
        return seq

    def event(self, kind: str, doc: dict, at_ms: float) -> int:
        return self._append(kind, "-", json.dumps(doc, separators=(",", ":")).encode(), at_ms)

    def frame(self, direction: str, message: Any, at_ms: float) -> int:
        return self._append("frame", direction, json.dumps(message).encode(), at_ms)

    def raw(self, direction: str, data: bytes, at_ms: float) -> int:
        return self._append("frame", direction, data, at_ms)

    def request(
        self,
        method: str,
        params: dict | None,
        at_ms: float,
        direction: str = "c2s",
        rpc_id: Any = None,
    ) -> tuple[int, Any]:
        if rpc_id is None:
            rpc_id = self.next_id
            self.next_id += 1
        message: dict = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
        if params is not None:
            message["params"] = params
        return self.frame(direction, message, at_ms), rpc_id

    def result(self, rpc_id: Any, result: dict, at_ms: float, direction: str = "s2c") -> int:
        return self.frame(direction, {"jsonrpc": "2.0", "id": rpc_id, "result": result}, at_ms)

    def error(
        self, rpc_id: Any, code: int, message: str, at_ms: float, direction: str = "s2c"
    ) -> int:
        doc = {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}
        return self.frame(direction, doc, at_ms)

    def handshake(self, at_ms: float = 0, version: str = "2025-11-25", answer: str | None = None):
        _, rid = self.request(
            "initialize",
            {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "client"}},
            at_ms,
        )
        self.result(
            rid,
            {
                "protocolVersion": answer or version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "srv"},
            },
            at_ms + 1,
        )
        self.frame("c2s", {"jsonrpc": "2.0", "method": "notifications/initialized"}, at_ms + 2)

    def list_tools(self, names: list[str], at_ms: float) -> None:
        _, rid = self.request("tools/list", {}, at_ms)
        tools = [{"name": n, "inputSchema": {"type": "object"}} for n in names]
        self.result(rid, {"tools": tools}, at_ms + 1)

    def call(
        self,
        tool: str,
        at_ms: float,
        latency_ms: float | None,
        arguments: dict | None = None,
        outcome: str = "ok",
    ) -> tuple[int, Any]:
        """A tools/call and its answer after `latency_ms` (None: no answer). outcome: ok,
        tool_error, rpc_error."""
        seq, rid = self.request("tools/call", {"name": tool, "arguments": arguments or {}}, at_ms)
        if latency_ms is not None:
            end = at_ms + latency_ms
            if outcome == "rpc_error":
                self.error(rid, -32603, "internal failure", end)
            else:
                self.result(
                    rid,
                    {
                        "content": [{"type": "text", "text": f"{tool} says {outcome}"}],
                        "isError": outcome == "tool_error",
                    },
                    end,
                )
        return seq, rid

    def fault(self, fault: str, at_ms: float, stage: str = "transport", **extra: Any) -> int:
        doc = {"fault": fault, "stage": stage, "detail": f"{fault} happened", "seq": None}
        doc.update(extra)
        return self.event("fault", doc, at_ms)

    def decision(self, at_ms: float, **doc: Any) -> int:
        base = {
            "decision": "allow",
            "final": None,
            "source": "policy",
            "decided_by": "rule",
            "rule": None,
            "server": None,
            "tool": None,
            "method": "tools/call",
            "args_fingerprint": None,
            "rpc_id": None,
            "request_seq": None,
            "host_session": None,
            "reason": None,
        }
        base.update(doc)
        return self.event("decision", base, at_ms)

    def end(self, at_ms: float, outcome: str = "ok", reason: str = "client_closed", **extra: Any):
        doc = {"reason": reason, "outcome": outcome, "exit_code": 0, "signal": None}
        doc.update(extra)
        return self.event("session_ended", doc, at_ms)

    def save(self, store: EventStore) -> str:
        store.append(self.events)
        return self.sid


def copy_for(store: EventStore, base: Path) -> ParquetCopy:
    return ParquetCopy(copy_dir(base, store.url))


def rows(con, sql: str, params: list | None = None) -> list[dict]:  # type: ignore[no-untyped-def]
    cursor = con.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def refreshed(store: EventStore, base: Path):  # type: ignore[no-untyped-def]
    copy = copy_for(store, base)
    copy.refresh(store)
    return connect(copy)
