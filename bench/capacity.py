"""A capacity model for a fleet: the CPU each stored frame costs in the tap, its store worker and
PostgreSQL, measured at 1, 2 and 4 taps, and what that predicts for a larger host.

This machine has 2 cores, so a fleet of 8 or 16 taps cannot be measured at scale here; what can
be measured is the cost of one frame in each process, and whether that cost stays put as taps are
added. Each run is `bench/fleet.py`'s (N taps into one fresh PostgreSQL database, each client
alternating sequential calls and pipelined bursts, signing checkpoints as a fleet with a key does);
while it runs, the CPU of every process is read from /proc (utime + stime, by process, sampled
every 50 ms), between the moment every warm-up frame is stored and the moment every measured
frame is. PostgreSQL's commits come from `pg_stat_database` over the same span.

The model: a frame costs c_tap + c_worker + c_db CPU seconds to record (the client and server
cost what they cost with or without a recorder). A host with K cores for recording stores at most
K / (c_tap + c_worker + c_db) frames a second; PostgreSQL alone, with D cores, at most D / c_db.
Checked here against the 2- and 4-tap runs: with everything (clients, servers, taps, workers,
the database) on the same 2 cores, the predicted rate is 2 / (the sum of every process's cost
per frame, from the 1-tap run), or N times the lone tap's rate when that is lower.

    python bench/capacity.py                 # 1, 2 and 4 taps, about two minutes
    python bench/capacity.py --taps 1 2 4 8 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blackbox.recorder.store import open_store
from blackbox.recorder.store.layout import ROW_COLUMNS
from blackbox.recorder.trust.keys import KEY_ENV, init_key
from blackbox.recorder.trust.signing import DEFAULT_EVERY_SECONDS, EVERY_ENV
from fleet import run_fleet
from ingest import bare_table, column_types, copy_batches
from tap_overhead import SERVER_MARK

TICK = os.sysconf("SC_CLK_TCK")
ROLES = ("tap", "store worker", "postgres", "server", "client")


def role_of(pid: int) -> str | None:
    """Which part of the fleet process `pid` is, from its command line."""
    if pid == os.getpid():
        return "client"  # the bench's threads are the hosts
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    line = b" ".join(argv)
    if b"ship_worker" in line:
        return "store worker"
    if b"blackbox" in line and b"record" in argv:
        return "tap"
    if SERVER_MARK.encode() in line:
        return "server"
    if argv and argv[0].startswith(b"postgres"):
        return "postgres"
    return None


class CpuSampler:
    """Every process's CPU seconds by role, read from /proc every 50 ms in a thread of its own
    (whose own CPU is not counted as the client's). A process that exits keeps its last reading;
    it loses at most the 50 ms before it exited."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[str, float]] = {}
        self.roles: dict[int, str | None] = {}
        self.own = 0.0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            self.sample()
            self.own = time.thread_time()

    def sample(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid not in self.roles:
                self.roles[pid] = role_of(pid)
            role = self.roles[pid]
            if role is None:
                continue
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            with self.lock:
                self.seen[pid] = (role, cpu)

    def totals(self) -> dict[str, float]:
        """CPU seconds so far, by role (the sampler's own time taken out of the client's)."""
        self.sample()
        with self.lock:
            out = dict.fromkeys(ROLES, 0.0)
            for role, cpu in self.seen.values():
                out[role] += cpu
        out["client"] -= self.own
        return out


def commits(admin: str, db: str) -> int:
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,)
        ).fetchone()
    return int(row[0]) if row else 0


def bare_insert_cpu(admin: str, db: str, frames: int) -> tuple[float, int]:
    """The floor of the store worker's CPU per frame: this process's CPU for a binary COPY of the
    log's own rows (the first `frames` the fleet stored, every column as stored) into a table of
    the same columns with no key, index or trigger, in batches of 1,000 (`ingest.BATCH`).
    Returns (CPU seconds, rows)."""
    url = f"{admin.rsplit('/', 1)[0]}/{db}"
    with psycopg.connect(url) as conn:
        columns = ", ".join(ROW_COLUMNS)
        rows = conn.execute(
            f"SELECT {columns} FROM events ORDER BY position LIMIT %s", (frames,)
        ).fetchall()
        conn.execute(bare_table(sqlite=False))
        conn.commit()
        types = column_types(sqlite=False)
        start = time.process_time()
        copy_batches(conn, "COPY t FROM STDIN (FORMAT BINARY)", rows, types)
        return time.process_time() - start, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--taps", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=3, help="sequential + burst per client")
    parser.add_argument("--seq", type=int, default=200, help="sequential calls per round")
    parser.add_argument("--burst", type=int, default=1000, help="pipelined calls per round")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--host-cores", type=int, default=16, help="the host the model sizes")
    args = parser.parse_args()

    admin = args.pg.replace("postgresql+psycopg:", "postgresql:", 1)
    db = f"bbcapacity_{secrets.token_hex(4)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    url = f"{args.pg.rsplit('/', 1)[0]}/{db}"
    sampler = CpuSampler()
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    runs: list[tuple[int, float, int, dict[str, float], int]] = []
    try:
        open_store(url).close()  # migrate once, before any tap opens it
        with tempfile.TemporaryDirectory(prefix="bb-capacity-") as tmp:
            work = Path(tmp)
            key = work / "fleet.key"
            init_key(key, "bench.example/capacity")
            signing = {KEY_ENV: str(key), EVERY_ENV: str(DEFAULT_EVERY_SECONDS)}
            for run, taps in enumerate(args.taps):
                marks: list[tuple[dict[str, float], int]] = []

                def mark() -> None:
                    marks.append((sampler.totals(), commits(admin, db)))  # noqa: B023

                label = f"run{run}-"  # a prefix no other run's session names start with
                shape = (args.rounds, args.seq, args.burst, 120.0, signing)
                rate, _lat, sent = run_fleet(
                    url, work, label, taps, *shape, on_warm=mark, on_stored=mark
                )
                (before, c0), (after, c1) = marks
                frames = sent - taps * 100  # each tap's 50 warm-up calls are 100 frames
                used = {role: after[role] - before[role] for role in ROLES}
                runs.append((taps, rate, frames, used, c1 - c0))
                print(f"{taps} tap(s) done", file=sys.stderr)
        sampler.stop.set()
        sampler.thread.join()  # its CPU is not the bare insert's
        bare_cpu, bare_rows = bare_insert_cpu(admin, db, runs[0][2])
    finally:
        sampler.stop.set()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    print(
        f"\n{args.rounds} rounds of ({args.seq} sequential + {args.burst} pipelined) tools/call "
        f"per tap into one PostgreSQL; {cores} CPUs, load average {load:.2f} before"
    )
    print("CPU per stored frame, µs (same run):")
    print(f"{'taps':>5} {'frames/s':>9} " + " ".join(f"{r:>12}" for r in ROLES) + "  commits/frame")
    for taps, rate, frames, used, n_commits in runs:
        per = " ".join(f"{used[r] / frames * 1e6:12.1f}" for r in ROLES)
        print(f"{taps:5d} {rate:9,.0f} {per}  {n_commits / frames:.3f}")

    taps1, rate1, frames1, used1, _ = runs[0]
    recorder = sum(used1[r] for r in ("tap", "store worker", "postgres")) / frames1
    everything = sum(used1.values()) / frames1
    print(
        f"\nmodel (from the {taps1}-tap run): recording costs {recorder * 1e6:.1f} µs of CPU a "
        f"frame (tap {used1['tap'] / frames1 * 1e6:.1f}, store worker "
        f"{used1['store worker'] / frames1 * 1e6:.1f}, PostgreSQL "
        f"{used1['postgres'] / frames1 * 1e6:.1f}); with the hosts and servers, "
        f"{everything * 1e6:.1f} µs"
    )
    per_core = 1 / recorder
    print(
        f"  = {per_core:,.0f} frames/s per core given to recording; a {args.host_cores}-core host "
        f"recording only: {args.host_cores * per_core:,.0f} frames/s; PostgreSQL alone saturates "
        f"one core at {frames1 / used1['postgres']:,.0f} frames/s"
        if used1["postgres"] > 0
        else ""
    )
    worker = used1["store worker"] / frames1
    bare = bare_cpu / bare_rows
    print(
        f"store worker against a bare batched insert of the same rows (binary COPY of "
        f"{bare_rows:,} stored rows in batches of 1,000 into a table of the same columns, this "
        f"process's CPU): {worker * 1e6:.1f} / {bare * 1e6:.1f} µs a frame = {worker / bare:.2f}x "
        f"(goal <= 1.5)"
    )
    print(f"check against the runs, everything on these {cores} cores:")
    for taps, rate, _frames, _used, _ in runs[1:]:
        predicted = min(taps * rate1, cores / everything)
        print(
            f"  {taps} taps: predicted {predicted:,.0f} frames/s, measured {rate:,.0f} "
            f"({rate / predicted:.2f}x the prediction)"
        )


if __name__ == "__main__":
    main()
