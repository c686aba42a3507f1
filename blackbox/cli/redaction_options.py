"""`--redact RULES` and `--no-redact`, and the redactor they choose: one configuration for every
way a record leaves the store (`export`, `show`, `ui`, the suite reports of `replay`).

Why it exists: a secret redacted in an export must not be readable in `show`, the UI or a JUnit
file written from the same store. So every way out builds its redactor here, as export does:
the built-in rules keyed with the store's own fingerprint key (under keys/ in the data
directory, never in the store), a rules file instead with `--redact`, none with `--no-redact`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from blackbox import config
from blackbox.recorder.privacy import Redactor, load_or_create_key, store_key_path


def configured_redactor(
    rules: Path | None, no_redact: bool, store_url: str | None
) -> Redactor | None:
    """The redactor `--redact RULES` / `--no-redact` choose for the store at `store_url`; None
    with `--no-redact`."""
    if no_redact:
        if rules is not None:
            raise click.UsageError("--redact and --no-redact exclude each other")
        return None
    if rules is not None:
        # The rules' own key (or `<rules>.key`), as `blackbox record --redact` uses.
        return Redactor.load(rules)
    key_path = store_key_path(config.data_dir(), config.store_url(store_url))
    return Redactor.default(key=load_or_create_key(key_path))


def redaction_options(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--redact RULES` and `--no-redact` (values `redact_rules`, `no_redact`); `what` names
    what they apply to, in the help."""

    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        func = click.option("--no-redact", is_flag=True, help=f"Do not redact {what}: as stored.")(
            func
        )
        return click.option(
            "--redact",
            "redact_rules",
            type=click.Path(path_type=Path, dir_okay=False),
            default=None,
            metavar="RULES",
            help=f"Redact {what} with these rules (TOML) instead of the built-in ones, "
            "which apply by default as in `export`.",
        )(func)

    return add
