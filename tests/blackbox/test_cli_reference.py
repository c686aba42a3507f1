"""docs/cli.md is the commands' own help, so it cannot drift: it must equal what the generator
renders now, and hold every command."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from blackbox.cli.main import COMMAND_MODULES
from blackbox.cli.reference import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
REGENERATE = "python -m blackbox.cli.reference > docs/cli.md"


def test_docs_cli_md_is_what_the_commands_say() -> None:
    # Generated as the regeneration command does, in a fresh interpreter: click keeps the help
    # option of the first context that asks a command for it, so in this process a test that
    # ran a command on its own (without the group's `-h`) would change what is rendered.
    generated = subprocess.run(
        [sys.executable, "-m", "blackbox.cli.reference"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "", "COLUMNS": "40"},
    ).stdout
    written = DOC.read_text(encoding="utf-8")
    if written != generated:
        diff = difflib.unified_diff(
            written.splitlines(), generated.splitlines(), "docs/cli.md", "generated", lineterm=""
        )
        shown = "\n".join(list(diff)[:40])
        raise AssertionError(
            f"docs/cli.md differs from the commands' help: regenerate it with `{REGENERATE}`\n"
            f"{shown}"
        )


def test_the_reference_holds_every_command_whatever_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = render()
    for name in COMMAND_MODULES:
        assert f"\n## blackbox {name}\n" in text, name
    assert "\n## blackbox retention apply\n" in text  # a group's commands too
    assert "--older-than AGE" in text and "--timeout DURATION" in text
    monkeypatch.setenv("COLUMNS", "40")  # click wraps --help at the terminal's width
    assert render() == text
