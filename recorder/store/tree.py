"""The log's Merkle tree in the store: sequencing records into it, proofs from cached subtrees, and
the recomputation from the records themselves that verification trusts instead.

Leaf i is the i-th record the sequencer took, its leaf input the record's 32-byte chain hash, and
from the store's `first_leaf` on that hash followed by the record's commitment C, computed again
from its bytes wherever a leaf is needed (`CommitKey`; recorder/log/commitment.py;
recorder/log/merkle.py has the tree itself). No row is kept per leaf: the record's row holds its
chain hash, and `tree_runs` says which record each leaf is, a row per run of consecutive log
positions; only the leaf hashes of records retention removed are kept apart. The sequencer runs
under a lock (SQLite: the write transaction; PostgreSQL: an advisory lock) and takes only
committed records, in position order, as Trillian's sequencer does: on PostgreSQL a transaction
can commit a lower position after a higher one, so a position the sequencer passed without
seeing it is kept in `tree_gaps` and taken in when it appears, at the end of the tree. Leaves
once sequenced never move, so a checkpoint is always consistent with every later one. Each run
costs O(k + log n) for k new records: the frontier is extended and the perfect subtrees
completed at every fourth level are stored, so that any subtree a proof asks for is a fold of at
most 8 stored hashes.

Everything stored here is the writer's cache. `recompute` is what `verify --checkpoint` trusts:
every leaf recomputed from its record's bytes through the session's chain.
"""

from __future__ import annotations

import bisect
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from blackbox.recorder import StoreError
from blackbox.recorder.log import chain, merkle
from blackbox.recorder.log import commitment as commitments
from blackbox.recorder.store import layout
from blackbox.recorder.store.schema import (
    checkpoints,
    commitment_keys,
    events,
    log_identity,
    tree_gaps,
    tree_nodes,
    tree_removed_leaves,
    tree_runs,
    tree_state,
)
from sqlalchemy import and_, delete, func, insert, or_, select, update
from sqlalchemy.engine import Connection, Row

if TYPE_CHECKING:
    from sqlalchemy.sql import ColumnElement

STRIDE = 4  # subtree hashes are stored at levels 4, 8, 12, ...
# A position passed unseen this long ago is no longer waited for: no append stays open an hour.
GAP_TTL_NS = 3600 * 10**9
# At most this many unseen positions are remembered per run (the highest, nearest the frontier):
# a first run over a store whose old retention left wide holes does not list every one.
MAX_NEW_GAPS = 10_000
_PG_TREE_LOCK = 0x6D6370747265  # "mcptre": the lock every sequencer takes on PostgreSQL
_LEAF = b"\x00"

T = TypeVar("T")


@dataclass(frozen=True)
class TreeHead:
    """The tree's size and root as the store holds them. `fresh`: the leaf hashes `sequence`
    just computed from the records (index -> hash), which the root check before signing, in the
    same transaction, takes instead of computing their commitments a second time."""

    size: int
    root: bytes
    fresh: dict[int, bytes] = field(default_factory=dict, compare=False, repr=False)


class TreeDamaged(StoreError):
    """The store's cached tree cannot answer (a subtree or its frontier is missing or damaged):
    only tampering with the tree's tables does this; `verify` says more."""


# -- sequencing ----------------------------------------------------------------------------------


def _state(conn: Connection) -> tuple[int, int, list[bytes]]:
    """(watermark, size, frontier stack) of the stored tree; (0, 0, []) before the first run."""
    row = conn.execute(select(tree_state.c.watermark, tree_state.c.frontier)).first()
    if row is None:
        return 0, 0, []
    frontier, problem = merkle.Frontier.decode(chain.as_bytes(row.frontier))
    if frontier is None:
        raise TreeDamaged(f"the store's tree frontier is damaged ({problem}): run verify")
    return row.watermark, frontier.size, list(frontier.hashes)


def lock(conn: Connection) -> None:
    """Take the tree's lock for the rest of the caller's transaction (PostgreSQL; on SQLite the
    write transaction is the lock)."""
    if conn.dialect.name == "postgresql":
        conn.execute(func.pg_advisory_xact_lock(_PG_TREE_LOCK).select())


def sequence(conn: Connection) -> TreeHead:
    """Take every committed record not yet in the tree into it, inside the caller's write
    transaction; the tree head after. Costs O(k + log n) for k new records."""
    lock(conn)
    watermark, size, stack = _state(conn)
    key = commit_key(conn, make=True)
    postgres = conn.dialect.name == "postgresql"
    leaves: list[bytes] = []
    positions: list[int] = []

    def take(rows: Sequence[Sequence[Any]]) -> None:
        for row in rows:
            leaves.append(key.leaf_hash(size + len(leaves), row))
            positions.append(row[0])

    if postgres:
        take(_filled_gaps(conn))
    seen: list[int] = []
    last = watermark
    while True:  # a page at a time: a backlog's raw bytes are never all in memory at once
        page = conn.execute(
            select(*LEAF_COLUMNS)
            .where(events.c.position > last)
            .order_by(events.c.position)
            .limit(SEQUENCE_PAGE)
        ).all()
        if not page:
            break
        seen.extend(row[0] for row in page)
        take(page)
        last = page[-1][0]
        if len(page) < SEQUENCE_PAGE:
            break
    if postgres and seen:
        _remember_gaps(conn, watermark, seen)
    if not leaves:
        return TreeHead(size, merkle.fold(stack))
    fresh = dict(enumerate(leaves, start=size))
    _, nodes = merkle.extend_frontier(stack, size, leaves, STRIDE)
    _add_runs(conn, size, positions)
    if nodes:
        _bulk_insert(conn, "tree_nodes", ("level", "idx", "hash"), nodes)
    size += len(leaves)
    values = {
        "size": size,
        "watermark": max(watermark, seen[-1] if seen else 0),
        "frontier": size.to_bytes(8, "big") + b"".join(stack),
    }
    if conn.execute(update(tree_state).where(tree_state.c.id == 1).values(**values)).rowcount == 0:
        conn.execute(insert(tree_state).values(id=1, **values))
    return TreeHead(size, merkle.fold(stack), fresh)


SEQUENCE_PAGE = 10_000
# What a leaf is computed from: the record's position and chain hash, then its header and raw
# bytes for the commitment (`CommitKey.leaf_hash`).
LEAF_COLUMNS = (
    events.c.position,
    events.c.hash,
    events.c.session_id,
    events.c.seq,
    events.c.wall_ns,
    events.c.mono_ns,
    events.c.kind,
    events.c.direction,
    events.c.raw_size,
    events.c.raw,
)


@dataclass(frozen=True)
class CommitKey:
    """The store's commitment key and the first leaf whose input carries a commitment: leaf i
    below `first_leaf` is SHA256(0x00 || chain hash), from it on SHA256(0x00 || chain hash ||
    C) (recorder/log/commitment.py)."""

    key: bytes
    first_leaf: int

    def salt(self, session_id: str, seq: int) -> bytes:
        """The record's salt r."""
        return commitments.record_salt(self.key, session_id, seq)

    def commitment(self, index: int, row: Sequence[Any]) -> bytes | None:
        """Leaf `index`'s commitment C from a row in `LEAF_COLUMNS` order; None below
        `first_leaf`."""
        if index < self.first_leaf:
            return None
        sid, seq, wall_ns, mono_ns, kind, direction, raw_size, raw = row[2:10]
        record = chain.ChainRecord(
            sid, seq, wall_ns, mono_ns, kind, direction, chain.as_bytes(raw), raw_size, b""
        )
        return commitments.commit(record, self.salt(sid, seq))

    def leaf_hash(self, index: int, row: Sequence[Any]) -> bytes:
        """Leaf `index`'s hash from a row in `LEAF_COLUMNS` order."""
        c = self.commitment(index, row)
        chain_hash = chain.as_bytes(row[1])
        return merkle.leaf_hash(commitments.leaf_input(chain_hash, c))


# A store that has no key yet has no committed leaf: the first sequencing makes the key, from the
# tree's size then.
NO_COMMITMENTS = CommitKey(b"", 2**63 - 1)


def commit_key(conn: Connection, make: bool = False) -> CommitKey:
    """The store's commitment key (migration 0011). With `make`, in the caller's write
    transaction, one is made for a store that has none (one created from the metadata), its
    first leaf the tree's size now; without, such a store has no committed leaf."""
    found = conn.execute(
        select(commitment_keys.c.key, commitment_keys.c.first_leaf).where(commitment_keys.c.id == 1)
    ).first()
    if found is not None:
        return CommitKey(chain.as_bytes(found[0]), int(found[1]))
    if not make:
        return NO_COMMITMENTS
    key = CommitKey(secrets.token_bytes(commitments.KEY_SIZE), _state(conn)[1])
    conn.execute(
        insert(commitment_keys).values(
            id=1, key=key.key, first_leaf=key.first_leaf, created_ns=time.time_ns()
        )
    )
    return key


def _add_runs(conn: Connection, size: int, positions: Sequence[int]) -> None:
    """Note that leaves `size`, `size + 1`, ... are the records at `positions`: a run per stretch
    of consecutive positions, the first one extending the tree's last run when it continues it."""
    runs: list[list[int]] = []
    for i, p in enumerate(positions):
        if runs and runs[-1][1] + runs[-1][2] == p:
            runs[-1][2] += 1
        else:
            runs.append([size + i, p, 1])
    last = conn.execute(
        select(tree_runs.c.first_idx, tree_runs.c.first_position, tree_runs.c.leaves)
        .order_by(tree_runs.c.first_idx.desc())
        .limit(1)
    ).first()
    if last is not None and last[0] + last[2] == size and last[1] + last[2] == runs[0][1]:
        conn.execute(
            update(tree_runs)
            .where(tree_runs.c.first_idx == last[0])
            .values(leaves=last[2] + runs[0][2])
        )
        runs = runs[1:]
    if runs:
        conn.execute(
            insert(tree_runs),
            [{"first_idx": i, "first_position": p, "leaves": n} for i, p, n in runs],
        )


def _bulk_insert(conn: Connection, table: str, columns: tuple[str, ...], rows: list) -> None:
    """Rows straight to the driver: COPY on PostgreSQL, `executemany` on SQLite (a SQLAlchemy
    Core insert of a checkpoint's rows would take most of the checkpoint's time)."""
    names = ", ".join(columns)
    if conn.dialect.name == "postgresql":
        driver = conn.connection.dbapi_connection
        assert driver is not None  # a connection in use holds its driver's
        cursor = driver.cursor()
        try:
            with cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        finally:
            cursor.close()
        return
    marks = ", ".join("?" for _ in columns)
    conn.exec_driver_sql(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)


def _filled_gaps(conn: Connection) -> list[tuple]:
    """Positions passed unseen that have committed since, in position order; forgets those that
    did and those too old to wait for."""
    gaps = conn.execute(select(tree_gaps.c.position)).scalars().all()
    if not gaps:
        return []
    found: list[tuple] = []
    for start in range(0, len(gaps), 500):
        chunk = gaps[start : start + 500]
        found.extend(conn.execute(select(*LEAF_COLUMNS).where(events.c.position.in_(chunk))))
    found.sort(key=lambda row: row[0])
    old = time.time_ns() - GAP_TTL_NS
    conn.execute(
        delete(tree_gaps).where(
            or_(tree_gaps.c.position.in_([row[0] for row in found]), tree_gaps.c.seen_ns < old)
        )
    )
    return found


def _remember_gaps(conn: Connection, watermark: int, seen: list[int]) -> None:
    """Note the positions between the watermark and the highest one seen that were not there."""
    present = set(seen)
    missing: list[int] = []
    for p in range(seen[-1] - 1, watermark, -1):
        if p not in present:
            missing.append(p)
            if len(missing) == MAX_NEW_GAPS:
                break
    if missing:
        now = time.time_ns()
        conn.execute(insert(tree_gaps), [{"position": p, "seen_ns": now} for p in missing])


# -- reading the stored tree ---------------------------------------------------------------------


def head(conn: Connection) -> TreeHead:
    """The stored tree's size and root (from the frontier: one row)."""
    _watermark, size, stack = _state(conn)
    return TreeHead(size, merkle.fold(stack))


def _fetch_subtrees(conn: Connection, asked: Sequence[tuple[int, int]]) -> dict:
    """The hashes of the perfect subtrees `asked` ((start, end) pairs), each a fold of at most
    2**(STRIDE-1) stored hashes: two queries for the lot."""
    plan: dict[tuple[int, int], tuple[int, int, int]] = {}
    leaf_ranges: list[tuple[int, int]] = []
    node_ranges: list[tuple[int, int, int]] = []
    for start, end in set(asked):
        height = (end - start).bit_length() - 1
        level = height - height % STRIDE
        first, count = start >> level, (end - start) >> level
        plan[(start, end)] = (level, first, count)
        if level == 0:
            leaf_ranges.append((first, first + count - 1))
        else:
            node_ranges.append((level, first, first + count - 1))
    got: dict[tuple[int, int], bytes] = {}
    if leaf_ranges:
        got.update(((0, i), h) for i, h in _leaf_hashes(conn, leaf_ranges).items())
    if node_ranges:
        query = select(tree_nodes.c.level, tree_nodes.c.idx, tree_nodes.c.hash).where(
            or_(
                *(
                    and_(tree_nodes.c.level == lv, tree_nodes.c.idx.between(a, b))
                    for lv, a, b in node_ranges
                )
            )
        )
        got.update(((lv, i), chain.as_bytes(h)) for lv, i, h in conn.execute(query))
    out: dict[tuple[int, int], bytes] = {}
    for key, (level, first, count) in plan.items():
        try:
            hashes = [got[(level, first + j)] for j in range(count)]
        except KeyError:
            raise TreeDamaged(
                f"the store's tree lacks the subtree of leaves [{key[0]}, {key[1]}): run verify"
            ) from None
        out[key] = merkle.root(hashes)
    return out


def _runs_over(
    conn: Connection, key: ColumnElement[Any], low: int, high: int
) -> Sequence[Row[int, int, int]]:
    """(first_idx, first_position, leaves) of the runs that can hold `key` values `low` to `high`
    (`key`: the leaf index or the log position a run starts at), in that order: from the run
    holding `low` to the last one starting at or before `high`."""
    start = select(func.max(key)).where(key <= low).scalar_subquery()
    return conn.execute(
        select(tree_runs.c.first_idx, tree_runs.c.first_position, tree_runs.c.leaves)
        .where(key >= func.coalesce(start, 0), key <= high)
        .order_by(key)
    ).all()


def _leaf_hashes(conn: Connection, ranges: Sequence[tuple[int, int]]) -> dict[int, bytes]:
    """The leaf hashes of leaves in the (first, last) `ranges`: of a record in the log, from the
    chain hash its row holds (and its commitment, from its bytes); of a record no longer there,
    the one kept for it."""
    out: dict[int, bytes] = {}
    key = commit_key(conn)
    for first, last in ranges:
        for run_first, position, leaves in _runs_over(conn, tree_runs.c.first_idx, first, last):
            a, b = max(first, run_first), min(last, run_first + leaves - 1)
            if a > b:
                continue
            offset = position - run_first
            rows = conn.execute(
                select(*LEAF_COLUMNS).where(events.c.position.between(a + offset, b + offset))
            )
            out.update((row[0] - offset, key.leaf_hash(row[0] - offset, row)) for row in rows)
        if all(i in out for i in range(first, last + 1)):
            continue  # every record is in the log: no kept leaf hash to look for
        kept = conn.execute(
            select(tree_removed_leaves.c.idx, tree_removed_leaves.c.leaf_hash).where(
                tree_removed_leaves.c.idx.between(first, last)
            )
        )
        for i, h in kept:
            out.setdefault(i, chain.as_bytes(h))
    return out


def _with_subtrees(conn: Connection, compute: Callable[[merkle.SubtreeHash], T]) -> T:
    """Run `compute` (a merkle function taking a `SubtreeHash`) over the stored tree: once to
    learn which subtrees it asks for (which never depends on their hashes), once with them."""
    asked: list[tuple[int, int]] = []

    def record(start: int, end: int) -> bytes:
        asked.append((start, end))
        return bytes(32)

    compute(record)
    known = _fetch_subtrees(conn, asked)
    return compute(lambda start, end: known[(start, end)])


def _check_size(conn: Connection, size: int) -> None:
    stored = head(conn).size
    if not 0 <= size <= stored:
        raise TreeDamaged(f"the tree holds {stored} leaves, not {size}")


def root_at(conn: Connection, size: int) -> bytes:
    """The stored tree's root at `size` leaves."""
    _check_size(conn, size)
    return _with_subtrees(conn, lambda sub: merkle.root_at(size, sub))


def inclusion_proof(conn: Connection, index: int, size: int) -> list[bytes]:
    """RFC 9162 inclusion proof of leaf `index` in the tree of `size` leaves."""
    _check_size(conn, size)
    return _with_subtrees(conn, lambda sub: merkle.inclusion_proof(index, size, sub))


def consistency_proof(conn: Connection, old_size: int, new_size: int) -> list[bytes]:
    """RFC 9162 consistency proof from the tree of `old_size` leaves to `new_size`."""
    _check_size(conn, new_size)
    return _with_subtrees(conn, lambda sub: merkle.consistency_proof(old_size, new_size, sub))


class BlockCache:
    """A `SubtreeHash` over the stored tree for many proofs at one size (an export's): stored
    hashes are read in aligned blocks of 256 and kept, so proofs of neighbouring leaves, which
    share most of their path, cost a query per 256 leaves rather than two each: an export
    proves many records, and a round trip per proof would dominate it."""

    BLOCK = 256

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.known: dict[tuple[int, int], bytes] = {}
        self.loaded: set[tuple[int, int]] = set()
        self.memo: dict[tuple[int, int], bytes] = {}

    def _stored(self, level: int, idx: int) -> bytes:
        key = (level, idx)
        found = self.known.get(key)
        if found is not None:
            return found
        first = idx - idx % self.BLOCK
        if (level, first) not in self.loaded:
            self.loaded.add((level, first))
            last = first + self.BLOCK - 1
            if level == 0:
                leaves = _leaf_hashes(self.conn, [(first, last)])
                self.known.update(((0, i), h) for i, h in leaves.items())
            else:
                rows = self.conn.execute(
                    select(tree_nodes.c.idx, tree_nodes.c.hash).where(
                        tree_nodes.c.level == level, tree_nodes.c.idx.between(first, last)
                    )
                )
                self.known.update(((level, i), chain.as_bytes(h)) for i, h in rows)
        if key not in self.known:
            raise TreeDamaged(f"the store's tree lacks node {idx} of level {level}: run verify")
        return self.known[key]

    def __call__(self, start: int, end: int) -> bytes:
        found = self.memo.get((start, end))
        if found is None:
            height = (end - start).bit_length() - 1
            level = height - height % STRIDE
            first, count = start >> level, (end - start) >> level
            found = merkle.root([self._stored(level, first + j) for j in range(count)])
            self.memo[(start, end)] = found
        return found


@dataclass(frozen=True)
class Leaf:
    """A sequenced record: tree index, log position, seq, chain hash and, from the store's
    first committed leaf on, its commitment C (the leaf input is the two together)."""

    index: int
    position: int
    seq: int
    chain_hash: bytes
    commitment: bytes | None

    @property
    def leaf_hash(self) -> bytes:
        return merkle.leaf_hash(commitments.leaf_input(self.chain_hash, self.commitment))


def session_leaves(conn: Connection, session_id: str) -> list[Leaf]:
    """The tree's leaves of a session's records, in seq order (records not yet sequenced are
    left out)."""
    rows = conn.execute(
        select(*LEAF_COLUMNS)
        .where(events.c.sid == layout.sid_bytes(session_id))
        .order_by(events.c.seq)
    ).all()
    if not rows:
        return []
    lowest, highest = min(r[0] for r in rows), max(r[0] for r in rows)
    runs = _runs_over(conn, tree_runs.c.first_position, lowest, highest)
    starts = [r[1] for r in runs]
    key = commit_key(conn)
    out: list[Leaf] = []
    for row in rows:
        position = row[0]
        k = bisect.bisect_right(starts, position) - 1
        if k >= 0 and position < runs[k][1] + runs[k][2]:
            index = runs[k][0] + position - runs[k][1]
            h = chain.as_bytes(row[1])
            out.append(Leaf(index, position, row[3], h, key.commitment(index, row)))
    return out


def mark_removed(conn: Connection, session_ids: Sequence[str], removed_by: int) -> None:
    """Keep the leaf hashes of these sessions' records before retention removes them (the
    record at `removed_by` says so), so that earlier checkpoints still verify; each bound to
    its session, which that record must name with the leaf (`removals.findings`)."""
    columns = ("idx", "leaf_hash", "removed_by", "session_id")
    for sid in session_ids:
        kept = [(leaf.index, leaf.leaf_hash, removed_by, sid) for leaf in session_leaves(conn, sid)]
        if kept:
            _bulk_insert(conn, "tree_removed_leaves", columns, kept)


# -- checkpoints as stored -----------------------------------------------------------------------


@dataclass(frozen=True)
class StoredCheckpoint:
    id: int
    size: int
    root_hash: bytes
    note: str
    created_ns: int


def known_log_id(conn: Connection) -> str | None:
    """The log's identity if the store has one yet (reading, never making it)."""
    found = conn.execute(select(log_identity.c.store_id).where(log_identity.c.id == 1)).scalar()
    return None if found is None else str(found)


def log_id(conn: Connection) -> str:
    """The log's identity, made with the store (migration 0007): what its checkpoints are filed
    under outside the store. Made here, in the caller's write transaction, for a store whose row
    is missing (one created from the metadata rather than the migrations)."""
    found = conn.execute(select(log_identity.c.store_id).where(log_identity.c.id == 1)).scalar()
    if found is None:
        found = str(uuid.uuid4())
        conn.execute(insert(log_identity).values(id=1, store_id=found, created_ns=time.time_ns()))
    return str(found)


def store_checkpoint(conn: Connection, size: int, root_hash: bytes, note: str) -> None:
    conn.execute(
        insert(checkpoints).values(
            size=size, root_hash=root_hash, note=note, created_ns=time.time_ns()
        )
    )


def stored_checkpoints(conn: Connection, last: bool = False) -> list[StoredCheckpoint]:
    """Every stored checkpoint, oldest first (only the newest with `last`)."""
    query = select(checkpoints).order_by(checkpoints.c.id.desc() if last else checkpoints.c.id)
    if last:
        query = query.limit(1)
    return [
        StoredCheckpoint(r.id, r.size, chain.as_bytes(r.root_hash), r.note, r.created_ns)
        for r in conn.execute(query)
    ]


# -- recomputation from the records --------------------------------------------------------------
