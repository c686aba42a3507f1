"""The rules of a policy and the file they are written in: reading a TOML policy file, validating
it with an error that points at the line to edit, and the `Rule` and `Condition` objects that say
which requests a rule matches. `blackbox.recorder.gate.policy` builds the gate on top of these; this
module knows nothing of frames, replies or decision records.

File format (see docs/permissions.md)::

    default = "allow"            # allow | deny | ask; "allow" when absent

    [[rule]]
    id = "no-etc-writes"
    decision = "deny"            # allow | deny | ask (a tap cannot ask: ask is denied there)
    server = "fs*"               # glob, or a list of globs; absent = any server
    tool = "write_*"             # glob, or a list of globs; absent = any tool
    method = "tools/call"        # exact method, or a list; default "tools/call"
    reason = "nothing writes under /etc"
    when = [{ arg = "path", matches = "^/etc/", normalize = "path" }]   # all must hold
    pin = true                   # hold the tools it targets to their approved definitions

    [pin]                        # pinning for whole servers (see blackbox.recorder.gate.pinning)
    servers = ["weather"]
    trust_on_first_use = true

Conditions: `arg` is a path into the call's arguments (`path`, `$.options.mode`, `files[0]`,
`["key.with.dots"]`), with exactly one of `equals = VALUE` (JSON equality: `true` is not `1`),
`matches = "REGEX"` (Python `re.search` on a string value; anchor with ^ and $) or
`present = true|false`. `normalize = "path"` makes `equals` and `matches` see the value as a
lexically normalised path (`//`, `.` and `..` resolved), so `/tmp/../etc/passwd` matches `^/etc/`.
The first rule that matches decides; else the default does.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from fnmatch import fnmatchcase

from blackbox.recorder import BlackboxError

DEFAULT_RULE = "default"
# The rule id of the gate's own refusals: a frame that is not JSON, and a request whose JSON
# has a key twice (its meaning depends on the server's parser).
UNPARSEABLE_RULE = "unparseable"
AMBIGUOUS_RULE = "ambiguous"
PIN_RULE = "pin"  # a pinned tool's definition differs from its approved one
TOOLS_CALL = "tools/call"

_DECISIONS = ("allow", "deny", "ask")
_RULE_KEYS = {"id", "decision", "server", "tool", "method", "reason", "when", "pin"}
_TOP_KEYS = {"default", "rule", "version", "pin"}
_COND_OPS = ("equals", "matches", "present")
_NORMALIZERS = ("path",)


class PolicyError(BlackboxError):
    """A policy file that cannot be used; the message is `FILE:LINE:COL: what is wrong`."""


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


def normalize_path(text: str) -> str:
    """A path as the file system would resolve it lexically: empty and `.` segments dropped,
    `..` removing the segment before it (never above the root), so `/tmp/../etc//passwd` is
    `/etc/passwd`. A path that names a directory (ends in `/`, `/.` or `/..`) keeps a trailing
    slash, so `/etc/x/..` is `/etc/` and still matches `^/etc/`. Not `posixpath.normpath`, which
    keeps a leading `//` (POSIX leaves its meaning to the system). Symbolic links are not
    followed: the gate sees strings, not the server's file system."""
    if not text:
        return text
    absolute = text.startswith("/")
    parts: list[str] = []
    for segment in text.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not absolute:
                parts.append("..")
            continue
        parts.append(segment)
    out = ("/" if absolute else "") + "/".join(parts)
    if not out:
        return "."
    if not out.endswith("/") and text.rsplit("/", 1)[-1] in ("", ".", ".."):
        out += "/"
    return out


_NORMALIZE = {"path": normalize_path}


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
    """One test on the arguments: `op` is equals, matches or present; `normalize` names how a
    string value is normalised before equals or matches sees it (None: as sent)."""

    arg: str
    path: tuple[str | int, ...]
    op: str
    value: object
    regex: re.Pattern[str] | None = None
    normalize: str | None = None

    def holds(self, args: object) -> bool:
        found = _lookup(args, self.path)
        if self.op == "present":
            return (found is not _MISSING) is self.value
        if found is _MISSING:
            return False
        if self.normalize is not None and isinstance(found, str):
            found = _NORMALIZE[self.normalize](found)
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
    pin: bool = False

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


def parse_policy(text: str, name: str = "<policy>") -> tuple[list[Rule], str]:
    """The rules and the default decision of a policy file's text; any problem raises
    `PolicyError` with `NAME:LINE:COL`."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_POS.match(str(exc))
        if m:
            raise PolicyError(f"{name}:{m['line']}:{m['col']}: invalid TOML: {m['msg']}") from None
        last = max(1, len(text.splitlines()))
        raise PolicyError(f"{name}:{last}:1: invalid TOML: {exc}") from None
    return _Builder(doc, _Locator(text), name).build()


# -- validation -----------------------------------------------------------------------------------


class _Builder:
    """Turns the parsed TOML into rules, with a located error for every semantic problem."""

    def __init__(self, doc: dict, locator: _Locator, name: str) -> None:
        self.doc = doc
        self.loc = locator
        self.name = name

    def fail(self, where: tuple[int, int], message: str) -> PolicyError:
        return PolicyError(f"{self.name}:{where[0]}:{where[1]}: {message}")

    def build(self) -> tuple[list[Rule], str]:
        for key in self.doc:
            if key not in _TOP_KEYS:
                raise self.fail(
                    self.loc.top(key),
                    f"unknown key {key!r} (expected: default, version, [[rule]], [pin])",
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
        return rules, default

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
        if rule_id in (DEFAULT_RULE, UNPARSEABLE_RULE, AMBIGUOUS_RULE, PIN_RULE):
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
        pin = raw.get("pin", False)
        if not isinstance(pin, bool):
            raise self.fail(self.loc.rule(index, "pin"), "pin must be true or false")
        return Rule(
            id=rule_id,
            decision=decision,
            servers=self.globs(index, raw, "server"),
            tools=tools,
            methods=methods,
            when=when,
            reason=reason,
            line=self.loc.rule(index)[0],
            pin=pin,
        )

    def condition(self, index: int, ci: int, raw: object) -> Condition:
        if not isinstance(raw, dict):
            raise self.fail(self.loc.condition(index, ci), "a condition must be a table")
        for key in raw:
            if key not in ("arg", "normalize") and key not in _COND_OPS:
                raise self.fail(
                    self.loc.condition(index, ci, key),
                    f"unknown key {key!r} in a condition (expected: arg, one of "
                    "equals, matches, present, and optionally normalize)",
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
        normalize = raw.get("normalize")
        if normalize is not None:
            if normalize not in _NORMALIZERS:
                raise self.fail(
                    self.loc.condition(index, ci, "normalize"),
                    f'normalize must be "path", not {normalize!r}',
                )
            if op == "present":
                raise self.fail(
                    self.loc.condition(index, ci, "normalize"),
                    "normalize applies to equals and matches, not present",
                )
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
            return Condition(arg, path, op, value, regex, normalize)
        return Condition(arg, path, op, _plain(value), None, normalize)


def _plain(value: object) -> object:
    """TOML dates and times have no JSON form: compare them as their TOML text."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
