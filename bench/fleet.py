"""A fleet of stdio taps recording into one PostgreSQL store, against one tap alone.

Where fleets live: many `blackbox record` processes, each with its own server and host, all
shipping into one PostgreSQL database. This runs N taps at once (default 8), each with a client
that alternates sequential `tools/call` round trips (for the latency tail) with pipelined bursts
(for throughput), and the same work through one tap alone before and after the fleet (the
baseline, same run, same store). It reports the frames stored per second (from the first request
until the store holds every frame), each tap's p99 against the lone tap's, and checks that nothing
was lost and every session's chain verifies. Every tap signs checkpoints with one shared key as
it stores, as a fleet with a key configured does (at the end of each session and every 60 s, the
product's default; `--checkpoint-every` signs more often): at the end each checkpoint must be
consistent with the next (the store's consistency proof, checked as an auditor checks it) and
all of them must verify against the records themselves. The database is a fresh one, dropped at
the end.

    python bench/fleet.py                      # 8 taps, about a minute
    python bench/fleet.py --taps 4 --rounds 3
    python bench/fleet.py --sqlite             # the same into one SQLite file
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blackbox.recorder.log import merkle
from blackbox.recorder.store import open_store, tree
from blackbox.recorder.trust import logproof
from blackbox.recorder.trust.keys import KEY_ENV, init_key
from blackbox.recorder.trust.signing import DEFAULT_EVERY_SECONDS, EVERY_ENV
from tap_overhead import BLACKBOX, SERVER, SERVER_MARK, Peer, pct


def stored_frames(url: str, prefix: str) -> tuple[int, int]:
    """(sessions, frames) the store holds for sessions named `prefix*`."""
    store = open_store(url)
    try:
        sessions = [s for s in store.list_sessions() if (s.name or "").startswith(prefix)]
        return len(sessions), sum(s.frames for s in sessions)
    finally:
        store.close()


def check_checkpoints(url: str, vkey: str) -> str:
    """Every checkpoint the taps signed, each against the next and all against the records: one
    line saying what holds, or what does not."""
    store = open_store(url)
    try:
        with store.transaction() as conn:
            kept = tree.stored_checkpoints(conn)
            runs = len(conn.execute(tree.tree_runs.select()).all())
            problems = []
            for old, new in itertools.pairwise(kept):
                if new.size < old.size:
                    problems.append(f"checkpoint {new.id} is smaller than {old.id}")
                    continue
                proof = tree.consistency_proof(conn, old.size, new.size)
                if not merkle.verify_consistency(
                    old.size, new.size, old.root_hash, new.root_hash, proof
                ):
                    problems.append(f"checkpoint {old.id} is not consistent with {new.id}")
        report = logproof.verify_checkpoint(store, "\n".join(k.note for k in kept), vkey)
    finally:
        store.close()
    problems += report.findings
    if not kept:
        return "checkpoints: NONE were signed"
    status = "each consistent with the next, all verify against the records"
    return (
        f"checkpoints: {len(kept)} signed by the taps, up to {kept[-1].size:,} records "
        f"({runs} runs of positions in the tree); "
        + (status if not problems else f"BROKEN: {problems[:3]}")
    )


def run_fleet(
    url: str,
    work: Path,
    label: str,
    taps: int,
    rounds: int,
    seq: int,
    burst: int,
    stall_s: float,
    signing: dict[str, str],
    on_warm: Callable[[], object] | None = None,
    on_stored: Callable[[], object] | None = None,
) -> tuple[float, list[list[int]], int]:
    """`taps` taps at once, each `rounds` x (seq sequential calls + a burst of `burst`); returns
    frames stored per second, each tap's latencies, and the frames sent. `on_warm` runs once every
    warm-up frame is stored, `on_stored` once the measured ones are (bench/capacity.py takes its
    CPU readings there)."""
    server = [sys.executable, "-c", SERVER, SERVER_MARK]
    peers = []
    for i in range(taps):
        env = dict(
            os.environ, BLACKBOX_HOME=str(work / f"home-{label}-{i}"), BLACKBOX_STORE=url, **signing
        )
        peers.append(Peer([BLACKBOX, "record", "--name", f"{label}-{i}", "--", *server], env))
    for peer in peers:
        peer.sequential(50)  # warm up: the tap, its store worker and the server are running
    warm = sum(p.frames for p in peers)
    deadline = time.monotonic() + 60
    while stored_frames(url, label)[1] < warm:
        if time.monotonic() > deadline:
            raise SystemExit(f"{label}: the warm-up frames were not stored in time")
        time.sleep(0.1)
    if on_warm is not None:
        on_warm()
    latencies: list[list[int]] = [[] for _ in peers]
    errors: list[BaseException] = []

    def drive(i: int) -> None:
        try:
            for _ in range(rounds):
                latencies[i] += peers[i].sequential(seq)
                peers[i].burst(burst)
        except BaseException as exc:  # reported below, never swallowed
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(taps)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"{label}: a client failed: {errors[0]!r}")
    sent = sum(p.frames for p in peers)
    deadline = time.monotonic() + stall_s
    while stored_frames(url, label)[1] < sent:
        if time.monotonic() > deadline:
            break  # reported as lost below
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    if on_stored is not None:
        on_stored()
    for peer in peers:
        if peer.close() != 0:
            raise SystemExit(f"{label}: a server did not exit cleanly")
    return (sent - warm) / elapsed, latencies, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--taps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5, help="sequential + burst per client")
    parser.add_argument("--seq", type=int, default=200, help="sequential calls per round")
    parser.add_argument("--burst", type=int, default=1000, help="pipelined calls per round")
    parser.add_argument(
        "--stall", type=float, default=60, help="give up waiting for the store after this long"
    )
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--sqlite", action="store_true", help="one SQLite file instead")
    parser.add_argument(
        "--checkpoint-every",
        type=float,
        default=DEFAULT_EVERY_SECONDS,
        help="seconds between each tap's checkpoints while it stores",
    )
    args = parser.parse_args()

    admin = args.pg.replace("postgresql+psycopg:", "postgresql:", 1)
    db = f"bbfleet_{secrets.token_hex(4)}"
    scratch = tempfile.mkdtemp(prefix="bb-fleet-store-")
    if args.sqlite:
        url = f"sqlite:///{scratch}/fleet.db"
    else:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db}"')
        url = f"{args.pg.rsplit('/', 1)[0]}/{db}"
    load = os.getloadavg()[0]
    try:
        open_store(url).close()  # migrate once, before any tap opens it
        with tempfile.TemporaryDirectory(prefix="bb-fleet-") as tmp:
            work = Path(tmp)
            key = work / "fleet.key"
            vkey = init_key(key, "bench.example/fleet").vkey
            signing = {KEY_ENV: str(key), EVERY_ENV: str(args.checkpoint_every)}
            shape = (args.rounds, args.seq, args.burst, args.stall, signing)
            lone1, lone_lat1, sent1 = run_fleet(url, work, "lone-a", 1, *shape)
            print("lone tap (before) done", file=sys.stderr)
            fleet, fleet_lat, sent_f = run_fleet(url, work, "fleet", args.taps, *shape)
            print("fleet done", file=sys.stderr)
            lone2, lone_lat2, sent2 = run_fleet(url, work, "lone-b", 1, *shape)
            print("lone tap (after) done", file=sys.stderr)
            store = open_store(url)
            findings = store.verify()
            sessions = store.list_sessions()
            store.close()
            checkpoints = check_checkpoints(url, vkey)
        lone_rate = (lone1 + lone2) / 2
        lone_p99 = pct(lone_lat1[0] + lone_lat2[0], 0.99)
        lone_p50 = pct(lone_lat1[0] + lone_lat2[0], 0.5)
        p99s = [pct(lat, 0.99) for lat in fleet_lat]
        p50s = [pct(lat, 0.5) for lat in fleet_lat]
        want = {"lone-a": sent1, "fleet": sent_f, "lone-b": sent2}
        got = {k: sum(s.frames for s in sessions if (s.name or "").startswith(k)) for k in want}
        print(
            f"\n{args.taps} taps x {args.rounds} rounds of ({args.seq} sequential + {args.burst} "
            f"pipelined) tools/call into one {'SQLite' if args.sqlite else 'PostgreSQL'}; "
            f"load average {load:.2f} before, "
            f"{os.getloadavg()[0]:.2f} after ({os.cpu_count()} CPUs)"
        )
        print(
            f"lone tap: {lone1:,.0f} / {lone2:,.0f} frames stored/s (before / after), "
            f"p50 {lone_p50:.3f} ms, p99 {lone_p99:.3f} ms"
        )
        print(
            f"fleet: {fleet:,.0f} frames stored/s = {fleet / lone_rate:.2f}x one tap's; "
            f"per-tap p50 {min(p50s):.3f}-{max(p50s):.3f} ms "
            f"({statistics.median(p50s) / lone_p50:.2f}x lone, median); "
            f"p99 {min(p99s):.3f}-{max(p99s):.3f} ms "
            f"({statistics.median(p99s) / lone_p99:.2f}x lone median, "
            f"{max(p99s) / lone_p99:.2f}x worst)"
        )
        lost = {k: want[k] - got[k] for k in want if got[k] != want[k]}
        print(
            f"stored: {sum(got.values()):,} of {sum(want.values()):,} frames "
            f"({'none lost' if not lost else f'MISSING {lost}'}) in {len(sessions)} sessions; "
            f"chains {'all verify' if not findings else f'BROKEN: {findings[:3]}'}"
        )
        print(checkpoints)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.sqlite:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


if __name__ == "__main__":
    main()
