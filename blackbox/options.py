"""Options and helpers shared by the command modules."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path

import click

from blackbox import config
from blackbox.output import FORMATS
from recorder.errors import BlackboxError
from recorder.store import EventStore, open_store

store_option = click.option(
    "--store",
    "store_url",
    metavar="URL",
    default=None,
    help="Store URL (default: BLACKBOX_STORE, else SQLite in the user data directory).",
)


def _set_home(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # Eager and applied at once: every later default (store, journal directory, keys) reads it.
    if value:
        import os

        os.environ[config.HOME_ENV] = str(Path(value).expanduser())
    return value


home_option = click.option(
    "--home",
    metavar="DIR",
    default=None,
    is_eager=True,
    expose_value=False,
    callback=_set_home,
    help="Data directory (journals, default store), as BLACKBOX_HOME would set it; attach "
    "writes it into the config because hosts start servers with a minimal environment.",
)


policy_option = click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Gate tools/call requests with this policy file (TOML); denied ones are not forwarded.",
)


def format_option(choices: tuple[str, ...] = FORMATS, default: str = "table"):  # type: ignore[no-untyped-def]
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help="Output format.",
    )


def open_configured_store(store_url: str | None, *, create: bool = False) -> EventStore:
    """The store named by the flag, the environment or the default. Readers leave `create`
    False: where there is no store they say so (`StoreMissing`: one line, exit 2) instead of
    making an empty one; writers (`db upgrade`, decision and hook recording) pass True."""
    return open_store(config.store_url(store_url), create=create)


class BadTime(BlackboxError):
    """A duration or a point in time that cannot be read."""


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}


def span_seconds(text: str, bare_seconds: bool = False) -> float:
    """`90d`, `12h`, `30m`, `250ms`, `2w` in seconds; a plain number only when `bare_seconds`
    (a retention age of a bare `90` would be read as seconds: too easy a mistake)."""
    match = _SPAN.match(text)
    if match is None or (match.group(2) is None and not bare_seconds):
        raise BadTime(
            f"{text!r} is not an age, not a duration: use a number and ms, s, m, h, d or w (90d)"
        )
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def moment_ns(text: str, now_ns: int | None = None) -> int:
    """A point in time in ns: an age (`7d`: that long ago) or an ISO date/time (UTC unless it
    says otherwise)."""
    now = time.time_ns() if now_ns is None else now_ns
    match = _SPAN.match(text)
    if match is not None and match.group(2) is not None:
        return now - int(float(match.group(1)) * _UNIT_S[match.group(2)] * 1e9)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadTime(
            f"cannot read time {text!r}: neither an age (7d, 12h, 30m) nor a date "
            "(2026-11-30 or 2026-11-30T12:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000) * 1000


class Duration(click.ParamType):
    """A positive duration option: `30m`, `90s`, `1h`, `250ms`, or plain seconds."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None):  # type: ignore[no-untyped-def]
        if isinstance(value, int | float):
            return float(value)
        try:
            seconds = span_seconds(str(value), bare_seconds=True)
        except BadTime as exc:
            self.fail(str(exc), param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r} is not a positive duration", param, ctx)
        return seconds
