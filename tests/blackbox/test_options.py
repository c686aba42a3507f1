"""Durations and points in time as every command reads them (one parser for all)."""

from __future__ import annotations

from datetime import UTC, datetime

import click
import pytest

from blackbox.options import BadTime, Duration, moment_ns, span_seconds


def test_moment_from_an_age_or_a_date() -> None:
    now = 1_000_000 * 10**9
    assert moment_ns("7d", now) == now - 7 * 86_400 * 10**9
    assert moment_ns("90m", now) == now - 90 * 60 * 10**9
    midnight = int(datetime(2026, 11, 30, tzinfo=UTC).timestamp()) * 10**9
    assert moment_ns("2026-11-30", now) == midnight
    assert moment_ns("2026-11-30T01:00:00+01:00", now) == midnight
    assert moment_ns("2026-11-30T00:00:00Z", now) == midnight
    with pytest.raises(BadTime, match="7d"):
        moment_ns("last tuesday", now)


def test_spans_need_a_unit_unless_bare_seconds_are_allowed() -> None:
    assert span_seconds("90d") == 90 * 86_400
    assert span_seconds("250ms") == pytest.approx(0.25)
    assert span_seconds("2w") == 14 * 86_400
    with pytest.raises(BadTime, match="is not an age"):
        span_seconds("90")  # a retention age of 90 seconds is never what was meant
    assert span_seconds("90", bare_seconds=True) == 90


def test_duration_option_type() -> None:
    duration = Duration()
    assert duration.convert("30m", None, None) == 1800
    assert duration.convert("15", None, None) == 15
    for bad in ("0s", "soon"):
        with pytest.raises(click.BadParameter):
            duration.convert(bad, None, None)
