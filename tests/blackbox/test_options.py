"""Durations, ages and points in time as every command reads them (one parser for all)."""

from __future__ import annotations

from datetime import UTC, datetime

import click
import pytest

from blackbox.cli.options import BadTime, Duration, moment_ns, span_seconds


def test_moment_from_an_age_or_a_date() -> None:
    now = 1_000_000 * 10**9
    assert moment_ns("7d", now) == now - 7 * 86_400 * 10**9
    assert moment_ns("90min", now) == now - 90 * 60 * 10**9
    midnight = int(datetime(2026, 11, 30, tzinfo=UTC).timestamp()) * 10**9
    assert moment_ns("2026-11-30", now) == midnight
    assert moment_ns("2026-11-30T01:00:00+01:00", now) == midnight
    assert moment_ns("2026-11-30T00:00:00Z", now) == midnight
    with pytest.raises(BadTime, match="7d"):
        moment_ns("last tuesday", now)


def test_ages_need_a_unit_durations_take_bare_seconds() -> None:
    assert span_seconds("90d", age=True) == 90 * 86_400
    assert span_seconds("250ms") == pytest.approx(0.25)
    assert span_seconds("2w") == 14 * 86_400
    with pytest.raises(BadTime, match="is not an age"):
        span_seconds("90", age=True)  # a retention age of 90 seconds is never what was meant
    assert span_seconds("90") == 90


def test_duration_option_type() -> None:
    duration = Duration()
    assert duration.convert("30min", None, None) == 1800
    assert duration.convert("15", None, None) == 15
    for bad in ("0s", "soon"):
        with pytest.raises(click.BadParameter):
            duration.convert(bad, None, None)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45),
        ("30min", 1800),
        ("12h", 43_200),
        ("7d", 604_800),
        ("2w", 1_209_600),
        ("6mo", 180 * 86_400),
        ("1y", 365 * 86_400),
        ("1.5h", 5400),
        ("PT30M", 1800),
        ("P1D", 86_400),
        ("P1DT2H3M4S", 86_400 + 7200 + 180 + 4),
        ("P6M", 180 * 86_400),
        ("P1Y", 365 * 86_400),
        ("P2W", 1_209_600),
    ],
)
def test_one_reading_of_every_unit(text: str, seconds: float) -> None:
    assert span_seconds(text) == pytest.approx(seconds)
    assert Duration().convert(text, None, None) == pytest.approx(seconds)


def test_a_bare_m_is_minutes_in_a_duration_and_refused_in_an_age() -> None:
    assert span_seconds("1m") == 60 and Duration().convert("2m", None, None) == 120
    with pytest.raises(BadTime) as info:
        span_seconds("1m", age=True)
    assert str(info.value) == "'1m' is ambiguous: write 1min for minutes or 1mo for months"
    with pytest.raises(BadTime, match="ambiguous"):
        span_seconds("1M")  # never minutes: ISO 8601 and others read M as months
    with pytest.raises(BadTime, match="ambiguous"):
        moment_ns("30m")
    for bad in ("P", "PT", "3parsecs"):
        with pytest.raises(BadTime):
            span_seconds(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["retention", "apply", "--older-than", "1m", "--dry-run"],
        ["sessions", "--since", "1m"],
        ["sessions", "--until", "1m"],
        ["report", "latency", "--since", "1m"],
    ],
)
def test_every_age_option_refuses_a_bare_m(argv: list[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from blackbox.cli.main import main

    store = f"sqlite:///{tmp_path / 's.db'}"
    from blackbox.recorder.store import open_store

    open_store(store).close()
    extra = ["--store", store]
    result = CliRunner().invoke(main, [*argv, *extra])
    assert result.exit_code == 2, result.output
    assert "ambiguous: write 1min for minutes or 1mo for months" in result.output
    assert "Traceback" not in result.output
