"""Benchmark of redaction on hostile text: the built-in rules must take time linear in the input.

For each adversarial input (the review's `a.a.a…@` and its kin for every rule that could
backtrack) at 10 KB, 100 KB, 1 MB and 10 MB, the time of `Redactor.redact_text` is printed with
two ratios: the growth against the size ten times smaller (linear is ~10x), and the cost against
a plain text of the same size (prose with a few e-mails, URLs, passwords and keys, so every rule
runs over all of it). The 10 MB case must stay within 2x of the plain text.

It also times `redact_frame` on a 40 KB hostile JSON frame: with `blackbox record --redact` that
is what a frame waits for before it is journaled and forwarded (the journal comes first, by
design), so it is the forwarding delay redaction adds.

    python bench/redact.py            # up to 10 MB (~1 min)
    python bench/redact.py --quick    # up to 1 MB
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from blackbox.recorder.privacy.redact import Redactor


def _tile(unit: str, size: int, tail: str = "") -> str:
    return (unit * (size // len(unit) + 1))[: size - len(tail)] + tail


HOSTILE = {
    "email a.a.a…@": lambda n: _tile("a.", n, "@"),
    "email a@a@a@…": lambda n: _tile("a@", n),
    "email @a.a.a…": lambda n: "x@" + _tile("a.", n - 2),
    "url a.a.a…://": lambda n: _tile("a.", n, "://"),
    "url x://aaa…": lambda n: "x://" + _tile("a", n - 4),
    "url x://u::::…": lambda n: "x://u" + _tile(":", n - 5),
    "url scheme://x: rep": lambda n: _tile("abcdefghijklmnopqrstuvwxyzabcdef://x:", n),
    "jwt eyJ-eyJ-…": lambda n: _tile("eyJ-", n),
    "pem BEGIN rep": lambda n: _tile("-----BEGIN RSA PRIVATE KEY-----", n),
    "phrase password is …": lambda n: "password is " + _tile(".", n - 12),
}

WORDS = ["the", "server", "returned", "a", "result", "with", "status", "ok", "and", "tool"]
WORDS += ["listed", "files", "in", "project", "directory", "while", "client", "waited", "for"]
SPRINKLE = [
    "alice.auditor@example.org",
    "https://user:hunter2pw@db.example.com/x",
    "password=tiger-lily-42",
    "Bearer abcdefghijklmnop",
    "sk-proj-Abc123Def456Ghi789Jkl012",
    "token: opaque-value",
]


def plain_text(size: int) -> str:
    rng = random.Random(7)
    parts: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(SPRINKLE) if rng.random() < 0.002 else rng.choice(WORDS)
        parts.append(word)
        length += len(word) + 1
    return " ".join(parts)[:size]


def timed(redactor: Redactor, text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        redactor.redact_text(text)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at 1 MB")
    args = parser.parse_args()
    sizes = [10_000, 100_000, 1_000_000] + ([] if args.quick else [10_000_000])
    redactor = Redactor.default(key=b"bench")
    plain = {n: timed(redactor, plain_text(n), 3 if n < 10_000_000 else 1) for n in sizes}
    print(f"{'input':24}" + "".join(f"{n // 1000:>10,} KB" for n in sizes) + "   growth  vs plain")
    print(f"{'plain text':24}" + "".join(f"{plain[n] * 1e3:>11.1f}ms" for n in sizes))
    worst = 0.0
    for name, make in HOSTILE.items():
        times = [timed(redactor, make(n), 3 if n < 10_000_000 else 1) for n in sizes]
        growth = times[-1] / times[-2] if times[-2] > 0 else float("inf")
        ratio = times[-1] / plain[sizes[-1]]
        worst = max(worst, ratio)
        print(
            f"{name:24}"
            + "".join(f"{t * 1e3:>11.1f}ms" for t in times)
            + f"   {growth:5.1f}x  {ratio:6.2f}x"
        )
    print(f"largest hostile/plain ratio at {sizes[-1] // 1_000_000 or 1} MB: {worst:.2f}x")

    delays = []
    for make in HOSTILE.values():
        frame = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"text": make(40_000)}}).encode()
        start = time.perf_counter()
        redactor.redact_frame(frame)
        delays.append(time.perf_counter() - start)
    print(
        f"redact_frame on a 40 KB hostile frame (the delay before forwarding): worst "
        f"{max(delays) * 1e3:.2f} ms, median {sorted(delays)[len(delays) // 2] * 1e3:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
