"""Checking the store's cached tree against the records: the tree is the writer's cache, never
evidence, so what is signed, proven or reported is computed from the leaves.

`leaf_roots` and `checked_root` give roots from the leaves (the records' chain hashes and the
hashes retention kept), incrementally from a root this log signed; `recompute` is `verify`'s
full recomputation from the records' bytes, which also compares every cached node it completes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from blackbox.recorder.log import Kind, chain, merkle
from blackbox.recorder.log import commitment as commitments
from blackbox.recorder.store.schema import (
    events,
    tree_nodes,
    tree_removed_leaves,
    tree_runs,
)
from sqlalchemy import select
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPIConnection, DBAPICursor
from blackbox.recorder.store.tree import (
    _LEAF,
    STRIDE,
    TreeDamaged,
    _leaf_hashes,
    _with_subtrees,
    commit_key,
    root_at,
)

LEAF_CHUNK = 65_536  # leaves read per query when roots are recomputed from the leaves


def leaf_roots(
    conn: Connection,
    sizes: Sequence[int],
    trusted: tuple[int, bytes] | None = None,
    fresh: dict[int, bytes] | None = None,
) -> dict[int, bytes]:
    """The roots at `sizes` computed from the leaves (each record's stored chain hash, with its
    commitment from its bytes, or the leaf hash retention kept), never from a cached node or the
    stored frontier: what a root is
    checked against before anything is signed or proven from the cache.

    With `trusted` (size P, root R: a checkpoint this log signed), only the leaves from P on are
    read: the perfect subtrees of the first P leaves are taken from the cache and must fold to R,
    which a damaged cache cannot fake (TreeDamaged otherwise). Sizes below P are not asked.

    `fresh` holds leaf hashes computed from the records in this transaction (`TreeHead.fresh`):
    a chunk they cover whole is taken from them rather than computed again."""
    wanted = sorted(set(sizes))
    roots: dict[int, bytes] = {}
    stack: list[bytes] = []
    size = 0
    if trusted is not None and trusted[0] > 0:
        size, signed = trusted
        stack = _with_subtrees(conn, lambda sub: _frontier_of(size, sub))
        if merkle.fold(stack) != signed:
            raise TreeDamaged(
                f"the store's cached tree over the first {size} leaves does not give the root "
                "this log signed for them: the tree's tables were edited; run verify"
            )
    for target in wanted:
        if target < size:
            raise ValueError(f"a root at {target} leaves is below the trusted {size}")
        while size < target:
            last = min(target, size + LEAF_CHUNK) - 1
            if fresh and size in fresh and last in fresh:  # `fresh` is one run of indices
                found = {i: fresh[i] for i in range(size, last + 1)}
            else:
                found = _leaf_hashes(conn, [(size, last)])
            if len(found) != last - size + 1:
                gone = next(i for i in range(size, last + 1) if i not in found)
                raise TreeDamaged(f"the store's tree has no leaf {gone}: run verify")
            size, _ = merkle.extend_frontier(stack, size, [found[i] for i in range(size, last + 1)])
        roots[target] = merkle.fold(stack)
    return roots


def _frontier_of(size: int, subtree_hash: merkle.SubtreeHash) -> list[bytes]:
    """The perfect subtrees of the first `size` leaves, largest first (the frontier at `size`)."""
    out, start = [], 0
    for bit in reversed(range(size.bit_length())):
        if size >> bit & 1:
            out.append(subtree_hash(start, start + (1 << bit)))
            start += 1 << bit
    return out


def checked_root(
    conn: Connection,
    size: int,
    trusted: tuple[int, bytes] | None = None,
    claimed: bytes | None = None,
    fresh: dict[int, bytes] | None = None,
) -> bytes:
    """The cached tree's root at `size` (and `claimed`, the stored head's root, when given),
    after checking it against the leaves (`leaf_roots`): TreeDamaged, naming the tree, when the
    cache disagrees with them."""
    cached = root_at(conn, size)
    if trusted is not None and trusted[0] > size:
        trusted = None
    if leaf_roots(conn, [size], trusted, fresh)[size] != cached or claimed not in (None, cached):
        raise TreeDamaged(
            f"the store's cached tree gives a root for {size} leaves that its records do not: "
            "the tree's tables were edited (the records may be intact); run verify"
        )
    return cached


@dataclass
class Recomputed:
    """The tree recomputed from the records: its size, its root at each size asked for, and what
    does not add up (plain sentences)."""

    size: int = 0
    roots: dict[int, bytes] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    retained: int = 0  # leaves of records retention removed, taken from the stored leaf hash
    # The first leaf whose record's stored chain hash is not the one recomputed from its bytes.
    first_difference: int | None = None
    bad_nodes: int = 0  # cached nodes that differ from the recomputation (the first few named)


_RECORD_COLUMNS = "session_id, seq, wall_ns, mono_ns, kind, direction, raw, raw_size, hash"
_CHUNK = 50_000  # leaves read per query: a cursor's worth, and the kept leaf hashes among them
_NO_RECORD = (None,) * 9


def _leaf_batches(conn: Connection, cursor: Callable[[], DBAPICursor]) -> Iterator[Sequence[tuple]]:
    """Every leaf of the stored tree in tree order, a list at a time, each as (idx, position,
    kept leaf hash, removed_by, then the record's session_id, seq, wall_ns, mono_ns, kind,
    direction, raw, raw_size and chain hash): the record's columns are None where it is gone
    from the log, and the kept columns None where it is not. The database builds the rows of
    records in the log in that shape, and a list is handed on as fetched unless a record is
    missing from it, where the hole is spliced in."""
    runs = conn.execute(
        select(tree_runs.c.first_idx, tree_runs.c.first_position, tree_runs.c.leaves).order_by(
            tree_runs.c.first_idx
        )
    ).all()
    for run_first, first_position, leaves in runs:
        offset = int(first_position - run_first)
        end = run_first + leaves
        for a in range(run_first, end, _CHUNK):
            b = min(a + _CHUNK, end)
            kept = {
                i: (h, by)
                for i, h, by in conn.execute(
                    select(
                        tree_removed_leaves.c.idx,
                        tree_removed_leaves.c.leaf_hash,
                        tree_removed_leaves.c.removed_by,
                    ).where(tree_removed_leaves.c.idx >= a, tree_removed_leaves.c.idx < b)
                )
            }
            expected = a
            cur = cursor()
            try:
                cur.execute(
                    f"SELECT position - ({offset}), position, NULL, NULL, {_RECORD_COLUMNS} "
                    f"FROM event_log WHERE position >= {int(a + offset)} "
                    f"AND position < {int(b + offset)} ORDER BY position"
                )
                while rows := cur.fetchmany(2000):
                    if rows[0][0] == expected and rows[-1][0] == expected + len(rows) - 1:
                        expected += len(rows)
                        yield rows
                        continue
                    spliced: list[tuple] = []
                    for row in rows:
                        while expected < row[0]:
                            gone = kept.get(expected, (None, None))
                            spliced.append((expected, expected + offset, *gone, *_NO_RECORD))
                            expected += 1
                        spliced.append(row)
                        expected = row[0] + 1
                    yield spliced
            finally:
                cur.close()
            if expected < b:
                yield [
                    (idx, idx + offset, *kept.get(idx, (None, None)), *_NO_RECORD)
                    for idx in range(expected, b)
                ]


def recompute(
    conn: Connection,
    sizes: Sequence[int] = (),
    cursor: Callable[[DBAPIConnection], DBAPICursor] | None = None,
) -> Recomputed:
    """Recompute the tree from the records' bytes: every leaf is the record's chain hash
    recomputed from the session's genesis (never the stored hash, leaf, node or frontier), in
    the order the sequencer took them; the root at each of `sizes` and at the whole tree.

    A leaf whose record retention removed (its `retention_applied` record still in the log) is
    the stored leaf hash, counted in `retained`; a leaf whose record is gone otherwise, a record
    out of its session's order, and a hole in the tree's indices are findings."""
    out = Recomputed()
    targets = sorted({s for s in sizes if s > 0})
    retention = set(
        conn.execute(
            select(events.c.position).where(events.c.kind == str(Kind.RETENTION_APPLIED))
        ).scalars()
    )
    driver = conn.connection.dbapi_connection
    assert driver is not None  # a connection in use holds its driver's
    stack: list[bytes] = []
    heads: dict[str, tuple[int, bytes]] = {}
    sha, leaf_prefix, link = hashlib.sha256, _LEAF, chain.link_fields
    key = commit_key(conn)
    commit, record_of = commitments.commit, chain.ChainRecord
    # Leaf hashes wait in `pending` and join the frontier a batch at a time (merkle's one merge
    # loop), and at each size whose root is wanted; `base` is the tree size before them.
    pending: list[bytes] = []
    # The nodes the recomputation completes at the stored levels, compared with the cached ones
    # a batch at a time: a cached node nothing else reads (no root, no frontier) is still checked.
    fresh: list[tuple[int, int, bytes]] = []
    base = 0
    n = 0
    t = 0
    missing: list[int] = []
    batches = _leaf_batches(conn, lambda: cursor(driver) if cursor else driver.cursor())
    for rows in batches:
        for row in rows:
            idx, position, stored_leaf, removed_by, sid = row[:5]
            if idx != n:
                out.findings.append(
                    f"the store's tree has no leaves {n}-{idx - 1}: its leaves were "
                    "deleted (the root below is recomputed without them)"
                    if idx > n
                    else f"the store's tree has leaf {idx} twice"
                )
                fresh += merkle.extend_frontier(stack, base, pending, STRIDE)[1]
                pending, base = [], idx
            if sid is None:
                if removed_by in retention:
                    out.retained += 1
                else:
                    missing.append(position)
                # A record deleted outside retention left no leaf hash: the root comes out wrong,
                # as it should, besides the finding.
                leaf = chain.as_bytes(stored_leaf) if stored_leaf is not None else bytes(32)
            else:
                # A record following its session's last one links from that one's recomputed
                # hash; any other is `_chain_hash`'s diagnosis.
                seq, raw, size = row[5], row[10], row[11]
                last = heads.get(sid)
                if (seq == 1 and last is None) or (last is not None and last[0] == seq - 1):
                    if type(raw) is not bytes:
                        raw = chain.as_bytes(raw)
                    prev = last[1] if last is not None else chain.genesis(sid)
                    linked = link(prev, sid, row[8], row[9], row[6], row[7], size, raw)
                    heads[sid] = (seq, linked)
                else:
                    linked = _chain_hash(row, heads, out)
                if idx < key.first_leaf:
                    leaf = sha(leaf_prefix + linked).digest()
                else:
                    # C from the record's bytes and the store's key, never a stored one.
                    if type(raw) is not bytes:
                        raw = chain.as_bytes(raw)
                    record = record_of(sid, seq, row[6], row[7], row[8], row[9], raw, size, b"")
                    c = commit(record, key.salt(sid, seq))
                    leaf = sha(leaf_prefix + linked + c).digest()
                # (bytes and a driver's memoryview compare by content)
                if out.first_difference is None and linked != row[12]:
                    out.first_difference = idx
            n = idx + 1
            pending.append(leaf)
            if t < len(targets) and targets[t] == n:
                base, done = merkle.extend_frontier(stack, base, pending, STRIDE)
                fresh += done
                pending = []
                while t < len(targets) and targets[t] == n:
                    out.roots[n] = merkle.fold(stack)
                    t += 1
        base, done = merkle.extend_frontier(stack, base, pending, STRIDE)
        fresh += done
        pending = []
        if len(fresh) >= _NODE_BATCH:
            _compare_nodes(conn, fresh, out)
            fresh = []
    if missing:
        shown = ", ".join(map(str, missing[:3])) + (", ..." if len(missing) > 3 else "")
        out.findings.append(
            f"{len(missing)} record(s) of the tree are gone from the log (log position "
            f"{shown}) and no retention record removed them: records were deleted"
        )
    _compare_nodes(conn, fresh, out)
    if out.bad_nodes > _NODE_FINDINGS:
        more = out.bad_nodes - _NODE_FINDINGS
        out.findings.append(f"... and {more} more cached tree node(s) differ from the records")
    out.size = n
    out.roots[n] = merkle.fold(stack)
    return out


_NODE_BATCH = 4096
_NODE_FINDINGS = 5  # bad nodes named one by one; beyond, counted


def _compare_nodes(
    conn: Connection, fresh: Sequence[tuple[int, int, bytes]], out: Recomputed
) -> None:
    """Compare recomputed nodes (level, index, hash) with the cached ones, naming each that
    differs or is missing. Only nodes over leaves before the first record whose stored hash is
    not its recomputed one: past it the records are at fault, which is said already."""
    limit = out.first_difference
    by_level: dict[int, dict[int, bytes]] = {}
    for level, idx, h in fresh:
        if limit is None or (idx + 1) << level <= limit:
            by_level.setdefault(level, {})[idx] = h
    for level, expected in sorted(by_level.items()):
        rows = conn.execute(
            select(tree_nodes.c.idx, tree_nodes.c.hash).where(
                tree_nodes.c.level == level,
                tree_nodes.c.idx.between(min(expected), max(expected)),
            )
        )
        stored = {i: chain.as_bytes(h) for i, h in rows}
        for idx, h in sorted(expected.items()):
            if stored.get(idx) == h:
                continue
            out.bad_nodes += 1
            if out.bad_nodes > _NODE_FINDINGS:
                continue
            span = f"leaves {idx << level}-{((idx + 1) << level) - 1}"
            what = "is missing" if idx not in stored else "differs from its records"
            out.findings.append(
                f"the store's cached tree node at level {level}, index {idx} ({span}) {what}: "
                "the tree's tables were edited (the records are intact)"
            )


def _chain_hash(row: Sequence, heads: dict[str, tuple[int, bytes]], out: Recomputed) -> bytes:
    """A record's chain hash recomputed from its bytes and its session's recomputed head."""
    _i, position, _l, _r, sid, seq, wall_ns, mono_ns, kind, direction, raw, raw_size, stored = row
    raw = chain.as_bytes(raw)
    last_seq, prev = heads.get(sid, (0, chain.genesis(sid)))
    if seq != last_seq + 1:
        out.findings.append(
            f"session {sid} seq {seq} follows seq {last_seq} in the tree (log position "
            f"{position}): its records were removed, inserted or renumbered"
        )
        prev = chain.as_bytes(stored)  # cannot be recomputed: the leaf is what the record says
        h = prev
    else:
        record = chain.ChainRecord(sid, seq, wall_ns, mono_ns, kind, direction, raw, raw_size, b"")
        h = chain.link(prev, record)
    heads[sid] = (seq, h)
    return h
