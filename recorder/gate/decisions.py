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

import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
from blackbox.recorder import AppendRefused, BlackboxError, StoreError, private_dir
from blackbox.recorder.log import (
    Direction,
    Key,
    Kind,
    NewEvent,
    Pending,
    StoredEvent,
    events,
    id_fields,
    request_key,
)
from blackbox.recorder.store import HOOK_TRANSPORT, EventStore

DECISIONS = ("allow", "deny", "ask")
FINALS = ("allow", "deny")
SOURCES = ("policy", "host", "user")
DECIDED_BY = ("rule", "default", "settings", "hook", "classifier", "user")


# One encoder for every fingerprint: `json.dumps` with these arguments builds a new encoder per
# call, which costs more than the encoding of a small arguments object. Same output.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
# A digit followed by "." or an exponent: where orjson may write a number differently from `json`
# (1e-05 vs 0.00001). Also matches inside strings ("v1.2"): those just take the slow path.
_FLOATISH = re.compile(rb"[0-9][.eE]")


def args_fingerprint(args: object) -> str:
    """sha256 hex of the canonical JSON of a call's arguments: how a decision finds its call, the
    one implementation the gate, the host hooks and the analytics `calls` rows all use.

    Canonical is `json.dumps(args, sort_keys=True, separators=(",", ":"))`; missing or null
    arguments count as `{}`, because a client may omit `arguments` where a host shows an empty
    input. orjson encodes several times faster and writes the same bytes when the output is
    ASCII (`json` escapes the rest, and DEL) and holds no float (formatted differently);
    anything else is encoded by `json` itself, so the digest never depends on the path taken."""
    if args is None:
        args = {}
    try:
        text: bytes | None = orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        text = None
    if text is None or not text.isascii() or b"\x7f" in text or _FLOATISH.search(text):
        text = _CANONICAL.encode(args).encode()
    return hashlib.sha256(text).hexdigest()


# -- recording host decisions ---------------------------------------------------------------------

_APPEND_ATTEMPTS = 50


def split_host_tool(name: str) -> tuple[str | None, str]:
    """`mcp__<server>__<tool>` as (server, tool); any other name is (None, name).

    Claude Code names MCP tools this way; a server name holding `__` is ambiguous, and is read
    as ending at its first `__`."""
    if name.startswith("mcp__"):
        server, sep, tool = name[5:].partition("__")
        if sep and server and tool:
            return server, tool
    return None, name


def session_started_doc(
    name: str,
    command: str,
    *,
    cwd: str | None = None,
    host_session: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> bytes:
    """The `session_started` document of a host-decision session (transport "hook")."""
    return events.encode(
        events.started_here(
            name=name,
            transport=HOOK_TRANSPORT,
            command=command,
            cwd=cwd,
            host_session=host_session,
            extra=dict(extra or {}),
        )
    )


def open_host_session(store: EventStore, name: str) -> str | None:
    """The newest unsealed session of this name, or None (a sealed one is never appended to)."""
    found = store.list_sessions(limit=1, name=name)
    if found and not found[0].sealed:
        return found[0].session_id
    return None


def host_session_id(name: str, generation: int) -> str:
    """The id of the `generation`-th session named `name` (0 first; a new one follows each
    seal). Derived from the name, not random, so hook processes racing to create the same
    host session all pick the same id and the store keeps exactly one of their starts. It is a
    version-8 (custom) UUID: host sessions sort by their start time, not by id."""
    digest = hashlib.sha256(f"mcp-blackbox/host-session/v1\0{name}\0{generation}".encode())
    value = int.from_bytes(digest.digest()[:16], "big")
    value = (value & ~(0xF << 76)) | (0x8 << 76)
    value = (value & ~(0b11 << 62)) | (0b10 << 62)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def append_host_records(
    store: EventStore,
    name: str,
    started_doc: bytes,
    records: Sequence[tuple[str, bytes]],
    wall_ns: int | None = None,
) -> str:
    """Append (kind, raw) records to the open host session called `name`, creating it (with
    `started_doc`) when there is none; returns the id of the session the last record went to.

    Several hook processes may append to one session at once, each computing the next seq from
    the store's head. The store skips a seq already taken (appends are idempotent per seq), so
    records go one per append: an append that stored nothing lost a race, and is retried at the
    new head. A batch could be half skipped and half stored, out of its order."""
    if not records:
        raise ValueError("nothing to append")
    sid = ""
    for kind, raw in records:
        for _attempt in range(_APPEND_ATTEMPTS):
            now = wall_ns if wall_ns is not None else time.time_ns()
            found = store.list_sessions(name=name)
            current = found[0] if found and not found[0].sealed else None
            try:
                if current is None:
                    # Racing creators write the same id: one start is kept, the rest skipped.
                    sid = host_session_id(name, len(found))
                    start = NewEvent(
                        sid, 1, now, 0, Kind.SESSION_STARTED, Direction.NONE, started_doc
                    )
                    store.append([start])
                    continue
                sid = current.session_id
                # Host records come from many processes: the offset within the session is
                # measured on the wall clock from its start (no monotonic clock spans them).
                mono = max(0, now - (current.started_ns or now))
                event = NewEvent(sid, current.last_seq + 1, now, mono, kind, Direction.NONE, raw)
                if store.append([event]) == 1:
                    break
            except AppendRefused:
                pass  # sealed meanwhile: the next look finds it so and starts a new session
            time.sleep(0.002 * (1 + _attempt))
        else:
            raise StoreError(
                f"host session {name!r}: could not append after {_APPEND_ATTEMPTS} attempts"
            )
    return sid


def record_decision(
    store: EventStore,
    *,
    tool: str,
    decision: str,
    source: str = "host",
    decided_by: str = "user",
    final: str | None = None,
    rule: str | None = None,
    server: str | None = None,
    args: object = None,
    fingerprint: str | None = None,
    rpc_id: str | None = None,
    host: str = "host",
    host_session: str | None = None,
    reason: str | None = None,
    session_name: str | None = None,
    extra: Mapping[str, object] | None = None,
    wall_ns: int | None = None,
) -> str:
    """Record one decision made outside the taps (any host) into the store; returns the id of
    the host session it went to (`<host>:<host_session>`, or `<host>` without one).

    `tool` may be a host's MCP tool name (`mcp__server__tool`): server and tool are split out.
    The fingerprint is computed from `args` unless given. `final` defaults to the decision for
    allow and deny (an ask has no final decision yet)."""
    check_decision(decision, source, decided_by, final)
    if server is None:
        server, tool = split_host_tool(tool)
    if final is None and decision in FINALS:
        final = decision
    name = session_name or (f"{host}:{host_session}" if host_session else host)
    doc = events.encode(
        events.Decision(
            decision=decision,
            final=final,
            source=source,
            decided_by=decided_by,
            rule=rule,
            server=server,
            tool=tool,
            args_fingerprint=fingerprint or args_fingerprint(args),
            rpc_id=rpc_id,
            host_session=host_session,
            reason=reason,
            extra=dict(extra or {}),
        )
    )
    started = session_started_doc(name, host, host_session=host_session)
    return append_host_records(store, name, started, [(Kind.DECISION, doc)], wall_ns)


def check_decision(decision: str, source: str, decided_by: str, final: str | None) -> None:
    """Refuse values outside the decision vocabulary, with a message naming the choices."""
    for label, value, allowed in (
        ("decision", decision, DECISIONS),
        ("source", source, SOURCES),
        ("decided_by", decided_by, DECIDED_BY),
    ):
        if value not in allowed:
            raise DecisionError(f"{label} must be one of {', '.join(allowed)}, not {value!r}")
    if final is not None and final not in FINALS:
        raise DecisionError(f"final must be allow or deny, not {final!r}")


class DecisionError(BlackboxError):
    """A decision that cannot be recorded as given."""


# -- the spool: host records kept while the store is unreachable ----------------------------------

SPOOL_NAME = "hook-decisions.pending.jsonl"


def spool_records(
    directory: Path,
    name: str,
    started_doc: bytes,
    records: Sequence[tuple[str, bytes]],
    wall_ns: int | None = None,
) -> Path:
    """Keep host records in a local file when the store cannot take them, so a hook never
    blocks its host; `drain_spool` moves them into the store later (the next hook run does).

    Host sessions are shared by many short hook processes, so their seqs are only known at the
    store; that is why these records wait here unnumbered instead of in a tap's journal."""
    private_dir(directory)  # 0700, and so is a data directory made for it
    path = directory / SPOOL_NAME
    line = json.dumps(
        {
            "name": name,
            "started": started_doc.decode(),
            "records": [[kind, raw.decode()] for kind, raw in records],
            "wall_ns": wall_ns if wall_ns is not None else time.time_ns(),
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)
    return path


def drain_spool(store: EventStore, directory: Path) -> int:
    """Append every spooled host record to the store, oldest first; returns how many entries
    were shipped. Entries that fail stay in the spool for the next attempt."""
    path = directory / SPOOL_NAME
    if not path.exists():
        return 0
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "rb") as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
        shipped = 0
        for line in lines:
            try:
                entry = json.loads(line)
                records = [(k, r.encode()) for k, r in entry["records"]]
                started = entry["started"].encode()
            except (ValueError, KeyError, TypeError, AttributeError):
                shipped += 1  # a torn or foreign line: nothing to ship, drop it
                continue
            try:
                append_host_records(store, entry["name"], started, records, entry.get("wall_ns"))
            except BlackboxError:
                break
            shipped += 1
        rest = lines[shipped:]
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        if rest:
            os.write(fd, b"\n".join(rest) + b"\n")
        return shipped
    finally:
        os.close(fd)


# -- correlation: which call did a decision decide? ----------------------------------------------

DEFAULT_WINDOW_NS = 120 * 1_000_000_000
DEFAULT_SLACK_NS = 100_000_000  # clock skew between a tap and a hook on another host


def normalise_server(name: str | None) -> str | None:
    """Server names as Claude Code spells them in tool names: characters outside
    [A-Za-z0-9_-] become `_`, so `my.server` is `my_server`."""
    if name is None:
        return None
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)


@dataclass(frozen=True)
class CallRef:
    """A `tools/call` request frame of a tap session."""

    session_id: str
    seq: int
    wall_ns: int
    server: str | None
    tool: str | None
    rpc_id: str | None
    args_fingerprint: str


@dataclass(frozen=True)
class HostDecision:
    """A host's final word on one tool use: the last of its decision records that says
    something (`final` set, else the latest), with what happened before it. `first_wall_ns` is
    the time of the use's first record (the proposal), `wall_ns` that of the final word."""

    session_id: str
    seq: int
    wall_ns: int
    first_wall_ns: int
    server: str | None
    tool: str
    args_fingerprint: str | None
    decision: str | None
    final: str | None
    decided_by: str | None
    asked: bool
    tool_use_id: str | None
    doc: dict


@dataclass(frozen=True)
class Correlation:
    """Host decisions joined to calls; what is left over on either side is visible."""

    matches: tuple[tuple[HostDecision, CallRef], ...]
    unmatched_decisions: tuple[HostDecision, ...]
    undecided_calls: tuple[CallRef, ...]


def _doc_of(raw: bytes) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_calls(store: EventStore, session_id: str, server: str | None = None) -> list[CallRef]:
    """The `tools/call` requests (client to server) of a recorded session, batches included.
    `server` defaults to the session's name."""
    if server is None:
        server = store.session(session_id).name
    out: list[CallRef] = []
    for ev in store.read_session(session_id):
        out.extend(call for call, _key in _tool_calls_of(ev, server))
    return out


def _tool_calls_of(ev: StoredEvent, server: str | None) -> list[tuple[CallRef, Key]]:
    """The `tools/call` requests a record carries (none unless it is a client frame), each with
    its pairing key."""
    if ev.kind != Kind.FRAME or ev.direction != Direction.CLIENT_TO_SERVER:
        return []
    if b'"tools/call"' not in ev.raw and b"\\" not in ev.raw:
        return []
    value = _doc_of(ev.raw) if ev.raw.lstrip()[:1] == b"{" else None
    items = [value] if value else _batch_items(ev.raw)
    out: list[tuple[CallRef, Key]] = []
    for item in items:
        if item.get("method") != "tools/call":
            continue
        raw_params = item.get("params")
        params = raw_params if isinstance(raw_params, dict) else {}
        name = params.get("name")
        rpc_id, rpc_id_type = id_fields(item["id"]) if "id" in item else (None, None)
        call = CallRef(
            ev.session_id,
            ev.seq,
            ev.wall_ns,
            server,
            name if isinstance(name, str) else None,
            rpc_id,
            args_fingerprint(params.get("arguments")),
        )
        out.append((call, request_key(Direction.CLIENT_TO_SERVER, rpc_id, rpc_id_type)))
    return out


def _batch_items(raw: bytes) -> list[dict]:
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    return []


def host_decisions(store: EventStore, session_id: str) -> list[HostDecision]:
    """One `HostDecision` per tool use recorded in a host session (grouped by `tool_use_id`;
    records without one stand alone)."""
    groups: dict[str, list] = {}
    order: list[str] = []
    for ev in store.read_session(session_id):
        if ev.kind != Kind.DECISION:
            continue
        doc = events.decode_dict(Kind.DECISION, ev.raw) or {}
        key = doc.get("tool_use_id") or f"#{ev.seq}"
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((ev, doc))
    out: list[HostDecision] = []
    for key in order:
        items = groups[key]
        finals = [(ev, doc) for ev, doc in items if doc.get("final")]
        ev, doc = finals[-1] if finals else items[-1]
        asked = any(d.get("decision") == "ask" for _e, d in items)
        out.append(
            HostDecision(
                session_id=session_id,
                seq=ev.seq,
                wall_ns=ev.wall_ns,
                first_wall_ns=items[0][0].wall_ns,
                server=doc.get("server"),
                tool=str(doc.get("tool")),
                args_fingerprint=doc.get("args_fingerprint"),
                decision=doc.get("decision"),
                final=doc.get("final"),
                decided_by=doc.get("decided_by"),
                asked=asked,
                tool_use_id=doc.get("tool_use_id"),
                doc=doc,
            )
        )
    return out


def correlate(
    decisions: Sequence[HostDecision],
    calls: Sequence[CallRef],
    window_ns: int = DEFAULT_WINDOW_NS,
    slack_ns: int = DEFAULT_SLACK_NS,
) -> Correlation:
    """Join each host decision to the `tools/call` it decided: same server (as the host spells
    it) and tool, same arguments fingerprint, nearest in time to the decision.

    When the host recorded the use from proposal to outcome (Claude Code hooks), the call must
    fall inside that span (give or take `slack_ns`): a host sends the call after its PreToolUse
    and before its PostToolUse, and a later call with the same arguments is another call. A
    lone decision record (`decision record`, `record_decision`) matches within `window_ns`.
    Each call and each decision is used once, closest pairs first. A denied call normally has
    no frame (the host never sent it): it stays unmatched, as does a call no host decided."""
    candidates: list[tuple[int, int, int]] = []
    for di, d in enumerate(decisions):
        if d.first_wall_ns < d.wall_ns:
            lo, hi = d.first_wall_ns - slack_ns, d.wall_ns + slack_ns
        else:
            lo, hi = d.wall_ns - window_ns, d.wall_ns + window_ns
        for ci, c in enumerate(calls):
            if d.tool != c.tool or d.args_fingerprint != c.args_fingerprint:
                continue
            if d.server is not None and normalise_server(d.server) != normalise_server(c.server):
                continue
            if lo <= c.wall_ns <= hi:
                candidates.append((abs(d.wall_ns - c.wall_ns), di, ci))
    candidates.sort()
    used_d: set[int] = set()
    used_c: set[int] = set()
    pairs: dict[int, int] = {}
    for _delta, di, ci in candidates:
        if di in used_d or ci in used_c:
            continue
        used_d.add(di)
        used_c.add(ci)
        pairs[di] = ci
    return Correlation(
        matches=tuple((decisions[di], calls[ci]) for di, ci in sorted(pairs.items())),
        unmatched_decisions=tuple(d for i, d in enumerate(decisions) if i not in used_d),
        undecided_calls=tuple(c for i, c in enumerate(calls) if i not in used_c),
    )


def policy_decisions(store: EventStore, session_id: str) -> list[tuple[dict, CallRef | None]]:
    """The gate's decisions of a tap session, each with its request: the latest client-to-server
    `tools/call` frame before it carrying the decision's `rpc_id`.

    The requests go through a pairing table in log order, but are not closed by their answers:
    the gate journals its decision right after the request it decided, before any answer, and a
    request already answered is still the one a late decision names. An id reused replaces the
    earlier request. The decision names the id by its text alone (its document has no id type):
    the newest request whose id has that text is the one."""
    server = store.session(session_id).name
    requests: Pending[CallRef] = Pending()
    out: list[tuple[dict, CallRef | None]] = []
    for ev in store.read_session(session_id):
        if ev.kind == Kind.FRAME:
            for call, key in _tool_calls_of(ev, server):
                requests.open(key, call)
            continue
        if ev.kind != Kind.DECISION:
            continue
        doc = events.decode_dict(Kind.DECISION, ev.raw) or {}
        if doc.get("source") != "policy":
            continue
        out.append((doc, requests.newest(Direction.CLIENT_TO_SERVER, doc.get("rpc_id"))))
    return out
