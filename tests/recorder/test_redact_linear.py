"""Redaction takes time linear in the text, for every built-in rule, whatever a hostile server
puts in a frame: the rule's trigger words repeated with no closing match, and long runs of each
character its patterns repeat, at 80 KB (the review's attack line), must cost no more than a
bounded multiple of plain text of the same size (plus a bounded cost per secret actually
replaced).

Before: the `password_phrase` rule (`password\\s+is\\s*:?\\s*...`) backtracked over every way of
splitting a run of white space between its two `\\s*`: "password is", 80,000 spaces and a full
stop took about 120 s (2.4 s at 8 KB)."""

from __future__ import annotations

import functools
import time

import pytest
from blackbox.recorder.privacy.hostile import HOSTILE_PIECES, RUN_CHARS, frame, plain_text, tile
from blackbox.recorder.privacy.redact import Redactor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEY = b"test-key"
N = 80_000


def _best(redactor: Redactor, text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        redactor.redact_text(text)
        best = min(best, time.perf_counter() - start)
    return best


PLAIN = plain_text(N)
# Bounds: generous, as the suite shares two cores with other work (bench/redact.py measures
# the worst near-miss frames at about 2x plain text on this machine); a quadratic rule misses
# them by a factor of a thousand at this size.
RATIO = 30.0
PER_SECRET = 60e-6  # what replacing one secret may add (its fingerprint, the splice)


@functools.cache
def _redactor() -> Redactor:
    """One redactor for the module, its automata built (they are built lazily, on first use)."""
    redactor = Redactor.default(key=KEY)
    redactor.redact_text(PLAIN)
    return redactor


@functools.cache
def _plain_seconds() -> float:
    """Plain text's best time, measured once for the module rather than beside each example
    (it was three of each example's five redactions of 80 KB)."""
    return _best(_redactor(), PLAIN, 3)


def test_every_builtin_rule_has_hostile_words() -> None:
    names = {rule.name for rule in Redactor.default(key=KEY).rules}
    assert names == set(HOSTILE_PIECES)


@pytest.mark.parametrize("rule", sorted(HOSTILE_PIECES))
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_hostile_text_costs_a_bounded_multiple_of_plain_text(
    rule: str, data: st.DataObject
) -> None:
    pieces = HOSTILE_PIECES[rule]
    if data.draw(st.booleans(), label="tiled"):
        units = data.draw(
            st.lists(st.sampled_from(pieces + tuple(RUN_CHARS)), min_size=1, max_size=4),
            label="units",
        )
        hostile = tile("".join(units), N)
    else:
        head = data.draw(st.sampled_from(pieces), label="head")
        run = data.draw(st.sampled_from(RUN_CHARS), label="run")
        hostile = head + run * (N - len(head))
    redactor = _redactor()
    # The best of two timings of the hostile text must stay within the bound, as before; the
    # second is only taken, with plain text timed again beside it (the load may have changed
    # since the module's measurement), when the first misses it.
    for attempt in range(2):
        plain = _best(redactor, PLAIN, 2) if attempt else _plain_seconds()
        redactor.counts.clear()
        start = time.perf_counter()
        redactor.redact_text(hostile)
        elapsed = time.perf_counter() - start
        replaced = sum(redactor.counts.values())
        bound = RATIO * plain + PER_SECRET * replaced
        if elapsed <= bound:
            break
    assert elapsed <= bound, (
        f"{rule}: {elapsed * 1e3:.1f} ms on {hostile[:40]!r}... against {plain * 1e3:.1f} ms "
        f"for plain text ({replaced} secrets replaced)"
    )


@pytest.mark.parametrize(
    "gap",
    [" " * N, "\t" * N, "\n" * N, " " * (N // 2) + ":" + " " * (N // 2), " \t" * (N // 2)],
    ids=["spaces", "tabs", "newlines", "colon", "mixed"],
)
def test_password_phrase_with_a_long_gap_stays_fast_and_still_redacts(gap: str) -> None:
    """Before: "password is", 80,000 spaces and a full stop took about 120 s."""
    redactor = Redactor.default(key=KEY)
    for tail in (".", " the password is hunter2."):
        text = "password is" + gap + tail
        start = time.perf_counter()
        out = redactor.redact_frame(frame(text))
        assert time.perf_counter() - start < 0.5
        assert b"hunter2" not in out


def test_many_secrets_in_one_frame_cost_per_secret() -> None:
    """80 KB holding 4,000 secrets: each costs its replacement, none makes the others dearer."""
    redactor = Redactor.default(key=KEY)
    text = "".join(f"password={i:06d}x " for i in range(N // 18))
    start = time.perf_counter()
    out = redactor.redact_text(text)
    elapsed = time.perf_counter() - start
    assert "000001x" not in out and out.count("[redacted:") == N // 18
    assert elapsed < 1.0
