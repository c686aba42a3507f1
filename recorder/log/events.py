"""The typed, versioned documents of every non-frame record kind: one encode, one decode.

A frame's `raw` is the bytes that crossed the wire and is never touched. Every other record holds a
JSON document describing a session event, and this module is the one place that knows their
shape: one frozen dataclass per kind, `encode` (one JSON encoder, so one spelling of every float),
and `decode(kind, raw)`, which returns `(document, None)` or `(None, problem)` and never raises, as
`blackbox.recorder.log.jsonrpc.parse` does for frames. An audit log is kept for years, so every
document written from now on carries its schema version as `"v"`; documents from before the schema
(no `"v"`, version 0) are brought up to date by one small upgrade step per version, as mitmproxy
does for its flows. docs/log-format.md is generated from this module (`python -m
blackbox.recorder.log.events`, rendered by `blackbox.recorder.log.format_page`) and a test keeps the
two in step: it is what an auditor reads.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from blackbox.recorder.log.event_base import (
    JSON,
    Document,
    FieldSpec,
    as_dict,
    doc_field,
    dumps,
    encode,
    encode_fields,
    extra_field,
    specs_of,
)
from blackbox.recorder.log.jsonrpc import degradation, fit_era, fit_text, parse

__all__ = ["JSON", "Document", "FieldSpec", "as_dict", "dumps", "encode", "encode_fields"]


@dataclass(frozen=True, slots=True)
class SessionStarted(Document):
    """The first record of every session: who recorded it, what ran, where. The sessions
    projection takes its name, transport, command and replay_of from here."""

    KIND: ClassVar[str] = "session_started"

    name: str | None = doc_field(
        "The session's name (`--name`, the host's server name).", required=True
    )
    transport: str | None = doc_field(
        "`stdio`, `http`, `hook` (host decisions), or null (the recorder's own sessions, such as"
        " retention).",
        required=True,
    )
    command: list[str] | str | None = doc_field(
        "What was recorded: the server's argv (stdio, replay against a command), its URL (http),"
        " or the host (hook).",
        required=True,
    )
    cwd: str | None = doc_field("The working directory the server was started in.")
    env_names: list[str] = doc_field(
        "Names (never values) of the environment variables the server was given.", default=[]
    )
    tap_version: str | None = doc_field("The mcp-blackbox version that recorded the session.")
    pid: int | None = doc_field("The recording process's id.")
    replay_of: str | None = doc_field("For a replay: the id of the session it replayed.")
    max_frame: int | None = doc_field(
        "stdio: the largest frame recorded whole, in bytes.", optional=True
    )
    quarantine_noise: bool | None = doc_field(
        "stdio: non-JSON stdout lines were kept from the client.", optional=True
    )
    policy: bool | None = doc_field("stdio: a policy gate was in force.", optional=True)
    redaction: bool | None = doc_field("stdio: redaction rules were in force.", optional=True)
    session_rule: str | None = doc_field(
        "http: how the proxy told sessions apart (legacy id, trace id, client).", optional=True
    )
    session_key: str | None = doc_field("http: the value that rule keyed on.", optional=True)
    remote: str | None = doc_field("http: the client's address.", optional=True)
    host_session: str | None = doc_field("hook: the host's own session id.", optional=True)
    timing: str | None = doc_field("replay: the timing mode.", optional=True)
    injections: list[JSON] | None = doc_field("replay: the faults injected.", optional=True)
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class EraDetected(Document):
    """The protocol era the session speaks, from the handshake or the first request's `_meta`."""

    KIND: ClassVar[str] = "era_detected"

    era: str | None = doc_field(
        "The protocol version, such as 2025-11-25 or 2026-07-28.", required=True
    )
    client_info: JSON = doc_field("The client's `clientInfo`, as sent.")
    server_info: JSON = doc_field("The server's `serverInfo`, as answered (null when unknown).")
    via: str | None = doc_field(
        "The method that told: `initialize`, `server/discover` or the first request.", optional=True
    )
    requested: str | None = doc_field(
        "The version the client asked for, when the server answered another.", optional=True
    )
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class SessionEnded(Document):
    """How the session ended. Its outcome is the sessions projection's outcome."""

    KIND: ClassVar[str] = "session_ended"

    reason: str = doc_field(
        "What ended it: client_closed, server_exited, interrupted, spawn_failed, recovered,"
        " abandoned, proxy_stopped, completed...",
        required=True,
        default="ended",
    )
    outcome: str = doc_field(
        "ok, server_exited, crashed, interrupted, recovered, abandoned...",
        required=True,
        default="ended",
    )
    exit_code: int | None = doc_field("The server's exit code, when it exited.")
    signal: str | None = doc_field("The signal that ended the server, by name.")
    tap_signals: list[str] | None = doc_field("Signals the tap itself received.", optional=True)
    detail: str | None = doc_field("A sentence on how it ended.", optional=True)
    verdict: str | None = doc_field("replay: the replay's verdict.", optional=True)
    recovered_ns: int | None = doc_field(
        "recovered: when `blackbox ship` closed a session its tap left open.", optional=True
    )
    sealed_by: str | None = doc_field("abandoned: what sealed it (retention).", optional=True)
    sealed_at_ns: int | None = doc_field("abandoned: when it was sealed.", optional=True)
    last_activity_ns: int | None = doc_field(
        "abandoned: the time of its last record.", optional=True
    )
    idle_ns: int | None = doc_field(
        "abandoned: the idle time that made it abandoned.", optional=True
    )
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class SessionSealed(Document):
    """The seal: the last record of a session, written by the store. It fixes how many records
    precede it and the chain head over them; `verify` finds truncation against it."""

    KIND: ClassVar[str] = "session_sealed"

    count: int = doc_field("How many records precede the seal.", required=True, default=0)
    head: str = doc_field(
        "The chain hash of the record before the seal, hex.", required=True, default=""
    )
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class Stderr(Document):
    """One line the server wrote to stderr (stdio), decoded as UTF-8 with replacement."""

    KIND: ClassVar[str] = "stderr"

    line: str = doc_field("The line, without its line ending.", required=True, default="")
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class Fault(Document):
    """Something went wrong on the wire or in the server; the doctor's tree is built from these."""

    KIND: ClassVar[str] = "fault"

    fault: str = doc_field(
        "The fault: stdout_pollution, invalid_json, invalid_utf8, oversize_frame, spawn_failed,"
        " server_exited, exit_with_outstanding, broken_pipe, timeout, stream_cut,"
        " upstream_error, store_refused (`raw_base64` holds the record a store refused),"
        " redaction_over_budget (a frame stored withheld: `rule`, `budget_ms`, `size`)...",
        required=True,
        default="unknown",
    )
    stage: str = doc_field(
        "The doctor's stage: transport, handshake, discovery or execution.", default="transport"
    )
    detail: str = doc_field("What happened, in a sentence.", default="")
    seq: int | None = doc_field("The seq of the record it concerns, if any.")
    direction: str | None = doc_field("c2s or s2c, for a fault in one direction.", optional=True)
    excerpt: str | None = doc_field("The start of the offending bytes.", optional=True)
    exit_code: int | None = doc_field("The server's exit code, for an exit.", optional=True)
    signal: str | None = doc_field("The signal that ended the server, by name.", optional=True)
    http_method: str | None = doc_field("http: the request's method.", optional=True)
    path: str | None = doc_field("http: the request's path.", optional=True)
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class Decision(Document):
    """A permission decision on a tool call, by the policy gate (source policy) or a host (source
    host or user). Joined to the call it decided by rpc id, or by server, tool and arguments
    fingerprint nearest in time."""

    KIND: ClassVar[str] = "decision"

    decision: str | None = doc_field(
        "allow, deny or ask; null for a host's record of a call not decided yet.", required=True
    )
    final: str | None = doc_field("The final outcome, allow or deny, once known.")
    source: str = doc_field("policy, host or user.", required=True, default="policy")
    decided_by: str | None = doc_field("rule, default, settings, hook, classifier or user.")
    rule: str | None = doc_field("The rule that decided, if any.")
    server: str | None = doc_field("The server's name.")
    tool: str | None = doc_field("The tool's name.")
    method: str = doc_field("The method decided on.", default="tools/call")
    args_fingerprint: str | None = doc_field(
        "sha256 hex of the canonical JSON of the call's arguments."
    )
    rpc_id: str | None = doc_field("The JSON-RPC id of the call, as text.")
    request_seq: int | None = doc_field("The seq of the request frame it decided.")
    host_session: str | None = doc_field("The host's own session id.")
    reason: str | None = doc_field("Why, as the rule or host put it.")
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class HttpExchange(Document):
    """One HTTP request/response through the proxy: what the frames alone do not say. Credentials
    in headers are kept only as fingerprints."""

    KIND: ClassVar[str] = "http_exchange"

    method: str | None = doc_field("The HTTP method.", required=True)
    path: str | None = doc_field("The request target.", required=True)
    status: int | None = doc_field("The response status (null when none was sent).")
    content_type: str | None = doc_field("The response's content type.")
    duration_ms: float | None = doc_field("From the request's start to the response's end.")
    request_headers: dict[str, JSON] = doc_field("The request's headers, as recorded.", default={})
    response_headers: dict[str, JSON] = doc_field(
        "The response's headers, as recorded.", default={}
    )
    request_seq: int | None = doc_field("The seq of the request's first frame.")
    remote: str | None = doc_field("The client's address.")
    bytes_in: int | None = doc_field("Request body bytes.")
    bytes_out: int | None = doc_field("Response body bytes.")
    upstream_answered: bool | None = doc_field("Whether the upstream answered at all.")
    sse_events: list[JSON] | None = doc_field(
        "The SSE events of a stream, in order.", optional=True
    )
    client_disconnected: bool | None = doc_field(
        "The client went away mid-response.", optional=True
    )
    note: str | None = doc_field("What the proxy did itself (a refusal, a denial).", optional=True)
    partial: bool | None = doc_field(
        "A long stream is written in parts: true for every part but the last.", optional=True
    )
    part: int | None = doc_field("The part's number, from 1.", optional=True)
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class ReplayStep(Document):
    """A replay's finding: a step that did not replay equivalent, a message the recording did not
    have, or (status summary, last) the replay's verdict."""

    KIND: ClassVar[str] = "replay_step"

    step: int | None = doc_field("The step's number; null for unexpected messages and the summary.")
    status: str = doc_field(
        "diverged, missing, not_sent, unexpected, summary...", required=True, default="summary"
    )
    replay_of: str | None = doc_field("The id of the session replayed.", optional=True)
    verdict: str | None = doc_field("summary: equivalent or diverged.", optional=True)
    summary: dict[str, JSON] | None = doc_field("summary: counts by status.", optional=True)
    faults: list[JSON] | None = doc_field(
        "summary: each recorded fault, reproduced or not.", optional=True
    )
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class RetentionApplied(Document):
    """Retention removed sessions (after archiving them in a verified bundle). The one sanctioned
    removal from the log, itself recorded."""

    KIND: ClassVar[str] = "retention_applied"

    older_than_ns: int | None = doc_field("The age limit asked for.")
    cutoff_ns: int | None = doc_field("Sessions that ended before this were removed.")
    cutoff: str | None = doc_field("The cutoff, as ISO 8601 text.")
    idle_ns: int | None = doc_field("Unsealed sessions idle this long were sealed as abandoned.")
    removed: list[str] = doc_field("The ids of the sessions removed.", default=[])
    sessions_removed: int = doc_field("How many sessions were removed.", default=0)
    records_removed: int = doc_field("How many records were removed.", default=0)
    archive: str | None = doc_field("Where the archive bundle was written.")
    archive_format: str | None = doc_field("The archive's data file format.")
    archive_manifest_sha256: str | None = doc_field("sha256 of the archive's manifest.")
    held_kept: list[str] = doc_field("Sessions kept because of a legal hold.", default=[])
    abandoned_sealed: list[str] = doc_field("Sessions sealed as abandoned first.", default=[])
    broken_kept: list[str] = doc_field(
        "Sessions kept because their chain did not verify.", default=[]
    )
    removed_leaves: dict[str, JSON] | None = doc_field(
        "Per removed session, the leaves its records were in the log's tree: ranges "
        "[first, last] of leaf indices, inclusive, in order.",
        optional=True,
    )
    authorisation: str | None = doc_field(
        "The log key's signed note over the sessions, leaves and archive this removes "
        "(docs/trust.md, signed removals).",
        optional=True,
    )
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class PolicyLoaded(Document):
    """A tap read its policy file: at start and each time the file changed while it ran. A
    failed load (the file does not parse) keeps the previous policy in force and says why.
    Every policy `decision` names the version (`policy_sha256`) that made it."""

    KIND: ClassVar[str] = "policy_loaded"

    ok: bool = doc_field(
        "Whether the file loaded (false: the previous policy stays in force).", default=True
    )
    sha256: str | None = doc_field("sha256 hex of the file's bytes as read.", required=True)
    path: str | None = doc_field("The policy file.")
    in_force: str | None = doc_field(
        "The sha256 of the policy in force after this load (the previous one when it failed)."
    )
    previous: str | None = doc_field("The sha256 of the policy in force before, if any.")
    default: str | None = doc_field("The policy's default decision (allow or deny).")
    rules: list[JSON] = doc_field(
        "The rules, in order: id, decision, servers, tools, methods, conditions, reason.",
        default=[],
    )
    error: str | None = doc_field("Why the load failed (FILE:LINE:COL: ...).")
    user: str | None = doc_field("Who loaded it: the tap's user.")
    pid: int | None = doc_field("Who loaded it: the tap's process id.")
    host: str | None = doc_field("Who loaded it: the machine's host name.")
    trigger: str | None = doc_field("start, or changed (the file changed while the tap ran).")
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class SessionIdle(Document):
    """No frame crossed for `--idle-after`: the session is idle from `last_frame_ns` on."""

    KIND: ClassVar[str] = "session_idle"

    idle_after_ns: int | None = doc_field("The idle limit in force, ns.", required=True)
    last_frame_ns: int | None = doc_field("Wall clock time of the last frame before, ns.")
    last_frame_seq: int | None = doc_field("The seq of that frame.")
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class SessionResumed(Document):
    """The first frame after a `session_idle`: the session is in use again."""

    KIND: ClassVar[str] = "session_resumed"

    idle_ns: int | None = doc_field("How long the session was without a frame, ns.", required=True)
    seq: int | None = doc_field("The seq of the frame that resumed it.")
    direction: str | None = doc_field("c2s or s2c: who spoke first.")
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class PeerBack(Document):
    """A peer that was `unresponsive` (a fault: pings unanswered) answered a ping again."""

    KIND: ClassVar[str] = "peer_back"

    peer: str | None = doc_field("server or client: the side that was silent.", required=True)
    silent_ns: int | None = doc_field("Since its last answer before, ns.")
    missed: int | None = doc_field("How many pings went unanswered in a row.")
    rpc_id: str | None = doc_field("The id of the ping it answered.")
    seq: int | None = doc_field("The seq of the answer.")
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class SuiteSaved(Document):
    """A named replay suite (`blackbox suite add`): the sessions `blackbox replay --suite NAME`
    replays. The newest record of a name is the suite; saving again replaces it."""

    KIND: ClassVar[str] = "suite_saved"

    name: str = doc_field("The suite's name.", required=True, default="")
    sessions: list[str] = doc_field("The full ids of the suite's sessions, in order.", default=[])
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class ToolsListed(Document):
    """What a server offered: the tools, prompts or resource templates of one list answer, each
    with the hash of its definition (`blackbox.recorder.gate.tooldefs`), written by the shipper side
    when a session's listing differs from its previous one. The inventory is built from these."""

    KIND: ClassVar[str] = "tools_listed"

    server: str | None = doc_field("The server's recorded name.", required=True)
    command: str | None = doc_field("The server's command line or URL.", required=True)
    method: str = doc_field(
        "The list method answered: tools/list, prompts/list, resources/templates/list or"
        " server/discover.",
        required=True,
        default="tools/list",
    )
    items: list[JSON] = doc_field(
        "Each item as {kind, name, hash}: kind tool, prompt or resource_template; hash the"
        " sha256 hex of its canonical definition.",
        default=[],
    )
    complete: bool = doc_field(
        "The answer listed everything (no pagination): what is absent has disappeared.",
        default=True,
    )
    seq: int | None = doc_field("The seq of the answer's frame.")
    findings: dict[str, JSON] = doc_field(
        "Suspicious-definition findings by item name (a heuristic; see docs/tools.md).",
        default={},
    )
    observed_session: str | None = doc_field(
        "The session the answer was seen in, when not this record's own (the HTTP proxy's"
        " watcher records in a session of its own).",
        optional=True,
    )
    extra: Mapping[str, JSON] = extra_field()


@dataclass(frozen=True, slots=True)
class ToolChanged(Document):
    """A server's tool, prompt or resource template changed, appeared or disappeared against the
    last definition recorded for that server (its name and command or URL), written by the
    shipper side as the answer is seen, never on the relay's path."""

    KIND: ClassVar[str] = "tool_changed"

    server: str | None = doc_field("The server's recorded name.", required=True)
    command: str | None = doc_field("The server's command line or URL.", required=True)
    tool: str = doc_field("The item's name.", required=True, default="")
    item_kind: str = doc_field("tool, prompt or resource_template.", default="tool")
    change: str = doc_field("changed, added or removed.", required=True, default="changed")
    method: str = doc_field("The list method whose answer showed it.", default="tools/list")
    old_hash: str | None = doc_field("The previous definition's hash (null when added).")
    new_hash: str | None = doc_field("The new definition's hash (null when removed).")
    diff: list[str] = doc_field("A readable diff, one line each (- old, + new).", default=[])
    findings: list[JSON] = doc_field(
        "Suspicious-definition findings of the new definition (a heuristic).", default=[]
    )
    seq: int | None = doc_field("The seq of the answer's frame.")
    previous_session: str | None = doc_field("The session the previous definition was seen in.")
    observed_session: str | None = doc_field(
        "The session the answer was seen in, when not this record's own.", optional=True
    )
    extra: Mapping[str, JSON] = extra_field()


def started_here(**fields: JSON) -> SessionStarted:
    """A `session_started` document by this process: its version and pid filled in; keys beyond
    the schema (a tap's own settings) are kept as extra."""
    from blackbox.recorder import __version__

    extra = fields.pop("extra", None) or {}
    values = {"tap_version": __version__, "pid": os.getpid(), **extra, **fields}
    return typing.cast(SessionStarted, from_dict(SessionStarted.KIND, values))


DOCUMENTS: dict[str, type[Document]] = {
    cls.KIND: cls
    for cls in (
        SessionStarted,
        EraDetected,
        SessionEnded,
        SessionSealed,
        Stderr,
        Fault,
        Decision,
        HttpExchange,
        ReplayStep,
        RetentionApplied,
        PolicyLoaded,
        SessionIdle,
        SessionResumed,
        PeerBack,
        SuiteSaved,
        ToolsListed,
        ToolChanged,
    )
}


# -- the schema as data: field lists the store, Parquet and export columns derive from -----------


def fields_of(kind: str) -> tuple[FieldSpec, ...]:
    """The fields of a kind's document, in schema order (raises KeyError for an unknown kind)."""
    return specs_of(DOCUMENTS[kind])


def field_names(kind: str) -> tuple[str, ...]:
    """The names of a kind's fields, in schema order: the column lists derive from these."""
    return tuple(s.name for s in fields_of(kind))


# -- upgrading old documents ---------------------------------------------------------------------

Upgrade = Callable[[dict[str, JSON]], dict[str, JSON]]


def _defaults(**values: JSON) -> Upgrade:
    def step(doc: dict[str, JSON]) -> dict[str, JSON]:
        for key, value in values.items():
            if doc.get(key) is None:
                doc[key] = value(doc) if callable(value) else value
        return doc

    return step


def _v0_session_ended(doc: dict[str, JSON]) -> dict[str, JSON]:
    # Before the schema, readers took the outcome from the reason when it was missing.
    reason = doc.get("reason") if isinstance(doc.get("reason"), str) else None
    doc.setdefault("reason", "ended")
    if not isinstance(doc.get("outcome"), str) or not doc["outcome"]:
        doc["outcome"] = reason or "ended"
    doc.setdefault("exit_code", None)
    doc.setdefault("signal", None)
    return doc


#: UPGRADES[kind][n] turns a version-n document (as a dict, without "v") into version n + 1.
#: Version 0 is every document written before the schema: the same fields, no "v", and some
#: written by producers that left out what version 1 requires.
UPGRADES: dict[str, dict[int, Upgrade]] = {
    "session_started": {
        0: _defaults(name=None, transport=None, command=None, env_names=[], replay_of=None)
    },
    "era_detected": {0: _defaults(era=None, client_info=None, server_info=None)},
    "session_ended": {0: _v0_session_ended},
    "session_sealed": {0: _defaults()},
    "stderr": {0: _defaults(line="")},
    # The replayer wrote transport faults with no stage, detail or seq of their own.
    "fault": {
        0: _defaults(
            stage="transport",
            detail=lambda d: d.get("fault") if isinstance(d.get("fault"), str) else "",
            seq=None,
        )
    },
    "decision": {0: _defaults(method="tools/call")},
    "http_exchange": {0: _defaults(request_headers={}, response_headers={})},
    "replay_step": {0: _defaults()},
    "retention_applied": {
        0: _defaults(removed=[], held_kept=[], abandoned_sealed=[], broken_kept=[])
    },
}


# -- decoding ------------------------------------------------------------------------------------


def decode(kind: str, raw: bytes) -> tuple[Document | None, str | None]:
    """A record's document: (document, None), or (None, problem). Never raises.

    Problems: `not_a_document` (a frame: its raw bytes are the wire's), `unknown_kind`, `empty`,
    `invalid_json`, `invalid_utf8`, `not_an_object`, `unsupported_version N` (written by a
    newer mcp-blackbox), `unknown_version N` (older than the kind itself), `missing_field NAME`,
    `wrong_type NAME`."""
    cls = DOCUMENTS.get(str(kind))
    if cls is None:
        return None, "not_a_document" if kind == "frame" else "unknown_kind"
    value, problem = parse(raw)
    if problem is not None:
        return None, problem
    if not isinstance(value, dict):
        return None, "not_an_object"
    version = value.pop("v", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        return None, "wrong_type v"
    if version > cls.VERSION:
        return None, f"unsupported_version {version}"
    steps = UPGRADES.get(cls.KIND, {})
    for n in range(version, cls.VERSION):
        step = steps.get(n)
        if step is None:  # a kind born after version n: no such document was ever written
            return None, f"unknown_version {version}"
        value = step(value)
    return _build(cls, value)


def _build(cls: type[Document], value: dict[str, JSON]) -> tuple[Document | None, str | None]:
    """A document from a current-version dict (consumed): fields checked, other keys kept."""
    values: dict[str, JSON] = {}
    for spec in specs_of(cls):
        if spec.name in value:
            item = value.pop(spec.name)
            if not isinstance(item, spec.types) or (
                isinstance(item, bool) and bool not in spec.types and object not in spec.types
            ):
                return None, f"wrong_type {spec.name}"
            values[spec.name] = item
        elif spec.required:
            return None, f"missing_field {spec.name}"
    values["extra"] = value  # the keys left over; never a spec's name (specs skip `extra`)
    return cls(**values), None


def from_dict(kind: str, values: Mapping[str, JSON]) -> Document:
    """A producer's document of `kind` from a dict of fields and evidence (keys beyond the schema
    are kept). Raises ValueError when the fields break the schema: a producer's bug, not data."""
    cls = DOCUMENTS[str(kind)]
    doc, problem = _build(cls, {k: v for k, v in values.items() if k != "v"})
    if doc is None:
        raise ValueError(f"{kind} document: {problem}")
    return doc


D = typing.TypeVar("D", bound=Document)


def decode_as(cls: type[D], raw: bytes) -> D | None:
    """The document of a record known to be of `cls`'s kind, or None when it does not decode."""
    doc, _problem = decode(cls.KIND, raw)
    return doc if isinstance(doc, cls) else None


def decode_dict(kind: str, raw: bytes) -> dict[str, JSON] | None:
    """A record's document as a plain dict in the current version (`as_dict` of `decode`), or
    None when it does not decode: for readers that pass documents on as JSON."""
    doc, _problem = decode(kind, raw)
    return None if doc is None else as_dict(doc)


DERIVED_KEYS = ("method", "tool", "era")


def derived_fields(raw: bytes) -> tuple[str | None, str | None, str | None, str | None]:
    """The derived columns (method, tool, era, degraded) of a non-frame record: its document's
    keys of those names when they hold text, as written, fitted as a frame's are. Read from the
    bytes, not through the upgrade steps, so that a record's derived columns never change when an
    upgrade step is added and `verify` can recompute them from any log ever written."""
    value, problem = parse(raw)
    if problem is not None or not isinstance(value, dict):
        return None, None, None, None
    method, tool, era = (value.get(key) if isinstance(value.get(key), str) else None
                         for key in DERIVED_KEYS)  # fmt: skip
    return (
        fit_text(method),
        fit_text(tool),
        fit_era(era),
        degradation(method=method, tool=tool, era=era),
    )


if (
    __name__ == "__main__"
):  # the written schema: python -m blackbox.recorder.log.events > docs/log-format.md
    import sys

    from blackbox.recorder.log.format_page import schema_markdown

    sys.stdout.write(schema_markdown())
