"""The policy gate: a TOML file of ordered allow/deny rules that the taps consult for every
`tools/call` request before forwarding it, and that `blackbox hook claude-code --mode enforce`
and `blackbox policy test` evaluate too.

MCP itself does not decide who may call what; the host does. A policy in the tap is a second,
host-independent line: a denied request never reaches the server, the client gets a JSON-RPC
error naming the rule, and every gated request leaves exactly one `decision` record in the log.

The gate sits on the hot path of every client-to-server frame, so `Policy.check` first does a
byte search and only parses frames that can be gated. The search is conservative: a frame that
contains a backslash is parsed too, because JSON may spell `tools/call` with escapes
(`"tools\\/call"`) that a plain byte search would miss.

File format (see docs/permissions.md)::

    default = "allow"            # allow | deny | ask; "allow" when absent

    [[rule]]
    id = "no-etc-writes"
    decision = "deny"            # allow | deny | ask (a tap cannot ask: ask is denied there)
    server = "fs*"               # glob, or a list of globs; absent = any server
    tool = "write_*"             # glob, or a list of globs; absent = any tool
    method = "tools/call"        # exact method, or a list; default "tools/call"
    reason = "nothing writes under /etc"
    when = [{ arg = "path", matches = "^/etc/" }]   # all must hold; also [[rule.when]] tables

Conditions: `arg` is a path into the call's arguments (`path`, `$.options.mode`, `files[0]`,
`["key.with.dots"]`), with exactly one of `equals = VALUE` (JSON equality: `true` is not `1`),
`matches = "REGEX"` (Python `re.search` on a string value; anchor with ^ and $) or
`present = true|false`. The first rule that matches decides; else the default does.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from recorder import events
from recorder.decisions import args_fingerprint, decision_doc
from recorder.errors import BlackboxError
from recorder.jsonrpc import id_fields
from recorder.model import Direction, Kind
from recorder.store import EventStore

# JSON-RPC reserves -32000..-32099 for implementation-defined server errors; the SDKs use -32002
# (resource not found) and around; -32001 is free in MCP and the spec's examples.
DENIED_CODE = -32001
# An unparseable frame that mentions a gated method is refused with JSON-RPC "Parse error".
PARSE_ERROR_CODE = -32700
DEFAULT_RULE = "default"
TOOLS_CALL = "tools/call"

_DECISIONS = ("allow", "deny", "ask")
_RULE_KEYS = {"id", "decision", "server", "tool", "method", "reason", "when"}
_TOP_KEYS = {"default", "rule", "version"}
_COND_OPS = ("equals", "matches", "present")
_TARGET_CACHE = 4096


class PolicyError(BlackboxError):
    """A policy file that cannot be used; the message is `FILE:LINE:COL: what is wrong`."""


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


# -- argument paths and conditions ---------------------------------------------------------------

_MISSING = object()
_PATH_TOKEN = re.compile(
    r"""\.?(?P<name>[^.\[\]"']+)|\[(?P<index>-?\d+)\]|\[(?P<q>["'])(?P<key>.*?)(?P=q)\]"""
)


def parse_arg_path(text: str) -> tuple[str | int, ...]:
    """`a.b[0]["c.d"]` (optionally prefixed by `$`) as a tuple of keys and indexes."""
    rest = text.strip()
    if rest.startswith("$"):
        rest = rest[1:]
    parts: list[str | int] = []
    pos = 0
    while pos < len(rest):
        m = _PATH_TOKEN.match(rest, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"bad argument path {text!r} at character {pos + 1}")
        if m.group("name") is not None:
            parts.append(m.group("name"))
        elif m.group("index") is not None:
            parts.append(int(m.group("index")))
        else:
            parts.append(m.group("key"))
        pos = m.end()
    return tuple(parts)


def _lookup(value: object, path: tuple[str | int, ...]) -> object:
    for part in path:
        if isinstance(part, int):
            if not isinstance(value, list) or not -len(value) <= part < len(value):
                return _MISSING
            value = value[part]
        else:
            if not isinstance(value, dict) or part not in value:
                return _MISSING
            value = value[part]
    return value


def json_equal(a: object, b: object) -> bool:
    """Equality of JSON values: unlike Python, `true` is not `1` and `1` is `1.0`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class Condition:
    """One test on the arguments: `op` is equals, matches or present."""

    arg: str
    path: tuple[str | int, ...]
    op: str
    value: object
    regex: re.Pattern[str] | None = None

    def holds(self, args: object) -> bool:
        found = _lookup(args, self.path)
        if self.op == "present":
            return (found is not _MISSING) is self.value
        if found is _MISSING:
            return False
        if self.op == "equals":
            return json_equal(found, self.value)
        assert self.regex is not None
        return isinstance(found, str) and self.regex.search(found) is not None


@dataclass(frozen=True)
class Rule:
    """One `[[rule]]`: all of its matchers must hold. None means "any"."""

    id: str
    decision: str
    servers: tuple[str, ...] | None
    tools: tuple[str, ...] | None
    methods: tuple[str, ...]
    when: tuple[Condition, ...]
    reason: str | None
    line: int

    def matches(self, server: str | None, method: str, tool: str | None, args: object) -> bool:
        return self.targets(server, method, tool) and all(c.holds(args) for c in self.when)

    def targets(self, server: str | None, method: str, tool: str | None) -> bool:
        """Whether the rule's server, method and tool matchers accept this request."""
        if method not in self.methods:
            return False
        if self.servers is not None and (
            server is None or not any(fnmatchcase(server, g) for g in self.servers)
        ):
            return False
        return self.tools is None or (
            tool is not None and any(fnmatchcase(tool, g) for g in self.tools)
        )


# -- locating problems in the source -----------------------------------------------------------

_RULE_HEADER = re.compile(r"^\s*\[\[\s*rule\s*\]\]")
_WHEN_HEADER = re.compile(r"^\s*\[\[\s*rule\s*\.\s*when\s*\]\]")
_ANY_HEADER = re.compile(r"^\s*\[")
_TOML_POS = re.compile(r"^(?P<msg>.*) \(at line (?P<line>\d+), column (?P<col>\d+)\)$", re.S)


class _Locator:
    """Finds the line of a rule, a key or a condition in the policy source, so semantic errors
    point where the user must edit. Falls back to the nearest thing it can find."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.rule_starts = [i for i, ln in enumerate(self.lines) if _RULE_HEADER.match(ln)]

    def _key_in(self, start: int, end: int, key: str) -> tuple[int, int] | None:
        pattern = re.compile(r"^(\s*)(?:\"" + re.escape(key) + r"\"|" + re.escape(key) + r")\s*=")
        for i in range(start, min(end, len(self.lines))):
            m = pattern.match(self.lines[i])
            if m:
                return i + 1, len(m.group(1)) + 1
        return None

    def _rule_span(self, index: int) -> tuple[int, int] | None:
        if index >= len(self.rule_starts):
            return None
        start = self.rule_starts[index]
        end = self.rule_starts[index + 1] if index + 1 < len(self.rule_starts) else len(self.lines)
        return start, end

    def top(self, key: str) -> tuple[int, int]:
        end = next((i for i, ln in enumerate(self.lines) if _ANY_HEADER.match(ln)), len(self.lines))
        return self._key_in(0, end, key) or (1, 1)

    def rule(self, index: int, key: str | None = None) -> tuple[int, int]:
        span = self._rule_span(index)
        if span is None:  # rules written as an inline array: point at `rule =`
            return self.top("rule")
        start, end = span
        if key is not None:
            # the rule's own keys come before its first [[rule.when]] sub-table
            own_end = next(
                (i for i in range(start + 1, end) if _ANY_HEADER.match(self.lines[i])), end
            )
            found = self._key_in(start + 1, own_end, key)
            if found:
                return found
        col = len(self.lines[start]) - len(self.lines[start].lstrip()) + 1
        return start + 1, col

    def condition(self, index: int, cond: int, key: str | None = None) -> tuple[int, int]:
        span = self._rule_span(index)
        if span is None:
            return self.top("rule")
        start, end = span
        headers = [i for i in range(start, end) if _WHEN_HEADER.match(self.lines[i])]
        if cond < len(headers):
            c_start = headers[cond]
            c_end = headers[cond + 1] if cond + 1 < len(headers) else end
            if key is not None:
                found = self._key_in(c_start + 1, c_end, key)
                if found:
                    return found
            return c_start + 1, 1
        return self.rule(index, "when")


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
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            m = _TOML_POS.match(str(exc))
            if m:
                raise PolicyError(
                    f"{name}:{m['line']}:{m['col']}: invalid TOML: {m['msg']}"
                ) from None
            last = max(1, len(text.splitlines()))
            raise PolicyError(f"{name}:{last}:1: invalid TOML: {exc}") from None
        return _Builder(doc, _Locator(text), name).build(sha256)

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
        return decision_doc(
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
        doc = decision_doc(
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


# -- validation -----------------------------------------------------------------------------------


class _Builder:
    """Turns the parsed TOML into rules, with a located error for every semantic problem."""

    def __init__(self, doc: dict, locator: _Locator, name: str) -> None:
        self.doc = doc
        self.loc = locator
        self.name = name

    def fail(self, where: tuple[int, int], message: str) -> PolicyError:
        return PolicyError(f"{self.name}:{where[0]}:{where[1]}: {message}")

    def build(self, sha256: str) -> Policy:
        for key in self.doc:
            if key not in _TOP_KEYS:
                raise self.fail(
                    self.loc.top(key),
                    f"unknown key {key!r} (expected: default, version, [[rule]])",
                )
        version = self.doc.get("version", 1)
        if version != 1:
            raise self.fail(self.loc.top("version"), f"unsupported version {version!r} (use 1)")
        default = self.doc.get("default", "allow")
        if default not in _DECISIONS:
            raise self.fail(
                self.loc.top("default"), f"default must be allow, deny or ask, not {default!r}"
            )
        raw_rules = self.doc.get("rule", [])
        if not isinstance(raw_rules, list):
            raise self.fail(self.loc.top("rule"), "rules are written as [[rule]] tables")
        rules: list[Rule] = []
        seen: dict[str, int] = {}
        for index, raw in enumerate(raw_rules):
            rule = self.rule(index, raw)
            if rule.id in seen:
                raise self.fail(
                    self.loc.rule(index, "id"),
                    f"duplicate rule id {rule.id!r} (first used on line {seen[rule.id]})",
                )
            seen[rule.id] = rule.line
            rules.append(rule)
        return Policy(rules, default, self.name, sha256)

    def globs(self, index: int, raw: dict, key: str) -> tuple[str, ...] | None:
        if key not in raw:
            return None
        value = raw[key]
        values = [value] if isinstance(value, str) else value
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) and v for v in values)
        ):
            raise self.fail(
                self.loc.rule(index, key), f"{key} must be a non-empty string or list of strings"
            )
        return tuple(values)

    def rule(self, index: int, raw: object) -> Rule:
        if not isinstance(raw, dict):
            raise self.fail(self.loc.rule(index), "a rule must be a table")
        for key in raw:
            if key not in _RULE_KEYS:
                raise self.fail(
                    self.loc.rule(index, key),
                    f"unknown key {key!r} in rule {index + 1} (expected: "
                    + ", ".join(sorted(_RULE_KEYS))
                    + ")",
                )
        rule_id = raw.get("id")
        if not isinstance(rule_id, str) or not rule_id.strip():
            raise self.fail(self.loc.rule(index, "id"), f"rule {index + 1} needs an id (a string)")
        if rule_id in (DEFAULT_RULE, "unparseable"):
            raise self.fail(self.loc.rule(index, "id"), f"rule id {rule_id!r} is reserved")
        decision = raw.get("decision")
        if decision not in _DECISIONS:
            raise self.fail(
                self.loc.rule(index, "decision"),
                f"rule {rule_id!r}: decision must be allow, deny or ask, not {decision!r}",
            )
        reason = raw.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise self.fail(self.loc.rule(index, "reason"), "reason must be a string")
        methods = self.globs(index, raw, "method") or (TOOLS_CALL,)
        for method in methods:
            if any(ch in method for ch in "*?["):
                raise self.fail(
                    self.loc.rule(index, "method"),
                    f"method {method!r}: methods are exact names, not globs",
                )
        tools = self.globs(index, raw, "tool")
        if tools is not None and TOOLS_CALL not in methods:
            raise self.fail(
                self.loc.rule(index, "tool"), "tool only applies to tools/call requests"
            )
        conditions = raw.get("when", [])
        if isinstance(conditions, dict):
            conditions = [conditions]
        if not isinstance(conditions, list):
            raise self.fail(self.loc.rule(index, "when"), "when must be a list of conditions")
        when = tuple(self.condition(index, i, c) for i, c in enumerate(conditions))
        return Rule(
            id=rule_id,
            decision=decision,
            servers=self.globs(index, raw, "server"),
            tools=tools,
            methods=methods,
            when=when,
            reason=reason,
            line=self.loc.rule(index)[0],
        )

    def condition(self, index: int, ci: int, raw: object) -> Condition:
        if not isinstance(raw, dict):
            raise self.fail(self.loc.condition(index, ci), "a condition must be a table")
        for key in raw:
            if key != "arg" and key not in _COND_OPS:
                raise self.fail(
                    self.loc.condition(index, ci, key),
                    f"unknown key {key!r} in a condition (expected: arg and one of "
                    "equals, matches, present)",
                )
        arg = raw.get("arg")
        if not isinstance(arg, str):
            raise self.fail(
                self.loc.condition(index, ci, "arg"),
                'a condition needs arg = "PATH" (a path into the call\'s arguments)',
            )
        try:
            path = parse_arg_path(arg)
        except ValueError as exc:
            raise self.fail(self.loc.condition(index, ci, "arg"), str(exc)) from None
        ops = [op for op in _COND_OPS if op in raw]
        if len(ops) != 1:
            raise self.fail(
                self.loc.condition(index, ci),
                "a condition needs exactly one of equals, matches, present",
            )
        op = ops[0]
        value = raw[op]
        if op == "present":
            if not isinstance(value, bool):
                raise self.fail(self.loc.condition(index, ci, op), "present must be true or false")
            return Condition(arg, path, op, value)
        if op == "matches":
            if not isinstance(value, str):
                raise self.fail(self.loc.condition(index, ci, op), "matches must be a string")
            try:
                regex = re.compile(value)
            except re.error as exc:
                raise self.fail(
                    self.loc.condition(index, ci, op), f"bad regular expression {value!r}: {exc}"
                ) from None
            return Condition(arg, path, op, value, regex)
        return Condition(arg, path, op, _plain(value))


def _plain(value: object) -> object:
    """TOML dates and times have no JSON form: compare them as their TOML text."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


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
