"""Benchmark of redaction on hostile text: every built-in rule must take time linear in the input.

For each built-in rule, hostile frames of 80 KB are made from its trigger words (tiled, in pairs,
or followed by a long run of one character: the near-misses that make a rule start over and over
without completing a match) and the worst one is kept. Each row prints that worst frame's cost
through `Redactor.redact_frame` (with `blackbox record --redact` that is what a frame waits for
before it is journaled and forwarded), its ratio to a plain frame of the same size (prose with a
few secrets, so every rule runs over all of it), and its growth from 20 KB to 80 KB (linear is
~4x; the quadratic `password_phrase` rule this replaced grew ~16x and took 120 s at 80 KB).
The goal is at most 3x plain and 50 ms per 80 KB frame; a last row shows a frame holding
thousands of real secrets, whose cost is per secret replaced.

    python bench/redact.py            # every candidate (~1-2 min)
    python bench/redact.py --quick    # fewer run characters
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from blackbox.recorder.privacy.hostile import (
    HOSTILE_PIECES,
    QUICK_RUN_CHARS,
    RUN_CHARS,
    candidates,
    frame,
    plain_text,
)
from blackbox.recorder.privacy.redact import Redactor

N = 80_000


def timed(redactor: Redactor, raw: bytes, repeat: int) -> tuple[float, int]:
    """The best time of `repeat` runs, and how many secrets one run replaced."""
    best = float("inf")
    for _ in range(repeat):
        redactor.counts.clear()
        start = time.perf_counter()
        redactor.redact_frame(raw)
        best = min(best, time.perf_counter() - start)
    return best, redactor.total


def worst(redactor: Redactor, texts: list[str], secrets: bool) -> tuple[float, int, str]:
    """The slowest text (best of three for the slowest few: one slow run may be the machine),
    among those that replace no secret (near-misses) or among those that replace some."""
    costs = []
    for text in texts:
        elapsed, replaced = timed(redactor, frame(text), 1)
        if (replaced > 0) == secrets:
            costs.append((elapsed, text))
    if not costs:
        return 0.0, 0, ""
    best = max((*timed(redactor, frame(t), 3), t) for _, t in sorted(costs, reverse=True)[:3])
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer run characters")
    args = parser.parse_args()
    chars = QUICK_RUN_CHARS if args.quick else RUN_CHARS
    redactor = Redactor.default(key=b"bench")
    rules = {rule.name for rule in redactor.rules}
    missing = rules - set(HOSTILE_PIECES)
    if missing:
        print(f"no hostile words for: {', '.join(sorted(missing))}")
        return 1
    plain = frame(plain_text(N))
    timed(redactor, plain, 2)  # warm: RE2 builds its automata lazily
    plain_s = timed(redactor, plain, 5)[0]
    load = os.getloadavg()[0]
    print(f"plain 80 KB frame: {plain_s * 1e3:.2f} ms (load average {load:.1f})")
    print("near-miss: the worst frame that replaces nothing; with secrets: the worst that does\n")
    print(
        f"{'rule':21} {'near-miss 80 KB':31} {'ms':>6} {'x plain':>8} {'20->80K':>7}"
        f" | {'with secrets':>12} {'us/secret':>9}"
    )
    worst_ratio = worst_ms = 0.0
    for name in HOSTILE_PIECES:
        texts = candidates(HOSTILE_PIECES[name], chars, N)
        near_s, _, near = worst(redactor, texts, secrets=False)
        dense_s, replaced, _ = worst(redactor, texts, secrets=True)
        quarter = timed(redactor, frame(near[: N // 4]), 5)[0] if near else 0.0
        growth = timed(redactor, frame(near), 5)[0] / max(quarter, 1e-9) if near else 0.0
        ratio = near_s / plain_s
        worst_ratio, worst_ms = max(worst_ratio, ratio), max(worst_ms, near_s * 1e3)
        per_secret = f"{dense_s / replaced * 1e6:9.1f}" if replaced else f"{'-':>9}"
        print(
            f"{name:21} {repr(near[:26])[:31]:31} {near_s * 1e3:6.1f} {ratio:7.2f}x {growth:6.1f}x"
            f" | {dense_s * 1e3:9.1f} ms {per_secret}"
        )
    print(f"\nworst near-miss frame: {worst_ms:.1f} ms, {worst_ratio:.2f}x plain (goal: 50 ms, 3x)")
    count = N // 18
    many_s = timed(redactor, frame("".join(f"password={i:06d}x " for i in range(count))), 3)[0]
    print(
        f"80 KB frame holding {count} real secrets: {many_s * 1e3:.1f} ms "
        f"({many_s / count * 1e6:.1f} us per secret replaced)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
