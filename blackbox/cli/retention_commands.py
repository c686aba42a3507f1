"""`retention schedule` and `retention status`: retention that runs by itself, and what it did.
The `retention` group itself (with `apply`) lives in `blackbox.cli.cmd_compliance`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from blackbox import config
from blackbox.cli.options import (
    AGE_HELP,
    DURATION_HELP,
    Age,
    BadTime,
    Duration,
    format_option,
    open_configured_store,
    span_seconds,
    store_option,
)
from blackbox.cli.output import render
from blackbox.recorder import private_dir


def _blackbox_executable() -> str:
    """This installation's `blackbox`, by absolute path (a timer has no PATH of the user's)."""
    beside = Path(sys.executable).with_name("blackbox")
    return str(beside) if beside.exists() else "blackbox"


@click.command("schedule")
@click.option(
    "--every",
    "every_s",
    type=Duration(),
    default="1d",
    show_default=True,
    metavar="DURATION",
    help=f"How often ({DURATION_HELP}).",
)
@click.option(
    "--older-than",
    type=Age(),
    default=None,
    metavar="AGE",
    help=f"Remove sessions that ended longer ago ({AGE_HELP}; default: BLACKBOX_RETENTION, "
    "else 90d).",
)
@click.option(
    "--archive-root",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Each run archives into a new retention-<time> directory under this one "
    "(default: BLACKBOX_ARCHIVE, else archive/ in the data directory).",
)
@click.option(
    "--as",
    "rendering",
    type=click.Choice(["auto", "systemd", "cron"]),
    default="auto",
    show_default=True,
    help="systemd user timer where systemd runs, else a cron line.",
)
@click.option("--print", "print_only", is_flag=True, help="Print what would be installed, only.")
@store_option
def retention_schedule(
    every_s: float,
    older_than: str | None,
    archive_root: Path | None,
    rendering: str,
    print_only: bool,
    store_url: str | None,
) -> None:
    """Run `retention apply` by itself: install a systemd user timer, or print the cron line to
    add (`crontab -e`) where there is no systemd. The command names the store, the age and the
    archive root explicitly: a timer has none of your shell's environment.

    \b
    Example:
      blackbox retention schedule --every 1d
      blackbox retention schedule --every 12h --as cron --print
    """
    from blackbox.recorder.compliance import (
        apply_argv,
        has_systemd,
        install_systemd,
        make_schedule,
        systemd_user_dir,
    )

    try:
        age = config.retention(older_than)
        span_seconds(age, age=True)  # a bad BLACKBOX_RETENTION is an error now, not at 3 a.m.
    except BadTime as exc:
        raise click.ClickException(str(exc)) from None
    argv = apply_argv(
        _blackbox_executable(),
        config.store_url(store_url),
        age,
        archive_root or config.archive_dir(),
    )
    if rendering == "auto":
        rendering = "systemd" if has_systemd() else "cron"
    log = config.data_dir() / "retention.log"
    private_dir(log.parent)  # the cron line's output goes there (0700 if made here)
    # The data directory the run keeps its last-run note in: the one this command sees.
    env = {config.HOME_ENV: str(config.data_dir())}
    schedule = make_schedule(argv, env, every_s, rendering, log)
    if rendering == "cron":
        assert schedule.cron is not None
        if not print_only:
            click.echo("no systemd here: add this line to your crontab (crontab -e):", err=True)
        click.echo(schedule.cron)
        return
    assert schedule.service is not None and schedule.timer is not None
    unit_dir = systemd_user_dir()
    if print_only:
        click.echo(f"# {unit_dir}/blackbox-retention.service\n{schedule.service}")
        click.echo(f"# {unit_dir}/blackbox-retention.timer\n{schedule.timer}", nl=False)
        return
    written = install_systemd(schedule, unit_dir)
    click.echo(f"installed {', '.join(str(p) for p in written)}; timer enabled")


@click.command("status")
@store_option
@format_option(("table", "json"))
def retention_status_cmd(store_url: str | None, fmt: str) -> None:
    """When retention last ran, what each recorded run removed, and the legal holds that kept
    sessions.

    \b
    Example:
      blackbox retention status
    """
    from blackbox.recorder.compliance import retention_status

    store = open_configured_store(store_url)
    try:
        status = retention_status(store, config.data_dir())
    finally:
        store.close()
    if fmt == "json":
        click.echo(json.dumps(status, indent=2))
        return
    last = status["last_run"]
    if last is None:
        click.echo("last run: never (on this machine)")
    else:
        click.echo(
            f"last run: {last.get('ran_at')}, older than {last.get('older_than')}: removed "
            f"{last.get('sessions_removed', 0)} session(s), {last.get('records_removed', 0)} "
            f"records; kept {len(last.get('held_kept') or [])} on hold"
        )
    runs = status["recorded_runs"]
    click.echo(f"recorded runs: {len(runs)}")
    if runs:
        click.echo(
            render(
                runs,
                "table",
                ["at", "cutoff", "sessions_removed", "records_removed", "held_kept", "archive"],
            )
        )
    holds = status["holds"]
    click.echo(f"legal holds: {len(holds)}")
    if holds:
        click.echo(render(holds, "table", ["session_id", "reason", "since"]))
