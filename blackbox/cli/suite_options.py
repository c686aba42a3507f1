"""The options that turn `blackbox replay` into a suite run (`--name`, `--since`, `--suite`,
`--jobs`, `--junit`; `--redact` and `--no-redact` for the reports), and running it: shared by
`replay` and `suite`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from blackbox.cli.options import NAME_GLOB_HELP, Moment, moment_ns, open_configured_store
from blackbox.cli.output import ProgressBar
from blackbox.cli.redaction_options import configured_redactor, redaction_options
from blackbox.replay import (
    ERAS,
    Recording,
    ReplayOptions,
    SessionOutcome,
    redacted,
    render,
    run_suite,
    select_sessions,
    summary_line,
    write_junit,
)

SUITE_KEYS = ("name_glob", "since", "suite", "jobs", "junit")


def suite_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options `blackbox replay` takes for many sessions at once, and --era."""
    for decorator in reversed(
        [
            click.option(
                "--name",
                "name_glob",
                metavar="GLOB",
                help=f"Replay every recorded session whose name matches ({NAME_GLOB_HELP}).",
            ),
            click.option(
                "--since", type=Moment(), help="Only sessions started since (7d, 2026-11-30)."
            ),
            click.option("--suite", metavar="NAME", help="Replay a suite saved by 'suite add'."),
            click.option(
                "--jobs",
                type=click.IntRange(min=1),
                default=None,
                help="Sessions replayed at once (default: the number of cores).",
            ),
            click.option(
                "--era",
                type=click.Choice(ERAS),
                help="Re-speak the session in this protocol era (legacy initialize <-> "
                "2026-07-28 server/discover and _meta); era-only differences are ignored.",
            ),
            click.option(
                "--junit",
                type=click.Path(dir_okay=False, path_type=Path),
                help="Also write JUnit XML here (one testcase per session).",
            ),
        ]
    ):
        func = decorator(func)
    reports = "the reports (a session's; a suite's table, JSON, GitHub and JUnit)"
    return redaction_options(reports)(func)


def wants_suite(sessions: tuple[str, ...], fmt: str, suite: dict[str, Any]) -> bool:
    """Whether `blackbox replay` runs as a suite (more than one session, a selection, or a
    suite-only output) rather than printing one session's full report."""
    return len(sessions) != 1 or fmt == "github" or any(suite.get(k) for k in SUITE_KEYS)


def replay_suite_cli(
    sessions: tuple[str, ...],
    *,
    against: str | None,
    url: str | None,
    options: ReplayOptions,
    fmt: str,
    store_url: str | None,
    name_glob: str | None = None,
    since: str | None = None,
    suite: str | None = None,
    jobs: int | None = None,
    junit: Path | None = None,
    guard: Callable[[Recording], frozenset[int]] | None = None,
    redact_rules: Path | None = None,
    no_redact: bool = False,
) -> None:
    """Run the suite, print it, write JUnit, exit 0 (all equivalent) or 1. What is printed and
    written is redacted as `export` redacts (see blackbox.cli.redaction_options)."""
    if not sessions and not (name_glob or since or suite):
        raise click.UsageError("name sessions to replay, or --name, --since or --suite")
    redactor = configured_redactor(redact_rules, no_redact, store_url)
    store = open_configured_store(store_url)
    selected = select_sessions(
        store,
        sessions,
        name_glob=name_glob,
        since_ns=moment_ns(since) if since else None,
        suite=suite,
    )
    click.echo(f"replaying {len(selected)} session(s)", err=True)
    bar = ProgressBar("replaying sessions")

    def progress(outcome: SessionOutcome, done: int, total: int) -> None:
        if bar.enabled:  # a terminal: a bar; a CI log: a line per session
            bar(done, total)
        else:
            click.echo(f"[{done}/{total}] {outcome.short_id} {outcome.status}", err=True)

    with bar:
        result = run_suite(
            store,
            selected,
            against=against,
            url=url,
            options=options,
            jobs=jobs,
            on_done=progress,
            guard=guard,
        )
    if redactor is not None:
        result = redacted(result, redactor)
    if junit is not None:
        write_junit(result, junit)
    click.echo(render(result, fmt))
    if fmt == "github":
        click.echo(summary_line(result), err=True)
    sys.exit(result.exit_code)
