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


# The one reading of durations for every option (--older-than, --since, --until, --idle,
# --idle-gap, --timeout). `m` alone is refused: minutes to some, months to others.
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)?\s*$")
_UNIT_S = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
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
UNITS_HINT = "s, min, h, d, w, mo, y (90d, 30min, 6mo) or ISO 8601 (P1DT2H)"


def parse_duration(text: str, bare_seconds: bool = False) -> float | None:
    """A duration in seconds (`90s`, `30min`, `12h`, `7d`, `2w`, `6mo`, `1y`, `250ms`, ISO 8601
    `PT30M`, `P1Y2M`), None when `text` is no duration at all; a plain number only when
    `bare_seconds`. Raises `BadTime` for the ambiguous `m` and unknown units."""
    text = text.strip()
    iso = _ISO.match(text)
    if iso is not None:
        return sum(float(v) * _UNIT_S[k] for k, v in iso.groupdict().items() if v)
    match = _SPAN.match(text)
    if match is None:
        return None
    number, unit = float(match.group(1)), match.group(2)
    if unit is None:
        if not bare_seconds:
            raise BadTime(f"{text!r} is not an age, not a duration: add a unit, {UNITS_HINT}")
        return number
    if unit == "m" or unit == "M":
        raise BadTime(
            f"{text!r} is ambiguous: write {match.group(1)}min for minutes or "
            f"{match.group(1)}mo for months"
        )
    if unit.lower() not in _UNIT_S:
        raise BadTime(f"{text!r}: unknown unit {unit!r}; use {UNITS_HINT}")
    return number * _UNIT_S[unit.lower()]


def span_seconds(text: str, bare_seconds: bool = False) -> float:
    """A duration in seconds (see `parse_duration`); a plain number only when `bare_seconds` (a
    retention age of a bare `90` would be read as seconds: too easy a mistake)."""
    seconds = parse_duration(text, bare_seconds)
    if seconds is None:
        raise BadTime(f"{text!r} is not an age, not a duration: use a number and {UNITS_HINT}")
    return seconds


def moment_ns(text: str, now_ns: int | None = None) -> int:
    """A point in time in ns: an age (`7d`: that long ago) or an ISO date/time (UTC unless it
    says otherwise)."""
    now = time.time_ns() if now_ns is None else now_ns
    seconds = parse_duration(text)
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
    """A positive duration option: `30min`, `90s`, `1h`, `250ms`, `PT5M`, or plain seconds."""

    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            seconds = span_seconds(str(value), bare_seconds=True)
        except BadTime as exc:
            self.fail(str(exc), param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r} is not a positive duration", param, ctx)
        return seconds
