"""The policy gate: ordered allow/deny rules, read from a TOML file by
`blackbox.recorder.gate.policy_rules`, that the taps consult for every `tools/call` request before
forwarding it, and that `blackbox hook claude-code --mode enforce` and `blackbox policy test`
evaluate too.

MCP itself does not decide who may call what; the host does. A policy in the tap is a second,
host-independent line: a denied request never reaches the server, the client gets a JSON-RPC
error naming the rule, and every gated request leaves exactly one `decision` record in the log.

The gate sits on the hot path of every client-to-server frame, so `Policy.check` first does a
byte search and only parses frames that can be gated. The search is conservative: a frame that
contains a backslash is parsed too, because JSON may spell `tools/call` with escapes
(`"tools\\/call"`) that a plain byte search would miss.

The gate decides on unambiguous JSON only. A frame with a key twice in one object (`"name":
"write_file","name":"read_file"`) means one thing to a parser that keeps the last value (ours)
and another to one that keeps the first, and the frame is forwarded as it came: a gated request
with a duplicate key anywhere in it is denied (rule `ambiguous`), whichever key it is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from blackbox.recorder.gate.decisions import args_fingerprint
from blackbox.recorder.gate.pinning import Pinner, PinSettings, pin_settings
from blackbox.recorder.gate.policy_rules import (
    AMBIGUOUS_RULE,
    DEFAULT_RULE,
    TOOLS_CALL,
    UNPARSEABLE_RULE,
    PolicyError,
    Rule,
    parse_policy,
)
from blackbox.recorder.log import (
    FALLBACK_DEPTH,
    Direction,
    Kind,
    encode_json,
    events,
    id_fields,
    too_deep,
)
from blackbox.recorder.store import EventStore

# JSON-RPC reserves -32000..-32099 for implementation-defined server errors; the SDKs use -32002
# (resource not found) and around; -32001 is free in MCP and the spec's examples.
DENIED_CODE = -32001
# An unparseable frame that mentions a gated method is refused with JSON-RPC "Parse error".
PARSE_ERROR_CODE = -32700
_TARGET_CACHE = 4096


@dataclass(frozen=True)
class GateVerdict:
    """What the tap does with one gated frame.

    `decision_docs` are the raw JSON documents of `decision` records, one per gated request in
    the frame, to journal right after the frame itself (so a decision's request is the preceding
    client-to-server frame with the same `rpc_id`). When `allowed` is false the frame must not be
    forwarded and `reply` (no trailing newline) goes back to the client instead; `reply` is None
    when nothing in the frame expects an answer (a notification)."""

    allowed: bool
    decision_docs: tuple[bytes, ...]
    reply: bytes | None


@dataclass(frozen=True)
class Outcome:
    """What the policy decided for one request: `rule` is a rule id or "default"."""

    decision: str
    rule: str
    decided_by: str
    reason: str | None


class _Request(NamedTuple):
    """One gated request of a frame: `batch_index` (None outside a batch), the message
    as parsed (the last of duplicate keys), the gated method it names, and the path to its
    first duplicated key when it has one (the key last). A tuple: one is made per gated frame."""

    batch_index: int | None  # not `index`: that would shadow tuple.index
    message: dict
    method: str
    duplicate: tuple[str | int, ...] | None


# -- reading a frame, duplicate keys included ----------------------------------------------------


class _Duplicate(Exception):
    """Raised by the fast parse's hook at the first object with a repeated key."""


class _Dups(dict):
    """An object with repeated keys: holds the last value of each key, like `json.loads`, and
    in `dups` every value of each repeated key, in order."""

    dups: dict[str, list]


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Duplicate
    return d


def _keep_duplicates(pairs: list[tuple[str, object]]) -> dict:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    out = _Dups(d)
    seen: dict[str, list] = {}
    for key, value in pairs:
        seen.setdefault(key, []).append(value)
    out.dups = {k: v for k, v in seen.items() if len(v) > 1}
    return out


def _parse(raw: bytes) -> tuple[object, bool]:
    """The frame's value and whether any object in it repeats a key. The hook adds a fraction of
    the plain parse's cost (one Python call per object), paid only by frames the byte search
    let through; the second parse, which keeps
    every value of a repeated key, only by frames that have one. A frame nested deeper than the
    parser goes raises ValueError, as invalid JSON does: the gate cannot read it either."""
    if too_deep(raw):  # decided the same way whatever the stack (jsonrpc.FALLBACK_DEPTH)
        raise ValueError(f"nested deeper than {FALLBACK_DEPTH} levels")
    try:
        try:
            return json.loads(raw, object_pairs_hook=_unique_pairs), False
        except _Duplicate:
            return json.loads(raw, object_pairs_hook=_keep_duplicates), True
    except RecursionError:
        raise ValueError("nested deeper than the parser goes") from None


def _first_duplicate(value: object) -> tuple[str | int, ...] | None:
    """The path to the first repeated key in `value` (depth first, key last), or None. Iterative:
    a parsed value may be nested as deep as the parser allows."""
    stack: list[tuple[object, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, _Dups):
            return (*path, next(iter(node.dups)))
        if isinstance(node, dict):
            stack.extend((v, (*path, k)) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in reversed(list(enumerate(node))))
    return None


def _path_text(path: list[str | int]) -> str:
    """`params.arguments.files[0]`, as a rule's `arg` is written."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


# -- the policy ---------------------------------------------------------------------------------


class Policy:
    """A parsed policy file. Immutable after loading; safe to share between threads."""

    def __init__(
        self,
        rules: Sequence[Rule],
        default: str = "allow",
        name: str = "<policy>",
        sha256: str | None = None,
        pins: PinSettings | None = None,
    ) -> None:
        self.rules = tuple(rules)
        # Tool pinning (`blackbox.recorder.gate.pinning`): the settings, and in a tap the session's
        # state.
        self.pins = pins
        self.pinner: Pinner | None = None
        self.default = default
        self.name = name
        self.sha256 = sha256
        methods = {TOOLS_CALL}
        for rule in self.rules:
            methods.update(rule.methods)
        self.methods = frozenset(methods)
        self._needles = tuple(b'"' + m.encode() + b'"' for m in sorted(self.methods))
        self._single = self._needles[0] if len(self._needles) == 1 else None
        self._targets: dict[tuple[str | None, str, str | None], tuple[Rule, ...]] = {}

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path) -> Policy:
        """Read and validate a policy file; any problem raises `PolicyError` with FILE:LINE:COL."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise PolicyError(f"{path}: cannot read the policy file: {exc.strerror}") from None
        return cls.from_bytes(data, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "<policy>") -> Policy:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            raise PolicyError(f"{name}:{line}:{col}: the file is not UTF-8") from None
        return cls.from_text(text, name, hashlib.sha256(data).hexdigest())

    @classmethod
    def from_text(cls, text: str, name: str = "<policy>", sha256: str | None = None) -> Policy:
        if sha256 is None:
            sha256 = hashlib.sha256(text.encode()).hexdigest()
        rules, default = parse_policy(text, name)
        return cls(rules, default, name, sha256, pin_settings(text, rules, name))

    # -- deciding --------------------------------------------------------------------------

    def evaluate(self, server: str | None, method: str, tool: str | None, args: object) -> Outcome:
        """The first matching rule's decision, else the default."""
        # A client calls few distinct (server, method, tool) targets: remember which rules can
        # apply to each, so the hot path only tests argument conditions.
        key = (server, method, tool)
        rules = self._targets.get(key)
        if rules is None:
            rules = tuple(r for r in self.rules if r.targets(server, method, tool))
            if len(self._targets) < _TARGET_CACHE:
                self._targets[key] = rules
        for rule in rules:
            if all(cond.holds(args) for cond in rule.when):
                reason = rule.reason or f"{method} {tool or ''} matched rule {rule.id}".strip()
                return Outcome(rule.decision, rule.id, "rule", reason)
        return Outcome(
            self.default,
            DEFAULT_RULE,
            "default",
            f"no rule matched; the policy's default is {self.default}",
        )

    def check(self, server: str | None, raw: bytes) -> GateVerdict | None:
        """Gate one client-to-server frame. None when the frame holds no gated request (the
        common case, decided by a byte search); else the verdict, with one decision document
        per gated request. Call it for client-to-server frames only."""
        if self._single is not None:
            if self._single not in raw and b"\\" not in raw:
                return None
        elif b"\\" not in raw and not any(n in raw for n in self._needles):
            return None
        try:
            value, ambiguous = _parse(raw)
        except (ValueError, UnicodeDecodeError):
            if any(n in raw for n in self._needles):
                return self._refuse_unparseable(server)
            return None
        if not ambiguous and isinstance(value, dict):  # the common case, without _requests()
            method = value.get("method")
            if not isinstance(method, str) or method not in self.methods:
                return None
            return self._check_one(server, _Request(None, value, method, None))
        requests = self._requests(value, ambiguous)
        if not requests:
            return None
        if isinstance(value, list):
            return self._check_batch(server, value, requests)
        return self._check_one(server, requests[0])

    def _requests(self, value: object, ambiguous: bool) -> list[_Request]:
        """The gated requests of a parsed frame (one, or a batch's), in order. In an ambiguous
        frame a request is gated when ANY of its `method` values is, and carries the path of
        its first duplicated key (None when that request itself has none)."""
        batch = isinstance(value, list)
        items = value if isinstance(value, list) else [value]
        found = []
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            duplicate = _first_duplicate(item) if ambiguous else None
            methods = item.dups.get("method", ()) if isinstance(item, _Dups) else ()
            method = next(
                (
                    m
                    for m in (*methods, item.get("method"))
                    if isinstance(m, str) and m in self.methods
                ),
                None,
            )
            if method is not None:
                found.append(_Request(index if batch else None, item, method, duplicate))
        return found

    def _decide(
        self, server: str | None, request: _Request
    ) -> tuple[Outcome, str | None, object, str, str | None]:
        """(outcome, tool, arguments, final decision, reason) for one request."""
        method = request.method
        params = request.message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == TOOLS_CALL:
            tool = params.get("name") if isinstance(params.get("name"), str) else None
            args = params.get("arguments")
        else:
            tool, args = None, params
        if request.duplicate is not None:
            *where, key = request.duplicate
            ambiguity = f"ambiguous JSON: duplicate key {json.dumps(key, ensure_ascii=False)}"
            if where:
                ambiguity += f" in {_path_text(where)}"
            ambiguity += " (JSON parsers disagree on which one counts)"
            outcome = Outcome("deny", AMBIGUOUS_RULE, "rule", ambiguity)
            return outcome, tool, args, "deny", ambiguity
        pinned = self.pinner.check(server, tool) if self.pinner is not None else None
        if pinned is not None and method == TOOLS_CALL:
            return Outcome("deny", pinned[0], "pin", pinned[1]), tool, args, "deny", pinned[1]
        outcome = self.evaluate(server, method, tool, args)
        final = "allow" if outcome.decision == "allow" else "deny"
        reason = outcome.reason
        if outcome.decision == "ask":
            reason = f"{reason} (the rule asks for approval and a tap has no one to ask)"
        return outcome, tool, args, final, reason

    def _doc(
        self,
        server: str | None,
        request: _Request,
        outcome: Outcome,
        tool: str | None,
        args: object,
        final: str,
        reason: str | None,
    ) -> bytes:
        message = request.message
        rpc_id = id_fields(message["id"])[0] if "id" in message else None
        extra: dict = {"policy_sha256": self.sha256}
        if request.batch_index is not None:
            extra["batch_index"] = request.batch_index
        return events.encode(
            events.Decision(
                decision=outcome.decision,
                final=final,
                source="policy",
                decided_by=outcome.decided_by,
                rule=outcome.rule,
                server=server,
                tool=tool,
                method=request.method,
                args_fingerprint=args_fingerprint(args),
                rpc_id=rpc_id,
                reason=reason,
                extra=extra,
            )
        )

    def _check_one(self, server: str | None, request: _Request) -> GateVerdict:
        outcome, tool, args, final, reason = self._decide(server, request)
        doc = self._doc(server, request, outcome, tool, args, final, reason)
        if final == "allow":
            return GateVerdict(True, (doc,), None)
        reply = None
        if "id" in request.message:
            reply = _error_reply(request.message["id"], outcome.rule, reason, outcome.decision)
        return GateVerdict(False, (doc,), reply)

    def _check_batch(
        self, server: str | None, items: list, requests: list[_Request]
    ) -> GateVerdict | None:
        decided = [(req, *self._decide(server, req)) for req in requests]
        denied = [d for d in decided if d[4] == "deny"]
        if not denied:
            docs = tuple(self._doc(server, *d) for d in decided)
            return GateVerdict(True, docs, None)
        # One denied request denies the whole batch: forwarding part of a batch would change its
        # meaning, and answering some requests from the tap and some from the server would need
        # the tap to merge replies. Every request in the batch gets an error naming the rule.
        first_rule = denied[0][1].rule
        denied_docs = []
        for req, o, tool, args, final, reason in decided:
            if final == "allow":
                reason = f"batch denied: another request in it was denied by rule {first_rule}"
            denied_docs.append(self._doc(server, req, o, tool, args, "deny", reason))
        by_index = {req.batch_index: (o, reason) for req, o, _t, _a, _f, reason in denied}
        replies = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or "id" not in item or "method" not in item:
                continue
            if i in by_index:
                o, reason = by_index[i]
                replies.append(_error_obj(item["id"], o.rule, reason, o.decision))
            else:
                replies.append(
                    _error_obj(
                        item["id"],
                        first_rule,
                        "the batch holds a request this policy denies",
                        "deny",
                    )
                )
        reply = _dumps(replies) if replies else None
        return GateVerdict(False, tuple(denied_docs), reply)

    def _refuse_unparseable(self, server: str | None) -> GateVerdict:
        reason = "the frame mentions a gated method but is not valid JSON"
        doc = events.encode(
            events.Decision(
                decision="deny",
                final="deny",
                source="policy",
                decided_by="rule",
                rule=UNPARSEABLE_RULE,
                server=server,
                tool=None,
                reason=reason,
                extra={"policy_sha256": self.sha256},
            )
        )
        reply = _dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": PARSE_ERROR_CODE,
                    "message": f"denied by policy: {reason}",
                    "data": {"rule": UNPARSEABLE_RULE, "decision": "deny"},
                },
            }
        )
        return GateVerdict(False, (doc,), reply)


def _error_obj(rpc_id: object, rule: str, reason: str | None, decision: str) -> dict:
    message = f"denied by policy rule {rule}"
    if reason:
        message += f": {reason}"
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "error": {
            "code": DENIED_CODE,
            "message": message,
            "data": {"rule": rule, "decision": "deny", "policy_decision": decision},
        },
    }


def _error_reply(rpc_id: object, rule: str, reason: str | None, decision: str) -> bytes:
    return _dumps(_error_obj(rpc_id, rule, reason, decision))


def _dumps(value: object) -> bytes:
    return encode_json(value)


# -- what a policy would have decided over a recorded session ------------------------------------


def evaluate_session(
    policy: Policy, store: EventStore, session_id: str, server: str | None = None
) -> list[dict]:
    """One row per gated request of a recorded session (client to server, batches included):
    what `policy` decides for it now, beside the gate's decision recorded at the time, if any
    (the decision record after the request with the same `rpc_id`). `server` defaults to the
    session's name, which is the name a tap matches rules on."""
    if server is None:
        server = store.session(session_id).name
    rows: list[dict] = []
    pending: dict[str | None, dict] = {}
    for ev in store.read_session(session_id):
        if ev.kind == Kind.DECISION:
            doc = events.decode_as(events.Decision, ev.raw)
            if doc is not None and doc.source == "policy":
                row = pending.pop(doc.rpc_id, None)
                if row is not None:
                    row["recorded"] = f"{doc.final or doc.decision} ({doc.rule})"
            continue
        if ev.kind != Kind.FRAME or ev.direction != Direction.CLIENT_TO_SERVER:
            continue
        try:
            value, ambiguous = _parse(ev.raw)
        except (ValueError, UnicodeDecodeError):
            continue
        for request in policy._requests(value, ambiguous):
            outcome, tool, args, _final, _reason = policy._decide(server, request)
            message = request.message
            rpc_id = id_fields(message["id"])[0] if "id" in message else None
            row = {
                "seq": ev.seq,
                "id": rpc_id,
                "server": server,
                "method": request.method,
                "tool": tool,
                "decision": outcome.decision,
                "rule": outcome.rule,
                "reason": outcome.reason,
                "args_fingerprint": args_fingerprint(args),
                "recorded": None,
            }
            rows.append(row)
            pending[rpc_id] = row
    return rows
