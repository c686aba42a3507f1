"""Benchmark of tool drift: the inventory (`blackbox tools`) over 10,000 recorded sessions against
the sessions report over the same copy, measured in the same run; and what watching costs per
record on the shipper side (the store worker's observer with and without the `ToolWatch`), and
what pinning costs per frame on the gated path against `Policy.check` itself.

The sessions are written through the real store API (hash chain and all): each one starts, lists
its server's tools (one tool's description changes every 1,000 sessions, so the copy holds drift),
calls two tools and ends. The Parquet copy is refreshed with the real code, then each query runs
through the read-only views, best of 5.

    python bench/tools.py            # 10,000 sessions (~1 min)
    python bench/tools.py --quick    # 1,000 sessions
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from blackbox.analytics.reports import Filters, open_copy, sessions
from blackbox.analytics.tools import ToolFilters, changes, inventory
from blackbox.analytics.views import connect
from blackbox.recorder.capture.observer import FrameObserver
from blackbox.recorder.gate import tooldefs
from blackbox.recorder.gate.pinning import Pinner, PinSettings
from blackbox.recorder.gate.policy import Policy
from blackbox.recorder.gate.tool_watch import ToolWatch
from blackbox.recorder.log import events
from blackbox.recorder.log.model import NewEvent, new_session_id
from blackbox.recorder.store import open_store

SERVERS = 5
TOOLS = 12


def tools_of(server: int, version: int) -> list[dict]:
    return [
        {
            "name": f"tool_{t}",
            "description": f"Tool {t} of server {server}, version {version if t == 0 else 1}.",
            "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
        }
        for t in range(TOOLS)
    ]


def session_records(i: int, now: int) -> list[NewEvent]:
    sid = new_session_id(now)
    server = i % SERVERS
    listed = tools_of(server, i // 1000)
    recs: list[tuple[str, str, bytes]] = [
        (
            "session_started",
            "-",
            events.encode(
                events.started_here(name=f"srv{server}", transport="stdio", command=["srv"])
            ),
        ),
        ("frame", "c2s", b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'),
        (
            "frame",
            "s2c",
            json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": listed}}).encode(),
        ),
    ]
    items = [
        {"kind": "tool", "name": t["name"], "hash": tooldefs.definition_hash("tool", t)}
        for t in listed
    ]
    recs.append(
        (
            "tools_listed",
            "-",
            events.encode(
                events.ToolsListed(
                    server=f"srv{server}",
                    command="srv",
                    items=items,
                    seq=3,
                    extra={"kinds": ["tool"]},
                )
            ),
        )
    )
    for n, tool in ((2, "tool_0"), (3, "tool_1")):
        call = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": tool, "arguments": {"x": "y"}},
        }
        recs.append(("frame", "c2s", json.dumps(call).encode()))
        reply = {"jsonrpc": "2.0", "id": n, "result": {"content": [{"type": "text", "text": "ok"}]}}
        recs.append(("frame", "s2c", json.dumps(reply).encode()))
    recs.append(
        (
            "session_ended",
            "-",
            events.encode(events.SessionEnded(reason="client_closed", outcome="ok")),
        )
    )
    return [
        NewEvent(sid, seq, now + seq * 1000, seq * 1000, kind, direction, raw)
        for seq, (kind, direction, raw) in enumerate(recs, start=1)
    ]


def best(fn, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_inventory(n: int, work: Path) -> dict:
    store = open_store(f"sqlite:///{work / 'store.db'}")
    start = time.time_ns() - n * 10_000_000
    batch: list[NewEvent] = []
    t0 = time.perf_counter()
    for i in range(n):
        batch += session_records(i, start + i * 10_000_000)
        if len(batch) >= 5000:
            store.append(batch)
            batch = []
    if batch:
        store.append(batch)
    written = time.perf_counter() - t0
    copy = open_copy(store, work / "analytics")
    t0 = time.perf_counter()
    copy.refresh(store)
    refreshed = time.perf_counter() - t0
    con = connect(copy)
    rows: list = []

    def inv() -> None:
        rows[:] = inventory(con, ToolFilters())

    t_inv = best(inv)
    t_changes = best(lambda: changes(con, ToolFilters()))
    t_base = best(lambda: sessions(con, "server", Filters()))
    con.close()
    store.close()
    return {
        "sessions": n,
        "write_s": written,
        "refresh_s": refreshed,
        "inventory_s": t_inv,
        "changes_s": t_changes,
        "sessions_report_s": t_base,
        "rows": len(rows),
    }


def per_record_ns(fn, batches: list[list[NewEvent]], rounds: int = 3) -> float:  # type: ignore[no-untyped-def]
    total = sum(len(b) for b in batches)
    best_ns = float("inf")
    for _ in range(rounds):
        observer = fn()
        start = time.perf_counter_ns()
        for b in batches:
            observer(b)
        best_ns = min(best_ns, (time.perf_counter_ns() - start) / total)
    return best_ns


def bench_watch(n: int) -> dict:
    now = time.time_ns()
    batches = [session_records(i, now + i) for i in range(n)]

    def plain() -> FrameObserver:
        return FrameObserver(lambda sid, doc: None)

    def watched() -> FrameObserver:
        return FrameObserver(lambda sid, doc: None, tools=ToolWatch(lambda s, d: None, None))

    base = per_record_ns(plain, batches)
    with_watch = per_record_ns(watched, batches)
    # The gated relay path of one session: a tools/list exchange, then 2,000 calls and their
    # answers; Policy.check on each client frame without pinning, then with it (the pinner's
    # look at every frame included).
    session = session_records(0, now)
    listing = [(ev.direction, ev.raw) for ev in session[1:3]]
    calls = [(ev.direction, ev.raw) for ev in session if ev.kind == "frame"][2:] * 1000
    frames = listing + calls

    def gate(pinned: bool) -> None:
        policy = Policy.from_text('default = "allow"\n[pin]\nservers = ["srv*"]\n')
        if pinned:
            policy.pinner = Pinner(PinSettings(("srv*",), (), False), None, None, "srv0")
            h = policy.pinner
            h.approved = {
                ("srv0", t["name"]): tooldefs.definition_hash("tool", t) for t in tools_of(0, 0)
            }
        for direction, raw in frames:
            if direction == "c2s":
                if pinned:
                    policy.pinner.client_frame(raw)  # type: ignore[union-attr]
                policy.check("srv0", raw)
            elif pinned:
                policy.pinner.server_frame(raw)  # type: ignore[union-attr]

    t_gate, t_pin = best(lambda: gate(False), 3), best(lambda: gate(True), 3)
    return {
        "observer_ns": base,
        "observer_with_watch_ns": with_watch,
        "gate_ns_per_frame": t_gate / len(frames) * 1e9,
        "pin_ns_per_frame": t_pin / len(frames) * 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 sessions")
    args = parser.parse_args()
    n = 1000 if args.quick else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        inv = bench_inventory(n, Path(tmp))
    watch = bench_watch(min(n, 2000))
    print(
        f"sessions: {inv['sessions']:,} (written in {inv['write_s']:.1f} s, copy refreshed in "
        f"{inv['refresh_s']:.1f} s), inventory rows: {inv['rows']}"
    )
    print(
        f"inventory:        {inv['inventory_s'] * 1000:8.1f} ms  "
        f"({inv['inventory_s'] / inv['sessions_report_s']:.2f}x the sessions report)"
    )
    print(f"changes:          {inv['changes_s'] * 1000:8.1f} ms")
    print(f"sessions report:  {inv['sessions_report_s'] * 1000:8.1f} ms  (baseline)")
    print(
        f"observer per record: {watch['observer_ns']:.0f} ns plain, "
        f"{watch['observer_with_watch_ns']:.0f} ns with the tool watch "
        f"({watch['observer_with_watch_ns'] / watch['observer_ns']:.2f}x; shipper side)"
    )
    print(
        f"gated path per frame: {watch['gate_ns_per_frame']:.0f} ns without pinning, "
        f"{watch['pin_ns_per_frame']:.0f} ns with it "
        f"({watch['pin_ns_per_frame'] / watch['gate_ns_per_frame']:.2f}x)"
    )
    met = inv["inventory_s"] < 1.0
    print(
        f"target: inventory over {inv['sessions']:,} sessions < 1 s: {'met' if met else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
