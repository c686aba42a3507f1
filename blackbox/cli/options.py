"""Options and helpers shared by the command modules."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from blackbox import config
from blackbox.cli.output import FORMATS
from blackbox.recorder import BlackboxError
from blackbox.recorder.store import EventStore, open_store

store_option = click.option(
    "--store",
    "store_url",
    metavar="URL",
    default=None,
    help="Store URL (default: BLACKBOX_STORE, else the store of the user configuration, else "
    "SQLite in the user data directory).",
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
    help="Data directory (journals, default store, user configuration), as BLACKBOX_HOME "
    "would set it.",
)


policy_option = click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Gate tools/call requests with this policy file (TOML); denied ones are not forwarded.",
)


# A command function (or a command) an option decorator is applied to.
F = TypeVar("F", bound=Callable[..., Any])


def format_option(choices: tuple[str, ...] = FORMATS, default: str = "table") -> Callable[[F], F]:
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


# The one reading of durations for every option that takes a time (--timeout, --idle-after,
# --idle-gap, --every, --slow, --older-than, --since, --until, --idle). Two readings of one
# grammar: a duration (how long to wait) takes a bare number as seconds and `m` as minutes; an
# age (how far back, what retention removes) needs a unit and refuses `m`, which is minutes to
# some and months to others, and a retention age of 6 minutes instead of 6 months loses records.
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)?\s*$")
_UNIT_S = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86_400.0,
    "w": 604_800.0,
    "mo": 30 * 86_400.0,  # a month is 30 days, a year 365: ages, not calendar arithmetic
    "y": 365 * 86_400.0,
}
_ISO = re.compile(
    r"^P(?!$)(?:(?P<y>\d+(?:\.\d+)?)Y)?(?:(?P<mo>\d+(?:\.\d+)?)M)?(?:(?P<w>\d+(?:\.\d+)?)W)?"
    r"(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?=\d)(?:(?P<h>\d+(?:\.\d+)?)H)?"
    r"(?:(?P<min>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$",
    re.IGNORECASE,
)
UNITS_HINT = "ms, s, m or min, h, d, w, mo, y (500ms, 30s, 2m, 1h, 90d, 6mo) or ISO 8601 (P1DT2H)"
AGE_HINT = "s, min, h, d, w, mo, y (90d, 30min, 6mo) or ISO 8601 (P1DT2H)"
# What --help says of every duration option, so that each says it the same way.
DURATION_HELP = "500ms, 30s, 2m, 1h, 1d; a plain number is seconds"
AGE_HELP = "an age: 30min, 12h, 7d, 6mo, 1y (m alone is refused: min or mo)"


def parse_duration(text: str, *, age: bool = False) -> float | None:
    """Seconds of a duration (`500ms`, `90s`, `2m`, `30min`, `12h`, `7d`, `2w`, `6mo`, `1y`, ISO
    8601 `PT30M`, `P1Y2M`; a plain number is seconds), None when `text` is no duration at all.
    An `age` needs a unit and refuses the ambiguous `m`. Raises `BadTime` for unknown units."""
    text = text.strip()
    iso = _ISO.match(text)
    if iso is not None:
        return sum(float(v) * _UNIT_S[k] for k, v in iso.groupdict().items() if v)
    match = _SPAN.match(text)
    if match is None:
        return None
    number, unit = float(match.group(1)), match.group(2)
    if unit is None:
        if age:
            raise BadTime(f"{text!r} is not an age, not a duration: add a unit, {AGE_HINT}")
        return number
    if unit == "M" or (age and unit == "m"):
        raise BadTime(
            f"{text!r} is ambiguous: write {match.group(1)}min for minutes or "
            f"{match.group(1)}mo for months"
        )
    if unit.lower() not in _UNIT_S:
        raise BadTime(f"{text!r}: unknown unit {unit!r}; use {AGE_HINT if age else UNITS_HINT}")
    return number * _UNIT_S[unit.lower()]


def span_seconds(text: str, *, age: bool = False) -> float:
    """Seconds of a duration or, with `age`, of an age (see `parse_duration`: an age of a bare
    `90` would be read as seconds, too easy a mistake where records are removed)."""
    seconds = parse_duration(text, age=age)
    if seconds is None:
        what, hint = ("an age", AGE_HINT) if age else ("a duration", UNITS_HINT)
        raise BadTime(f"{text!r} is not {what}: use a number and {hint}")
    return seconds


def positive_seconds(text: str, *, allow_zero: bool = False) -> float:
    """Seconds of a duration that must be above zero (or zero, with `allow_zero`)."""
    seconds = span_seconds(text)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise BadTime(f"{text!r} is not a positive duration")
    return seconds


def moment_ns(text: str, now_ns: int | None = None) -> int:
    """A point in time in ns: an age (`7d`: that long ago) or an ISO date/time (UTC unless it
    says otherwise)."""
    now = time.time_ns() if now_ns is None else now_ns
    seconds = parse_duration(text, age=True)
    if seconds is not None:
        return now - int(seconds * 1e9)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadTime(
            f"cannot read time {text!r}: neither an age (7d, 30min, 6mo, P1D) nor a date "
            "(2026-11-30 or 2026-11-30T12:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    # Stores keep ns in a signed 64-bit integer (years 1677 to 2262): clamp, never overflow.
    return max(-(2**63), min(2**63 - 1, int(moment.timestamp() * 1_000_000) * 1000))


class Duration(click.ParamType):
    """A duration option: `500ms`, `30s`, `2m`, `1h`, `1d`, `PT5M`, or plain seconds; above zero
    unless `allow_zero`. Its value is seconds (a float)."""

    name = "duration"

    def __init__(self, *, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return positive_seconds(str(value), allow_zero=self.allow_zero)
        except BadTime as exc:
            self.fail(str(exc), param, ctx)


class Age(click.ParamType):
    """An age option (`--older-than 90d`): a unit is needed and `m` is refused (see
    `parse_duration`). Its value stays the text, which is what gets recorded and scheduled."""

    name = "age"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> str:
        try:
            span_seconds(str(value), age=True)
        except BadTime as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


class Moment(click.ParamType):
    """A point-in-time option (`--since 7d`, `--until 2026-11-30`): an age or an ISO date, read
    by `moment_ns`. Its value stays the text: the moment an age names is taken when it is used."""

    name = "when"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> str:
        try:
            moment_ns(str(value))
        except BadTime as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


NAME_GLOB_HELP = "a shell glob: * any text, ? one character, [ab] one of them"


def rules_file_option(help: str, exists: bool = False) -> Callable[[F], F]:
    """`--redact RULES` naming a rules file (value `redact_file`) for the commands that redact
    as they record or send (`record`, `bridge`, `attach`, `otel export`); `help` says to what."""
    return click.option(
        "--redact",
        "redact_file",
        type=click.Path(dir_okay=False, exists=exists, path_type=Path),
        default=None,
        help=help,
    )
