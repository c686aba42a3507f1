"""Checking the log against checkpoints, and proving records are in it.

`verify_checkpoint` is what `blackbox verify --checkpoint FILE --key VKEY` runs: the note's
signature checked with the key alone, then the tree recomputed from the records' own bytes
(recorder/store/tree.py `recompute`: never a stored leaf, node or frontier, which whoever can
write the database can rewrite too) and its root at the checkpoint's size compared. Each finding
is one sentence a reader understands. `prove` gives RFC 9162 inclusion and consistency proofs
as JSON, for a third party to check against a checkpoint it holds.
"""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass, field

from blackbox.recorder import BlackboxError
from blackbox.recorder.log import merkle
from blackbox.recorder.store import EventStore, tree, tree_check
from blackbox.recorder.trust.checkpoint import Checkpoint, Verifier, open_checkpoint, parse_vkey
from blackbox.recorder.trust.signing import note_checkpoint, split_notes

_DAMAGED = (
    "the store's cached tree does not agree with its records over the first {size} leaves: "
    "the tree's tables were edited (the records may be intact); no proof given; run verify"
)


class ProofError(BlackboxError):
    """A proof cannot be given as asked (a size beyond the tree, a session not in it)."""


@dataclass
class CheckpointReport:
    """What checking the log against checkpoints found (sentences), and what it checked."""

    findings: list[str] = field(default_factory=list)
    checked: list[int] = field(default_factory=list)  # sizes of the checkpoints checked
    log_size: int = 0
    retained: int = 0


def read_verifier(vkey: str) -> Verifier:
    verifier, problem = parse_vkey(vkey.strip())
    if verifier is None:
        raise ProofError(f"--key is not a verifier key: {problem}")
    return verifier


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _recompute(store: EventStore, sizes: list[int]) -> tree_check.Recomputed:
    with store.transaction() as conn:
        return tree_check.recompute(conn, sizes, cursor=getattr(store, "_bytes_cursor", None))


def verify_checkpoint(store: EventStore, note: str, vkey: str) -> CheckpointReport:
    """Check the log against a signed checkpoint held outside it (see the module's docstring)."""
    verifier = read_verifier(vkey)
    report = CheckpointReport()
    notes = split_notes(note) or [note]
    opened: list[Checkpoint] = []
    for text in notes:
        checkpoint, problem = open_checkpoint(text, [verifier], origin=verifier.name)
        if checkpoint is None:
            report.findings.append(f"the checkpoint is refused: {problem}")
            return report
        opened.append(checkpoint)
    return _against(store, opened, report)


def _against(
    store: EventStore, opened: list[Checkpoint], report: CheckpointReport
) -> CheckpointReport:
    recomputed = _recompute(store, [c.size for c in opened])
    report.log_size, report.retained = recomputed.size, recomputed.retained
    report.findings.extend(recomputed.findings)
    for checkpoint in opened:
        report.checked.append(checkpoint.size)
        if checkpoint.size > recomputed.size:
            report.findings.append(
                f"the log holds {recomputed.size} records, fewer than the {checkpoint.size} the "
                "checkpoint covers: records were removed or the database was rolled back"
            )
            continue
        if recomputed.roots.get(checkpoint.size, merkle.EMPTY_ROOT) != checkpoint.root_hash:
            where = ""
            if recomputed.first_difference is not None:
                where = f" (the first record that differs is leaf {recomputed.first_difference})"
            report.findings.append(
                f"the root of the first {checkpoint.size} records differs from the checkpoint's: "
                f"records before it were rewritten, inserted or removed{where}"
            )
    with store.transaction() as conn:
        stored = tree.head(conn)
    if stored.size == recomputed.size and stored.root != recomputed.roots[recomputed.size]:
        report.findings.append(
            "the store's cached tree differs from its records: the tree's tables were edited, "
            "and the next checkpoint would not be signed"
        )
    return report


def verify_stored(store: EventStore, vkey: str | None = None) -> CheckpointReport:
    """Check every checkpoint the store keeps against the log recomputed from its records, and
    each against the next; with `vkey`, each signature too. Without a key they are only as
    trustworthy as the database that holds them."""
    report = CheckpointReport()
    with store.transaction() as conn:
        kept = tree.stored_checkpoints(conn)
    if not kept:
        return report
    verifier = read_verifier(vkey) if vkey else None
    opened: list[Checkpoint] = []
    for row in kept:
        if verifier is not None:
            checkpoint, problem = open_checkpoint(row.note, [verifier], origin=verifier.name)
            if checkpoint is None:
                report.findings.append(f"stored checkpoint {row.id} is refused: {problem}")
                continue
        else:
            checkpoint = note_checkpoint(row.note)
            if checkpoint is None:
                report.findings.append(f"stored checkpoint {row.id} is not a checkpoint")
                continue
        opened.append(checkpoint)
    for old, new in itertools.pairwise(opened):
        if old.size > new.size:
            report.findings.append(
                f"a stored checkpoint of {old.size} records is followed by one of {new.size}: "
                "a stored checkpoint is inconsistent with a later one"
            )
    return _against(store, opened, report)


def prove(
    store: EventStore,
    session_id: str,
    checkpoint_note: str | None = None,
    consistency_from: int | None = None,
) -> dict[str, object]:
    """Inclusion proofs of a session's records in the tree (at the size of `checkpoint_note`
    when given, else the tree as it stands), and a consistency proof from `consistency_from`
    on request, as a JSON-ready document (hashes in base64, as checkpoints write them)."""
    with store.transaction() as conn:
        head = tree.head(conn)
        size = head.size
        if checkpoint_note is not None:
            notes = split_notes(checkpoint_note)
            checkpoint = note_checkpoint(notes[-1]) if notes else None
            if checkpoint is None:
                raise ProofError("--checkpoint is not a signed checkpoint")
            size = checkpoint.size
        if size > head.size:
            raise ProofError(
                f"the tree holds {head.size} records, not the {size} of the checkpoint"
            )
        # Nothing is proven from the cache's word: the roots come from the leaves, and every
        # proof is checked against them before it is printed.
        asked = [size] if consistency_from is None else [size, consistency_from]
        try:
            roots = tree_check.leaf_roots(conn, [s for s in asked if 0 <= s <= size])
        except tree.TreeDamaged as exc:
            raise ProofError(str(exc)) from None
        root = roots[size]
        if tree.root_at(conn, size) != root:
            raise ProofError(_DAMAGED.format(size=size))
        leaves = [leaf for leaf in tree.session_leaves(conn, session_id) if leaf.index < size]
        paths = [tree.inclusion_proof(conn, leaf.index, size) for leaf in leaves]
        doc: dict[str, object] = {
            "tree_size": size,
            "root_hash": _b64(root),
            "session_id": session_id,
            "inclusion": [
                {
                    "seq": leaf.seq,
                    "log_position": leaf.position,
                    "leaf_index": leaf.index,
                    "chain_hash": leaf.chain_hash.hex(),
                    # The leaf input is chain_hash || commitment when the leaf carries one.
                    "commitment": leaf.commitment.hex() if leaf.commitment else None,
                    "proof": [_b64(h) for h in path],
                }
                for leaf, path in zip(leaves, paths, strict=True)
            ],
        }
        for leaf, path in zip(leaves, paths, strict=True):
            if not merkle.verify_inclusion(leaf.leaf_hash, leaf.index, size, path, root):
                raise ProofError(_DAMAGED.format(size=size))
        if consistency_from is not None:
            if not 0 <= consistency_from <= size:
                raise ProofError(f"no consistency proof from {consistency_from} to {size}")
            path = tree.consistency_proof(conn, consistency_from, size)
            old_root = roots[consistency_from]
            if not merkle.verify_consistency(consistency_from, size, old_root, root, path):
                raise ProofError(_DAMAGED.format(size=size))
            doc["consistency"] = {
                "old_size": consistency_from,
                "old_root_hash": _b64(old_root),
                "new_size": size,
                "proof": [_b64(h) for h in path],
            }
    return doc
