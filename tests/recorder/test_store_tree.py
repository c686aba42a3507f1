"""The Merkle tree in the store, on SQLite and PostgreSQL: sequencing, incremental updates, proofs
from cached subtrees, out-of-order commits, concurrent writers with checkpoints."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from blackbox.recorder.log import merkle
from blackbox.recorder.log.model import new_session_id
from blackbox.recorder.store import open_store, tree, tree_check
from blackbox.recorder.trust.checkpoint import Signer, open_checkpoint
from blackbox.recorder.trust.signing import issue

from tests.fixtures.storekit import OF_S, T0, log_leaves, session_events


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
        leaves = log_leaves(store)
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
                log_leaves(store)[index], index, size, proof, reference.root()
            )
        # nothing new: the same head, nothing written
        assert tree.sequence(conn) == tree.TreeHead(size, reference.root())
        recomputed = tree_check.recompute(conn, [17, size])
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
        runs = conn.execute(tree.tree_runs.select().order_by("first_idx")).all()
        positions = [r.first_position + k for r in runs for k in range(r.leaves)]
        recomputed = tree_check.recompute(conn, [first.size, second.size])
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
        assert tree_check.recompute(conn).roots[total] == heads[-1].root_hash
    store.close()


def test_the_tree_keeps_a_row_per_run_not_per_leaf(store_url):
    """The leaf hash of a record in the log is its chain hash's, which its row holds: the tree
    keeps which record each leaf is as runs of positions (one here, where the log has no hole)
    and no leaf hash while no record is removed."""
    store = open_store(store_url)
    for i in range(5):
        store.append(session_events(calls=20, start_ns=T0 + i * 10**9))
        with store.transaction(write=True) as conn:
            head = tree.sequence(conn)
    with store.transaction() as conn:
        runs = conn.execute(tree.tree_runs.select()).all()
        kept = conn.execute(tree.tree_removed_leaves.select()).all()
    assert head.size > 200
    assert [(r.first_idx, r.leaves) for r in runs] == [(0, head.size)]
    assert kept == []
    store.close()


def test_a_forged_removal_of_a_deleted_record_is_still_a_deletion(store_url):
    """An attacker deletes a session's records (triggers off) and, so that the tree still adds
    up, files their true leaf hashes as kept, naming as their remover a record that is not a
    retention record: the roots agree with the checkpoint, but verify reports the deletion."""
    from tests.fixtures.storekit import tamper

    store = open_store(store_url)
    sessions = [session_events(calls=3, start_ns=T0 + i * 10**9) for i in range(3)]
    for events in sessions:
        store.append(events)
    signer = Signer.generate("test/log")
    signed = issue(store, signer)
    victim = sessions[1][0].session_id
    with store.transaction() as conn:
        leaves = tree.session_leaves(conn, victim)
    assert len(leaves) == len(list(store.read_session(victim)))
    forged = [
        (
            "INSERT INTO tree_removed_leaves (idx, leaf_hash, removed_by) VALUES (:i, :h, :p)",
            {"i": leaf.index, "h": leaf.leaf_hash, "p": leaves[0].position},
        )
        for leaf in leaves
    ]
    tamper(
        store_url,
        *forged,
        (f"DELETE FROM events WHERE {OF_S}", {"s": victim}),
        ("DELETE FROM sessions WHERE session_id = :s", {"s": victim}),
    )
    with store.transaction() as conn:
        recomputed = tree_check.recompute(conn, [signed.size])
    assert recomputed.roots[signed.size] == signed.root  # the forgery keeps the root
    assert recomputed.retained == 0
    assert any("gone from the log" in f and "no retention record" in f for f in recomputed.findings)
    store.close()


def test_a_deleted_run_and_a_reordered_run_are_caught(store_url):
    """The runs are the writer's cache of which record each leaf is: deleting one leaves a hole
    verify names, and reordering them changes the recomputed root."""
    from tests.fixtures.storekit import tamper

    store = open_store(store_url)
    store.append(session_events(calls=6, start_ns=T0))
    signed = issue(store, Signer.generate("test/log"))
    tamper(
        store_url,
        ("UPDATE tree_runs SET leaves = 3 WHERE first_idx = 0", {}),
        (
            "INSERT INTO tree_runs (first_idx, first_position, leaves) "
            "SELECT 3, first_position + 4, :n FROM tree_runs WHERE first_idx = 0",
            {"n": signed.size - 4},
        ),
        (
            "INSERT INTO tree_runs (first_idx, first_position, leaves) "
            "SELECT :i, first_position + 3, 1 FROM tree_runs WHERE first_idx = 0",
            {"i": signed.size - 1},
        ),
    )
    with store.transaction() as conn:
        reordered = tree_check.recompute(conn, [signed.size])
    assert reordered.size == signed.size
    assert reordered.roots[signed.size] != signed.root
    tamper(store_url, ("DELETE FROM tree_runs WHERE first_idx = 3", {}))
    with store.transaction() as conn:
        holed = tree_check.recompute(conn)
    assert any(f"has no leaves 3-{signed.size - 2}" in f for f in holed.findings)
    store.close()


def test_an_edited_record_is_named_by_its_leaf(store_url):
    """An attacker edits a record's bytes in place (triggers off), keeping its stored chain hash:
    the recomputed root differs from the checkpoint's, and the recomputation names the first
    leaf whose record no longer matches its stored hash."""
    from tests.fixtures.storekit import tamper

    store = open_store(store_url)
    for i in range(3):
        store.append(session_events(calls=3, start_ns=T0 + i * 10**9))
    signed = issue(store, Signer.generate("test/log"))
    with store.transaction() as conn:
        intact = tree_check.recompute(conn, [signed.size])
        victim = tree.session_leaves(conn, nth_session_id(store, 1))[2]
    assert intact.first_difference is None and intact.roots[signed.size] == signed.root
    tamper(
        store_url,
        ("UPDATE events SET raw = :raw WHERE position = :p", {"raw": b"{}", "p": victim.position}),
    )
    with store.transaction() as conn:
        edited = tree_check.recompute(conn, [signed.size])
    assert edited.first_difference == victim.index
    assert edited.roots[signed.size] != signed.root
    store.close()


def nth_session_id(store, k: int) -> str:
    """The id of the k-th session in the log."""
    seen: list[str] = []
    for e in store.read_log():
        if e.session_id not in seen:
            seen.append(e.session_id)
    return seen[k]
