"""What recording costs on the HTTP path: tool calls against a minimal HTTP MCP server, directly,
through a bare streaming proxy that records nothing (same stack: uvicorn + httpx2), and through
`blackbox proxy` (journal + store child shipping into SQLite), all measured in one run; plus the
blackbox proxy without a shipper ("journal only"), to show where the cost is.

The CPU time each measured process spends per call is reported too: on a shared machine the
wall-clock figures swing with everyone else's load, the CPU cost much less.

Each server and proxy runs in its own process; the load generator is a raw HTTP/1.1 keep-alive
client (so the client's own overhead stays small next to what is measured). Sequential: one
client, one call at a time, the four targets taking turns of 25 calls (so a busy moment on the
shared machine falls on all of them alike; the store child's bursts of work, too, fall on every
target, and its cost shows in the CPU per call). Concurrent: 16 clients at once, one
target per turn. Then the blackbox proxy's memory is sampled while it serves many calls (it
must not grow).

    python bench/proxy_overhead.py            # ~1 minute: 5 rounds of 500 sequential and
                                              # 16 x 40 concurrent calls, 5,000-call memory run
    python bench/proxy_overhead.py --full     # the issue's 100,000-call memory run (slow)
    python bench/proxy_overhead.py --rounds 1 --memory-requests 3000   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
BLACKBOX = str(Path(sys.executable).with_name("blackbox"))
TOOL_RESULT = {"content": [{"type": "text", "text": "42"}], "isError": False}


# -- the upstream: a minimal stateless MCP-over-HTTP server on raw asyncio ----------------------


async def _serve_upstream(port: int) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length)
                rid = json.loads(body).get("id") if body else None
                reply = json.dumps({"jsonrpc": "2.0", "id": rid, "result": TOOL_RESULT}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(reply)}\r\n\r\n".encode()
                    + reply
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


# -- the baseline: a bare streaming reverse proxy on the same stack, recording nothing ----------


def _serve_bare(port: int, upstream: str) -> None:
    import httpx2
    import uvicorn

    hop = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"trailer"}
    client = httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=None))
    client.headers.clear()

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k not in hop and k != b"content-length"]
        target = scope["raw_path"].decode() + (
            "?" + scope["query_string"].decode() if scope["query_string"] else ""
        )
        request = client.build_request(
            scope["method"], upstream + target, headers=headers, content=body
        )
        response = await client.send(request, stream=True)
        try:
            out = [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in hop]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": out}
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    # As `blackbox proxy` does before serving (run_proxy), so the comparison is of the work per
    # call, not of whose heap a full collection has to walk.
    gc.freeze()
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        http="h11",
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,  # as `blackbox proxy`: no X-Forwarded-For middleware
        lifespan="off",
    )


# -- the blackbox proxy without its shipper: what journaling alone costs ----------------------


def _serve_journal_only(port: int, upstream: str) -> None:
    from blackbox.recorder.capture.journal import Journal
    from blackbox.recorder.capture.taps.http import HttpProxyTap
    from blackbox.recorder.capture.taps.http_exchange import ProxySettings
    from blackbox.recorder.capture.taps.http_server import ProxyServer

    journal = Journal.create(Path(tempfile.mkdtemp(prefix="bb-bench-journal-")))
    tap = HttpProxyTap(ProxySettings(upstream + "/mcp"), journal)
    gc.freeze()  # as run_proxy does
    server = ProxyServer(tap, port=port).start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
        journal.discard()


# -- the load generator -------------------------------------------------------------------------


def _request(i: int, port: int) -> bytes:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {
                "name": "add",
                "arguments": {"a": i, "b": 1},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
                },
            },
        },
        separators=(",", ":"),
    ).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        "accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n"
        f"mcp-method: tools/call\r\nmcp-name: add\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = None
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if length is not None:
        await reader.readexactly(length)
    elif chunked:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def _worker(port: int, count: int, start: int, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in range(start, start + count):
            request = _request(i, port)
            t0 = time.perf_counter()
            writer.write(request)
            status = await _read_response(reader)
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                raise RuntimeError(f"HTTP {status} from port {port}")
    finally:
        writer.close()


async def _load(port: int, clients: int, per_client: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    t0 = time.perf_counter()
    await asyncio.gather(
        *(_worker(port, per_client, c * per_client, latencies) for c in range(clients))
    )
    return latencies, time.perf_counter() - t0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its live descendants (the blackbox proxy ships from a
    child process, whose work is part of what recording costs)."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += _cpu_seconds(int(child))
    except (FileNotFoundError, ProcessLookupError):
        pass
    return total


async def _interleaved(
    ports: list[int], per_target: int, turn: int = 25
) -> tuple[list[list[float]], list[int]]:
    """One client, one call at a time, the targets taking turns of `turn` calls (each leads
    equally often): every target meets the same moments of the machine's load from elsewhere, so
    the ratios between them are not decided by which one ran during a busy second. The first
    call of a turn finds its processes asleep and is not counted (it is warm-up, and the CPU
    figure still includes it). Returns the counted latencies and the calls made, per target."""
    conns = [await asyncio.open_connection("127.0.0.1", port) for port in ports]
    latencies: list[list[float]] = [[] for _ in ports]
    calls = [0] * len(ports)
    try:
        rotation = 0
        while any(len(lat) < per_target for lat in latencies):
            for j in range(len(ports)):
                k = (rotation + j) % len(ports)
                reader, writer = conns[k]
                for i in range(min(turn, per_target - len(latencies[k]) + 1)):
                    request = _request(calls[k], ports[k])
                    t0 = time.perf_counter()
                    writer.write(request)
                    status = await _read_response(reader)
                    elapsed = time.perf_counter() - t0
                    calls[k] += 1
                    if status != 200:
                        raise RuntimeError(f"HTTP {status} from port {ports[k]}")
                    if i > 0:
                        latencies[k].append(elapsed)
            rotation += 1
    finally:
        for _reader, writer in conns:
            writer.close()
    return latencies, calls


def _figures(
    latencies: list[float], elapsed: float, cpu: float, calls: int | None = None
) -> dict[str, float]:
    """p50/p99 (ms), requests/s and CPU ms per call (`calls`: those the CPU was spent on, when
    more than the latencies counted)."""
    latencies = sorted(latencies)
    return {
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000,
        "rps": len(latencies) / elapsed,
        "cpu": cpu / (calls or len(latencies)) * 1000,
    }


def measure_sequential(targets: list[tuple[int, int]], per_target: int) -> list[dict[str, float]]:
    """Sequential calls to all targets (port, pid) interleaved; figures per target. Requests
    per second are per target: one over the mean time of its calls."""
    ports = [port for port, _pid in targets]
    asyncio.run(_interleaved(ports, min(per_target, 50)))  # warm-up
    cpu0 = [_cpu_seconds(pid) for _port, pid in targets]
    latencies, calls = asyncio.run(_interleaved(ports, per_target))
    return [
        _figures(lat, sum(lat), _cpu_seconds(pid) - c0, n)
        for lat, n, (_port, pid), c0 in zip(latencies, calls, targets, cpu0, strict=True)
    ]


def measure(port: int, pid: int, clients: int, per_client: int) -> dict[str, float]:
    """Latency percentiles and throughput seen by the clients, and the CPU time the measured
    process spent per call (robust on a shared machine, where wall-clock figures are noisy)."""
    asyncio.run(_load(port, clients, min(per_client, 50)))  # warm-up
    cpu0 = _cpu_seconds(pid)
    latencies, elapsed = asyncio.run(_load(port, clients, per_client))
    return _figures(latencies, elapsed, _cpu_seconds(pid) - cpu0)


def _median_of(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


# -- processes ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def _spawn(argv: list[str], port: int, env: dict[str, str] | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    _wait(port, proc)
    return proc


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate(timeout=10)
    return (err or b"").decode(errors="replace")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # A round's p99 is its 1-in-100 slowest call: with 200 calls that was the 2nd slowest, a
    # figure one scheduler hiccup on a shared machine decides; 500 calls give it five.
    parser.add_argument("--requests", type=int, default=500, help="sequential calls per round")
    parser.add_argument("--per-client", type=int, default=40, help="calls per client per round")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory-requests", type=int, default=5000)
    parser.add_argument("--full", action="store_true", help="100,000 calls for the memory run")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-bare", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--serve-journal-only", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        asyncio.run(_serve_upstream(args.serve_upstream))
        return
    if args.serve_bare:
        _serve_bare(int(args.serve_bare[0]), args.serve_bare[1])
        return
    if args.serve_journal_only:
        _serve_journal_only(int(args.serve_journal_only[0]), args.serve_journal_only[1])
        return
    if args.full:
        args.memory_requests = 100_000

    tmp = Path(tempfile.mkdtemp(prefix="bb-proxy-bench-"))
    up_port, bare_port, bb_port, jo_port = _free_port(), _free_port(), _free_port(), _free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    procs = [_spawn([sys.executable, str(HERE), "--serve-upstream", str(up_port)], up_port)]
    procs.append(
        _spawn([sys.executable, str(HERE), "--serve-bare", str(bare_port), upstream], bare_port)
    )
    procs.append(
        _spawn([sys.executable, str(HERE), "--serve-journal-only", str(jo_port), upstream], jo_port)
    )
    env = {"BLACKBOX_HOME": str(tmp / "home")}
    store = f"sqlite:///{tmp / 'bench.db'}"
    blackbox = _spawn(
        [
            BLACKBOX,
            "proxy",
            "--upstream",
            f"{upstream}/mcp",
            "--listen",
            f"127.0.0.1:{bb_port}",
            "--store",
            store,
        ],
        bb_port,
        env,
    )
    targets = (
        ("direct", up_port, procs[0].pid),
        ("bare proxy", bare_port, procs[1].pid),
        ("blackbox proxy, journal only", jo_port, procs[2].pid),
        ("blackbox proxy", bb_port, blackbox.pid),
    )
    rounds: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {"sequential": [], "concurrent": []} for name, _port, _pid in targets
    }
    try:
        # Sequential calls interleave the targets in turns of 25 calls; concurrent ones (16
        # clients on one target) take turns by round. Each figure is the median over the rounds.
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds} ...", file=sys.stderr)
            sequential = measure_sequential(
                [(port, pid) for _n, port, pid in targets], args.requests
            )
            for (name, _port, _pid), figures in zip(targets, sequential, strict=True):
                rounds[name]["sequential"].append(figures)
            for name, port, pid in targets:
                rounds[name]["concurrent"].append(measure(port, pid, args.clients, args.per_client))
        results = {
            name: {mode: _median_of(runs) for mode, runs in modes.items()}
            for name, modes in rounds.items()
        }
        print(
            f"memory run: {args.memory_requests} calls through blackbox proxy ...", file=sys.stderr
        )
        warm = max(1000, args.memory_requests // 10)
        asyncio.run(_load(bb_port, args.clients, warm // args.clients))
        rss_start = _rss_mib(blackbox.pid)
        per = max(1, (args.memory_requests - warm) // args.clients)
        samples = [rss_start]
        done = 0
        step = max(1, per // 4)
        while done < per:
            n = min(step, per - done)
            asyncio.run(_load(bb_port, args.clients, n))
            done += n
            samples.append(_rss_mib(blackbox.pid))
    finally:
        err = _stop(blackbox)
        for proc in procs:
            _stop(proc)
    total = warm + per * args.clients

    print("\n| target | mode | p50 ms | p99 ms | req/s | CPU ms/call |")
    print("|---|---|---:|---:|---:|---:|")
    for name, modes in results.items():
        for mode, r in modes.items():
            print(
                f"| {name} | {mode} | {r['p50']:.2f} | {r['p99']:.2f} | {r['rps']:.0f} | "
                f"{r['cpu']:.2f} |"
            )
    print("\n| ratio against the bare proxy | p50 | p99 | req/s | CPU/call |")
    print("|---|---:|---:|---:|---:|")
    for name in ("blackbox proxy", "blackbox proxy, journal only"):
        for mode in ("sequential", "concurrent"):
            b, x = results["bare proxy"][mode], results[name][mode]
            print(
                f"| {name}, {mode} | {x['p50'] / b['p50']:.2f}x | {x['p99'] / b['p99']:.2f}x | "
                f"{x['rps'] / b['rps']:.2f}x | {x['cpu'] / b['cpu']:.2f}x |"
            )
    print("\n| ratio (bare proxy / direct) | p50 | p99 | req/s |")
    print("|---|---:|---:|---:|")
    for mode in ("sequential", "concurrent"):
        d, b = results["direct"][mode], results["bare proxy"][mode]
        print(
            f"| {mode} | {b['p50'] / d['p50']:.2f}x | {b['p99'] / d['p99']:.2f}x | "
            f"{b['rps'] / d['rps']:.2f}x |"
        )
    print(
        f"\nblackbox proxy RSS over {total:,} calls (after a {warm:,}-call warm-up): "
        + " -> ".join(f"{s:.1f}" for s in samples)
        + f" MiB; growth {samples[-1] - samples[0]:+.1f} MiB"
    )
    print(f"blackbox proxy: {err.strip().splitlines()[-1] if err.strip() else '(no output)'}")


if __name__ == "__main__":
    main()
