"""A shell glob over a name column, read the way `fnmatch.fnmatchcase` reads it, on both stores;
and the literal substring match the other text filters use.

Why it exists: every option that matches a name (`sessions --name`, `replay --name`, `export
--server`, ...) takes a glob, and a listing applies its limit after its filters, so the glob
has to run in SQL. SQLite's GLOB and PostgreSQL's regular expressions spell a glob differently
(`[!a]` against `[^a]`, escapes, anchoring): the glob is parsed once here and written in each
dialect. A name without `*`, `?` or `[` stays an equality, which the name index serves.
"""

from __future__ import annotations

from typing import Any

from blackbox.recorder.store import storable_text
from sqlalchemy import false

# (kind, text): "any" for *, "one" for ?, "set" (text is the set's body, negated by a leading
# "!"), "lit" for one literal character.
Token = tuple[str, str]


def has_magic(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def tokens(pattern: str) -> list[Token]:
    """The glob's parts, with `fnmatch`'s rules: `]` first in a set is literal, an unclosed `[`
    is a literal `[`."""
    out: list[Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not out or out[-1][0] != "any":
                out.append(("any", ""))
        elif c == "?":
            out.append(("one", ""))
        elif c == "[":
            j = i + 1 if i < n and pattern[i] == "!" else i
            j = j + 1 if j < n and pattern[j] == "]" else j
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(("lit", "["))
            else:
                out.append(("set", pattern[i:j]))
                i = j + 1
        else:
            out.append(("lit", c))
    return out


def sqlite_glob(pattern: str) -> str:
    """The pattern as SQLite's GLOB reads it (case-sensitive, like `fnmatchcase`)."""
    parts = []
    for kind, text in tokens(pattern):
        if kind == "any":
            parts.append("*")
        elif kind == "one":
            parts.append("?")
        elif kind == "lit":
            parts.append(f"[{text}]" if text in "*?[" else text)
        elif text.startswith("!"):
            parts.append(f"[^{text[1:]}]")
        elif text.startswith("^"):
            # GLOB reads a leading ^ as negation; fnmatch as the character itself.
            parts.append(f"[{text[1:]}^]" if len(text) > 1 else "^")
        else:
            parts.append(f"[{text}]")
    return "".join(parts)


def _regex_char(c: str) -> str:
    return c if c.isalnum() or c == "_" else "\\" + c


def postgres_regex(pattern: str) -> str:
    """The pattern as a PostgreSQL regular expression (`~`), anchored at both ends."""
    parts = ["^"]
    for kind, text in tokens(pattern):
        if kind == "any":
            parts.append(".*")
        elif kind == "one":
            parts.append(".")
        elif kind == "lit":
            parts.append(_regex_char(text))
        else:
            negated = text.startswith("!")
            body = text[1:] if negated else text
            # Inside brackets only \, ^, [ and ] need care; a range's "-" keeps its meaning.
            escaped = "".join("\\" + c if c in "\\^[]" else c for c in body)
            parts.append(f"[{'^' if negated else ''}{escaped}]")
    parts.append("$")
    return "".join(parts)


def glob_condition(column: Any, pattern: str, dialect: str) -> Any:
    """A WHERE condition: `column` matches the glob `pattern` on this dialect."""
    if not storable_text(pattern):
        return false()
    if not has_magic(pattern):
        return column == pattern
    if dialect == "postgresql":
        return column.op("~")(postgres_regex(pattern))
    return column.op("GLOB")(sqlite_glob(pattern))


def contains_condition(column: Any, text: str, dialect: str) -> Any:
    """A WHERE condition: `column` holds `text` (a substring, taken literally: LIKE's `%`, `_`
    and escape character are escaped)."""
    if not storable_text(text):
        return false()
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return column.like(f"%{escaped}%", escape="\\")
