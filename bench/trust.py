"""Speed of the Merkle tree over the log (not a test: prints figures).

Three figures, each against a baseline measured in the same run: a full root recomputation over
1,000,000 random 32-byte leaves (what `verify --checkpoint` does) against one `hashlib.sha256` of
each of the same leaves; appending 10,000 leaves to the frontier of a 1,000,000-leaf tree (what
each checkpoint costs the writer); and an inclusion proof for one leaf of a 1,000,000-leaf tree
through the subtree callback, answered by an in-memory tree that keeps every level, and by one
that keeps only leaf hashes (what a store without cached subtree hashes would pay).

Then the same three on a store (recorder/store/tree.py), SQLite unless --store says: the signed
checkpoint after 10,000 new records on a 1,000,000-record log (sequencing, subtree caching,
signing, storing: what the shipper pays), the recomputation of the tree from the records' bytes
that `verify --checkpoint` does (against `hashlib.sha256` of each record's canonical bytes), and
an inclusion proof answered from the cached subtrees.

    python bench/trust.py [--leaves 1000000] [--append 10000] [--rounds 3]
                          [--store-records 1000000] [--store URL]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import time

from blackbox.recorder.log.merkle import (
    Frontier,
    MemoryTree,
    inclusion_proof,
    leaf_hash,
    root,
    root_from_leaves,
    subtree_hash_from_leaves,
    verify_inclusion,
)


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def sha256_each(leaves: list[bytes]) -> None:
    sha = hashlib.sha256
    for leaf in leaves:
        sha(leaf).digest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--leaves", type=int, default=1_000_000)
    parser.add_argument("--append", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store-records", type=int, default=1_000_000)
    parser.add_argument("--store", default=None, help="a store URL (default: a SQLite scratch)")
    args = parser.parse_args()
    n, k = args.leaves, args.append
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")

    leaves = [os.urandom(32) for _ in range(n)]

    # 1. Full recomputation: baseline and tree interleaved, so both see the same load.
    print(f"\nfull root over {n:,} leaves (leaf hashing included)")
    ratios = []
    for r in range(args.rounds):
        base, _ = timed(sha256_each, leaves)
        full, _ = timed(root_from_leaves, leaves)
        ratios.append(full / base)
        print(
            f"  round {r + 1}: sha256 each {n / base:,.0f} leaves/s, "
            f"root {n / full:,.0f} leaves/s, {full / base:.2f}x the baseline's time"
        )
    print(f"  median {statistics.median(ratios):.2f}x (an RFC tree hashes each leaf twice)")

    hashes = [leaf_hash(leaf) for leaf in leaves]
    more = [leaf_hash(os.urandom(32)) for _ in range(k)]

    # 2. The writer's checkpoint: extend the stored frontier by k leaves, then take the root.
    build, frontier = timed(Frontier.of, hashes)
    print(f"\nfrontier append of {k:,} leaves onto a {n:,}-leaf frontier (built in {build:.2f} s)")
    for r in range(args.rounds):
        stored = frontier.to_bytes()
        base, _ = timed(sha256_each, more)
        start = time.perf_counter()
        current, _ = Frontier.decode(stored)
        current.extend(more)
        current_root = current.root()
        append = time.perf_counter() - start
        print(
            f"  round {r + 1}: {append * 1000:.1f} ms (decode + append + root), "
            f"sha256 of the same {k:,} leaves {base * 1000:.1f} ms, {append / base:.2f}x"
        )
    assert current_root == root(hashes + more)

    # 3. An inclusion proof through the subtree callback.
    build, tree = timed(MemoryTree, hashes)
    print(
        f"\ninclusion proof for one leaf of {n:,} (every level in memory, built in {build:.2f} s)"
    )
    rng = random.Random(16)
    tree_root = tree.root()
    one = [hashes[0]]
    for r in range(args.rounds):
        index = rng.randrange(n)
        base, _ = timed(sha256_each, one * 64)
        proof_time, proof = timed(tree.inclusion_proof, index)
        verify_time, ok = timed(verify_inclusion, hashes[index], index, n, proof, tree_root)
        assert ok
        print(
            f"  round {r + 1}: leaf {index}: proof {proof_time * 1000:.3f} ms "
            f"({len(proof)} hashes), verify {verify_time * 1000:.3f} ms; "
            f"64 sha256 calls {base * 1000:.3f} ms"
        )
    from_leaves = subtree_hash_from_leaves(lambda start, end: hashes[start:end])
    index = rng.randrange(n)
    leaf_only, proof = timed(inclusion_proof, index, n, from_leaves)
    assert verify_inclusion(hashes[index], index, n, proof, tree_root)
    print(f"  leaf hashes only (no cached subtrees): {leaf_only * 1000:.0f} ms for leaf {index}")
    if args.store_records:
        bench_store(args.store_records, k, args.rounds, args.store)


def bench_store(records: int, k: int, rounds: int, url: str | None) -> None:
    """The store's figures: see the module's docstring."""
    import tempfile
    from pathlib import Path

    from blackbox.recorder.log import chain
    from blackbox.recorder.log.model import NewEvent
    from blackbox.recorder.store import open_store, tree, tree_check
    from blackbox.recorder.trust.checkpoint import Signer
    from blackbox.recorder.trust.signing import issue

    scratch = tempfile.TemporaryDirectory(prefix="trust-bench-")
    url = url or f"sqlite:///{Path(scratch.name) / 'bench.db'}"
    store = open_store(url)
    signer = Signer.generate("bench.example/log")
    per_session = 100

    def fill(count: int, start: int) -> None:
        batch: list[NewEvent] = []
        for i in range(start, start + count):
            sid, seq = f"s{i // per_session:08d}", i % per_session + 1
            raw = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t"}}' % i
            batch.append(NewEvent(sid, seq, 10**18 + i, i, "frame", "c2s", raw))
            if len(batch) == 5000:
                store.append(batch)
                batch = []
        if batch:
            store.append(batch)

    print(f"\nstore {url.split(':')[0]}: filling {records:,} records")
    took, _ = timed(fill, records, 0)
    took_seq, first = timed(issue, store, signer)
    print(f"  filled in {took:.1f} s; first checkpoint (sequencing all) {took_seq:.1f} s")
    filled = records
    print(f"signed checkpoint after {k:,} new records on a {first.size:,}-record log")
    for r in range(rounds):
        fill(k, filled)
        filled += k
        raws = [os.urandom(70) for _ in range(k)]
        base, _ = timed(sha256_each, raws)
        took, issued = timed(issue, store, signer)
        print(
            f"  round {r + 1}: {took * 1000:.0f} ms to size {issued.size:,} "
            f"(sha256 of {k:,} records' bytes {base * 1000:.1f} ms, {took / base:.1f}x)"
        )
    with store.transaction() as conn:
        size = tree.head(conn).size
        rng = random.Random(16)
        for _ in range(rounds):
            index = rng.randrange(size)
            took, proof = timed(tree.inclusion_proof, conn, index, size)
            print(f"  inclusion proof of leaf {index}: {took * 1000:.2f} ms ({len(proof)} hashes)")
    # The auditor's recomputation from the records, against sha256 of their canonical bytes.
    canon = [chain.canonical(ev) for ev in store.read_log()]
    base, _ = timed(sha256_each, canon)
    with store.transaction() as conn:
        took, again = timed(tree_check.recompute, conn, [], getattr(store, "_bytes_cursor", None))
    assert again.roots[again.size] == issue(store, signer).root
    print(
        f"recomputation from the records: {again.size / took:,.0f} records/s; sha256 of each "
        f"record's canonical bytes {len(canon) / base:,.0f}/s ({took / base:.1f}x its time)"
    )
    store.close()
    scratch.cleanup()


if __name__ == "__main__":
    main()
