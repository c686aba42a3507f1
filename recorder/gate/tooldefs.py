"""Tool, prompt and resource-template definitions: a canonical hash, a readable diff, and the
heuristics that flag what a poisoned definition usually looks like.

Why it exists: a "rug pull" changes a reviewed tool's description or schema under the same name.
To say *that* a definition changed, two recordings must hash alike whatever their key order (JSON
canonicalised: sorted keys, no spaces, UTF-8); to say *how*, a diff a person can read; to say
whether the change looks like an attack, a short list of named rules (`Rule`), each a regular
expression over a field, that a user extends with a TOML file. The rules are a heuristic: they
flag what poisoning usually looks like, they prove nothing. Pure functions, no I/O but reading
the rule file, no network.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import tomllib
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from blackbox.recorder import BlackboxError
from blackbox.recorder.log import encode_json

# What each list method answers, as (item kind, result key).
LISTS: dict[str, tuple[tuple[str, str], ...]] = {
    "tools/list": (("tool", "tools"),),
    "prompts/list": (("prompt", "prompts"),),
    "resources/templates/list": (("resource_template", "resourceTemplates"),),
    # The stateless era's discovery may carry the lists too; a key it lacks is simply not judged.
    "server/discover": (
        ("tool", "tools"),
        ("prompt", "prompts"),
        ("resource_template", "resourceTemplates"),
    ),
}
# The fields of a definition that its hash covers (the name is the key, not part of the hash).
FIELDS: dict[str, tuple[str, ...]] = {
    "tool": ("title", "description", "inputSchema", "outputSchema", "annotations"),
    "prompt": ("title", "description", "arguments"),
    "resource_template": ("title", "description", "uriTemplate", "mimeType", "annotations"),
}
RULES_ENV = "BLACKBOX_TOOL_RULES"
LONG_DESCRIPTION = 1500  # characters; tool descriptions in the reference servers stay under 400


class RuleError(BlackboxError):
    """A user rule file that cannot be read or holds a bad rule."""


def canonical(value: object) -> bytes:
    """Canonical JSON: sorted keys, no whitespace, UTF-8, so key order never counts."""
    return encode_json(value, sort_keys=True)


def definition(kind: str, item: Mapping[str, object]) -> dict[str, object]:
    """The hashed part of one listed item: its known fields that are present."""
    return {k: item[k] for k in FIELDS.get(kind, ()) if k in item}


def definition_hash(kind: str, item: Mapping[str, object]) -> str:
    """sha256 hex of the canonical JSON of `definition(kind, item)`."""
    return hashlib.sha256(canonical(definition(kind, item))).hexdigest()


def listed_items(method: str, result: object) -> list[tuple[str, str, dict[str, object]]]:
    """(kind, name, item) of every named item in a list answer's `result`, in order; items
    without a string name are skipped (there is nothing to key them on)."""
    if not isinstance(result, dict):
        return []
    found = []
    for kind, key in LISTS.get(method, ()):
        items = result.get(key)
        if not isinstance(items, list):
            continue
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                found.append((kind, item["name"], item))
    return found


def listed_kinds(method: str, result: object) -> tuple[str, ...]:
    """The item kinds a list answer speaks for (a kind whose key is absent says nothing)."""
    if not isinstance(result, dict):
        return ()
    return tuple(k for k, key in LISTS.get(method, ()) if isinstance(result.get(key), list))


# -- the diff -------------------------------------------------------------------------------------


def _flatten(value: object, path: str, out: dict[str, str]) -> None:
    if isinstance(value, dict) and value:
        for key in sorted(value):
            _flatten(value[key], f"{path}.{key}" if path else key, out)
    elif isinstance(value, list) and value and any(isinstance(v, dict | list) for v in value):
        for i, item in enumerate(value):
            _flatten(item, f"{path}[{i}]", out)
    else:
        out[path] = canonical(value).decode()


def _visible(text: str) -> str:
    """Text with invisible and bidirectional characters spelled out, so a diff shows them."""
    return "".join(
        f"<U+{ord(ch):04X}>" if unicodedata.category(ch) == "Cf" or ch in _INVISIBLE else ch
        for ch in text
    )


def diff(old: Mapping[str, object] | None, new: Mapping[str, object] | None) -> list[str]:
    """A readable diff of two definitions, one line each: `- field: old`, `+ field: new`; text
    fields (descriptions) as a line diff; schemas path by path; invisible characters spelled
    out as <U+XXXX>. [] when they are the same JSON."""
    if old is None and new is None:
        return []
    if old is None:
        return ["(appeared)"] + [f"+ {k}: {_visible(v)}" for k, v in _flat(new).items()]
    if new is None:
        return ["(disappeared)"] + [f"- {k}: {_visible(v)}" for k, v in _flat(old).items()]
    lines: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if canonical(a) == canonical(b):
            continue
        if isinstance(a, str) and isinstance(b, str):
            for line in difflib.ndiff(a.splitlines() or [""], b.splitlines() or [""]):
                if line[:1] in "+-":
                    lines.append(f"{line[0]} {key}: {_visible(line[2:])}")
            continue
        fa: dict[str, str] = {}
        fb: dict[str, str] = {}
        if a is not None:
            _flatten(a, key, fa)
        if b is not None:
            _flatten(b, key, fb)
        for path in sorted(set(fa) | set(fb)):
            if fa.get(path) == fb.get(path):
                continue
            if path in fa:
                lines.append(f"- {path}: {_visible(fa[path])}")
            if path in fb:
                lines.append(f"+ {path}: {_visible(fb[path])}")
    return lines


def _flat(value: Mapping[str, object] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    items: Mapping[str, object] = value or {}
    for key in sorted(items):
        _flatten(items[key], key, out)
    return out


# -- suspicious definitions ----------------------------------------------------------------------

# Zero-width, joiners, word joiner, BOM, soft hyphen, and the tag characters (U+E0000 block)
# beyond what category Cf already covers; bidi controls are Cf too.
_INVISIBLE = frozenset("\u00ad\u180e\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff")
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@dataclass(frozen=True)
class Rule:
    """One heuristic: `pattern` (a regular expression, case-insensitive) searched in `field`
    (`description`, `schema` — every string in the schemas and annotations — or `any`)."""

    id: str
    pattern: str
    message: str
    field: str = "any"

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.IGNORECASE)


DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(
        "instruction_tag",
        r"<\s*/?\s*(important|system|instructions?|secret|hidden|admin)\b[^>]*>",
        "an instruction tag aimed at the model",
    ),
    Rule(
        "ignore_previous",
        r"\b(ignore|disregard|forget)\s+(all\s+)?(the\s+)?(previous|prior|above|earlier)\b",
        "asks the model to ignore earlier instructions",
    ),
    Rule(
        "hide_from_user",
        r"\b(do\s+not|don't|never)\s+(tell|mention|show|reveal|inform)\b.{0,40}\buser\b",
        "asks the model to keep something from the user",
    ),
    Rule(
        "secret_reference",
        r"(~/\.ssh|\bid_rsa\b|\bid_ed25519\b|\.aws/credentials|(^|[\s/'\"`])\.env\b|"
        r"\bapi[_ -]?keys?\b|\b(access|auth|bearer|secret)[_ -]?tokens?\b|\bpasswords?\b|"
        r"\bprivate[_ -]?keys?\b|\.netrc\b|\.npmrc\b|/etc/passwd|/etc/shadow)",
        "refers to secrets or credential files",
    ),
)


def load_rules(path: Path | None = None) -> tuple[Rule, ...]:
    """The default rules plus a user's, from `path`, else `$BLACKBOX_TOOL_RULES` when set.

    The file is TOML: `[[rule]]` tables with `id`, `pattern`, `message` and optionally `field`
    (description, schema or any). A user rule with a default rule's id replaces it; one with
    `pattern = ""` switches it off. Raises `RuleError` with the file name and what is wrong."""
    if path is None and os.environ.get(RULES_ENV):
        path = Path(os.environ[RULES_ENV]).expanduser()
    if path is None:
        return DEFAULT_RULES
    try:
        doc = tomllib.loads(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RuleError(f"{path}: cannot read the tool rules: {exc}") from None
    rules = {r.id: r for r in DEFAULT_RULES}
    for i, raw in enumerate(doc.get("rule", [])):
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise RuleError(f"{path}: rule {i + 1} needs an id (a string)")
        pattern, field = raw.get("pattern", ""), raw.get("field", "any")
        if not isinstance(pattern, str) or field not in ("description", "schema", "any"):
            raise RuleError(
                f"{path}: rule {raw['id']!r}: pattern must be text, field one of "
                "description, schema, any"
            )
        if not pattern:
            rules.pop(raw["id"], None)
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            raise RuleError(f"{path}: rule {raw['id']!r}: bad pattern: {exc}") from None
        raw_message = raw.get("message")
        message = raw_message if isinstance(raw_message, str) else raw["id"]
        rules[raw["id"]] = Rule(raw["id"], pattern, message, field)
    return tuple(rules.values())


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def findings(
    kind: str,
    name: str,
    item: Mapping[str, object],
    rules: Sequence[Rule] = DEFAULT_RULES,
    other_tools: Iterable[str] = (),
) -> list[dict[str, str]]:
    """What looks like poisoning in one definition: a list of {rule, message, excerpt}.

    Built-in checks besides `rules`: invisible characters, bidirectional controls, a very long
    description, and another listed tool's name in the description (`other_tools`)."""
    d = definition(kind, item)
    raw_description = d.get("description")
    description = raw_description if isinstance(raw_description, str) else ""
    schema_text = "\n".join(
        s for k, v in d.items() if k not in ("description", "title") for s in _strings(v)
    )
    raw_title = d.get("title")
    title = raw_title if isinstance(raw_title, str) else ""
    every = "\n".join(x for x in (name, title, description, schema_text) if x)
    found: list[dict[str, str]] = []
    invisible = sorted({ch for ch in every if ch in _INVISIBLE or _is_tag(ch)})
    if invisible:
        found.append(_finding("invisible_unicode", "invisible characters", invisible))
    bidi = sorted({ch for ch in every if ch in _BIDI})
    if bidi:
        found.append(_finding("bidi_unicode", "bidirectional control characters", bidi))
    if len(description) > LONG_DESCRIPTION:
        found.append(
            {
                "rule": "long_description",
                "message": f"a {len(description)}-character description (over {LONG_DESCRIPTION})",
                "excerpt": _visible(description[:80]),
            }
        )
    others = [t for t in other_tools if t != name and len(t) >= 4]
    for other in others:
        m = re.search(r"(?<![\w-])" + re.escape(other) + r"(?![\w-])", description)
        if m is not None:
            found.append(
                {
                    "rule": "other_tool",
                    "message": f"names another tool, {other!r}",
                    "excerpt": _excerpt(description, m),
                }
            )
            break
    texts = {"description": description, "schema": schema_text, "any": every}
    for rule in rules:
        m = rule.compiled().search(texts.get(rule.field, every))
        if m is not None:
            found.append(
                {
                    "rule": rule.id,
                    "message": rule.message,
                    "excerpt": _excerpt(texts.get(rule.field, every), m),
                }
            )
    return found


def _is_tag(ch: str) -> bool:
    return 0xE0000 <= ord(ch) <= 0xE007F


def _finding(rule: str, what: str, chars: list[str]) -> dict[str, str]:
    names = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in chars[:5])
    return {"rule": rule, "message": f"{what}: {names}", "excerpt": names}


def _excerpt(text: str, m: re.Match[str]) -> str:
    start, end = max(0, m.start() - 30), min(len(text), m.end() + 30)
    return _visible(text[start:end].replace("\n", " "))


def short(hash_hex: str | None) -> str:
    """The 12-character form of a definition hash shown to people."""
    return (hash_hex or "")[:12]
