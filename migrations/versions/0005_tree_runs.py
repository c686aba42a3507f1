"""The Merkle tree without a row per leaf: `tree_leaves` (leaf index, log position, leaf hash)
becomes `tree_runs`, a row per run of leaves whose records sit at consecutive log positions, and
`tree_removed_leaves`, the leaf hashes of records no longer in the log. A live record's leaf hash
is SHA-256(0x00 || its chain hash), which its own row holds: the per-leaf table repeats it, at
a cost on every record (recorder/store/tree.py, docs/performance.md).

The leaves are read once, in index order, a batch at a time; a leaf whose record is gone keeps
its hash and its `removed_by` as they were (a record deleted outside retention stays a finding
of `verify --checkpoint`).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

BATCH = 50_000


def _position() -> sa.types.TypeEngine:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "tree_runs",
        sa.Column("first_idx", _position(), autoincrement=False, nullable=False),
        sa.Column("first_position", _position(), nullable=False),
        sa.Column("leaves", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("first_idx", name=op.f("pk_tree_runs")),
    )
    op.create_index(op.f("ix_tree_runs_first_position"), "tree_runs", ["first_position"])
    op.create_table(
        "tree_removed_leaves",
        sa.Column("idx", _position(), autoincrement=False, nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("removed_by", _position(), nullable=True),
        sa.PrimaryKeyConstraint("idx", name=op.f("pk_tree_removed_leaves")),
    )
    conn = op.get_bind()
    runs: list[list[int]] = []
    after = -1
    while True:
        rows = conn.execute(
            sa.text(
                "SELECT t.idx, t.position, t.leaf_hash, t.removed_by, e.position "
                "FROM tree_leaves t LEFT JOIN events e ON e.position = t.position "
                "WHERE t.idx > :after ORDER BY t.idx LIMIT :n"
            ),
            {"after": after, "n": BATCH},
        ).all()
        if not rows:
            break
        gone = []
        for idx, position, leaf, removed_by, present in rows:
            if runs and runs[-1][0] + runs[-1][2] == idx and runs[-1][1] + runs[-1][2] == position:
                runs[-1][2] += 1
            else:
                runs.append([idx, position, 1])
            if present is None or removed_by is not None:
                gone.append({"idx": idx, "leaf_hash": bytes(leaf), "removed_by": removed_by})
        if gone:
            conn.execute(
                sa.text(
                    "INSERT INTO tree_removed_leaves (idx, leaf_hash, removed_by) "
                    "VALUES (:idx, :leaf_hash, :removed_by)"
                ),
                gone,
            )
        after = rows[-1][0]
    if runs:
        conn.execute(
            sa.text(
                "INSERT INTO tree_runs (first_idx, first_position, leaves) VALUES (:i, :p, :n)"
            ),
            [{"i": i, "p": p, "n": n} for i, p, n in runs],
        )
    op.drop_index(op.f("ix_tree_leaves_position"), table_name="tree_leaves")
    op.drop_table("tree_leaves")


def downgrade() -> None:
    op.create_table(
        "tree_leaves",
        sa.Column("idx", _position(), autoincrement=False, nullable=False),
        sa.Column("position", _position(), nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("removed_by", _position(), nullable=True),
        sa.PrimaryKeyConstraint("idx", name=op.f("pk_tree_leaves")),
    )
    op.create_index(op.f("ix_tree_leaves_position"), "tree_leaves", ["position"])
    conn = op.get_bind()
    kept = {
        idx: (bytes(leaf), removed_by)
        for idx, leaf, removed_by in conn.execute(
            sa.text("SELECT idx, leaf_hash, removed_by FROM tree_removed_leaves")
        )
    }
    runs = conn.execute(
        sa.text("SELECT first_idx, first_position, leaves FROM tree_runs ORDER BY first_idx")
    ).all()
    for first_idx, first_position, leaves in runs:
        for start in range(0, leaves, BATCH):
            count = min(BATCH, leaves - start)
            low = first_position + start
            hashes: dict[int, bytes | memoryview] = dict(
                conn.execute(
                    sa.text("SELECT position, hash FROM events WHERE position BETWEEN :a AND :b"),
                    {"a": low, "b": low + count - 1},
                ).all()
            )
            rows = []
            for k in range(count):
                idx, position = first_idx + start + k, low + k
                leaf, removed_by = kept.get(idx, (None, None))
                if position in hashes and leaf is None:
                    leaf = hashlib.sha256(b"\x00" + bytes(hashes[position])).digest()
                if leaf is not None:
                    rows.append(
                        {"i": idx, "p": position, "h": leaf, "r": removed_by},
                    )
            if rows:
                conn.execute(
                    sa.text(
                        "INSERT INTO tree_leaves (idx, position, leaf_hash, removed_by) "
                        "VALUES (:i, :p, :h, :r)"
                    ),
                    rows,
                )
    op.drop_table("tree_removed_leaves")
    op.drop_index(op.f("ix_tree_runs_first_position"), table_name="tree_runs")
    op.drop_table("tree_runs")
