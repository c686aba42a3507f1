"""Permission decisions as log records: the document format, the arguments fingerprint, recording
a host's decisions into the store, and joining decisions to the `tools/call` frames they decided.

A decision is a `decision` record in the same log and hash chain as the frames, so it is as
tamper-evident as they are. Two producers write them: the policy gate in the taps (source
`policy`, journaled right after the request frame it decided) and hosts (source `host`: Claude
Code hooks, `blackbox decision record`, `record_decision()`), whose decisions live in a session of
their own and are joined to calls afterwards by `correlate()`: same server and tool, same
arguments fingerprint, nearest in time within a window.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

DECISIONS = ("allow", "deny", "ask")
FINALS = ("allow", "deny")
SOURCES = ("policy", "host", "user")
DECIDED_BY = ("rule", "default", "settings", "hook", "classifier", "user")


def canonical_args(args: object) -> bytes:
    """The canonical JSON of a call's arguments. Missing or null arguments count as `{}`, because
    a client may omit `arguments` where a host shows an empty input."""
    if args is None:
        args = {}
    return json.dumps(args, sort_keys=True, separators=(",", ":")).encode()


def args_fingerprint(args: object) -> str:
    """sha256 hex of the canonical JSON of the arguments: how a host decision finds its call."""
    return hashlib.sha256(canonical_args(args)).hexdigest()


def decision_doc(
    *,
    decision: str,
    source: str,
    decided_by: str,
    tool: str | None,
    final: str | None = None,
    rule: str | None = None,
    server: str | None = None,
    method: str = "tools/call",
    args_fingerprint: str | None = None,
    rpc_id: str | None = None,
    request_seq: int | None = None,
    host_session: str | None = None,
    reason: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> bytes:
    """The raw JSON of a `decision` record (compact, keys in a fixed order)."""
    doc: dict[str, object] = {
        "decision": decision,
        "final": final,
        "source": source,
        "decided_by": decided_by,
        "rule": rule,
        "server": server,
        "tool": tool,
        "method": method,
        "args_fingerprint": args_fingerprint,
        "rpc_id": rpc_id,
        "request_seq": request_seq,
        "host_session": host_session,
        "reason": reason,
    }
    if extra:
        for key, value in extra.items():
            doc.setdefault(key, value)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
