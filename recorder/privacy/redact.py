"""Redaction: replace secrets in recorded payloads by a marker and a keyed fingerprint.

It lives in `recorder` because the taps use it at record time (`--redact FILE`, for secrets that
must never be stored) and exports use it when records leave the store. One `Redactor` is built
from TOML rules (or the built-in defaults) and applied to raw bytes (`redact_frame`) or to parsed
JSON values (`redact_value`).

Three kinds of rules:

- by key name anywhere in a payload (`password`, `authorization`, ...): the whole value goes;
- by JSON path (`$.params.arguments.card`, `$.result.content[*].text`): the whole value goes;
- by pattern over string values: the built-in shapes of secrets (API keys of the well-known
  services, JWTs, PEM keys, bearer and basic credentials, URL passwords and query credentials,
  e-mail addresses; `rules`), values introduced by a secret's name inside text (a JSON object
  quoted in a tool's text, `PASSWORD=...`, `Authorization: ...`; `embedded`), and a rules
  file's regular expressions: the match goes, or only its group named `secret` when it has one.

Every pattern runs on RE2 (`engine`), in time linear in the text: a frame from a hostile server
cannot make redaction slow, and a rules file's pattern RE2 cannot run is refused at load.

A redacted value becomes `[redacted:<fingerprint>]`, where the fingerprint is the first 16 hex
digits of HMAC-SHA256(key, secret). The key comes from the rules file or a key file, so equal
secrets give equal fingerprints (joinable across records and exports) without being readable;
without a key a random one is made per Redactor, so fingerprints join only within one run.

`redact_frame` never raises: a frame that is not JSON gets the regular expressions only, and if
anything unexpected fails the whole frame is replaced by a marker (failing closed: a redactor
that cannot redact must not leak).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import secrets
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from blackbox.recorder.log import encode_json
from blackbox.recorder.privacy.embedded import (
    PHRASE,
    QUOTED_TAILS,
    URL_AND_HEADERS,
    keyed_rules,
    make_rules,
)
from blackbox.recorder.privacy.engine import (
    MARKER,
    MARKER_PREFIX,
    Context,
    Hit,
    Match,
    OutOfBudget,
    Picker,
    RedactionRulesError,
    Regex,
    Rule,
    apply_rules,
    check_deadline,
    compile_builtin,
    compile_user,
    strip_group_names,
)
from blackbox.recorder.privacy.fingerprint import (
    FingerprintKeyError,
    fingerprint,
    load_or_create_key,
)
from blackbox.recorder.privacy.rules import (
    BLOCKS,
    BUILTIN_KEYS,
    EMAIL,
    KEY_SHAPES,
    NOT_SECRET_KEYS,
    PATH_KEYS,
    STRING_ONLY_KEYS,
    fold_key,
    has_token_word,
    is_placeholder,
    is_schema,
    key_variants,
    make_rule,
)

FINGERPRINT_HEX = 16


@functools.cache
def _builtin_rules() -> tuple[tuple[Rule, ...], tuple[Rule, ...], tuple[Rule, ...]]:
    """The built-in rules, compiled once: (before the keyed rules, after them, last)."""
    first = tuple(make_rule(spec) for spec in BLOCKS) + make_rules(URL_AND_HEADERS)
    first += tuple(make_rule(spec) for spec in KEY_SHAPES)
    return first, make_rules((*QUOTED_TAILS, PHRASE)), (make_rule(EMAIL),)


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


def _user_pick(has_secret: bool) -> Picker:
    """A rules file's pattern: the match goes, or only its group named `secret`."""

    def pick(buf: bytes, m: Match, ctx: Context) -> Hit | None:
        start, end = m.span("secret") if has_secret else m.span()
        if start < 0 or start == end or buf.startswith(MARKER, start):
            return None
        return start, end, ctx.marker(buf[start:end]).encode()

    return pick


# A record with its bytes in `raw`: the store's `StoredEvent`, or a live feed's record.
_Rec = TypeVar("_Rec", bound=Any)


@dataclass
class Redactor:
    """Applies redaction rules. Build with `Redactor.default()` or `Redactor.load(path)`."""

    key: bytes
    keys: frozenset[str] = frozenset()
    key_suffixes: tuple[str, ...] = ()
    paths: tuple[tuple[str, ...], ...] = ()
    # Every pattern rule, in the order they run: built-in shapes, values named in text, the rules
    # file's patterns.
    rules: tuple[Rule, ...] = ()
    source: str = "builtin"
    # How many values were replaced, by rule name: what a caller reports.
    counts: dict[str, int] = field(default_factory=dict)
    # Whether a string may match any rule: the built-ins' literals and one pattern joining the
    # rules file's; most strings match none (None: every rule runs on every string).
    prefilter: _Prefilter | None = None
    # Substrings any secret key name contains (lower-cased): with the prefilter, lets a frame
    # with no candidate at all skip parsing (None: no fast path for these rules).
    key_needles: Regex | None = None
    # Whether the built-in key rules (which include "any name with a token word") apply.
    builtin_keys: bool = False
    _key_cache: dict[str, bool] = field(default_factory=dict, repr=False)
    # While `redact_frame_within` runs: when its budget ends (monotonic seconds).
    _deadline: float | None = field(default=None, repr=False)

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
        False. A pattern is a regex or a (name, regex) pair, in RE2's syntax (Python's for
        common patterns); RedactionRulesError, naming it, if RE2 cannot run it."""
        names = {fold_key(k) for k in keys}
        if builtins:
            names.update(BUILTIN_KEYS)
        user: list[Rule] = []
        for i, pat in enumerate(patterns):
            name, text = pat if isinstance(pat, tuple) else (f"pattern_{i + 1}", pat)
            regex = compile_user(name, text)
            user.append(Rule(name, regex, _user_pick("secret" in regex.groupindex)))
        first, phrase, last = _builtin_rules() if builtins else ((), (), ())
        rules = (*first, *keyed_rules(names), *phrase, *last, *user)
        parsed_paths = tuple(_parse_path(p) for p in paths)
        return cls(
            key=key if key is not None else secrets.token_bytes(32),
            keys=frozenset(names),
            key_suffixes=tuple("_" + n for n in sorted(names)),
            paths=parsed_paths,
            rules=rules,
            source=source,
            prefilter=_Prefilter.build(rules, user),
            key_needles=_needles(names, user, parsed_paths),
            builtin_keys=builtins,
        )

    @classmethod
    def default(cls, key: bytes | None = None) -> Redactor:
        """The built-in rules: secret key names, the shapes of well-known secrets, secrets named
        in text, e-mail addresses."""
        return cls.build(key=key, builtins=True, source="builtin")

    @classmethod
    def load(cls, path: Path, default_key: bytes | None = None) -> Redactor:
        """A redactor from a TOML rules file::

            builtins = true                # include the built-in rules (default true)
            key = "a long random string"   # HMAC key for fingerprints, or:
            key_file = "redact.key"        # relative to this file; made (random) if missing
            keys = ["x-session-token"]     # key names, anywhere in a payload
            paths = ["$.params.arguments.card_number", "$.result.content[*].text"]
            patterns = ['\\b4[0-9]{15}\\b']  # regexes (RE2) over string values
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
        """A string with every pattern match replaced (the very same string when none)."""
        raw = text.encode("utf-8", "surrogatepass")
        out = self._redact_bytes(raw)
        if out is raw:
            return text
        try:
            return out.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:  # a lone surrogate cut by a match: keep the rest readable
            return out.decode("utf-8", "replace")

    def _redact_bytes(self, raw: bytes) -> bytes:
        if self.prefilter is not None and not self.prefilter.may_match(raw):
            return raw
        return apply_rules(self.rules, raw, self, self._count, self._deadline)

    def is_secret_key(self, name: str) -> bool:
        """Whether a value named `name` (a JSON key, a variable, a header) is a secret."""
        known = self._key_cache.get(name)
        if known is not None:
            return known
        if len(self._key_cache) > 10_000:
            self._key_cache.clear()
        known = self._key_cache[name] = self._judge_key(name)
        return known

    def _judge_key(self, name: str) -> bool:
        folded = fold_key(name)
        if folded in NOT_SECRET_KEYS:
            return False
        if folded in self.keys or folded.endswith(self.key_suffixes):
            return True
        return self.builtin_keys and has_token_word(folded)

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
            check_deadline(self._deadline, "key")
            named = self._names_a_secret(obj)
            out: dict[str, object] = {}
            for k, v in obj.items():
                if v is not None and isinstance(k, str) and self._is_secret_value(k, v, named):
                    out[k] = self._whole(v, "key")
                else:
                    out[k] = self._walk(v, (*path, str(k)))
            return out
        if isinstance(obj, list):
            return [self._walk(v, (*path, str(i))) for i, v in enumerate(obj)]
        if isinstance(obj, str):
            return self._redact_string(obj)
        return obj

    def _names_a_secret(self, obj: dict) -> bool:
        """`{"name": "DB_PASSWORD", "value": "..."}`: a list of variables (Kubernetes, ECS,
        a completion request's argument) names the secret in one key, holds it in another."""
        if "value" not in obj and "Value" not in obj:
            return False
        name = obj.get("name", obj.get("Name", obj.get("key", obj.get("Key"))))
        return isinstance(name, str) and len(name) <= 200 and self.is_secret_key(name)

    def _is_secret_value(self, key: str, value: object, named: bool) -> bool:
        if named and key in ("value", "Value"):
            return True
        if isinstance(value, bool) or not self.is_secret_key(key):
            return False  # a flag (`has_password: true`) holds no secret
        folded = fold_key(key)
        if isinstance(value, dict | list):
            # A JSON Schema describing a secret (a tool's `inputSchema`) is not one, nor is a
            # configuration object under `auth`.
            return not (folded in STRING_ONLY_KEYS or is_schema(value))
        if isinstance(value, str):
            if folded in PATH_KEYS and value.startswith(("/", "~")):
                return False  # `PWD=/home/me`: a working directory
            return not is_placeholder(value.encode("utf-8", "surrogatepass"))
        return True

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

    def redact_record(self, ev: _Rec) -> _Rec:
        """A record as it may be shown (a stored one, or one a follower read from a journal):
        its raw bytes redacted (the very same record when nothing matched). Frames and session
        events alike: a session's command line can carry a token too."""
        raw = self.redact_frame(ev.raw)
        return ev if raw is ev.raw else dataclasses.replace(ev, raw=raw)

    def redact_frame_within(self, raw: bytes, budget_s: float) -> tuple[bytes, str | None]:
        """`redact_frame` bounded in time, for the relay: (the redacted frame, None), or, when
        redaction is still running after `budget_s` seconds, (the whole frame's marker, the
        name of the rule that was running): the frame is then withheld, only its keyed
        fingerprint kept. Never raises."""
        self._deadline = time.monotonic() + budget_s
        try:
            return self._redact_frame(raw), None
        except OutOfBudget as exc:
            self._count("over_budget")
            return self.marker(bytes(raw)).encode(), exc.rule
        except Exception:  # fail closed, as redact_frame does
            self._count("unredactable")
            return self.marker(bytes(raw)).encode(), None
        finally:
            self._deadline = None

    def _redact_frame(self, raw: bytes) -> bytes:
        if self.key_needles is not None and self.prefilter is not None and b"\\" not in raw:
            # Fast path, for frames with no escapes: JSON strings then appear verbatim in the
            # text, so no rule's literal and no key-name substring in the whole frame means no
            # match in any of its strings or keys.
            low = raw.lower()
            if not self.prefilter.may_match(raw, low) and self.key_needles.search(low) is None:
                return raw
        before = sum(self.counts.values())
        body = raw.strip()
        try:
            value = json.loads(body)
        except ValueError:
            value = _NOT_JSON
        if value is _NOT_JSON:
            # The bytes themselves: what is not UTF-8 passes through untouched.
            out = self._redact_bytes(raw)
            return raw if sum(self.counts.values()) == before else out
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
    names: Iterable[str], user: Iterable[Rule], paths: tuple[tuple[str, ...], ...]
) -> Regex | None:
    """A pattern of the substrings every secret key name contains, in each spelling (snake,
    camel folded, kebab); None when the fast path would be unsound: path rules (they match any
    value) or rules-file patterns anchored to a string's edges."""
    edges = re.compile(r"(?<![\[\\])\^|(?<!\\)\$|\\[AZzbB]")
    if paths or any(edges.search(r.regex.pattern.replace(r"\b", "")) for r in user):
        return None
    variants = key_variants(set(names))
    if not variants:
        return compile_builtin(r"[^\s\S]")  # never matches: no key rules
    return compile_builtin("|".join(re.escape(v) for v in variants))


class _Prefilter:
    """Whether a text may match any rule: built-ins by their literals, the rules file's patterns
    by one pattern joining them (most strings match nothing, and one check is far cheaper than
    one pass per rule)."""

    def __init__(self, triggers: tuple[bytes, ...], combined: Regex | None) -> None:
        self.triggers = triggers
        # One pattern of all the literals: one pass over the text, not one per literal.
        self.literals = compile_builtin("|".join(re.escape(t.decode()) for t in triggers))
        self.combined = combined

    @classmethod
    def build(cls, rules: Iterable[Rule], user: list[Rule]) -> _Prefilter | None:
        """None when some built-in rule has no literal (then every rule runs on every text)."""
        triggers: list[bytes] = []
        for rule in rules:
            if rule.triggers:
                triggers.extend(rule.triggers)
            elif rule not in user:
                return None
        combined = None
        if user:
            joined = "|".join(f"(?:{strip_group_names(r.regex.pattern)})" for r in user)
            try:
                combined = Regex(joined)
            except Exception:  # re2.error: the joined pattern is too large for RE2
                return None
        return cls(tuple(dict.fromkeys(triggers)), combined)

    def may_match(self, text: str | bytes, low: bytes | None = None) -> bool:
        """Whether any rule may match `text` (`low`: the text in lower case, if at hand)."""
        raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        low = raw.lower() if low is None else low
        if self.triggers and self.literals.search(low) is not None:
            return True
        return self.combined is not None and self.combined.search(raw) is not None


def _path_matches(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(pattern) == len(path) and all(
        p == "*" or p == q for p, q in zip(pattern, path, strict=True)
    )


def _strings(doc: dict, name: str, path: Path) -> list[str]:
    value = doc.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RedactionRulesError(f"redaction rules {path}: {name} must be a list of strings")
    return value


__all__ = ["MARKER_PREFIX", "RedactionRulesError", "Redactor", "load_or_create_key"]
