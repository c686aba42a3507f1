"""How long `blackbox attach` / `detach` take on a big host config, against plain json load+dump.

A config of 200 servers (150 stdio, 50 HTTP, Claude-Code shape, 2-space indentation) is written to
a temporary directory; each round attaches it (parse, plan, self-check, backup into the data
directory, state file, atomic write; HTTP entries become stdio bridge entries) and detaches it
again (byte-exact restore), and the baseline round loads and dumps the same file with the json
module (read, parse, serialise, write; no fsync). "parse only" is reading the config into the
position-keeping tree, the cost of never re-serialising the user's file. All measured in one
run, alternating.

    python bench/attach.py            # 30 rounds
    python bench/attach.py --quick    # 5 rounds
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from blackbox.hosts import attach as lib

WRAPPER = str(Path(sys.executable).with_name("blackbox"))


def make_config(n: int) -> dict:
    servers: dict = {}
    for i in range(n):
        if i % 4 == 3:
            servers[f"remote-{i}"] = {
                "type": "http",
                "url": f"https://mcp{i}.example.com/mcp",
                "headers": {"Authorization": f"Bearer ${{TOKEN_{i}}}"},
            }
        else:
            servers[f"server-{i}"] = {
                "command": "npx",
                "args": ["-y", f"@example/mcp-server-{i}", "--root", f"/srv/data/{i}"],
                "env": {"LOG_LEVEL": "info", "INDEX": str(i)},
            }
    return {"mcpServers": servers}


def baseline(path: Path) -> None:
    with path.open() as handle:
        data = json.load(handle)
    with path.open("w") as handle:
        json.dump(data, handle, indent=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 30")
    parser.add_argument("--servers", type=int, default=200)
    opts = parser.parse_args()
    rounds = 5 if opts.quick else 30

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / ".mcp.json"
        plain = Path(tmp) / "plain.json"
        text = json.dumps(make_config(opts.servers), indent=2) + "\n"
        config.write_text(text)
        plain.write_text(text)
        original = config.read_bytes()
        times: dict[str, list[float]] = {
            "json load+dump": [],
            "attach": [],
            "detach": [],
            "parse only": [],
        }
        for _ in range(rounds):
            t0 = time.perf_counter()
            baseline(plain)
            t1 = time.perf_counter()
            report = lib.attach(config, wrapper=WRAPPER, data_dir=Path(tmp))
            t2 = time.perf_counter()
            lib.detach(config, data_dir=Path(tmp))
            t3 = time.perf_counter()
            times["json load+dump"].append(t1 - t0)
            times["attach"].append(t2 - t1)
            times["detach"].append(t3 - t2)
            lib.load_config(config)  # read + span-keeping parse, the part attach cannot skip
            times["parse only"].append(time.perf_counter() - t3)
            assert config.read_bytes() == original, "round trip is not byte-exact"
        wrapped = len(report.by_action("wrapped"))
        bridged = len(report.by_action("bridged"))

    base = statistics.median(times["json load+dump"])
    print(
        f"config: {opts.servers} servers ({wrapped} stdio wrapped, {bridged} HTTP bridged), "
        f"{len(text)} bytes, {rounds} rounds, byte-exact round trip checked each round"
    )
    print(f"{'operation':<16} {'median ms':>10} {'p90 ms':>8} {'x baseline':>11}")
    for name, samples in times.items():
        med = statistics.median(samples)
        p90 = sorted(samples)[int(0.9 * (len(samples) - 1))]
        print(f"{name:<16} {med * 1e3:>10.2f} {p90 * 1e3:>8.2f} {med / base:>10.1f}x")


if __name__ == "__main__":
    main()
