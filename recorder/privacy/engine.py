"""The regular-expression engine redaction runs on: RE2, whose time is linear in the text.

Redaction runs on the tap's path (`blackbox record --redact`: a frame waits for it before it is
journaled and forwarded) and on every export, over text a hostile server wrote. A backtracking
engine (Python's `re`) can take quadratic or exponential time on a crafted near-miss (the
built-in `password_phrase` rule took 120 s on 80 KB), and cannot be interrupted, so every
pattern that looks for a secret, built-in or from a rules file, is compiled by RE2
(google-re2), which runs it as an automaton, in time linear in the text whatever the pattern.
Python's `re` is left only what cannot backtrack: a single character class repeated with nothing
after it (`Run`), and fixed shapes matched against at most 64 bytes.

RE2 has no back-references, lookaround, atomic groups or possessive repeats (they are what makes
a match super-linear). A rules file's pattern that uses one is refused when the file is loaded,
with one line naming the rule and the construct, instead of being run slowly or approximated.
Python spellings RE2 writes differently are translated (`\\Z`, `\\uXXXX`, `{,n}`); the rest is
RE2's syntax, which for common patterns is Python's (but `\\d`, `\\w`, `\\s`, `\\b` are ASCII).

Texts are matched as UTF-8 bytes: a frame is bytes already, and RE2's own str interface encodes
the whole text again on every call.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import re2
from blackbox.recorder import BlackboxError


class RedactionRulesError(BlackboxError):
    """A rules file that cannot be read or makes no sense."""


class OutOfBudget(Exception):
    """Redaction of one frame went past its time budget; `rule` is the one running then."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


def check_deadline(deadline: float | None, rule: str) -> None:
    """OutOfBudget naming `rule` when the monotonic clock is past `deadline` (None: no budget)."""
    if deadline is not None and time.monotonic() > deadline:
        raise OutOfBudget(rule)


class Match:
    """A match: its span and its groups' spans, in bytes."""

    __slots__ = ("_names", "_spans")

    def __init__(self, spans: list[tuple[int, int]], names: dict[str, int]) -> None:
        self._spans = spans
        self._names = names

    def span(self, group: int | str = 0) -> tuple[int, int]:
        """(-1, -1) for a group that took no part in the match."""
        if group == 0:
            return self._spans[0]
        return self._spans[self._names[group] if isinstance(group, str) else group]

    def start(self, group: int | str = 0) -> int:
        return self.span(group)[0]

    def end(self, group: int | str = 0) -> int:
        return self.span(group)[1]


def _options() -> Any:  # re2.Options: the module ships no type information
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported once, by us, not on stderr too
    return options


_OPTIONS = _options()
# The compiled RE2 object under the module's Python wrapper, called directly where it can be:
# the wrapper's generator and match objects cost more per match than the search itself, and a
# hostile frame can hold a match every few bytes.
_UNANCHORED = re2._Anchor.UNANCHORED
_ANCHOR_START = re2._Anchor.ANCHOR_START


class Regex:
    """A compiled RE2 pattern, matched against UTF-8 bytes (positions are bytes)."""

    __slots__ = ("_match", "groupindex", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        compiled = re2.compile(pattern, _OPTIONS)  # raises re2.error
        self._match = compiled._regexp.Match  # (anchor, bytes, pos, endpos) -> group spans
        self.groupindex: dict[str, int] = dict(compiled.groupindex)

    def finditer(self, data: bytes, pos: int = 0) -> Iterator[Match]:
        """The matches from `pos` on, left to right, none overlapping."""
        size = len(data)
        search = self._match
        names = self.groupindex
        while pos <= size:
            spans = search(_UNANCHORED, data, pos, size)
            start, end = spans[0]
            if start < 0:
                return
            yield Match(spans, names)
            pos = end if end > start else end + 1

    def search(self, data: bytes) -> Match | None:
        return next(self.finditer(data), None)

    def match_end(self, data: bytes, pos: int, endpos: int | None = None) -> int:
        """Where a match anchored at `pos` ends (`pos` itself when none): for reading a run."""
        size = len(data) if endpos is None else min(endpos, len(data))
        if pos > size:
            return pos
        end = self._match(_ANCHOR_START, data, pos, size)[0][1]
        return pos if end < 0 else int(end)


class Run:
    """A run of one character class from a given position: how far a bare value or a header line
    goes. A single class repeated, with nothing after it, cannot backtrack in any engine, so this
    one is Python's, which is called several times faster than RE2 is (a hostile frame can ask
    where a run ends every few bytes)."""

    __slots__ = ("_match",)

    def __init__(self, char_class: str) -> None:
        if not (char_class.startswith("[") and char_class.endswith("]")):
            raise ValueError(f"not a character class: {char_class!r}")
        self._match = re.compile((char_class + "*").encode()).match

    def match_end(self, data: bytes, pos: int, endpos: int | None = None) -> int:
        m = self._match(data, pos, len(data) if endpos is None else endpos)
        return pos if m is None else m.end()


MARKER_PREFIX = "[redacted:"
MARKER = MARKER_PREFIX.encode()


class Context(Protocol):
    """What a rule asks of the redactor that runs it."""

    def marker(self, secret: str | bytes) -> str:
        """The stand-in for a secret: `[redacted:<keyed fingerprint>]`."""
        ...

    def is_secret_key(self, name: str) -> bool:
        """Whether a value named `name` (a JSON key, a variable, a header) is a secret."""
        ...


# (start, end, replacement): the bytes `buf[start:end]` become `replacement`.
Hit = tuple[int, int, bytes]
# Given the text and a match, the part to replace (None: the match is no secret).
Picker = Callable[[bytes, Match, Context], Hit | None]


@dataclass(frozen=True, slots=True)
class Rule:
    """One detector: a pattern finds candidates, `pick` says what of each one is the secret.

    A built-in pattern has no capturing group: RE2 then finds a match with its automata alone
    (forward for the end, backward for the start), while the spans of groups need a slower
    engine over the whole match, which a hostile frame can make 80 KB long. What a group would
    say, `pick` reads from the match's bytes. A rule runs only on a text holding one of its
    `triggers` (lower-case literals every match contains; empty: always)."""

    name: str
    regex: Regex
    pick: Picker
    triggers: tuple[bytes, ...] = ()
    # For rules with many literals: one pattern of them, searched once per text for all the
    # rules sharing it (testing each literal would scan the text once per literal).
    gate: Regex | None = None


def apply_rules(
    rules: tuple[Rule, ...],
    buf: bytes,
    ctx: Context,
    count: Callable[[str], None],
    deadline: float | None = None,
) -> bytes:
    """`buf` with every rule applied in turn, each to the previous one's output (so a rule never
    re-redacts another's marker). Linear: each rule is one pass of its automaton over the text,
    plus, per match, work bounded by what the match replaces (a skipped match costs a bounded
    look at its start, and no match is looked at twice).

    With a `deadline` (monotonic seconds), OutOfBudget naming the rule that runs when the clock
    passes it: checked before each rule and at each candidate, so the overrun is at most one
    search of the automaton or one candidate's look."""
    low = buf.lower()
    gates: dict[int, bool] = {}
    for rule in rules:
        check_deadline(deadline, rule.name)
        if rule.gate is not None:
            open_ = gates.get(id(rule.gate))
            if open_ is None:
                open_ = gates[id(rule.gate)] = rule.gate.search(low) is not None
            if not open_:
                continue
        elif rule.triggers and not any(t in low for t in rule.triggers):
            continue
        pieces: list[bytes] = []
        last = 0
        pos: int | None = 0
        while pos is not None:
            scan_from, pos = pos, None
            for m in rule.regex.finditer(buf, scan_from):
                if deadline is not None and time.monotonic() > deadline:
                    raise OutOfBudget(rule.name)
                start, end = m.start(), m.end()
                if start < last:
                    continue
                hit = rule.pick(buf, m, ctx)
                if hit is None:
                    continue
                s, e, replacement = hit
                if s < last or buf.startswith(MARKER, s):
                    continue
                pieces.append(buf[last:s])
                pieces.append(replacement)
                last = e
                count(rule.name)
                if e > end:  # the secret ran past the match: go on searching after it
                    pos = e
                    break
        if pieces:
            pieces.append(buf[last:])
            buf = b"".join(pieces)
            low = buf.lower()
            gates.clear()
    return buf


def compile_builtin(pattern: str) -> Regex:
    """A built-in pattern (a bug, not a user error, when RE2 refuses it)."""
    return Regex(pattern)


def compile_user(name: str, pattern: str) -> Regex:
    """A rules file's pattern, translated to RE2's spelling; RedactionRulesError (one line naming
    the rule) when it is not a valid regular expression or uses what RE2 cannot run."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise RedactionRulesError(
            f"redaction rule {name}: bad regular expression {pattern!r}: {exc}"
        ) from None
    reason = _unsupported(pattern)
    if reason is None:
        try:
            return Regex(translate(pattern))
        except re2.error as exc:
            detail = exc.args[0] if exc.args else exc
            if isinstance(detail, bytes):
                detail = detail.decode("utf-8", "replace")
            reason = f"RE2 rejects it ({detail})"
    raise RedactionRulesError(
        f"redaction rule {name} ({pattern!r}) cannot run in linear time: it uses {reason}; "
        "redaction runs every pattern on RE2, which has no back-references, lookaround, atomic "
        "groups or possessive repeats: rewrite the pattern without it"
    )


def _unsupported(pattern: str) -> str | None:
    """The construct of a (valid Python) pattern that RE2 cannot run, in words; None if none."""
    if TYPE_CHECKING:
        import sre_constants as c
        import sre_parse  # typeshed describes re._parser under its old public name
    else:
        from re import _constants as c
        from re import _parser as sre_parse

    atomic = getattr(c, "ATOMIC_GROUP", None)
    possessive = getattr(c, "POSSESSIVE_REPEAT", None)
    names = {
        c.GROUPREF: "a back-reference (\\1, (?P=name))",
        c.GROUPREF_EXISTS: "a conditional group (?(...))",
        atomic: "an atomic group (?>...)",
        possessive: "a possessive repeat (*+, ++, ?+)",
    }

    def walk(items: Any) -> str | None:  # a SubPattern: (op, arg) pairs, arg untyped
        for op, arg in items:
            if op is not None and op in names:
                return names[op]
            if op in (c.ASSERT, c.ASSERT_NOT):
                behind = arg[0] < 0
                spelling = ("(?<" if behind else "(?") + ("=" if op is c.ASSERT else "!")
                return f"a {'lookbehind' if behind else 'lookahead'} {spelling}...)"
            children: list[Any] = []
            if op in (c.MAX_REPEAT, c.MIN_REPEAT):
                children = [arg[2]]
            elif op is c.SUBPATTERN:
                children = [arg[-1]]
            elif op is c.BRANCH:
                children = list(arg[1])
            for child in children:
                found = walk(child)
                if found:
                    return found
        return None

    parsed = sre_parse.parse(pattern)
    found = walk(parsed)
    if found:
        return found
    if parsed.state.flags & (re.VERBOSE | re.ASCII | re.LOCALE):
        return "a flag other than i, m, s ((?x), (?a) or (?L))"
    return None


# The Python spellings RE2 does not read: `\Z` (RE2 says `\z`), `\uXXXX` and `\UXXXXXXXX` (RE2
# says `\x{...}`) and `{,n}` (RE2 reads it literally; Python as `{0,n}`). A backslash escapes the
# next character, and a character class `[...]` takes `{` literally.
_TOKEN = re.compile(r"\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})|\\Z|\\.|\[|\]|\{,", re.DOTALL)


def translate(pattern: str) -> str:
    """A valid Python pattern in RE2's spelling (see above); the rest is left as it is."""
    out: list[str] = []
    last = 0
    in_class = False
    for m in _TOKEN.finditer(pattern):
        if m.start() < last:
            continue  # inside a `[]...]` start taken whole
        token = m.group()
        replacement = None
        if m.group(1) or m.group(2):
            replacement = f"\\x{{{m.group(1) or m.group(2)}}}"
        elif token == "\\Z" and not in_class:
            replacement = "\\z"
        elif token == "[" and not in_class:
            in_class = True
            # `[]...]` and `[^]...]`: a `]` first in a class is a member, not its end.
            after = pattern[m.end() :]
            skip = 1 if after.startswith("^") else 0
            if after[skip : skip + 1] == "]":
                out.append(pattern[last : m.end() + skip + 1])
                last = m.end() + skip + 1
        elif token == "]" and in_class:
            in_class = False
        elif token == "{," and not in_class:
            replacement = "{0,"
        if replacement is not None:
            out.append(pattern[last : m.start()])
            out.append(replacement)
            last = m.end()
    out.append(pattern[last:])
    return "".join(out)


def strip_group_names(pattern: str) -> str:
    """The pattern with its named groups made plain, so that patterns can be joined into one
    alternation (RE2 refuses a name used twice)."""
    return re.sub(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>", "(", pattern)
