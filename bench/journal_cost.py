"""What journaling a frame costs the relay path, apart from the rest of the tap (issue 39, point 2).

The tap journals every chunk it reads before forwarding it (`recorder/capture/journal.py`, one
`os.writev` into a segment file). Before replacing that system call, this measures what it costs
a round trip: the same do-nothing `selectors` relay as `bench/tap_overhead.py`'s floor, three ways,
and `blackbox record`, all taking turns of 25 sequential `tools/call` round trips, so that the
shared machine's load lands on each alike:

1. the relay (nothing recorded): the baseline;
2. the relay with one `os.writev` of a journal-sized record (header, prefix, the chunk) into an
   `O_APPEND` file before each forward: the tap's system call, nothing else;
3. the relay copying the same record into a memory-mapped, preallocated file instead: a journal
   with no system call per frame;
4. `blackbox record`, the tap itself.

Prints p50 and p99 of each against the relay, pooled over the rounds, the CPU per call of each
front process (every thread; the tap's store worker, a process of its own, is not counted: issue
39's point 3 compares the tap's process with the relay), and the load average. The CPU of the two
journalling relays is the floor of each design: what journalling alone costs, before any of the
tap's own work (framing, sequence numbers, the session's bookkeeping).

    python bench/journal_cost.py [--rounds 3] [--calls 1500]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tap_overhead import BLACKBOX, SELECTORS_RELAY, SERVER, SERVER_MARK, TURN, Peer, _cpu_ns

# The journal's record header (`journal.HEADER`) and a session-id-sized prefix, packed per chunk
# as the tap does. Inserted into the floor relay's source just before it forwards a chunk.
_SETUP = "import struct, mmap\nHDR = struct.Struct('>2sBBHIqqqq')\nPREFIX = b'x' * 44\n"
_WRITEV_SETUP = (
    "jfd = os.open(os.environ['JOURNAL_FILE'], os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n"
)
_WRITEV = (
    "        os.writev(jfd, (HDR.pack(b'ab', 5, 3, 36, len(data), 1, 2, 3, -1), PREFIX, data))\n"
)
_MMAP_SETUP = (
    "SEGMENT = 64 << 20\n"
    "jfd = os.open(os.environ['JOURNAL_FILE'], os.O_RDWR | os.O_CREAT)\n"
    "os.posix_fallocate(jfd, 0, SEGMENT)\n"
    "MAPPED = mmap.mmap(jfd, SEGMENT)\n"
    "AT = [0]\n"
)
_MMAP = (
    "        rec = HDR.pack(b'ab', 5, 3, 36, len(data), 1, 2, 3, -1) + PREFIX + data\n"
    "        at = AT[0] if AT[0] + len(rec) <= SEGMENT else 0\n"
    "        MAPPED[at : at + len(rec)] = rec\n"
    "        AT[0] = at + len(rec)\n"
)
_FORWARD = "        send(route[fd], data)\n"


def _with_journal(setup: str, per_chunk: str) -> str:
    assert _FORWARD in SELECTORS_RELAY and "reading = 2\n" in SELECTORS_RELAY
    source = SELECTORS_RELAY.replace("reading = 2\n", "reading = 2\n" + _SETUP + setup, 1)
    return source.replace(_FORWARD, per_chunk + _FORWARD, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=1500, help="round trips per config a round")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bb-journal-cost-"))
    env = dict(
        os.environ,
        BLACKBOX_HOME=str(work / "home"),
        BLACKBOX_STORE=f"sqlite:///{work / 'bench.db'}",
    )
    server = [sys.executable, "-c", SERVER, SERVER_MARK]
    configs = {
        "relay": [sys.executable, "-c", SELECTORS_RELAY, *server],
        "relay + writev": [sys.executable, "-c", _with_journal(_WRITEV_SETUP, _WRITEV), *server],
        "relay + mmap": [sys.executable, "-c", _with_journal(_MMAP_SETUP, _MMAP), *server],
        "blackbox record": [BLACKBOX, "record", "--name", "bench", "--", *server],
    }
    lat: dict[str, list[int]] = {name: [] for name in configs}
    cpu_ns: dict[str, int] = dict.fromkeys(configs, 0)  # the front process, every thread
    calls = 0
    load_before = os.getloadavg()[0]
    for rnd in range(args.rounds):
        peers = {}
        for name, argv in configs.items():
            peer_env = dict(env, JOURNAL_FILE=str(work / f"{name.replace(' ', '')}.{rnd}"))
            peers[name] = Peer(argv, peer_env)
        for peer in peers.values():
            peer.sequential(300)  # warm up
        time.sleep(1)  # the tap's store worker has started and shipped the warm-up
        start = {name: _cpu_ns(peer.proc.pid) for name, peer in peers.items()}
        for _turn in range(max(1, args.calls // TURN)):
            for name, peer in peers.items():
                lat[name] += peer.sequential(TURN)
        calls += max(1, args.calls // TURN) * TURN
        for name, peer in peers.items():
            cpu_ns[name] += _cpu_ns(peer.proc.pid) - start[name]
        for peer in peers.values():
            peer.close()
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    base = lat["relay"]
    base50, base99 = statistics.median(base), statistics.quantiles(base, n=100)[98]
    print(
        f"{args.rounds} round(s) x {args.calls} sequential round trips per config; load average "
        f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print(
        f"{'config':18}{'p50 us':>9}{'p50 x':>8}{'p99 us':>9}{'p99 x':>8}"
        f"{'CPU us/call':>13}{'CPU x':>8}"
    )
    base_cpu = cpu_ns["relay"] / calls
    for name, values in lat.items():
        p50, p99 = statistics.median(values), statistics.quantiles(values, n=100)[98]
        cpu = cpu_ns[name] / calls
        print(
            f"{name:18}{p50 / 1e3:>9.1f}{p50 / base50:>7.2f}x{p99 / 1e3:>9.1f}{p99 / base99:>7.2f}x"
            f"{cpu / 1e3:>13.1f}{cpu / base_cpu:>7.2f}x"
        )
    print(
        "CPU: the front process alone, every thread (the tap's store worker is a process of its "
        "own); goal for the tap <= 1.3x the relay"
    )


if __name__ == "__main__":
    main()
