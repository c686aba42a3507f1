"""Benchmark of the live views: time to first render of `/sessions` over 10,000 sessions and of a
100,000-frame session's page in headless Chromium, against the same pages over a 10-session store
and a 10-frame session measured in the same run; and the lag from the wire to `blackbox tail -f`
and to the browser (server-sent events), against a follower that reads the store alone.

"Render" is the page loaded AND its script having filled the table (the page marks `body.loaded`).
The lag of a frame is the time it reached the reader minus its wall time (taken by the tap as the
frame crossed it). The traffic is the SDK client driving the SDK's example server through
`blackbox record`, 40 calls 50 ms apart.

    python bench/ui.py           # 10,000 sessions, a 100,000-frame session
    python bench/ui.py --quick   # 1,000 sessions, a 10,000-frame session
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from blackbox.recorder.log.model import new_session_id
from blackbox.recorder.query.live_feed import Follower
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import session_events

from blackbox.ui.server import serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
BLACKBOX = str(Path(sys.executable).with_name("blackbox"))
SERVER = [sys.executable, str(ROOT / "examples" / "server.py")]
T0 = 1_764_000_000_000_000_000
CALLS = 40


def fill(url: str, sessions: int, frames: int) -> tuple[str, str]:
    """`sessions` small sessions and one of about `frames` frames; (big id, small id)."""
    store = open_store(url)
    batch = []
    small = ""
    for i in range(sessions):
        sid = new_session_id(T0 + i * 60 * 10**9)
        small = small or sid
        batch.extend(session_events(sid, T0 + i * 60 * 10**9, calls=1))
        if len(batch) > 20_000:
            store.append(batch)
            batch = []
    big = new_session_id(T0 + sessions * 60 * 10**9)
    batch.extend(session_events(big, T0 + sessions * 60 * 10**9, calls=frames // 2))
    store.append(batch)
    store.close()
    return big, small


def render_times(browser, served, paths: list[str], runs: int = 5) -> list[float]:  # type: ignore[no-untyped-def]
    """Median seconds from navigation to `body.loaded`, per path (after one warm-up visit)."""
    context = browser.new_context()
    page = context.new_page()
    base = served.url.split("/?")[0]
    page.goto(served.url, wait_until="load")  # trade the token for the cookie
    out = []
    for path in paths:
        times = []
        for i in range(runs + 1):
            started = time.perf_counter()
            page.goto(base + path, wait_until="load")
            page.wait_for_selector("body.loaded", state="attached", timeout=30_000)
            if i:
                times.append(time.perf_counter() - started)
        out.append(statistics.median(times))
    context.close()
    return out


async def _client(url: str, home: Path) -> None:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=BLACKBOX,
        args=["record", "--name", "lag", "--store", url, "--", *SERVER],
        env={"BLACKBOX_HOME": str(home)},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for i in range(CALLS):
            await session.call_tool("echo", {"message": f"m{i}"})
            await anyio.sleep(0.05)


def drive(url: str, home: Path) -> None:
    """The traffic, on a thread of its own (Playwright's sync API holds this one's event loop)."""
    import anyio

    thread = threading.Thread(target=anyio.run, args=(_client, url, home))
    thread.start()
    thread.join(120)


def p95(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(0.95 * len(values)))]


def lag_tail(url: str, home: Path) -> list[float]:
    proc = subprocess.Popen(
        [BLACKBOX, "tail", "-f", "-n", "0", "--format", "jsonl", "--store", url],
        env={**os.environ, "BLACKBOX_HOME": str(home)},
        stdout=subprocess.PIPE,
        text=True,
    )
    lags: list[float] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            doc = json.loads(line)
            if doc["kind"] == "frame":
                from datetime import datetime

                lags.append(time.time() - datetime.fromisoformat(doc["time"]).timestamp())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(1.5)  # tail's start-up (imports, store) before the traffic begins
    drive(url, home)
    time.sleep(1.5)
    proc.terminate()
    proc.wait(10)
    return lags


def lag_store_only(url: str, home: Path) -> list[float]:
    """The baseline: a follower reading the store alone (what a poller of `read_log` sees)."""
    store = open_store(url, create=False)
    follower = Follower(store, None)
    lags: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            for rec in follower.poll():
                if rec.kind == "frame":
                    lags.append(time.time() - rec.wall_ns / 1e9)
            time.sleep(0.1)

    poller = threading.Thread(target=poll)
    poller.start()
    drive(url, home)
    time.sleep(1.5)
    done.set()
    poller.join()
    store.close()
    return lags


def lag_browser(browser, served, url: str, home: Path) -> list[float]:  # type: ignore[no-untyped-def]
    context = browser.new_context()
    page = context.new_page()
    page.goto(served.url, wait_until="load")
    page.evaluate(
        """() => { window.lags = []; const s = new EventSource('/api/live');
        s.addEventListener('records', (ev) => { const now = Date.now();
          for (const r of JSON.parse(ev.data)) if (r.kind === 'frame')
            window.lags.push(now / 1000 - r.wall_ns / 1e9); }); }"""
    )
    time.sleep(1.0)
    drive(url, home)
    time.sleep(1.5)
    lags = page.evaluate("() => window.lags")
    context.close()
    return lags


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sessions, frames = (1_000, 10_000) if args.quick else (10_000, 100_000)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        big_url, small_url = f"sqlite:///{tmp / 'big.db'}", f"sqlite:///{tmp / 'small.db'}"
        started = time.perf_counter()
        big_id, _ = fill(big_url, sessions, frames)
        small_big, _ = fill(small_url, 10, 10)
        print(f"filled the stores in {time.perf_counter() - started:.1f}s")
        big_store, small_store = open_store(big_url), open_store(small_url)
        big_ui = serve_in_thread(big_store, None, tmp / "a1")
        small_ui = serve_in_thread(small_store, None, tmp / "a2")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            base_list, base_session = render_times(
                browser, small_ui, ["/sessions", f"/sessions/{small_big}"]
            )
            big_list, big_session = render_times(
                browser, big_ui, ["/sessions", f"/sessions/{big_id}"]
            )
            print(
                f"/sessions, {sessions} sessions: {big_list * 1000:.0f} ms "
                f"(10 sessions: {base_list * 1000:.0f} ms, ratio {big_list / base_list:.2f})"
            )
            print(
                f"session page, {frames} frames: {big_session * 1000:.0f} ms "
                f"(10 frames: {base_session * 1000:.0f} ms, ratio {big_session / base_session:.2f})"
            )
            big_ui.stop()
            small_ui.stop()
            live_url = f"sqlite:///{tmp / 'live.db'}"
            home = tmp / "home"
            drive(live_url, home)  # create the store and warm the caches
            live_store = open_store(live_url, create=False)
            live_ui = serve_in_thread(live_store, home / "journal", tmp / "a3")
            store_lags = lag_store_only(live_url, home)
            tail_lags = lag_tail(live_url, home)
            browser_lags = lag_browser(browser, live_ui, live_url, home)
            live_ui.stop()
            browser.close()
        for name, lags in (
            ("store only (baseline)", store_lags),
            ("tail -f", tail_lags),
            ("browser (SSE)", browser_lags),
        ):
            print(
                f"wire -> {name}: p50 {statistics.median(lags) * 1000:.0f} ms, "
                f"p95 {p95(lags) * 1000:.0f} ms over {len(lags)} frames"
            )
        print(f"tail -f p95 / store-only p95: {p95(tail_lags) / p95(store_lags):.2f}")


if __name__ == "__main__":
    main()
