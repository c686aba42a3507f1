"""The Merkle tree in the store, on SQLite and PostgreSQL: sequencing, incremental updates, proofs
from cached subtrees, out-of-order commits, concurrent writers with checkpoints."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from recorder import merkle
from recorder.checkpoint import Signer, open_checkpoint
from recorder.model import new_session_id
from recorder.signing import issue
from recorder.store import open_store, tree
from tests.recorder.storekit import T0, session_events


def chain_hashes(store) -> list[bytes]:
    return [e.hash for e in store.read_log()]


def test_sequencing_builds_the_rfc_tree_incrementally(store_url):
    store = open_store(store_url)
    reference = merkle.MemoryTree()
    for batch in range(6):
        for k in range(batch + 1):
            store.append(session_events(calls=k + 1, start_ns=T0 + batch * 10**9 + k * 10**6))
        with store.transaction(write=True) as conn:
            head = tree.sequence(conn)
        leaves = [merkle.leaf_hash(h) for h in chain_hashes(store)]
        reference = merkle.MemoryTree(leaves)
        assert head == tree.TreeHead(len(leaves), reference.root())
    size = reference.size
    assert size > 100
    with store.transaction() as conn:
        assert tree.head(conn).size == size
        for old in (1, 2, 15, 16, 17, 64, size - 1, size):
            assert tree.root_at(conn, old) == reference.root(old)
            assert tree.consistency_proof(conn, old, size) == reference.consistency_proof(old)
        for index in (0, 1, 15, 16, 31, 32, 100, size - 1):
            proof = tree.inclusion_proof(conn, index, size)
            assert proof == reference.inclusion_proof(index)
            assert merkle.inclusion_proof(index, size, tree.BlockCache(conn)) == proof
            assert merkle.verify_inclusion(
                merkle.leaf_hash(chain_hashes(store)[index]), index, size, proof, reference.root()
            )
        # nothing new: the same head, nothing written
        assert tree.sequence(conn) == tree.TreeHead(size, reference.root())
        recomputed = tree.recompute(conn, [17, size])
    assert recomputed.findings == []
    assert recomputed.roots == {17: reference.root(17), size: reference.root()}
    store.close()


@pytest.mark.timeout(60)
def test_a_position_committed_late_is_sequenced_after_the_others(pg_url):
    """PostgreSQL: a transaction that took lower positions commits after one that took higher
    ones. The sequencer never waits for it nor skips it: it goes in at the end of the tree, and
    the checkpoint signed before it is consistent with the one after."""
    store = open_store(pg_url)
    store.append(session_events(start_ns=T0))
    signer = Signer.generate("test/log")
    first = issue(store, signer)
    # Two appends that skip the log lock (as a writer of another make might): the first takes
    # its positions and stays open while the second commits.
    slow, fast = store.engine.connect(), store.engine.connect()
    try:
        slow_events = session_events(start_ns=T0 + 10**9)
        store._append_in(slow, slow_events)
        store._append_in(fast, session_events(start_ns=T0 + 2 * 10**9))
        fast.commit()
        second = issue(store, signer)
        slow.commit()
    finally:
        slow.close()
        fast.close()
    third = issue(store, signer)
    n = len(slow_events) + 1
    assert third.size == second.size + n
    with store.transaction() as conn:
        positions = [r.position for r in conn.execute(tree.tree_leaves.select().order_by("idx"))]
        recomputed = tree.recompute(conn, [first.size, second.size])
    assert positions[-n:] == sorted(positions[-n:])
    assert positions[-n] < positions[-n - 1]  # the late commit's lower positions, at the end
    assert recomputed.findings == []
    assert recomputed.roots[second.size] == second.root
    for old, new in ((first, second), (second, third)):
        with store.transaction() as conn:
            proof = tree.consistency_proof(conn, old.size, new.size)
        assert merkle.verify_consistency(old.size, new.size, old.root, new.root, proof)
    store.close()


@pytest.mark.timeout(120)
def test_four_concurrent_writers_with_checkpoints_every_100ms(pg_url):
    store = open_store(pg_url)
    signer = Signer.generate("test/log")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        mine = open_store(pg_url)
        try:
            for i in range(12):
                start = T0 + (w * 100 + i) * 10**9
                mine.append(session_events(new_session_id(start), calls=2, start_ns=start))
                time.sleep(0.04)  # the writes span several checkpoint intervals
        except BaseException as exc:
            errors.append(exc)
        finally:
            mine.close()

    notes: list[str] = []

    def checkpointer() -> None:
        mine = open_store(pg_url)
        try:
            while not stop.is_set():
                notes.append(issue(mine, signer).note)
                time.sleep(0.1)
            notes.append(issue(mine, signer).note)
        except BaseException as exc:
            errors.append(exc)
        finally:
            mine.close()

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    signing = threading.Thread(target=checkpointer)
    signing.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    signing.join()
    assert errors == []
    heads = [open_checkpoint(n, [signer.verifier])[0] for n in notes]
    assert all(h is not None for h in heads)
    assert len({h.size for h in heads}) >= 3
    total = sum(1 for _ in store.read_log())
    assert heads[-1].size == total
    with store.transaction() as conn:
        for old, new in itertools.pairwise(heads):
            assert old.size <= new.size
            proof = tree.consistency_proof(conn, old.size, new.size)
            assert merkle.verify_consistency(
                old.size, new.size, old.root_hash, new.root_hash, proof
            ), (old.size, new.size)
        assert tree.recompute(conn).roots[total] == heads[-1].root_hash
    store.close()
