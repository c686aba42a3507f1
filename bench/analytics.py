"""Benchmark of the analytics: the latency report by tool over 1,000,000 calls (and 10,000,000 with
--big), cold and warm, against the same percentiles computed directly in SQL on a SQLite store of
matching size; and the incremental refresh of 100,000 new frames.

The big synthetic sets are written straight to Parquet with pyarrow (the same schema the refresh
writes) and straight into the store's `events` table with sqlite3 (no hash chain: only query
cost is measured). The report itself runs through the real API: `run_report` checks the store
for new records (none), opens the read-only views and queries them.

    python bench/analytics.py            # 1,000,000 calls + the refresh benchmark (~2 min)
    python bench/analytics.py --big      # also 10,000,000 calls (several minutes, ~6 GB disk)
    python bench/analytics.py --quick    # 100,000 calls: a smoke run
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from blackbox.analytics import parquet
from blackbox.analytics.calls import CALLS_SCHEMA
from blackbox.analytics.parquet import EVENTS_SCHEMA, ParquetCopy, copy_dir
from blackbox.analytics.reports import run_report
from blackbox.recorder.log.model import NewEvent, new_session_id
from blackbox.recorder.store import open_store

TOOLS = {  # name: (log-mean of latency in ms, log-sigma)
    "read_file": (1.5, 0.6),
    "search": (3.5, 0.9),
    "write_file": (2.0, 0.7),
    "fetch": (5.0, 1.1),
    "get-sum": (0.5, 0.4),
    "echo": (0.3, 0.3),
    "list_dir": (1.2, 0.5),
    "run_query": (4.0, 1.3),
}
CALLS_PER_SESSION = 1000
CHUNK_CALLS = 500_000
T0 = 1_764_000_000_000_000_000
SPAN_NS = 7 * 86_400 * 10**9
MS = 1_000_000

BASELINE_SQL = """
WITH q AS MATERIALIZED (
    SELECT session_id, direction, rpc_id, rpc_id_type, tool, mono_ns FROM events
    WHERE kind = 'frame' AND msg_type = 'request' AND method = 'tools/call'
), r AS MATERIALIZED (
    SELECT session_id, direction, rpc_id, rpc_id_type, mono_ns FROM events
    WHERE kind = 'frame' AND msg_type IN ('response', 'error')
), calls AS (
    SELECT q.tool AS tool, (r.mono_ns - q.mono_ns) / 1e6 AS latency_ms
    FROM q JOIN r
      ON r.session_id = q.session_id AND r.rpc_id = q.rpc_id
     AND r.rpc_id_type = q.rpc_id_type AND r.direction <> q.direction
), ranked AS (
    SELECT tool, latency_ms,
           row_number() OVER (PARTITION BY tool ORDER BY latency_ms) AS rn,
           count(*) OVER (PARTITION BY tool) AS n
    FROM calls
)
SELECT tool, max(n) AS calls,
       min(CASE WHEN rn >= 0.50 * n THEN latency_ms END) AS p50_ms,
       min(CASE WHEN rn >= 0.95 * n THEN latency_ms END) AS p95_ms,
       min(CASE WHEN rn >= 0.99 * n THEN latency_ms END) AS p99_ms,
       max(latency_ms) AS max_ms
FROM ranked GROUP BY tool ORDER BY calls DESC
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def synthesize(n_calls: int, seed: int = 1):  # type: ignore[no-untyped-def]
    """Yield chunks of synthetic calls as numpy columns, sessions in start order."""
    rng = np.random.default_rng(seed)
    n_sessions = max(n_calls // CALLS_PER_SESSION, 1)
    names = list(TOOLS)
    mu = np.array([TOOLS[t][0] for t in names])
    sigma = np.array([TOOLS[t][1] for t in names])
    sessions_per_chunk = max(CHUNK_CALLS // CALLS_PER_SESSION, 1)
    position = 0
    for first in range(0, n_sessions, sessions_per_chunk):
        count = min(sessions_per_chunk, n_sessions - first)
        k = CALLS_PER_SESSION
        n = count * k
        sess = np.repeat(np.arange(first, first + count), k)
        j = np.tile(np.arange(k), count)
        tool = rng.integers(0, len(names), n)
        latency_ms = rng.lognormal(mu[tool], sigma[tool])
        start_ns = T0 + sess.astype(np.int64) * (SPAN_NS // n_sessions)
        req_mono = j.astype(np.int64) * 50 * MS
        resp_mono = req_mono + (latency_ms * MS).astype(np.int64)
        is_error = rng.random(n) < 0.03
        records = 2 * k + 2  # session_started, k requests, k responses, session_ended
        base = position + (sess - first) * records
        yield {
            "first_session": first,
            "count": count,
            "k": k,
            "session_ids": [
                new_session_id(T0 + s * (SPAN_NS // n_sessions))
                for s in range(first, first + count)
            ],
            "sess": sess - first,
            "j": j,
            "tool": np.array(names)[tool],
            "start_ns": start_ns,
            "req_mono": req_mono,
            "resp_mono": resp_mono,
            "is_error": is_error,
            "req_pos": base + 2 + 2 * j,
            "resp_pos": base + 3 + 2 * j,
            "req_seq": 2 + 2 * j,
            "resp_seq": 3 + 2 * j,
            "base": position,
            "records": records,
        }
        position += count * records


def _join(*parts) -> pa.Array:  # type: ignore[no-untyped-def]
    """Concatenate string arrays and literals element-wise, as binary (a frame's raw bytes)."""
    return pc.binary_join_element_wise(*parts, "").cast(pa.binary())


def events_table(c: dict) -> pa.Table:
    """The chunk's log records, built column-wise: per session a session_started and a
    session_ended record, per call a request and a response frame."""
    k, count = c["k"], c["count"]
    n = count * k
    sids = np.array(c["session_ids"])
    sid = pa.array(sids[c["sess"]])
    ids = pa.array((c["j"] + 1).astype(str))
    tool = pa.array(c["tool"])
    wall_req = c["start_ns"] + c["req_mono"]
    wall_resp = c["start_ns"] + c["resp_mono"]
    zero = pa.array([bytes(32)] * n, pa.binary())
    req_raw = _join(
        '{"jsonrpc":"2.0","id":', ids, ',"method":"tools/call","params":{"name":"', tool,
        '","arguments":{"q":', ids, "}}}",
    )  # fmt: skip
    resp_raw = _join(
        '{"jsonrpc":"2.0","id":', ids, ',"result":{"content":[{"type":"text","text":"done"}],'
        '"isError":', pa.array(np.where(c["is_error"], "true", "false")), "}}",
    )  # fmt: skip

    def frames(pos, seq, wall, mono, direction, raw, msg_type, method, tools, is_error):  # type: ignore[no-untyped-def]
        return {
            "position": pos, "session_id": sid, "seq": seq, "wall_ns": wall, "mono_ns": mono,
            "kind": pa.array(["frame"] * n), "direction": pa.array([direction] * n),
            "msg_type": pa.array([msg_type] * n), "method": method, "rpc_id": ids,
            "rpc_id_type": pa.array(["number"] * n), "tool": tools, "is_error": is_error,
            "error_code": pa.nulls(n, pa.int64()), "era": pa.nulls(n, pa.string()),
            "raw": raw, "raw_size": pa.nulls(n, pa.int64()), "hash": zero,
        }  # fmt: skip

    req = frames(
        c["req_pos"], c["req_seq"], wall_req, c["req_mono"], "c2s", req_raw, "request",
        pa.array(["tools/call"] * n), tool, pa.nulls(n, pa.bool_()),
    )  # fmt: skip
    resp = frames(
        c["resp_pos"], c["resp_seq"], wall_resp, c["resp_mono"], "s2c", resp_raw, "response",
        pa.nulls(n, pa.string()), pa.nulls(n, pa.string()), pa.array(c["is_error"]),
    )  # fmt: skip
    first = np.arange(count) * k
    last = first + k - 1
    base = c["base"] + np.arange(count) * c["records"]
    names = [f"srv{(c['first_session'] + s) % 5}" for s in range(count)]
    started_raw = [json.dumps({"name": name, "transport": "stdio"}).encode() for name in names]
    ended_raw = b'{"reason":"client_closed","outcome":"ok","exit_code":0,"signal":null}'
    end_mono = c["resp_mono"][last] + MS
    control = {
        "position": np.concatenate([base + 1, base + c["records"]]),
        "session_id": np.concatenate([sids, sids]),
        "seq": np.concatenate([np.ones(count, np.int64), np.full(count, 2 * k + 2)]),
        "wall_ns": np.concatenate([c["start_ns"][first], c["start_ns"][first] + end_mono]),
        "mono_ns": np.concatenate([np.zeros(count, np.int64), end_mono]),
        "kind": ["session_started"] * count + ["session_ended"] * count,
        "direction": ["-"] * (2 * count),
        "raw": started_raw + [ended_raw] * count,
        "hash": [bytes(32)] * (2 * count),
    }
    tables = [
        pa.Table.from_pydict(req, schema=_STORE_SCHEMA),
        pa.Table.from_pydict(resp, schema=_STORE_SCHEMA),
        pa.Table.from_pydict(
            {name: control.get(name, pa.nulls(2 * count, f.type)) for name, f in
             zip(_STORE_SCHEMA.names, _STORE_SCHEMA, strict=True)},
            schema=_STORE_SCHEMA,
        ),
    ]  # fmt: skip
    table = pa.concat_tables(tables)
    for extra in ("args_fingerprint", "error_message", "ref_id", "ref_id_type", "items"):
        table = table.append_column(
            EVENTS_SCHEMA.field(extra), pa.nulls(len(table), EVENTS_SCHEMA.field(extra).type)
        )
    return table.select(EVENTS_SCHEMA.names).cast(EVENTS_SCHEMA)


EVENT_COLUMNS = [f.name for f in EVENTS_SCHEMA][:18]
_STORE_SCHEMA = pa.schema([EVENTS_SCHEMA.field(name) for name in EVENTS_SCHEMA.names[:18]])


def write_chunk(c: dict, copy: ParquetCopy, conn: sqlite3.Connection | None) -> None:
    events = events_table(c)
    if conn is not None:
        columns = [events[name].to_pylist() for name in EVENT_COLUMNS]
        conn.executemany(
            f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) VALUES "
            f"({', '.join('?' * len(EVENT_COLUMNS))})",
            zip(*columns, strict=True),
        )
    sid_index = c["sess"]
    sids = np.array(c["session_ids"])[sid_index]
    n_calls = len(sid_index)
    calls = pa.Table.from_pydict(
        {
            "session_id": sids,
            "direction": pa.array(["c2s"] * n_calls),
            "rpc_id": (c["j"] + 1).astype(str),
            "rpc_id_type": pa.array(["number"] * n_calls),
            "method": pa.array(["tools/call"] * n_calls),
            "tool": c["tool"],
            "args_fingerprint": pa.nulls(n_calls, pa.string()),
            "era": pa.array(["2025-11-25"] * n_calls),
            "request_position": c["req_pos"],
            "request_seq": c["req_seq"],
            "request_item": pa.nulls(n_calls, pa.int32()),
            "started_ns": c["start_ns"] + c["req_mono"],
            "request_mono_ns": c["req_mono"],
            "response_position": c["resp_pos"],
            "response_seq": c["resp_seq"],
            "response_type": pa.array(["response"] * n_calls),
            "ended_ns": c["start_ns"] + c["resp_mono"],
            "latency_ns": c["resp_mono"] - c["req_mono"],
            "is_error": c["is_error"],
            "error_code": pa.nulls(n_calls, pa.int64()),
            "error_message": pa.nulls(n_calls, pa.string()),
            "cancel_seq": pa.nulls(n_calls, pa.int64()),
            "fault_seq": pa.nulls(n_calls, pa.int64()),
            "base_outcome": np.where(c["is_error"], "tool_error", "ok"),
            "closed": np.ones(n_calls, dtype=bool),
        },
        schema=CALLS_SCHEMA,
    )
    first, last = c["base"] + 1, c["base"] + c["count"] * c["records"]
    name = f"p{first:012d}-{last:012d}.parquet"
    parquet._write_by_day(events, "wall_ns", copy.dataset_dir("events"), name)
    control = events.filter(pc.not_equal(events["kind"], "frame"))
    parquet._write_by_day(control, "wall_ns", copy.dataset_dir("control"), name)
    parquet._write_by_day(calls, "started_ns", copy.dataset_dir("calls"), name)


def build(n_calls: int, work: Path, baseline: bool) -> tuple:  # type: ignore[no-untyped-def]
    """A SQLite store (events only) and its Parquet copy, both holding `n_calls` calls."""
    url = f"sqlite:///{work / f'store-{n_calls}.db'}"
    store = open_store(url)  # creates the schema
    store.close()
    base = work / f"analytics-{n_calls}"
    copy = ParquetCopy(copy_dir(base, open_store(url).url))
    copy._init_layout()
    conn = None
    if baseline:
        conn = sqlite3.connect(url[len("sqlite:///") :])
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -1000000")  # 1 GB: index upkeep stays in memory
    last_key = None
    for chunk in synthesize(n_calls):
        write_chunk(chunk, copy, conn)
        last_key = [chunk["session_ids"][-1], 2 * chunk["k"] + 2]
        position = chunk["base"] + chunk["count"] * chunk["records"]
        log(f"  built {position:,} records")
    if conn is not None:
        conn.commit()
        conn.close()
    else:  # without the baseline the store still needs the last record, for the refresh check
        store = open_store(url)
        sid, seq = last_key
        with sqlite3.connect(url[len("sqlite:///") :]) as raw:
            raw.execute(
                "INSERT INTO events (position, session_id, seq, wall_ns, mono_ns, kind, "
                "direction, raw, hash) VALUES (?, ?, ?, 0, 0, 'session_ended', '-', x'7b7d', ?)",
                (position, sid, seq, bytes(32)),
            )
    copy._write_state(
        {
            "schema_version": parquet.SCHEMA_VERSION,
            "position": position,
            "last_key": last_key,
            "pending": None,
        }
    )
    return url, base


def timed(fn, repeat: int = 1) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def bench_report(n_calls: int, work: Path, baseline: bool) -> dict:
    log(f"building {n_calls:,} calls ...")
    start = time.perf_counter()
    url, base = build(n_calls, work, baseline)
    log(f"  built in {time.perf_counter() - start:.0f} s")
    store = open_store(url)
    cold, report = timed(lambda: run_report(store, base, "latency", "tool"))
    warm, report = timed(lambda: run_report(store, base, "latency", "tool"), repeat=3)
    rows = report.sections[0].rows  # type: ignore[attr-defined]
    assert sum(r["calls"] for r in rows) == n_calls, rows
    figures = {"calls": n_calls, "cold_s": cold, "warm_s": warm}
    if baseline:
        log("  direct SQL on SQLite ...")
        con = sqlite3.connect(url[len("sqlite:///") :])
        direct, result = timed(lambda: con.execute(BASELINE_SQL).fetchall())
        con.close()
        by_tool = {r[0]: r for r in result}  # type: ignore[union-attr]
        for row in rows:  # the two agree (nearest rank vs interpolation: within a few %)
            assert by_tool[row["tool"]][1] == row["calls"]
            assert abs(by_tool[row["tool"]][2] - row["p50_ms"]) <= 0.05 * row["p50_ms"] + 0.01
        figures["sqlite_s"] = direct
    store.close()
    log(f"  figures: {figures}")
    return figures


def bench_refresh(work: Path, frames: int = 100_000) -> dict:
    """Refresh of `frames` new frames appended through the store API after an initial copy."""
    work.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{work / 'refresh.db'}"
    store = open_store(url)
    base = work / "analytics-refresh"
    copy = ParquetCopy(copy_dir(base, store.url))

    def session(n_calls: int, offset_ns: int) -> list[NewEvent]:
        sid = new_session_id(T0 + offset_ns)
        evs = [NewEvent(sid, 1, T0 + offset_ns, 0, "session_started", "-", b'{"name":"s"}')]
        for i in range(n_calls):
            at = i * 10 * MS
            req = (
                b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
                b'"arguments":{"message":"hello %d"}}}' % (i, i)
            )
            resp = (
                b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text",'
                b'"text":"hello %d"}]}}' % (i, i)
            )
            evs.append(NewEvent(sid, len(evs) + 1, T0 + offset_ns + at, at, "frame", "c2s", req))
            evs.append(
                NewEvent(sid, len(evs) + 1, T0 + offset_ns + at + MS, at + MS, "frame", "s2c", resp)
            )
        return evs

    store.append(session(1000, 0))
    copy.refresh(store)
    log(f"appending {frames:,} frames through the store API ...")
    for part in range(10):
        store.append(session(frames // 20, (part + 1) * 10**12))
    first = copy.state()["position"]  # type: ignore[index]
    read_s, _ = timed(lambda: sum(1 for _ in store.read_log(first)))  # the store's own read
    cpu = time.process_time()
    refresh_s, result = timed(lambda: copy.refresh(store))
    refresh_cpu = time.process_time() - cpu
    assert result.new_records >= frames, result  # type: ignore[union-attr]
    idle_s, idle = timed(lambda: copy.refresh(store), repeat=5)
    assert idle.new_records == 0  # type: ignore[union-attr]
    store.close()
    log(
        f"  refresh: {refresh_s:.2f} s wall, {refresh_cpu:.2f} s CPU; read_log alone "
        f"{read_s:.2f} s; idle {idle_s * 1000:.1f} ms"
    )
    return {
        "frames": frames,
        "refresh_s": refresh_s,
        "refresh_cpu": refresh_cpu,
        "read_s": read_s,
        "idle_s": idle_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls in the default set")
    parser.add_argument("--quick", action="store_true", help="100,000 calls (a smoke run)")
    parser.add_argument("--big", action="store_true", help="also run 10,000,000 calls")
    parser.add_argument("--skip-baseline", action="store_true", help="no direct SQL baseline")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    parser.add_argument(
        "--refresh-only", action="store_true", help="only the refresh of 100k new frames"
    )
    parser.add_argument("--repeat", type=int, default=1, help="refresh runs (median reported)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-analytics-", dir=args.dir) as tmp:
        work = Path(tmp)
        sizes = [100_000 if args.quick else args.calls] + ([10_000_000] if args.big else [])
        results = (
            []
            if args.refresh_only
            else [bench_report(n, work, not args.skip_baseline) for n in sizes]
        )
        runs = [bench_refresh(work / f"refresh-{i}") for i in range(args.repeat)]
        refresh = {
            key: statistics.median(r[key] for r in runs) if key != "frames" else runs[0][key]
            for key in runs[0]
        }
    if results:
        print("| calls | report cold | report warm | direct SQL (SQLite) | speed-up (warm) |")
        print("|---:|---:|---:|---:|---:|")
    for r in results:
        direct = r.get("sqlite_s")
        print(
            f"| {r['calls']:,} | {r['cold_s']:.2f} s | {r['warm_s']:.2f} s | "
            + (f"{direct:.1f} s | {direct / r['warm_s']:.0f}× |" if direct else "— | — |")
        )
    if results:
        print()
    # The baseline: the store's own read_log of the same records, timed in the same run, so the
    # ratio holds on a busy machine where the seconds do not.
    print("| refresh | wall | CPU | store's read_log of the same records | refresh / read_log |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| {refresh['frames']:,} new frames | {refresh['refresh_s']:.2f} s | "
        f"{refresh['refresh_cpu']:.2f} s | {refresh['read_s']:.2f} s | "
        f"{refresh['refresh_s'] / refresh['read_s']:.2f}× |"
    )
    print(f"| nothing new | {refresh['idle_s'] * 1000:.1f} ms | | | |")


if __name__ == "__main__":
    main()
