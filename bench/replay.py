"""Benchmark: replay throughput against the official SDK client, and --timing original accuracy.

1. Throughput. The official SDK client (`mcp.Client`, handshake era) makes 3 `echo` calls to a
   minimal SDK server through `blackbox record`; the N-call session is that recording with its
   tools/call exchange repeated N times through the store API (same bytes but for the id and the
   message, spaced by the recorded gap), so building it stays quick. Then, in the same run, the
   SDK client makes the same N calls directly (the baseline), and `replay_session` replays the
   N-call session at --timing none against the same server (it must come out equivalent). The
   replay's time is everything `blackbox replay` does: load the session from the store, start
   the server, drive it, compare every response, store the replay as a new session. The
   baseline's time is connect + N calls + close. Target: replay within 1.5x of the direct client.

2. Accuracy. A session of 100 calls with random gaps (2-40 ms) between a response and the next
   request is recorded the same way, then replayed at --timing original; for each request the
   error is |replayed gap - recorded gap|. Target: median under 1 ms.

3. Suite. `--sessions` copies of a recorded 3-call session replayed as one suite (`run_suite`)
   with --jobs 1, then with --jobs 2; the figure is the ratio of the two times. Target: >= 1.7x
   (on a machine whose two cores are otherwise idle: each replay starts a Python server, which
   is CPU-bound).

4. Minimisation. A session of `--minimize-calls` echo calls with one `fail` call (a tool error)
   in the middle, minimised for that fault (`minimize_session`). Target: under 60 s and under
   200 replays, ending with the failing call and the handshake.

    python bench/replay.py            # 10,000 calls, 1 round (--rounds N for more)
    python bench/replay.py --quick    # 1,000 calls, 1 round
    python bench/replay.py --only suite,minimize --sessions 100 --minimize-calls 1000
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from blackbox.recorder.log.model import Direction, Kind
from blackbox.recorder.store import open_store
from blackbox.replay.replayer import ReplayOptions, replay_session

HERE = Path(__file__).resolve()
BLACKBOX = str(Path(sys.executable).with_name("blackbox"))
SERVER = [sys.executable, str(HERE), "--serve-minimal"]


def serve_minimal() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench-minimal")

    @server.tool()
    def echo(message: str) -> str:
        """Return the message."""
        return message

    @server.tool()
    def fail(message: str) -> str:
        """A tool error."""
        from mcp.server.mcpserver.exceptions import ToolError

        raise ToolError(f"failed on {message}")

    server.run()


def params(argv: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=argv[0], args=argv[1:], env=env)


def client_calls(
    argv: list[str], calls: int, gaps_ms: list[float] | None = None, env=None
) -> float:  # type: ignore[no-untyped-def]
    """The official SDK client making `calls` echo calls; returns the seconds it took."""
    import anyio
    from mcp import Client

    async def run() -> float:
        started = time.perf_counter()
        async with Client(params(argv, env), mode="legacy") as client:
            for i in range(calls):
                if gaps_ms:
                    await anyio.sleep(gaps_ms[i] / 1000)
                await client.call_tool("echo", {"message": f"m{i}"})
        return time.perf_counter() - started

    return anyio.run(run)


def record(store_url: str, home: Path, name: str, calls: int, gaps_ms=None) -> str:  # type: ignore[no-untyped-def]
    env = {"BLACKBOX_HOME": str(home), "BLACKBOX_STORE": store_url}
    argv = [BLACKBOX, "record", "--name", name, "--store", store_url, "--", *SERVER]
    client_calls(argv, calls, gaps_ms, env)
    store = open_store(store_url)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [s for s in store.list_sessions(name=name) if s.sealed]
        if found:
            return found[0].session_id
        time.sleep(0.2)
    raise SystemExit(f"the {name} session was not recorded")


def extend(store, template_id: str, calls: int, fail_at: int | None = None) -> str:  # type: ignore[no-untyped-def]
    """A session of `calls` echo calls made from a recorded one: its frames up to the first
    tools/call as recorded, then the recorded tools/call exchange repeated with new ids and
    messages (the server answers exactly what the recording then expects), then its end."""
    import json

    from blackbox.recorder.log.model import NewEvent, new_session_id

    events = list(store.read_session(template_id))
    first = next(i for i, e in enumerate(events) if e.method == "tools/call")
    request, response = events[first], events[first + 1]
    assert response.direction == Direction.SERVER_TO_CLIENT and response.rpc_id == request.rpc_id
    ended = next(e for e in events if e.kind == Kind.SESSION_ENDED)
    sid = new_session_id()
    out: list = []

    def add(ev, raw: bytes, mono: int) -> None:  # type: ignore[no-untyped-def]
        out.append(NewEvent(sid, len(out) + 1, ev.wall_ns, mono, ev.kind, ev.direction, raw))

    for ev in events[:first]:
        add(ev, ev.raw, ev.mono_ns)
    req, res = json.loads(request.raw), json.loads(response.raw)
    mono = request.mono_ns
    turn = response.mono_ns - request.mono_ns
    base_id = int(req["id"])
    for i in range(calls):
        req["id"] = res["id"] = base_id + i
        req["params"]["arguments"]["message"] = f"m{i}"
        res["result"]["content"][0]["text"] = f"m{i}"
        res["result"]["structuredContent"]["result"] = f"m{i}"
        req["params"]["name"] = "fail" if i == fail_at else "echo"
        answer = res
        if i == fail_at:
            text = f"Error executing tool fail: failed on m{i}"
            answer = {"jsonrpc": "2.0", "id": res["id"], "result": {"isError": True}}
            answer["result"]["content"] = [{"type": "text", "text": text}]
        add(request, json.dumps(req, separators=(",", ":")).encode(), mono)
        add(response, json.dumps(answer, separators=(",", ":")).encode(), mono + turn)
        mono += 2 * turn
    add(ended, ended.raw, mono)
    for start in range(0, len(out), 5000):
        store.append(out[start : start + 5000])
    return sid


def gap_errors(store, original: str, replayed: str) -> list[float]:  # type: ignore[no-untyped-def]
    """|replayed gap - recorded gap| in ms for each request that followed a response."""

    def gaps(session_id: str) -> list[float]:
        frames = [e for e in store.read_session(session_id) if e.kind == Kind.FRAME]
        out = []
        for prev, cur in itertools.pairwise(frames):
            if (
                cur.direction == Direction.CLIENT_TO_SERVER
                and cur.method == "tools/call"
                and prev.direction == Direction.SERVER_TO_CLIENT
            ):
                out.append((cur.mono_ns - prev.mono_ns) / 1e6)
        return out

    recorded, replayed_gaps = gaps(original), gaps(replayed)
    return [abs(a - b) for a, b in zip(recorded, replayed_gaps, strict=False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="1,000 calls, 1 round")
    parser.add_argument("--sessions", type=int, default=100, help="suite size")
    parser.add_argument("--minimize-calls", type=int, default=1_000)
    parser.add_argument(
        "--only", default="throughput,timing,suite,minimize", help="comma-separated parts"
    )
    parser.add_argument("--serve-minimal", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_minimal:
        serve_minimal()
        return
    if args.quick:
        args.calls, args.rounds = 1_000, 1
    parts = set(args.only.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        url = f"sqlite:///{home / 'bench.db'}"
        if "suite" in parts or "minimize" in parts:
            template = record(url, home, "template", 3)
            store = open_store(url)
            if "suite" in parts:
                bench_suite(store, template, args.sessions)
            if "minimize" in parts:
                bench_minimize(store, template, args.minimize_calls)
            store.close()
        if not parts & {"throughput", "timing"}:
            return
        print(f"recording, then extending it to {args.calls:,} calls ...", file=sys.stderr)
        store = open_store(url)
        sid = extend(store, record(url, home, "bench", 3), args.calls)
        direct, replays = [], []
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}: direct SDK client, then replay", file=sys.stderr)
            direct.append(client_calls(SERVER, args.calls))
            started = time.perf_counter()
            result = replay_session(store, sid)
            replays.append(time.perf_counter() - started)
            if result.exit_code != 0:
                raise SystemExit(f"the replay diverged: {result.summary()}")
        d, p = statistics.median(direct), statistics.median(replays)
        print(f"\nthroughput, {args.calls:,} calls (median of {args.rounds} round(s)):")
        print("| run | seconds | calls/s | vs direct SDK client |")
        print("|---|---:|---:|---:|")
        print(f"| direct SDK client | {d:.2f} | {args.calls / d:,.0f} | 1.00x |")
        print(f"| blackbox replay --timing none | {p:.2f} | {args.calls / p:,.0f} | {p / d:.2f}x |")

        print("\nrecording a 100-call session with random gaps ...", file=sys.stderr)
        rng = random.Random(7)
        gaps = [rng.uniform(2, 40) for _ in range(100)]
        timed = record(url, home, "timed", 100, gaps)
        result = replay_session(store, timed, options=ReplayOptions(timing="original"))
        errors = sorted(gap_errors(store, timed, result.replay_id))
        p95 = errors[int(len(errors) * 0.95) - 1]
        print(
            f"\n--timing original, {len(errors)} gaps of 2-40 ms (load {os.getloadavg()[0]:.1f}):"
        )
        print("| median abs error | p95 abs error | max abs error |")
        print("|---:|---:|---:|")
        print(f"| {statistics.median(errors):.3f} ms | {p95:.3f} ms | {errors[-1]:.3f} ms |")
        store.close()


def bench_suite(store, template: str, sessions: int) -> None:  # type: ignore[no-untyped-def]
    from blackbox.replay.suite import run_suite

    ids = [extend(store, template, 3) for _ in range(sessions)]
    infos = [store.session(i) for i in ids]
    times = {}
    for jobs in (1, 2):
        print(f"suite of {sessions} sessions, --jobs {jobs} ...", file=sys.stderr)
        result = run_suite(store, infos, jobs=jobs)
        if result.exit_code != 0:
            raise SystemExit(f"the suite diverged: {result.counts}")
        times[jobs] = result.duration_s
    print(f"\nsuite of {sessions} sessions (load {os.getloadavg()[0]:.1f}):")
    print("| jobs | seconds | sessions/s | speed-up |")
    print("|---:|---:|---:|---:|")
    for jobs, secs in times.items():
        print(f"| {jobs} | {secs:.1f} | {sessions / secs:.2f} | {times[1] / secs:.2f}x |")


def bench_minimize(store, template: str, calls: int) -> None:  # type: ignore[no-untyped-def]
    from blackbox.replay.minimize import minimize_session

    sid = extend(store, template, calls, fail_at=calls // 2 + 7)
    print(f"minimising a {calls:,}-call session with one fault ...", file=sys.stderr)
    result = minimize_session(store, sid)
    if result.goal is None:
        raise SystemExit(f"nothing to minimise: {result.not_reproduced}")
    print(f"\nminimisation of {calls:,} calls with one fault (load {os.getloadavg()[0]:.1f}):")
    print("| steps before | steps after | replays | seconds | kept |")
    print("|---:|---:|---:|---:|---|")
    kept = ", ".join(result.kept_labels)
    print(
        f"| {result.steps_before:,} | {result.steps_after} | {result.replays} | "
        f"{result.seconds:.1f} | {kept} |"
    )


if __name__ == "__main__":
    main()
