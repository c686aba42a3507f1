"""Benchmark of the policy gate: what `Policy.check` costs per client-to-server frame, against
a plain `json.loads` of the same frame measured in the same run (the least a gate that looks at
the frame could do), and what one `blackbox hook claude-code` run costs against a bare
`blackbox --version` (the interpreter and CLI start-up every hook pays anyway).

Frames are the kinds a tap sees from a client: tools/call requests (gated: parsed and matched
against a 12-rule policy, the last rules matching on arguments), and ungated traffic
(notifications, tools/list, responses to server requests) that the byte prefilter passes.

    python bench/policy.py            # 200,000 frames of each kind, 10 hook runs (~1 min)
    python bench/policy.py --quick    # 20,000 frames, 3 hook runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from blackbox.recorder.gate.policy import Policy

POLICY = "\n".join(
    [
        'default = "allow"',
        *(
            f'[[rule]]\nid = "r{i}"\ndecision = "deny"\nserver = "srv{i}*"\ntool = "tool_{i}_*"\n'
            for i in range(10)
        ),
        '[[rule]]\nid = "no-etc"\ndecision = "deny"\ntool = "write_*"\n'
        'when = [{ arg = "path", matches = "^/etc/" }]',
        '[[rule]]\nid = "force"\ndecision = "ask"\n'
        'when = [{ arg = "options.force", equals = true }]',
    ]
)


def frames(n: int) -> tuple[list[bytes], list[bytes]]:
    gated, ungated = [], []
    for i in range(n):
        args = {"path": f"/home/u/file{i}.txt", "content": "x" * 200, "options": {"force": False}}
        gated.append(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "tools/call",
                    "params": {"name": "write_file", "arguments": args},
                }
            ).encode()
        )
        kind = i % 3
        if kind == 0:
            msg = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": i, "progress": i % 100, "total": 100},
            }
        elif kind == 1:
            msg = {"jsonrpc": "2.0", "id": i, "method": "tools/list", "params": {}}
        else:
            msg = {"jsonrpc": "2.0", "id": i, "result": {"roots": [{"uri": f"file:///w/{i}"}]}}
        ungated.append(json.dumps(msg).encode())
    return gated, ungated


def per_frame_ns(fn, items: list[bytes], rounds: int = 3) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for raw in items:
            fn(raw)
        best = min(best, (time.perf_counter_ns() - start) / len(items))
    return best


def run_ms(cmd: list[str], data: bytes | None, env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, input=data, env=env, capture_output=True, timeout=60, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    opts = parser.parse_args()
    n = 20_000 if opts.quick else 200_000
    runs = 3 if opts.quick else 10
    policy = Policy.from_text(POLICY)
    gated, ungated = frames(n)
    print(f"policy gate, {n} frames of each kind, best of 3 rounds", file=sys.stderr)

    base_g = per_frame_ns(json.loads, gated)
    check_g = per_frame_ns(lambda raw: policy.check("files", raw), gated)
    base_u = per_frame_ns(json.loads, ungated)
    check_u = per_frame_ns(lambda raw: policy.check("files", raw), ungated)
    verdict = policy.check("files", gated[0])
    assert verdict is not None and verdict.allowed  # the benchmark measures the allow path

    print("| frames | json.loads (baseline) | Policy.check | ratio |")
    print("|---|---|---|---|")
    print(
        f"| tools/call (gated, 12 rules) | {base_g:,.0f} ns | {check_g:,.0f} ns "
        f"| {check_g / base_g:.2f}x |"
    )
    print(
        f"| other client frames (prefiltered) | {base_u:,.0f} ns | {check_u:,.0f} ns "
        f"| {check_u / base_u:.3f}x |"
    )

    blackbox = str(Path(sys.executable).with_name("blackbox"))
    payload = json.dumps(
        {
            "session_id": "bench",
            "transcript_path": "/home/u/.claude/projects/p/bench.jsonl",
            "cwd": "/home/u/p",
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "mcp__files__write_file",
            "tool_input": {"path": "/home/u/a.txt", "content": "x"},
            "tool_use_id": "toolu_bench",
        }
    ).encode()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, BLACKBOX_HOME=tmp)
        env.pop("BLACKBOX_STORE", None)
        print(f"hook runs: {runs} each, median", file=sys.stderr)
        subprocess.run([blackbox, "sessions"], env=env, capture_output=True, timeout=60)
        base = run_ms([blackbox, "--version"], None, env, runs)
        hook = run_ms([blackbox, "hook", "claude-code"], payload, env, runs)
    print()
    print("| command | median wall time | ratio |")
    print("|---|---|---|")
    print(f"| `blackbox --version` (baseline) | {base:,.0f} ms | 1.00x |")
    print(
        f"| `blackbox hook claude-code` (observe, SQLite) | {hook:,.0f} ms | {hook / base:.2f}x |"
    )


if __name__ == "__main__":
    main()
