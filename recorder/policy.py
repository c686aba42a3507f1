"""The policy gate: ordered allow/deny rules, read from a TOML file by `recorder.policy_rules`,
that the taps consult for every `tools/call` request before forwarding it, and that
`blackbox hook claude-code --mode enforce` and `blackbox policy test` evaluate too.

MCP itself does not decide who may call what; the host does. A policy in the tap is a second,
host-independent line: a denied request never reaches the server, the client gets a JSON-RPC
error naming the rule, and every gated request leaves exactly one `decision` record in the log.

The gate sits on the hot path of every client-to-server frame, so `Policy.check` first does a
byte search and only parses frames that can be gated. The search is conservative: a frame that
contains a backslash is parsed too, because JSON may spell `tools/call` with escapes
(`"tools\\/call"`) that a plain byte search would miss.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from recorder import events
from recorder.decisions import args_fingerprint
from recorder.jsonrpc import id_fields
from recorder.model import Direction, Kind
from recorder.policy_rules import DEFAULT_RULE, TOOLS_CALL, PolicyError, Rule, parse_policy
from recorder.store import EventStore

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


# -- the policy ---------------------------------------------------------------------------------


class Policy:
    """A parsed policy file. Immutable after loading; safe to share between threads."""

    def __init__(
        self,
        rules: Sequence[Rule],
        default: str = "allow",
        name: str = "<policy>",
        sha256: str | None = None,
    ) -> None:
        self.rules = tuple(rules)
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
        return cls(rules, default, name, sha256)

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
            value = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            if any(n in raw for n in self._needles):
                return self._refuse_unparseable(server)
            return None
        if isinstance(value, dict):
            if value.get("method") not in self.methods:
                return None
            return self._check_one(server, value)
        if isinstance(value, list):
            return self._check_batch(server, value)
        return None

    def _decide(self, server: str | None, message: dict, final_override: str | None = None):  # type: ignore[no-untyped-def]
        method = message["method"]
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == TOOLS_CALL:
            tool = params.get("name") if isinstance(params.get("name"), str) else None
            args = params.get("arguments")
        else:
            tool, args = None, params
        outcome = self.evaluate(server, method, tool, args)
        final = "allow" if outcome.decision == "allow" else "deny"
        reason = outcome.reason
        if outcome.decision == "ask":
            reason = f"{reason} (the rule asks for approval and a tap has no one to ask)"
        return outcome, tool, args, final, reason

    def _doc(
        self,
        server: str | None,
        message: dict,
        outcome: Outcome,
        tool: str | None,
        args: object,
        final: str,
        reason: str | None,
        extra: dict | None = None,
    ) -> bytes:
        rpc_id = id_fields(message["id"])[0] if "id" in message else None
        return events.encode(
            events.Decision(
                decision=outcome.decision,
                final=final,
                source="policy",
                decided_by=outcome.decided_by,
                rule=outcome.rule,
                server=server,
                tool=tool,
                method=message["method"],
                args_fingerprint=args_fingerprint(args),
                rpc_id=rpc_id,
                reason=reason,
                extra={"policy_sha256": self.sha256, **(extra or {})},
            )
        )

    def _check_one(self, server: str | None, message: dict) -> GateVerdict:
        outcome, tool, args, final, reason = self._decide(server, message)
        doc = self._doc(server, message, outcome, tool, args, final, reason)
        if final == "allow":
            return GateVerdict(True, (doc,), None)
        reply = None
        if "id" in message:
            reply = _error_reply(message["id"], outcome.rule, reason, outcome.decision)
        return GateVerdict(False, (doc,), reply)

    def _check_batch(self, server: str | None, items: list) -> GateVerdict | None:
        gated = [
            (i, item)
            for i, item in enumerate(items)
            if isinstance(item, dict) and item.get("method") in self.methods
        ]
        if not gated:
            return None
        decided = [(i, item, *self._decide(server, item)) for i, item in gated]
        denied = [d for d in decided if d[5] == "deny"]
        if not denied:
            docs = tuple(
                self._doc(server, item, o, tool, args, final, reason, {"batch_index": i})
                for i, item, o, tool, args, final, reason in decided
            )
            return GateVerdict(True, docs, None)
        # One denied request denies the whole batch: forwarding part of a batch would change its
        # meaning, and answering some requests from the tap and some from the server would need
        # the tap to merge replies. Every request in the batch gets an error naming the rule.
        first_rule = denied[0][2].rule
        docs = []
        for i, item, o, tool, args, final, reason in decided:
            if final == "allow":
                reason = f"batch denied: another request in it was denied by rule {first_rule}"
            docs.append(self._doc(server, item, o, tool, args, "deny", reason, {"batch_index": i}))
        by_index = {i: (o, reason) for i, _item, o, _t, _a, final, reason in denied}
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
        return GateVerdict(False, tuple(docs), reply)

    def _refuse_unparseable(self, server: str | None) -> GateVerdict:
        reason = "the frame mentions a gated method but is not valid JSON"
        doc = events.encode(
            events.Decision(
                decision="deny",
                final="deny",
                source="policy",
                decided_by="rule",
                rule="unparseable",
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
                    "data": {"rule": "unparseable", "decision": "deny"},
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
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


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
            value = json.loads(ev.raw)
        except (ValueError, UnicodeDecodeError):
            continue
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict) or item.get("method") not in policy.methods:
                continue
            params = item.get("params") if isinstance(item.get("params"), dict) else {}
            method = item["method"]
            if method == TOOLS_CALL:
                tool = params.get("name") if isinstance(params.get("name"), str) else None
                args = params.get("arguments")
            else:
                tool, args = None, params
            outcome = policy.evaluate(server, method, tool, args)
            rpc_id = id_fields(item["id"])[0] if "id" in item else None
            row = {
                "seq": ev.seq,
                "id": rpc_id,
                "server": server,
                "method": method,
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
