"""Redaction: replace secrets in recorded payloads by a marker and a keyed fingerprint.

It lives in `recorder` because the taps use it at record time (`--redact FILE`, for secrets that
must never be stored) and exports use it when records leave the store. One `Redactor` is built
from TOML rules (or the built-in defaults) and applied to raw bytes (`redact_frame`) or to parsed
JSON values (`redact_value`).

Three kinds of rules:

- by key name anywhere in a payload (`password`, `authorization`, ...): the whole value goes;
- by JSON path (`$.params.arguments.card`, `$.result.content[*].text`): the whole value goes;
- by regular expression over string values (bearer tokens, API-key shapes, e-mail addresses):
  the match goes, or only its group named `secret` when the pattern has one.

A redacted value becomes `[redacted:<fingerprint>]`, where the fingerprint is the first 16 hex
digits of HMAC-SHA256(key, secret). The key comes from the rules file or a key file, so equal
secrets give equal fingerprints (joinable across records and exports) without being readable;
without a key a random one is made per Redactor, so fingerprints join only within one run.

`redact_frame` never raises: a frame that is not JSON gets the regular expressions only, and if
anything unexpected fails the whole frame is replaced by a marker (failing closed: a redactor
that cannot redact must not leak).
"""

from __future__ import annotations

import json
import re
import secrets
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackbox.recorder import BlackboxError
from blackbox.recorder.log import encode_json
from blackbox.recorder.privacy.fingerprint import (
    FingerprintKeyError,
    fingerprint,
    load_or_create_key,
)

MARKER_PREFIX = "[redacted:"
FINGERPRINT_HEX = 16


class RedactionRulesError(BlackboxError):
    """A rules file that cannot be read or makes no sense."""


# Key names whose values are secrets wherever they appear. Names are compared after folding
# camelCase to snake_case, lower-casing and turning '-' into '_' (so `X-Api-Key`, `apiKey` and
# `api_key` all match). A name matches when it equals one of these or ends with `_<one of these>`.
BUILTIN_KEYS = (
    "pass",
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "client_secret",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth_token",
    "api_key",
    "apikey",
    "x_api_key",
    "authorization",
    "proxy_authorization",
    "cookie",
    "set_cookie",
    "private_key",
    "credentials",
    "session_token",
)
# Names that would match a suffix above but are protocol plumbing, not secrets.
NOT_SECRET_KEYS = frozenset({"progress_token", "next_token", "max_tokens", "tokens"})
# Besides, any name with a word containing "token" (`tokenValue`, `x_token_id`, `csrftoken`) is a
# secret, except token counts and tokenizers (`input_tokens`, `token_count`, `tokenizer`).
_TOKEN_WORD = re.compile(r"token(?!s\b|s_|_count\b|_limit\b|i[sz])")

# (name, pattern). A group named `secret` narrows what is replaced.
#
# Every built-in pattern runs in time linear in the text, because a hostile server can put
# anything in a frame and these run on the tap's path (`--redact`) and on every export. Each one
# either starts with a literal (the engine skips to its occurrences), or may start only where a
# run of its characters starts (a negative lookbehind), and no two unbounded repetitions in it can
# share characters. A pattern that breaks these rules is quadratic on a crafted run (an e-mail
# pattern rescans from every word start to the `@`); bench/redact.py prints each rule's ratio
# against a plain text of the same size.
BUILTIN_PATTERNS: tuple[tuple[str, str], ...] = (
    ("bearer", r"(?i)\b(?:bearer|token)\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})"),
    ("basic_auth", r"(?i)\bbasic\s+(?P<secret>[A-Za-z0-9+/]{8,}={0,2})"),
    # Anchored on `://`: the scheme in front adds nothing to find the password after the user.
    ("url_password", r"://[^/\s:@]+:(?P<secret>[^/\s@]+)@"),
    (
        "assignment",
        r"(?i)\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)"
        r"\s*[=:]\s*[\"']?(?P<secret>[^\s\"'&,;]{3,})",
    ),
    # "my password is hunter2.", "the passphrase was: x y" (the first word; trailing
    # punctuation is the sentence's, not the password's).
    (
        "password_phrase",
        r"(?i)\b(?:password|passwd|passphrase|passcode|pwd)\s+(?:is|was)\s*:?\s*[\"']?"
        r"(?P<secret>[^\s\"'&,;]*[^\s\"'&,;.!?)\]}])",
    ),
    ("openai_anthropic_key", r"\bsk-[A-Za-z0-9_-]{16,}"),
    ("stripe_key", r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"),
    ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    (
        "jwt",
        r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    # The body may not hold another BEGIN line, so each scan for the END ends at the next key.
    (
        "private_key_block",
        r"-----BEGIN [A-Z ]{0,64}PRIVATE KEY-----(?:[^-]|-(?!----BEGIN ))*?"
        r"-----END [A-Z ]{0,64}PRIVATE KEY-----",
    ),
    (
        "email",
        r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
    ),
)

# Literals (lower-case) at least one of which every match of a built-in pattern contains: a
# string containing none of them cannot match, which is far cheaper to check than the regexes.
BUILTIN_TRIGGERS: dict[str, tuple[str, ...]] = {
    "bearer": ("bearer", "token"),
    "basic_auth": ("basic",),
    "url_password": ("://",),
    "assignment": ("password", "passwd", "pwd", "secret", "token", "api", "access"),
    "password_phrase": ("passw", "passphrase", "passcode", "pwd"),
    "openai_anthropic_key": ("sk-",),
    "stripe_key": ("k_live_", "k_test_"),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "aws_access_key": ("akia", "asia"),
    "slack_token": ("xox",),
    "google_api_key": ("aiza",),
    "jwt": ("eyj",),
    "private_key_block": ("-----begin",),
    "email": ("@",),
}

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _fold_key(name: str) -> str:
    return _CAMEL.sub("_", name).lower().replace("-", "_")


def _parse_path(path: str) -> tuple[str, ...]:
    """`$.a.b[0].c`, `$.a[*].b`, `a.*.c` -> ("a", "b", "0", "c"); `*` matches any key or index."""
    text = path.strip()
    if text.startswith("$"):
        text = text[1:]
    text = re.sub(r"\[(\*|\d+)\]", r".\1", text)
    text = re.sub(r"\[[\"']([^\"']+)[\"']\]", r".\1", text)
    parts = tuple(p for p in text.split(".") if p)
    if not parts:
        raise RedactionRulesError(f"empty JSON path {path!r} in redaction rules")
    return parts


@dataclass(slots=True)
class _Pattern:
    name: str
    regex: re.Pattern[str]
    has_secret_group: bool
    builtin: bool = False


@dataclass
class Redactor:
    """Applies redaction rules. Build with `Redactor.default()` or `Redactor.load(path)`."""

    key: bytes
    keys: frozenset[str] = frozenset()
    key_suffixes: tuple[str, ...] = ()
    paths: tuple[tuple[str, ...], ...] = ()
    patterns: tuple[_Pattern, ...] = ()
    source: str = "builtin"
    # How many values were replaced, by rule name: what a caller reports.
    counts: dict[str, int] = field(default_factory=dict)
    # One regex that matches wherever any pattern could: most strings match none, and one
    # search is far cheaper than one substitution per pattern (None: patterns not combinable).
    prefilter: _Prefilter | None = None
    # Substrings any secret key name contains (lower-cased): with the prefilter, lets a frame
    # with no candidate at all skip parsing (None: no fast path for these rules).
    key_needles: re.Pattern[str] | None = None
    # Whether the built-in key rules (which include "any name with a token word") apply.
    builtin_keys: bool = False
    _key_cache: dict[str, bool] = field(default_factory=dict, repr=False)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        key: bytes | None = None,
        builtins: bool = True,
        keys: Iterable[str] = (),
        paths: Iterable[str] = (),
        patterns: Iterable[str | tuple[str, str]] = (),
        source: str = "custom",
    ) -> Redactor:
        """A redactor from explicit rules; the built-in rules are included unless `builtins` is
        False. A pattern is a regex or a (name, regex) pair."""
        names = {_fold_key(k) for k in keys}
        if builtins:
            names.update(BUILTIN_KEYS)
        compiled: list[_Pattern] = []
        n_builtin = len(BUILTIN_PATTERNS) if builtins else 0
        sources: list[tuple[str, str]] = list(BUILTIN_PATTERNS) if builtins else []
        for i, pat in enumerate(patterns):
            sources.append(pat if isinstance(pat, tuple) else (f"pattern_{i + 1}", pat))
        for i, (name, text) in enumerate(sources):
            try:
                regex = re.compile(text)
            except re.error as exc:
                raise RedactionRulesError(f"bad regular expression {text!r}: {exc}") from None
            if i >= n_builtin:
                _refuse_catastrophic(name, text)
            compiled.append(_Pattern(name, regex, "secret" in regex.groupindex, i < n_builtin))
        parsed_paths = tuple(_parse_path(p) for p in paths)
        return cls(
            key=key if key is not None else secrets.token_bytes(32),
            keys=frozenset(names),
            key_suffixes=tuple("_" + n for n in sorted(names)),
            paths=parsed_paths,
            patterns=tuple(compiled),
            source=source,
            prefilter=_Prefilter.build(compiled),
            key_needles=_needles(names, compiled, parsed_paths),
            builtin_keys=builtins,
        )

    @classmethod
    def default(cls, key: bytes | None = None) -> Redactor:
        """The built-in rules: bearer tokens, API-key shapes, password-like keys, e-mails."""
        return cls.build(key=key, builtins=True, source="builtin")

    @classmethod
    def load(cls, path: Path, default_key: bytes | None = None) -> Redactor:
        """A redactor from a TOML rules file::

            builtins = true                # include the built-in rules (default true)
            key = "a long random string"   # HMAC key for fingerprints, or:
            key_file = "redact.key"        # relative to this file; made (random) if missing
            keys = ["x-session-token"]     # key names, anywhere in a payload
            paths = ["$.params.arguments.card_number", "$.result.content[*].text"]
            patterns = ['\\b4[0-9]{15}\\b']  # regexes over string values
            [patterns_named]               # or named regexes (the name shows in counts)
            iban = '\\bDE[0-9]{20}\\b'

        When the file names no key, `default_key` is used, else the key file `<rules file>.key`
        next to it (created on first use; if it cannot be, a random key, whose fingerprints join
        only within this Redactor).
        """
        path = Path(path).expanduser()
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RedactionRulesError(f"redaction rules file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RedactionRulesError(f"cannot read redaction rules {path}: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise RedactionRulesError(f"redaction rules {path} are not valid TOML: {exc}") from None
        known = {"builtins", "key", "key_file", "keys", "paths", "patterns", "patterns_named"}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise RedactionRulesError(
                f"redaction rules {path}: unknown setting(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(known))})"
            )
        if isinstance(doc.get("key"), str) and doc["key"]:
            key = doc["key"].encode()
        elif isinstance(doc.get("key_file"), str):
            key = load_or_create_key(path.parent / doc["key_file"])
        elif default_key is not None:
            key = default_key
        else:
            # A key of its own next to the rules file, so that the tap (record time) and the
            # exports that use the same rules give the same fingerprints.
            try:
                key = load_or_create_key(path.with_name(path.name + ".key"))
            except FingerprintKeyError:
                key = None  # a read-only directory: fingerprints join within this run only
        pats: list[str | tuple[str, str]] = list(_strings(doc, "patterns", path))
        named = doc.get("patterns_named", {})
        if not isinstance(named, dict):
            raise RedactionRulesError(f"redaction rules {path}: patterns_named must be a table")
        pats.extend((str(k), str(v)) for k, v in named.items())
        return cls.build(
            key=key,
            builtins=bool(doc.get("builtins", True)),
            keys=_strings(doc, "keys", path),
            paths=_strings(doc, "paths", path),
            patterns=pats,
            source=str(path.name),
        )

    # -- applying ----------------------------------------------------------------------------

    def fingerprint(self, secret: str | bytes) -> str:
        """The keyed fingerprint of a secret: equal secrets, equal fingerprints."""
        return fingerprint(self.key, secret, FINGERPRINT_HEX)

    def marker(self, secret: str | bytes) -> str:
        return f"{MARKER_PREFIX}{self.fingerprint(secret)}]"

    def _count(self, rule: str) -> None:
        self.counts[rule] = self.counts.get(rule, 0) + 1

    def redact_text(self, text: str) -> str:
        """A string with every pattern match replaced."""
        if self.prefilter is not None and not self.prefilter.may_match(text):
            return text
        low = text.lower() if len(text) > 256 else None
        for pat in self.patterns:
            # A long text runs only the built-ins whose literals it holds: each regex pass scans
            # the whole text, so a long frame of one hostile kind pays for one rule, not fourteen.
            triggers = BUILTIN_TRIGGERS.get(pat.name) if pat.builtin else None
            if low is not None and triggers and not any(t in low for t in triggers):
                continue
            if pat.has_secret_group:

                def repl(m: re.Match[str], pat: _Pattern = pat) -> str:
                    secret = m.group("secret")
                    if secret is None or secret.startswith(MARKER_PREFIX):
                        return m.group(0)
                    self._count(pat.name)
                    start, end = m.span("secret")
                    base = m.start(0)
                    whole = m.group(0)
                    return whole[: start - base] + self.marker(secret) + whole[end - base :]

            else:

                def repl(m: re.Match[str], pat: _Pattern = pat) -> str:
                    self._count(pat.name)
                    return self.marker(m.group(0))

            text = pat.regex.sub(repl, text)
        return text

    def _is_secret_key(self, name: str) -> bool:
        known = self._key_cache.get(name)
        if known is not None:
            return known
        if len(self._key_cache) > 10_000:
            self._key_cache.clear()
        known = self._key_cache[name] = self._judge_key(name)
        return known

    def _judge_key(self, name: str) -> bool:
        folded = _fold_key(name)
        if folded in NOT_SECRET_KEYS:
            return False
        if folded in self.keys or folded.endswith(self.key_suffixes):
            return True
        return self.builtin_keys and _TOKEN_WORD.search(folded) is not None

    def _whole(self, value: object, rule: str) -> str:
        if isinstance(value, str):
            # Keep the scheme of an Authorization header readable ("Bearer [redacted:...]").
            scheme, sep, rest = value.partition(" ")
            if not (sep and scheme.lower() in ("bearer", "basic", "token", "digest") and rest):
                scheme, rest = "", value
            if rest.startswith(MARKER_PREFIX):
                return value  # already redacted: redaction is idempotent
            self._count(rule)
            return f"{scheme} {self.marker(rest)}" if scheme else self.marker(rest)
        self._count(rule)
        return self.marker(json.dumps(value, sort_keys=True, separators=(",", ":")))

    def redact_value(self, obj: object) -> object:
        """A copy of a parsed JSON value with every rule applied (the input is not changed)."""
        return self._walk(obj, ())

    def _walk(self, obj: object, path: tuple[str, ...]) -> object:
        if self.paths and path and any(_path_matches(p, path) for p in self.paths):
            return self._whole(obj, "path")
        if isinstance(obj, dict):
            out: dict[str, object] = {}
            for k, v in obj.items():
                if v is not None and isinstance(k, str) and self._is_secret_key(k):
                    out[k] = self._whole(v, "key")
                else:
                    out[k] = self._walk(v, (*path, str(k)))
            return out
        if isinstance(obj, list):
            return [self._walk(v, (*path, str(i))) for i, v in enumerate(obj)]
        if isinstance(obj, str):
            return self._redact_string(obj)
        return obj

    def _redact_string(self, text: str) -> str:
        # Tool results often carry JSON inside a string (content[].text): redact it as JSON so
        # key-name rules reach it too, keeping it a JSON string.
        stripped = text.strip()
        if len(stripped) > 1 and stripped[0] in "{[" and stripped[-1] in "}]":
            try:
                inner = json.loads(stripped)
            except ValueError:
                inner = None
            if isinstance(inner, dict | list):
                before = sum(self.counts.values())
                redacted = self._walk(inner, ())
                if sum(self.counts.values()) != before:
                    return json.dumps(redacted, ensure_ascii=False)
                return text
        return self.redact_text(text)

    def redact_frame(self, raw: bytes) -> bytes:
        """The frame with every rule applied; the very same bytes when nothing matched.

        JSON keeps its key order and is written compactly when something changed; surrounding
        whitespace (a stdio frame's newline) is kept. Never raises.
        """
        try:
            return self._redact_frame(raw)
        except Exception:  # fail closed: a frame we cannot redact is hidden whole
            self._count("unredactable")
            return self.marker(bytes(raw)).encode()

    def _redact_frame(self, raw: bytes) -> bytes:
        if self.key_needles is not None and self.prefilter is not None:
            # Fast path, for frames with no escapes: JSON strings then appear verbatim in the
            # text, so no pattern match and no key-name substring in the whole frame means no
            # match in any of its strings or keys.
            text = raw.decode("utf-8", "surrogateescape")
            if (
                "\\" not in text
                and not self.prefilter.may_match(text)
                and self.key_needles.search(text.lower()) is None
            ):
                return raw
        before = sum(self.counts.values())
        body = raw.strip()
        try:
            value = json.loads(body)
        except ValueError:
            value = _NOT_JSON
        if value is _NOT_JSON:
            text = raw.decode("utf-8", "surrogateescape")
            out = self.redact_text(text)
            if sum(self.counts.values()) == before:
                return raw
            return out.encode("utf-8", "surrogateescape")
        redacted = self.redact_value(value)
        if sum(self.counts.values()) == before:
            return raw
        start = len(raw) - len(raw.lstrip())
        head, tail = raw[:start], raw[start + len(body) :]
        return head + encode_json(redacted) + tail

    @property
    def total(self) -> int:
        """How many values this redactor has replaced so far."""
        return sum(self.counts.values())


_NOT_JSON = object()


def _needles(
    names: Iterable[str], patterns: Iterable[_Pattern], paths: tuple[tuple[str, ...], ...]
) -> re.Pattern[str] | None:
    """A regex of the substrings every secret key name contains, in each spelling (snake,
    camel folded, kebab); None when the fast path would be unsound: path rules (they match any
    value) or rules-file patterns anchored to a string's edges or looking around it."""
    edges = re.compile(r"(?<![\[\\])\^|(?<!\\)\$|\\[AZbB]|\(\?<[=!]|\(\?!")
    # Built-ins are prefiltered by their literals, which a string's edges cannot hide.
    custom = [p for p in patterns if not (p.builtin and p.name in BUILTIN_TRIGGERS)]
    if paths or any(edges.search(p.regex.pattern.replace(r"\b", "")) for p in custom):
        return None
    variants = set()
    for name in names:
        variants.update({name, name.replace("_", ""), name.replace("_", "-")})
    if not variants:
        return re.compile(r"(?!x)x")  # never matches: no key rules
    return re.compile("|".join(re.escape(v) for v in sorted(variants, key=len, reverse=True)))


class _Prefilter:
    """Whether a string may match any pattern: built-ins by their trigger literals, the rules
    file's patterns by one combined regex (most strings match nothing, and one check is far
    cheaper than one substitution per pattern)."""

    def __init__(self, triggers: tuple[str, ...], combined: re.Pattern[str] | None) -> None:
        self.triggers = triggers
        self.combined = combined

    @classmethod
    def build(cls, patterns: Iterable[_Pattern]) -> _Prefilter | None:
        """None when the patterns cannot be combined soundly (then every pattern runs)."""
        triggers: list[str] = []
        custom: list[_Pattern] = []
        for pat in patterns:
            known = BUILTIN_TRIGGERS.get(pat.name)
            if known is not None and pat.builtin:
                triggers.extend(known)
            else:
                custom.append(pat)
        combined = None
        if custom:
            combined = _combine(custom)
            if combined is None:
                return None
        return cls(tuple(dict.fromkeys(triggers)), combined)

    def may_match(self, text: str) -> bool:
        if self.triggers:
            low = text.lower()
            if any(t in low for t in self.triggers):
                return True
        return self.combined is not None and self.combined.search(text) is not None


def _combine(patterns: Iterable[_Pattern]) -> re.Pattern[str] | None:
    """One alternation of all patterns: leading global flags become scoped groups and named
    groups plain ones (names may repeat across patterns). None when that does not compile or
    when back-references would point at the wrong group once combined."""
    parts = []
    for pat in patterns:
        if re.search(r"\\[1-9]|\(\?P=|\(\?\(", pat.regex.pattern):
            return None
        text = re.sub(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(", pat.regex.pattern)
        flags = re.match(r"^\(\?([aiLmsux]+)\)", text)
        if flags:
            text = f"(?{flags.group(1)}:{text[flags.end() :]})"
        parts.append(f"(?:{text})")
    try:
        return re.compile("|".join(parts))
    except re.error:
        return None


def _path_matches(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(pattern) == len(path) and all(
        p == "*" or p == q for p, q in zip(pattern, path, strict=True)
    )


def _strings(doc: dict, name: str, path: Path) -> list[str]:
    value = doc.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RedactionRulesError(f"redaction rules {path}: {name} must be a list of strings")
    return value


__all__ = ["RedactionRulesError", "Redactor", "load_or_create_key"]


def _refuse_catastrophic(name: str, text: str) -> None:
    """Refuse a rule with a repetition of varying length inside a repetition (`(a+)+`,
    `(\\w*\\s?)*`), which backtracks exponentially on a near-miss. Rules run on the tap's
    path and Python's engine cannot be interrupted, so such a rule is refused at load, not timed.
    (Possessive and atomic repeats do not backtrack and are allowed.)"""
    if TYPE_CHECKING:
        import sre_parse  # typeshed describes re._parser under its old public name
    else:
        from re import _parser as sre_parse  # the parse tree the compiler itself uses

    repeats = (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT)

    def walk(items: Any, inside: bool) -> bool:  # a SubPattern: (op, arg) pairs, arg untyped
        for op, arg in items:
            if op in repeats:
                lo, hi, body = arg
                if inside and lo != hi:
                    return True
                if walk(body, inside or hi is sre_parse.MAXREPEAT or hi > 1):
                    return True
            elif op is sre_parse.SUBPATTERN:
                children = [arg[-1]]
            elif op is sre_parse.BRANCH:
                children = arg[1]
            elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
                children = [arg[1]]
            else:
                continue  # literals, classes; atomic groups and possessive repeats never backtrack
            if op not in repeats and any(walk(child, inside) for child in children):
                return True
        return False

    if walk(sre_parse.parse(text), False):
        raise RedactionRulesError(
            f"redaction rule {name} ({text!r}) nests a repetition inside a repetition, which can "
            "take exponential time on a hostile frame: rewrite it without the outer or inner "
            "repeat (e.g. '(a+)+' as 'a+')"
        )
