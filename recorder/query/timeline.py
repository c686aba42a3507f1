"""One session's timeline: each record with its answer paired, the tool, the error and the latency.

`show` reads a session as a conversation: a response names the request it answers (`re`), carries
that request's method and tool, says whether it failed (`isError` in a tool result, or the
JSON-RPC error code) and how long the answer took (`latency_ms`, monotonic clock). Rows carry the
whole payload too (`payload`, or `payload_b64` when it is not UTF-8): only the table cuts it into
an excerpt. Pairing is recorder/log/pairing.py's, the one every reader uses. Like the excerpt, it
lives in analytics without its heavy imports, so the shell lists a timeline without pyarrow.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from typing import Any

from blackbox.recorder.log import Pending, StoredEvent, request_key, response_key
from blackbox.recorder.query.excerpts import excerpt

COLUMNS = ["seq", "offset_ms", "direction", "kind", "method", "tool", "id", "re", "error"]
COLUMNS += ["latency_ms", "bytes", "excerpt"]

EXCERPT = 80


def error_of(ev: StoredEvent) -> str | None:
    """`isError` for a tool result that failed, the code of a JSON-RPC error, else None."""
    if ev.msg_type == "error":
        return str(ev.error_code) if ev.error_code is not None else "error"
    if ev.is_error:
        return "isError"
    return None


def payload_fields(raw: bytes) -> dict[str, str]:
    """The whole payload: as text when it is UTF-8, else base64."""
    try:
        return {"payload": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"payload_b64": base64.b64encode(raw).decode("ascii")}


def timeline_rows(records: Iterable[StoredEvent]) -> Iterator[dict]:
    """Rows of a session's records in seq order, responses paired with their requests."""
    pending: Pending[dict[str, Any]] = Pending()
    first_mono: int | None = None
    for ev in records:
        if first_mono is None:
            first_mono = ev.mono_ns
        row = {
            "seq": ev.seq,
            "offset_ms": round((ev.mono_ns - first_mono) / 1e6, 3),
            "direction": ev.direction,
            "kind": ev.kind,
            "type": ev.msg_type,
            "method": ev.method,
            "tool": ev.tool,
            "id": ev.rpc_id,
            "re": None,
            "error": error_of(ev),
            "latency_ms": None,
            "bytes": ev.raw_size if ev.raw_size is not None else len(ev.raw),
            "stored_bytes": len(ev.raw),
            "excerpt": excerpt(ev.raw, EXCERPT),
        }
        if ev.kind == "frame" and ev.msg_type == "request":
            opened = {"seq": ev.seq, "mono": ev.mono_ns, "method": ev.method, "tool": ev.tool}
            pending.open(request_key(ev.direction, ev.rpc_id, ev.rpc_id_type), opened)
        elif ev.kind == "frame" and ev.msg_type in ("response", "error"):
            request = pending.close(response_key(ev.direction, ev.rpc_id, ev.rpc_id_type))
            if request is not None:
                row["re"] = request["seq"]
                row["method"] = row["method"] or request["method"]
                row["tool"] = row["tool"] or request["tool"]
                row["latency_ms"] = round((ev.mono_ns - request["mono"]) / 1e6, 3)
        row.update(payload_fields(ev.raw))
        yield row
