"""Cost curves as a store fills: does anything get slower as the records pile up?

Fills a store in steps (SQLite, then PostgreSQL) with realistic synthetic sessions — most frames
200 B to 2 KiB, one in 2,000 up to 1 MiB, sessions of 10 to 10,000 records, most of them short —
and at each step measures: the ingest rate of the step (store API, batches of 1,000), the
`verify` rate over the step's sessions, a signed checkpoint (which grows the Merkle tree over
the step's records, as a recording store's automatic checkpoints do), the store's bytes on disk
per raw byte it holds (broken down by table and index at the end), the analytics refresh of the
step's last 100,000 records, `sessions` (the default listing of 50 among all sessions), `show`
of a 1,000-record session (its timeline rows) and `report latency --by tool` (warm). Each step's
figures are ratios against the first step's: flat curves stay near 1.
Writes a Markdown table and a PNG of the curves (matplotlib, the `bench` extra).

    python bench/scale.py --steps 250000,500000,750000,1000000        # a few minutes
    python bench/scale.py --steps 1000000,2000000,...,10000000 --out docs/scale

`--listing-only` measures `sessions` alone at each step, against the listing as it was before it
read only the listed sessions (`listing_before`: one GROUP BY over an IN list of the 50 ids, and
the handles counted in Python over every session id), on the same store in the same run, and
checks that both give the same rows. `--session-records 10` makes every session 10 records long,
so that 1M records hold 100,000 sessions:

    python bench/scale.py --listing-only --session-records 10 --steps 250000,1000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from blackbox.analytics.parquet import ParquetCopy, copy_dir
from blackbox.analytics.reports import run_report
from blackbox.recorder.log import events
from blackbox.recorder.log.model import Direction, Kind, NewEvent, new_session_id
from blackbox.recorder.query import listing
from blackbox.recorder.query.handles import all_session_ids, short_handles
from blackbox.recorder.query.timeline import timeline_rows
from blackbox.recorder.store import open_store
from blackbox.recorder.store.projection import session_info
from blackbox.recorder.trust import signing
from blackbox.recorder.trust.checkpoint import Signer

BATCH = 1000
REFRESH_RECORDS = 100_000
TOOLS = ["read_file", "search", "write_file", "fetch", "echo", "list_dir", "run_query", "get-sum"]
T0 = 1_764_000_000_000_000_000
PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


class Generator:
    """Deterministic synthetic sessions of a tap's shape (started, request/reply pairs, ended)."""

    def __init__(self, seed: int = 7, session_records: int | None = None) -> None:
        self.rng = random.Random(seed)
        self.session_records = session_records
        self.clock = T0
        self.raw_bytes = 0

    def session_size(self) -> int:
        if self.session_records:
            return self.session_records
        # 90 % short (10-100 records), 10 % long (100-10,000), log-uniform in each band.
        lo, hi = (10, 100) if self.rng.random() < 0.9 else (100, 10_000)
        return int(lo * (hi / lo) ** self.rng.random())

    def payload(self) -> int:
        if self.rng.random() < 1 / 2000:
            return int(2048 * 512 ** self.rng.random())  # 2 KiB .. 1 MiB
        return int(200 * 10.24 ** self.rng.random())  # 200 B .. 2 KiB

    def session(self, records: int) -> list[NewEvent]:
        sid = new_session_id()
        rng = self.rng
        started = events.SessionStarted(
            name=f"srv-{rng.randrange(20)}", transport="stdio", command=["srv"], cwd="/srv",
            env_names=["PATH"], tap_version="0.1.0", pid=4242,
        )  # fmt: skip
        rows: list[tuple[str, str, bytes, int]] = [
            (Kind.SESSION_STARTED, Direction.NONE, events.encode(started), 0)
        ]
        mono = 1_000
        rpc = 0
        while len(rows) + 2 <= records - 1:
            rpc += 1
            tool = TOOLS[rpc % len(TOOLS)]
            size = self.payload()
            req = {
                "jsonrpc": "2.0", "id": rpc, "method": "tools/call",
                "params": {"name": tool, "arguments": {"q": "x" * max(0, size // 4)}},
            }  # fmt: skip
            rows.append((Kind.FRAME, Direction.CLIENT_TO_SERVER, _j(req), mono))
            mono += int(rng.lognormvariate(0.5, 1.0) * 1_000_000)
            reply = {
                "jsonrpc": "2.0", "id": rpc,
                "result": {"content": [{"type": "text", "text": "y" * size}], "isError": False},
            }  # fmt: skip
            rows.append((Kind.FRAME, Direction.SERVER_TO_CLIENT, _j(reply), mono))
            mono += int(rng.expovariate(1.0) * 1_000_000)
        ended = events.SessionEnded(reason="client_closed", outcome="ok", exit_code=0)
        rows.append((Kind.SESSION_ENDED, Direction.NONE, events.encode(ended), mono))
        out = []
        for seq, (kind, direction, raw, m) in enumerate(rows, start=1):
            self.raw_bytes += len(raw)
            out.append(NewEvent(sid, seq, self.clock + m, m, kind, direction, raw))
        self.clock += mono + 1_000_000
        return out


def _j(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def timed(fn, repeat: int = 1):  # type: ignore[no-untyped-def]
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def fill(store, gen: Generator, records: int) -> tuple[float, list[str]]:  # type: ignore[no-untyped-def]
    """Append about `records` records in whole sessions; returns (seconds, session ids)."""
    added, sids, elapsed = 0, [], 0.0
    while added < records:
        evs = gen.session(min(gen.session_size(), max(10, records - added)))
        start = time.perf_counter()
        for i in range(0, len(evs), BATCH):
            store.append(evs[i : i + BATCH])
        elapsed += time.perf_counter() - start
        added += len(evs)
        sids.append(evs[0].session_id)
    return elapsed, sids


def disk_bytes(store, url: str) -> int:  # type: ignore[no-untyped-def]
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1]
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar())


# Where a store's bytes go, table by table and index by index (SQLite's `dbstat` table, when
# the library has it; PostgreSQL's relation sizes, TOAST included): the raw bytes alone are the
# floor the disk/raw figure is measured against. SQLite names the (session_id, seq) index
# itself; its rowid tables have no primary-key index.
PARTS = (
    "events",
    "sqlite_autoindex_events_1",
    "uq_events_session_id_seq",
    "uq_events_sid_seq",
    "pk_events",
    "session_ids",
    "sqlite_autoindex_session_ids_1",
    "pk_session_ids",
    "tree_runs",
    "tree_removed_leaves",
    "tree_nodes",
)
PG_SIZES = """
    SELECT c.relname, pg_relation_size(c.oid) + COALESCE(pg_relation_size(c.reltoastrelid), 0)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i')
"""


def breakdown(store, raw_bytes: int, records: int) -> dict:  # type: ignore[no-untyped-def]
    """Bytes per record of each part of the store, and of the raw bytes it holds."""
    sqlite = store.engine.dialect.name == "sqlite"
    query = "SELECT name, sum(pgsize) FROM dbstat GROUP BY name" if sqlite else PG_SIZES
    with store.engine.connect() as conn:
        try:
            found = {name: int(size) for name, size in conn.exec_driver_sql(query)}
        except Exception as exc:  # a libsqlite3 built without dbstat
            return {"unknown": f"no sizes: {exc}"}
    out = {"raw": raw_bytes / records}
    for name in PARTS:
        if name in found:
            out[name] = found.pop(name) / records
    out["everything else"] = sum(found.values()) / records
    return out


def run_backend(
    label: str, url: str, steps: list[int], work: Path, session_records: int | None = None
) -> list[dict]:
    store = open_store(url)
    copy_base = work / f"analytics-{label}"
    copy = ParquetCopy(copy_dir(copy_base, store.url))
    gen = Generator(session_records=session_records)
    # A recording store grows a Merkle tree as its automatic checkpoints are signed; a step signs
    # one, so that the bytes on disk include the tree as a real store's do.
    signer = Signer.generate("bench.scale")
    rows, total = [], 0
    for target in steps:
        step = target - total
        head = max(0, step - REFRESH_RECORDS)
        t_head, sids = fill(store, gen, head)
        copy.refresh(store)  # bring the copy up to date: the timed refresh sees only the tail
        show_evs = gen.session(1000)
        start = time.perf_counter()
        for i in range(0, len(show_evs), BATCH):
            store.append(show_evs[i : i + BATCH])
        _t, tail_sids = fill(store, gen, step - head - len(show_evs))
        t_show_ingest = time.perf_counter() - start
        sids += [show_evs[0].session_id, *tail_sids]
        total = target
        ingest = step / (t_head + t_show_ingest)
        t_checkpoint, _ = timed(lambda: signing.issue(store, signer))
        t_refresh, result = timed(lambda: copy.refresh(store))
        t_verify, findings = timed(lambda s=sids: store.verify_each(s))
        bad = {k: v for k, v in findings.items() if v}
        if bad:
            raise SystemExit(f"{label}: chains broken at {target:,}: {list(bad.items())[:2]}")
        n_sessions = len(store.list_sessions())
        t_sessions, _ = timed(
            lambda: [s.row() for s in listing.list_summaries(store, listing.SessionFilter())],
            repeat=3,
        )
        sid = show_evs[0].session_id
        t_show, shown = timed(lambda s=sid: list(timeline_rows(store.read_session(s))), repeat=3)
        assert len(shown) >= 1000, len(shown)  # one row a record (and a few the timeline adds)
        run_report(store, copy_base, "latency", "tool")
        t_report, _ = timed(lambda: run_report(store, copy_base, "latency", "tool"), repeat=3)
        row = {
            "backend": label,
            "records": target,
            "sessions": n_sessions,
            "ingest_per_s": ingest,
            "verify_per_s": step / t_verify,
            "checkpoint_s": t_checkpoint,
            "disk_per_raw": disk_bytes(store, url) / gen.raw_bytes,
            "refresh_s": t_refresh,
            "refreshed": result.new_records,
            "sessions_ms": t_sessions * 1000,
            "show_ms": t_show * 1000,
            "report_s": t_report,
            "load": os.getloadavg()[0],
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    parts = breakdown(store, gen.raw_bytes, total)
    print(json.dumps({"backend": label, "bytes_per_record": parts}), file=sys.stderr)
    store.close()
    return rows


# The counts of `listing.COUNTS` as the old listing's SQL said them (kept here as text: only the
# store modules import SQLAlchemy).
BEFORE_COUNTS = {
    "calls": "kind = 'frame' AND msg_type = 'request'",
    "errors": "kind = 'frame' AND (msg_type = 'error' OR is_error = {true})",
    "faults": "kind = 'fault'",
}


def listing_before(store) -> list[dict]:  # type: ignore[no-untyped-def]
    """`sessions` (default filter) as it was before the listing read only the listed sessions:
    the counts in one GROUP BY over `session_id IN (...)`, the handles among every session id."""
    assert list(BEFORE_COUNTS) == list(listing.COUNTS)
    infos = [session_info(r) for r in listing._candidates(store, listing.SessionFilter(), 0, 50)]
    ids = [i.session_id for i in infos]
    counts = {sid: dict.fromkeys(listing.COUNTS, 0) for sid in ids}
    sqlite = store.engine.dialect.name == "sqlite"
    mark, true = ("?", "1") if sqlite else ("%s", "true")
    sums = ", ".join(
        f"sum(CASE WHEN {cond.format(true=true)} THEN 1 ELSE 0 END) AS {name}"
        for name, cond in BEFORE_COUNTS.items()
    )
    query = (
        f"SELECT session_id, {sums} FROM events "
        f"WHERE session_id IN ({', '.join(mark for _ in ids)}) GROUP BY session_id"
    )
    with store.engine.connect() as conn:
        for r in conn.exec_driver_sql(query, tuple(ids)) if ids else ():
            counts[r[0]] = {n: int(v or 0) for n, v in zip(listing.COUNTS, r[1:], strict=True)}
    handles = short_handles(store)
    out = []
    for info in infos:
        summary = listing.SessionSummary(info, counts[info.session_id], handles[info.session_id])
        out.append(summary.row())
    return out


def run_listing(label: str, url: str, steps: list[int], session_records: int | None) -> list[dict]:
    """`sessions` now and as it was (`listing_before`), alternately, at each step."""
    store = open_store(url)
    gen = Generator(session_records=session_records)
    rows, total, pending = [], 0, []
    for target in steps:
        # Whole sessions, appended a batch of about 1,000 records at a time across sessions
        # (short sessions one append each would make the fill, not the listing, the long part).
        while total < target:
            pending += gen.session(min(gen.session_size(), max(10, target - total - len(pending))))
            if len(pending) >= BATCH or total + len(pending) >= target:
                store.append(pending)
                total += len(pending)
                pending = []
        now = lambda: [s.row() for s in listing.list_summaries(store, listing.SessionFilter())]  # noqa: E731
        assert now() == listing_before(store), "the listing changed its rows"
        t_now, t_before = float("inf"), float("inf")
        for _ in range(3):  # alternately, so that both see the same machine
            t_before = min(t_before, timed(lambda: listing_before(store))[0])
            t_now = min(t_now, timed(now)[0])
        row = {
            "backend": label,
            "records": total,
            "sessions": len(all_session_ids(store)),
            "before_ms": t_before * 1000,
            "sessions_ms": t_now * 1000,
            "before_per_now": t_before / t_now,
            "load": os.getloadavg()[0],
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    store.close()
    return rows


COLUMNS = [
    ("records", "records", "{:,}"),
    ("sessions", "sessions", "{:,}"),
    ("ingest_per_s", "ingest rec/s", "{:,.0f}"),
    ("verify_per_s", "verify rec/s", "{:,.0f}"),
    ("checkpoint_s", "checkpoint s", "{:.2f}"),
    ("disk_per_raw", "disk / raw", "{:.2f}"),
    ("refresh_s", "refresh 100k s", "{:.2f}"),
    ("sessions_ms", "sessions ms", "{:.1f}"),
    ("show_ms", "show 1k ms", "{:.1f}"),
    ("report_s", "latency report s", "{:.2f}"),
    ("load", "load", "{:.1f}"),
]
CURVES = ["ingest_per_s", "verify_per_s", "refresh_s", "sessions_ms", "show_ms", "report_s"]
LISTING_COLUMNS = [
    ("records", "records", "{:,}"),
    ("sessions", "sessions", "{:,}"),
    ("before_ms", "sessions before ms", "{:.1f}"),
    ("sessions_ms", "sessions ms", "{:.1f}"),
    ("before_per_now", "before / now", "{:.1f}×"),
    ("load", "load", "{:.1f}"),
]


def markdown(rows: list[dict], columns: list = COLUMNS) -> str:  # type: ignore[type-arg]
    out = []
    for backend in dict.fromkeys(r["backend"] for r in rows):
        mine = [r for r in rows if r["backend"] == backend]
        first = mine[0]
        out.append(f"\n{backend}\n")
        out.append("| " + " | ".join(h for _k, h, _f in columns) + " |")
        out.append("|" + "---|" * len(columns))
        for r in mine:
            cells = []
            for key, _h, fmt in columns:
                cell = fmt.format(r[key])
                if key in [*CURVES, "before_ms"] and r is not first and first[key]:
                    cell += f" ({r[key] / first[key]:.2f}×)"
                cells.append(cell)
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, key in zip(axes.flat, CURVES, strict=True):
        for backend in dict.fromkeys(r["backend"] for r in rows):
            mine = [r for r in rows if r["backend"] == backend]
            first = mine[0][key] or 1
            ax.plot(
                [r["records"] for r in mine], [r[key] / first for r in mine], "o-", label=backend
            )
        ax.axhspan(0.8, 1.2, color="0.9")
        ax.set_title(f"{dict((k, h) for k, h, _f in COLUMNS)[key]} (× first step)")
        ax.set_xlabel("records in the store")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="250000,500000,750000,1000000")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--out", default=None, help="write OUT.md and OUT.png")
    parser.add_argument("--listing-only", action="store_true", help="measure `sessions` alone")
    parser.add_argument("--session-records", type=int, default=None, help="records per session")
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    rows: list[dict] = []

    def run(label: str, url: str) -> list[dict]:
        if args.listing_only:
            return run_listing(label, url, steps, args.session_records)
        return run_backend(label, url, steps, work, args.session_records)

    with tempfile.TemporaryDirectory(prefix="bb-scale-") as tmp:
        work = Path(tmp)
        if "sqlite" in args.backends:
            url = f"sqlite:///{work / 'scale.db'}"
            rows += run("SQLite", url)
        if "postgresql" in args.backends:
            admin = args.pg.replace("postgresql+psycopg:", "postgresql:", 1)
            db = f"bbscale_{secrets.token_hex(4)}"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{db}"')
            try:
                url = f"{args.pg.rsplit('/', 1)[0]}/{db}"
                rows += run("PostgreSQL", url)
            finally:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    table = markdown(rows, LISTING_COLUMNS if args.listing_only else COLUMNS)
    print(table)
    if args.out:
        Path(args.out + ".md").write_text(table)
        if not args.listing_only:
            try:
                plot(rows, Path(args.out + ".png"))
            except ImportError:
                print(
                    f"wrote {args.out}.md only: the PNG needs matplotlib (pip install '.[bench]')"
                )


if __name__ == "__main__":
    main()
