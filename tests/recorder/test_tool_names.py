"""Names a host may not tell apart: the same name twice, or names that differ only by case,
invisible characters or confusable letters, are one group; different names stay apart."""

from __future__ import annotations

import pytest
from blackbox.recorder.gate.tool_names import ambiguous, describe, skeleton


@pytest.mark.parametrize(
    "lookalike",
    [
        "echo",  # the same name twice
        "Echo",  # case
        "ECHO",
        "ec\u200bho",  # a zero-width space
        "e\u2060cho",  # a word joiner
        "\u0435cho",  # Cyrillic ie
        "ech\u043e",  # Cyrillic o
        "\u0435\u0441h\u03bf",  # Cyrillic ie, es and a Greek omicron
        "\uff45\uff43\uff48\uff4f",  # fullwidth
        "echo\U000e0041",  # a tag character
    ],
)
def test_a_lookalike_of_a_listed_name_makes_both_ambiguous(lookalike: str) -> None:
    found = ambiguous([("tool", "echo"), ("tool", lookalike), ("tool", "add")])
    assert found[("tool", "echo")] == ["echo", lookalike]
    assert ("tool", lookalike) in found and ("tool", "add") not in found


@pytest.mark.parametrize(
    "other",
    ["echo2", "read_file", "echos", "ech", "e-cho", "echo_upper", "ekho"],
)
def test_different_names_are_not_ambiguous(other: str) -> None:
    assert ambiguous([("tool", "echo"), ("tool", other)]) == {}


def test_only_items_of_one_kind_are_compared() -> None:
    assert ambiguous([("tool", "summarise"), ("prompt", "summarise")]) == {}


def test_digits_that_read_as_letters_are_confusable() -> None:
    assert skeleton("t00l") == skeleton("tool") and skeleton("fi1e") == skeleton("file")


def test_describe_names_a_repeat_and_spells_out_lookalikes() -> None:
    assert describe(["echo", "echo"]) == "'echo' listed 2 times"
    assert (
        describe(["echo", "\u0435cho"]) == "'echo', '\\u0435cho' (names a reader cannot tell apart)"
    )
