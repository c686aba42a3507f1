"""What the per-value commitments in the tree's leaves cost (issue 34, point 5; not a test: prints
figures).

From migration 0011 every leaf of the tree commits to its record's header and to each token of
its raw bytes with a salt (recorder/log/commitment.py): the sequencer, `verify --checkpoint`,
`prove` and `export` compute C from the record's bytes. Three figures, each against a baseline in
the same run:

1. per record, on the frames of the synthetic session mix (`recorder/store/synthetic.py`, with
   secrets): C (tokens, salts, digests) against the chain hash the store computes anyway;
2. a checkpoint (sequencing and signing) over N new records on a SQLite store whose leaves carry
   commitments, against the same records on a store whose leaves do not (its `first_leaf` moved
   past them, as in a store from before 0011);
3. `verify --checkpoint`'s recomputation of the tree on both stores.

    python bench/commitments.py [--sessions 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from blackbox.recorder.log import chain, commitment, new_session_id
from blackbox.recorder.store import open_store, tree, tree_check
from blackbox.recorder.store.synthetic import session_events
from blackbox.recorder.trust.checkpoint import Signer
from blackbox.recorder.trust.signing import issue

T0 = 1_790_000_000_000_000_000


def records(sessions: int) -> list[list]:
    return [
        session_events(new_session_id(T0 + i * 10**9), T0 + i * 10**9, calls=6, secrets=i % 3 == 0)
        for i in range(sessions)
    ]


def per_record(batches: list[list], rounds: int) -> tuple[float, float, int]:
    """(µs per record for the chain hash, µs per record for C, records)."""
    flat = [ev for batch in batches for ev in batch]
    key = bytes(32)
    salts = [commitment.record_salt(key, ev.session_id, ev.seq) for ev in flat]
    link_times, commit_times = [], []
    prev = bytes(32)
    for _ in range(rounds):
        started = time.perf_counter()
        for ev in flat:
            chain.link(prev, ev)
        link_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        for ev, r in zip(flat, salts, strict=True):
            commitment.commit(ev, r)
        commit_times.append(time.perf_counter() - started)
    n = len(flat)
    return min(link_times) / n * 1e6, min(commit_times) / n * 1e6, n


def store_with(batches: list[list], path: Path, committed: bool) -> str:
    url = f"sqlite:///{path}"
    store = open_store(url)
    store.close()
    if not committed:  # a store from before 0011: its first committed leaf past every record
        with sqlite3.connect(path) as db:
            db.execute("DROP TRIGGER commitment_keys_no_update")
            db.execute("UPDATE commitment_keys SET first_leaf = ?", (2**62,))
    store = open_store(url)
    for batch in batches:
        store.append(batch)
    store.close()
    return url


def checkpoint_and_verify(url: str, signer: Signer) -> tuple[float, float]:
    store = open_store(url)
    try:
        started = time.perf_counter()
        issue(store, signer)
        signed = time.perf_counter() - started
        started = time.perf_counter()
        with store.transaction() as conn:
            found = tree_check.recompute(conn)
            assert not found.findings and found.roots[found.size] == tree.head(conn).root
        return signed, time.perf_counter() - started
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batches = records(args.sessions)
    link_us, commit_us, n = per_record(batches, args.rounds)
    print(f"{n} records of the synthetic mix, best of {args.rounds}:")
    print(f"  chain hash        {link_us:7.2f} µs/record  1.00×")
    print(f"  commitment C      {commit_us:7.2f} µs/record  {commit_us / link_us:5.2f}×")
    signer = Signer.generate("bench/log")
    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for committed in (False, True):  # taking turns: the machine's load lands on both
                url = store_with(batches, Path(tmp) / f"{r}-{committed}.sqlite", committed)
                results[committed].append(checkpoint_and_verify(url, signer))
    plain_sign = statistics.median(s for s, _ in results[False])
    plain_verify = statistics.median(v for _, v in results[False])
    sign = statistics.median(s for s, _ in results[True])
    verify = statistics.median(v for _, v in results[True])
    print(f"SQLite store of {n} records, median of {args.rounds}:")
    print(f"  checkpoint, leaves without C  {plain_sign * 1000:8.1f} ms  1.00×")
    print(f"  checkpoint, leaves with C     {sign * 1000:8.1f} ms  {sign / plain_sign:5.2f}×")
    print(f"  tree recomputed, without C    {plain_verify * 1000:8.1f} ms  1.00×")
    print(f"  tree recomputed, with C       {verify * 1000:8.1f} ms  {verify / plain_verify:5.2f}×")


if __name__ == "__main__":
    main()
