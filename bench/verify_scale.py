"""PostgreSQL `verify` as the log grows: is its rate flat to 10M records, and if not, why?

Fills a PostgreSQL store in steps with bench/scale.py's Generator (the same sessions, seed and
batches of 1,000) and at each step times `store.verify_each` over the step's sessions, as
bench/scale.py does (the first read of those records after their append). Beside the rate it
prints, one JSON line a step:

- where verify's time goes: the wall time of each per-session read (`_intact_chain_summary`: the
  lowest and highest seq, the server's chain check `_run_intact`, which also finds the seal; and
  `_rederived_findings`, the stream of every record's raw bytes re-derived in Python on a thread,
  with that thread's CPU time);
- what the planner knows and does with the per-session queries of one long session of the step:
  `pg_class.reltuples`/`relpages` and whether `pg_stats` has `events.sid`; each query's estimated
  against actual rows, plan cost, whether JIT compiled it and for how long (EXPLAIN ANALYZE);
- the buffers the verify touched: `pg_statio_user_tables` deltas of `events` (heap, index, TOAST;
  hit = shared_buffers, read = the kernel's cache or the disk) and the disk's sectors read
  (/proc/diskstats);
- the relations' sizes against shared_buffers.

The store's connections run without JIT (`postgres._no_jit`, the fix of what this script found).
At the steps named by --probe-at, the same step's sessions are verified again on connections with
JIT as the server has it (the store's connect hook removed; no server setting changed), and at the
last step after `ANALYZE events, session_ids`: each probe changes one thing against the step's
run. `--window N` verifies only the sessions of each step's last N records
(the rest of the step is appended unmeasured), so that sparse steps cost one verify of N records.
Ends with a Markdown table of the steps (ratios against the first step).

    python bench/verify_scale.py --pg postgresql+psycopg://postgres@127.0.0.1:5432/DB \\
        --steps 1000000,2000000,4000000,5000000,7000000,10000000 --window 1000000 \\
        --probe-at 1000000,5000000,10000000

DB must exist and be empty: the script makes the store in it and leaves it there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import psycopg
from blackbox.recorder.log import DERIVED
from blackbox.recorder.store import layout, open_store
from blackbox.recorder.store import postgres as pg_store

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import Generator, fill  # bench/scale.py, beside this script


class Timers:
    """Wall (and thread CPU) time of the store's per-session verify reads, summed."""

    NAMES = ("_intact_chain_summary", "_run_intact", "_rederived_findings")

    def __init__(self, store) -> None:  # type: ignore[no-untyped-def]
        self.wall = dict.fromkeys(self.NAMES, 0.0)
        self.cpu = dict.fromkeys(self.NAMES, 0.0)
        for name in self.NAMES:
            if hasattr(store, name):
                setattr(store, name, self._wrap(name, getattr(store, name)))

    def _wrap(self, name, fn):  # type: ignore[no-untyped-def]
        def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
            w, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[name] += time.perf_counter() - w
                self.cpu[name] += time.thread_time() - c

        return timed

    def reset(self) -> None:
        for name in self.NAMES:
            self.wall[name] = self.cpu[name] = 0.0

    def split(self) -> dict:
        w = self.wall
        return {
            "chain_s": w["_intact_chain_summary"],
            "seq_bounds_s": w["_intact_chain_summary"] - w["_run_intact"],
            "run_check_s": w["_run_intact"],
            "rederive_wall_s": w["_rederived_findings"],
            "rederive_cpu_s": self.cpu["_rederived_findings"],
        }


STATIO = """
SELECT heap_blks_read, heap_blks_hit, idx_blks_read, idx_blks_hit,
       coalesce(toast_blks_read, 0), coalesce(toast_blks_hit, 0)
FROM pg_statio_user_tables WHERE relname = 'events'
"""
STATIO_KEYS = ("heap_read", "heap_hit", "idx_read", "idx_hit", "toast_read", "toast_hit")
SIZES = """
SELECT pg_relation_size('events'), pg_relation_size(reltoastrelid),
       pg_relation_size('uq_events_sid_seq'), reltuples::bigint, relpages,
       (SELECT count(*) FROM pg_stats WHERE tablename = 'events' AND attname = 'sid'),
       (SELECT correlation FROM pg_stats WHERE tablename = 'events' AND attname = 'position'),
       current_setting('shared_buffers')
FROM pg_class WHERE relname = 'events'
"""


def disk_sectors_read() -> int:
    disks = {d for d in os.listdir("/sys/block") if not d.startswith(("loop", "ram", "dm-"))}
    return sum(
        int(f[5])
        for f in (line.split() for line in Path("/proc/diskstats").read_text().splitlines())
        if f[2] in disks
    )


def statio(dsn: str) -> dict:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(STATIO).fetchone()
    return dict(zip(STATIO_KEYS, row, strict=True))


def queries(sid: bytes) -> dict[str, tuple[str, list[str]]]:
    """verify's per-session queries on one session (as sql_verify.py and postgres.py say them),
    each with the SET LOCALs it runs under."""
    lit = "'\\x" + sid.hex() + "'::bytea"
    off = ["SET LOCAL enable_bitmapscan = off", "SET LOCAL enable_sort = off"]
    run = pg_store._RUN_CHECK.replace("%(prev)s", "'\\x00'::bytea").replace("%(sid)s", lit)
    run = run.replace("%(first)s", "1").replace("%(last)s", "1000000000")
    run = run.replace("%(sealed)s", "'session_sealed'")
    derived = ", ".join(DERIVED)
    return {
        "seq_bounds": (
            (
                f"SELECT (SELECT seq FROM events WHERE sid = {lit} ORDER BY seq LIMIT 1), "
                f"(SELECT seq FROM events WHERE sid = {lit} ORDER BY seq DESC LIMIT 1)"
            ),
            [],
        ),
        "run_check": (run, off),
        "rederive": (
            (
                f"SELECT seq, wall_ns, kind, raw, hash, {derived} FROM event_log "
                f"WHERE sid = {lit} ORDER BY seq"
            ),
            [],
        ),
    }


def explain(dsn: str, sid: bytes) -> dict:
    """Each query's plan (top node under the aggregate or the join), estimated vs actual rows,
    total cost, execution ms, JIT ms (None: not compiled), shared blocks hit/read."""
    out = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, (sql, sets) in queries(sid).items():
            with conn.transaction():
                for s in sets:
                    conn.execute(s)
                if name == "rederive":  # a named cursor is planned for its first 10 % of rows
                    shape = conn.execute("EXPLAIN (FORMAT JSON) DECLARE c CURSOR FOR " + sql)
                    cursor_doc = shape.fetchone()[0][0]
                    cursor_plan = cursor_doc["Plan"]
                (doc,) = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql).fetchone()
            top = doc[0]["Plan"]
            scans = []

            def walk(node, scans=scans):  # type: ignore[no-untyped-def]
                if "Relation Name" in node or node["Node Type"] in ("Sort",):
                    scans.append(
                        f"{node['Node Type']}({node.get('Relation Name', '')}"
                        f"{'/' + node['Index Name'] if 'Index Name' in node else ''}) "
                        f"est {node['Plan Rows']:.0f} act {node['Actual Rows']:.0f}"
                    )
                for child in node.get("Plans", []):
                    walk(child, scans)

            walk(top)
            jit = doc[0].get("JIT")
            out[name] = {
                "cost": round(top["Total Cost"]),
                "scans": scans,
                "exec_ms": round(doc[0]["Execution Time"], 2),
                "jit_ms": None if jit is None else round(jit["Timing"]["Total"], 1),
                "jit_opts": None if jit is None else jit["Options"],
                "hit": top.get("Shared Hit Blocks"),
                "read": top.get("Shared Read Blocks"),
            }
            if name == "rederive":
                out[name]["cursor_plan"] = cursor_plan["Node Type"] + (
                    f"({cursor_plan['Plans'][0]['Node Type']})" if "Plans" in cursor_plan else ""
                )
                out[name]["cursor_cost"] = round(cursor_plan["Total Cost"])
                cursor_jit = cursor_doc.get("JIT")
                out[name]["cursor_jit"] = None if cursor_jit is None else cursor_jit["Options"]
    return out


def scatter(dsn: str, sid: bytes) -> dict:
    """How many heap pages hold one session's records (its rows are appended together)."""
    with psycopg.connect(dsn) as conn:
        rows, pages = conn.execute(
            "SELECT count(*), count(DISTINCT (ctid::text::point)[0]) FROM events WHERE sid = %s",
            (sid,),
        ).fetchone()
    return {"records": rows, "heap_pages": pages}


def timed_verify(store, sids: list[str], timers: Timers, dsn: str) -> dict:  # type: ignore[no-untyped-def]
    store.engine.dispose()  # fresh backends, whose statistics are flushed when they exit
    before, sectors = statio(dsn), disk_sectors_read()
    timers.reset()
    cpu0 = time.process_time()
    start = time.perf_counter()
    found = store.verify_each(sids)
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    bad = [s for s, f in found.items() if f]
    if bad:
        raise SystemExit(f"chain findings in {len(bad)} sessions, e.g. {found[bad[0]][:2]}")
    store.engine.dispose()
    time.sleep(0.5)
    after = statio(dsn)
    return {
        "seconds": round(seconds, 2),
        "python_cpu_s": round(cpu, 2),
        **{k: round(v, 2) for k, v in timers.split().items()},
        "statio": {k: after[k] - before[k] for k in STATIO_KEYS},
        "disk_mb_read": round((disk_sectors_read() - sectors) * 512 / 1e6),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", required=True, help="postgresql+psycopg://... of an empty database")
    parser.add_argument("--steps", default="1000000,2000000")
    parser.add_argument("--probe-at", default="", help="steps at which to run the probes")
    parser.add_argument(
        "--window", type=int, default=None,
        help="verify only the sessions of the step's last WINDOW records (default: the whole step)",
    )  # fmt: skip
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    probe_at = {int(s) for s in args.probe_at.split(",") if s}
    dsn = args.pg.replace("postgresql+psycopg:", "postgresql:", 1)

    store = open_store(args.pg)
    timers = Timers(store)
    table: list[str] = [
        (
            "| records | sessions verified | verify rec/s | server's JIT rec/s "
            "| after ANALYZE rec/s | verify cursor's est. cost | JIT | load |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    gen = Generator()
    total, first_rate = 0, None
    for target in steps:
        window = min(args.window or target - total, target - total)
        if target - total > window:
            fill(store, gen, target - total - window)
        _t_fill, sids = fill(store, gen, window)
        records = window
        total = target
        row: dict = {"records": total, "sessions_in_step": len(sids)}
        v = timed_verify(store, sids, timers, dsn)
        row["verify_per_s"] = round(records / v["seconds"])
        first_rate = first_rate or row["verify_per_s"]
        row["ratio"] = round(row["verify_per_s"] / first_rate, 2)
        row["verify"] = v
        with psycopg.connect(dsn) as conn:
            heap, toast, index, reltuples, relpages, sid_stats, corr, sb = conn.execute(
                SIZES
            ).fetchone()
            # The step's longest session, and the record count of each session of the step.
            longest = conn.execute(
                "SELECT e.sid, count(*) FROM events e WHERE e.sid = ANY(%s) "
                "GROUP BY e.sid ORDER BY count(*) DESC LIMIT 1",
                ([layout.sid_bytes(s) for s in sids],),
            ).fetchone()
        row["sizes_mb"] = {
            "heap": heap // 2**20, "toast": toast // 2**20, "index": index // 2**20,
            "shared_buffers": sb,
        }  # fmt: skip
        row["planner_knows"] = {
            "reltuples": reltuples, "relpages": relpages, "pg_stats_sid": sid_stats,
            "position_correlation": corr,
        }  # fmt: skip
        row["sample"] = scatter(dsn, longest[0])
        row["plans"] = explain(dsn, longest[0])
        row["load"] = round(os.getloadavg()[0], 2)
        print(json.dumps(row), flush=True)
        if total in probe_at:
            probes = {}
            hook = pg_store._no_jit
            pg_store._no_jit = lambda _driver, _record: None  # the server's JIT setting
            try:
                server_jit = open_store(args.pg)
            finally:
                pg_store._no_jit = hook
            jit_timers = Timers(server_jit)
            probes["server_jit"] = timed_verify(server_jit, sids, jit_timers, dsn)
            server_jit.close()
            if total == steps[-1]:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("ANALYZE events")
                    conn.execute("ANALYZE session_ids")
                probes["analyzed"] = timed_verify(store, sids, timers, dsn)
                with psycopg.connect(dsn) as conn:
                    probes["analyzed_knows"] = conn.execute(SIZES).fetchone()[3:7]
                probes["analyzed_plans"] = explain(dsn, longest[0])
            for p in probes.values():
                if isinstance(p, dict) and "seconds" in p:
                    p["verify_per_s"] = round(records / p["seconds"])
            print(json.dumps({"records": total, "probes": probes}, default=str), flush=True)
        else:
            probes = {}
        cursor = row["plans"]["rederive"]

        def rate(p: dict | None, first: int = first_rate) -> str:
            if not p:
                return "–"
            return f"{p['verify_per_s']:,} ({p['verify_per_s'] / first:.2f}×)"

        table.append(
            f"| {total:,} | {len(sids):,} | {row['verify_per_s']:,} ({row['ratio']:.2f}×) "
            f"| {rate(probes.get('server_jit'))} | {rate(probes.get('analyzed'))} "
            f"| {cursor['cursor_cost']:,} | {'yes' if cursor['cursor_jit'] else 'no'} "
            f"| {row['load']:.1f} |"
        )
    store.close()
    print("\n".join(table))


if __name__ == "__main__":
    main()
