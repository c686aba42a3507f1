"""Listed names a host may not tell apart: the same name twice, or names that differ only by case,
invisible characters or confusable letters.

Why it exists: a `tools/list` that names `echo` twice — once as approved, once changed — leaves the
choice of definition to whoever reads the list, and hosts choose differently (the first, the last,
or both under one key). A pinned tool whose name is ambiguous cannot be judged on "the" definition
the host uses, so the gate denies its calls and the watcher records the ambiguity as a change. The
comparison is on a *skeleton* of each name, after Unicode TR #39's idea: compatibility forms
folded (NFKC), case folded, invisible and format characters dropped, and the letters of other
scripts that look like Latin ones (Cyrillic `е`, Greek `ο`, …) mapped to them, as are `0`/`o`
and `1`/`l`. The table covers the lookalikes of the lowercase Latin letters and digits that
tool names are made of; it is not the whole of Unicode's confusables.txt.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

# Lookalikes of Latin lowercase letters (after case folding) in Cyrillic, Greek, Armenian and
# Latin's own extensions, and the digits that read as letters.
_CONFUSABLE = str.maketrans(
    {
        "\u0430": "a",  # Cyrillic a
        "\u03b1": "a",  # Greek alpha
        "\u0441": "c",  # Cyrillic es
        "\u03f2": "c",  # Greek lunate sigma
        "\u0501": "d",  # Cyrillic komi de
        "\u0435": "e",  # Cyrillic ie
        "\u0261": "g",  # Latin script g
        "\u04bb": "h",  # Cyrillic shha
        "\u0456": "i",  # Cyrillic byelorussian-ukrainian i
        "\u03b9": "i",  # Greek iota
        "\u0131": "i",  # Latin dotless i
        "\u0458": "j",  # Cyrillic je
        "\u03ba": "k",  # Greek kappa
        "\u04cf": "l",  # Cyrillic palochka
        "\u2113": "l",  # script l
        "1": "l",
        "\u0578": "n",  # Armenian vo
        "\u043e": "o",  # Cyrillic o
        "\u03bf": "o",  # Greek omicron
        "\u0585": "o",  # Armenian oh
        "0": "o",
        "\u0440": "p",  # Cyrillic er
        "\u03c1": "p",  # Greek rho
        "\u051b": "q",  # Cyrillic qa
        "\u0455": "s",  # Cyrillic dze
        "\u03c5": "u",  # Greek upsilon
        "\u057d": "u",  # Armenian seh
        "\u03bd": "v",  # Greek nu
        "\u0475": "v",  # Cyrillic izhitsa
        "\u051d": "w",  # Cyrillic we
        "\u0445": "x",  # Cyrillic ha
        "\u03c7": "x",  # Greek chi
        "\u0443": "y",  # Cyrillic u
    }
)


def _dropped(ch: str) -> bool:
    # Format characters (zero-width joiners, bidi controls, tags) and default-ignorable fillers.
    return unicodedata.category(ch) == "Cf" or ch in "\u00ad\u034f\u115f\u1160\u3164\uffa0"


def skeleton(name: str) -> str:
    """The form two names share when a reader cannot tell them apart."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    visible = "".join(ch for ch in folded if not _dropped(ch))
    return unicodedata.normalize("NFKC", visible.translate(_CONFUSABLE))


def ambiguous(items: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
    """(kind, name) of each listed item that a host may confuse with another of the same kind,
    with every name of its group in listed order (a name twice appears twice)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for kind, name in items:
        groups.setdefault((kind, skeleton(name)), []).append(name)
    out: dict[tuple[str, str], list[str]] = {}
    for (kind, _), names in groups.items():
        if len(names) > 1:
            for name in names:
                out[(kind, name)] = names
    return out


def describe(names: list[str]) -> str:
    """`'echo' twice` or `'echo', 'еcho' (look alike)`, with invisible characters spelled out."""
    shown = [ascii(n) if not n.isascii() else repr(n) for n in names]
    if len(set(names)) == 1:
        return f"{shown[0]} listed {len(names)} times"
    return f"{', '.join(dict.fromkeys(shown))} (names a reader cannot tell apart)"
