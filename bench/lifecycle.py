"""Benchmark of the session lifecycle's costs on the relay's path, each against a baseline
measured in the same run (the machine is noisy: only ratios are compared):

- the policy gate with live reloading (`LivePolicy.check`, its watcher thread reading and hashing
  the file every `--interval` seconds, a rewrite every second) against the plain `Policy.check`
  of the same policy, over the same tools/call frames;
- the idle watch's `touch()` per chunk relayed, and the proxy's heartbeat check per recorded
  frame, against the same loop without them.

    python bench/lifecycle.py            # 200,000 frames, watcher every 1 s
    python bench/lifecycle.py --quick    # 20,000 frames
    python bench/lifecycle.py --interval 0.01   # a watcher a hundred times busier
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

from blackbox.recorder.capture.heartbeat import FrameHeartbeats
from blackbox.recorder.capture.idle import IdleWatch
from blackbox.recorder.gate.policy import Policy
from blackbox.recorder.gate.policy_reload import LivePolicy

from bench.policy import POLICY


def frames(n: int) -> list[bytes]:
    out = []
    for i in range(n):
        args = {"path": f"/home/u/file{i}.txt", "content": "x" * 200, "options": {"force": False}}
        msg = {"jsonrpc": "2.0", "id": i, "method": "tools/call"}
        msg["params"] = {"name": "write_file", "arguments": args}
        out.append(json.dumps(msg).encode())
    return out


def per_frame_us(check, batch: list[bytes], rounds: int = 5) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for raw in batch:
            check("srv", raw)
        best = min(best, time.perf_counter() - start)
    return best / len(batch) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    n = 20_000 if args.quick else 200_000
    batch = frames(n)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy.toml"
        path.write_text(POLICY)
        plain = Policy.load(path)
        live = LivePolicy(path, interval=args.interval)
        live.watch(lambda _doc: None)
        stop = threading.Event()

        def rewrite() -> None:  # a new version every second, alternating two texts
            i = 0
            while not stop.wait(1.0):
                i += 1
                path.write_text(f"{POLICY}\n# v{i % 2}\n")

        writer = threading.Thread(target=rewrite, daemon=True)
        writer.start()
        try:
            # Interleaved, so drift in machine load hits both alike.
            base, watched = [], []
            for _ in range(5):
                base.append(per_frame_us(plain.check, batch))
                watched.append(per_frame_us(live.check, batch))
        finally:
            stop.set()
            live.stop()
        loads = len(live.history)
    b, w = min(base), min(watched)
    print(f"policy check, {n} tools/call frames, watcher every {args.interval:g} s:")
    print(f"  Policy.check      {b:.2f} us/frame (baseline)")
    print(f"  LivePolicy.check  {w:.2f} us/frame  ratio {w / b:.3f}  ({loads} loads recorded)")

    idle = IdleWatch(3600.0, lambda _doc: None)
    chunks = range(n * 5)

    def without() -> float:
        start = time.perf_counter()
        for _ in chunks:
            pass
        return time.perf_counter() - start

    def with_touch() -> float:
        touch = idle.touch
        start = time.perf_counter()
        for _ in chunks:
            touch("c2s")
        return time.perf_counter() - start

    t0 = min(without() for _ in range(3))
    t1 = min(with_touch() for _ in range(3))
    per = (t1 - t0) / len(chunks) * 1e9
    print(f"idle watch: touch() adds {per:.0f} ns per relayed chunk")
    share = per / (b * 1000)
    print(f"  (one policy check costs {b * 1000:.0f} ns: touch is {share:.3f} of it)")

    heartbeats = FrameHeartbeats(lambda _s, _d: None, own_prefix="blackbox proxy:")
    raw = batch[0]

    def with_heartbeats() -> float:
        frame = heartbeats.frame
        start = time.perf_counter()
        for i in chunks:
            frame("session", "c2s", raw, i)
        return time.perf_counter() - start

    t2 = min(with_heartbeats() for _ in range(3))
    per_hb = (t2 - t0) / len(chunks) * 1e9
    print(f"proxy heartbeats: frame() adds {per_hb:.0f} ns per recorded frame that is not a ping")


if __name__ == "__main__":
    main()
