"""An export bundle's proof that its records are the log's: the signed checkpoint that covers them
(checkpoint.txt) and an RFC 9162 inclusion proof per record (proofs.jsonl).

The chain and the manifest prove a bundle is consistent with itself; whoever can rewrite the
database, or the bundle, can recompute both. A checkpoint signed with a key kept outside the store,
and a proof that each record's chain hash is a leaf of the tree it signs, tie every record to the
log as it was when the checkpoint was signed: `verify-export --key VKEY` checks both offline. A
redacted record's leaf input is its original chain hash, which the bundle keeps, and from the
manifest's `committed_from` on its commitment, recomputed from what the row shows and discloses
(`record_commitment`): so what a redacted record shows is proven too.

proofs.jsonl holds one line per record, in the records file's order: `{"session_id", "seq",
"leaf_index", "proof": [base64 hashes, leaf side first]}`; `leaf_index` is null for a record
newer than the checkpoint. The leaves each session's records are at go into the manifest too
(its `leaves`, compact ranges), which a signed manifest vouches for (`bundle_sign`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from blackbox.recorder import private_file
from blackbox.recorder.compliance.bundle_sign import LeafTally, leaves_entry
from blackbox.recorder.log import chain, commitment, merkle
from blackbox.recorder.store import EventStore, tree
from blackbox.recorder.trust import (
    Checkpoint,
    Verifier,
    note_checkpoint,
    open_checkpoint,
    split_notes,
)

CHECKPOINT_FILE = "checkpoint.txt"
PROOFS_FILE = "proofs.jsonl"


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(
    store: EventStore, out_dir: Path, note: str, session_ids: Iterable[str]
) -> tuple[dict[str, object], dict[str, dict[str, object]], dict[str, dict[str, object]]]:
    """Write checkpoint.txt and proofs.jsonl for the sessions' records (in export order); returns
    the manifest's `tree` entry, the two files' manifest entries and each session's `leaves`
    entry (the leaf indices of its records in the checkpoint's tree)."""
    notes = split_notes(note)
    checkpoint = note_checkpoint(notes[-1]) if notes else None
    if checkpoint is None:
        raise ValueError("not a signed checkpoint")
    size, root = checkpoint.size, checkpoint.root_hash
    proven = uncovered = 0
    leaves_of: dict[str, dict[str, object]] = {}
    # Both files 0600 like the rest of the bundle (recorder/private.py).
    proofs = private_file(out_dir / PROOFS_FILE)
    with store.transaction() as conn, open(proofs, "w", encoding="utf-8") as out:
        key = tree.commit_key(conn)
        cached = tree.BlockCache(conn)
        for sid in session_ids:
            leaves = {leaf.seq: leaf for leaf in tree.session_leaves(conn, sid)}
            indices: list[int] = []
            not_covered = 0
            for rec in store.read_session(sid):
                leaf = leaves.get(rec.seq)
                line: dict[str, object] = {"session_id": sid, "seq": rec.seq, "leaf_index": None}
                if leaf is not None and leaf.index < size:
                    proof = merkle.inclusion_proof(leaf.index, size, cached)
                    # Checked before it is written: a proof from a damaged cache would only
                    # fail in the auditor's hands.
                    if not merkle.verify_inclusion(leaf.leaf_hash, leaf.index, size, proof, root):
                        raise tree.TreeDamaged(
                            f"the store's cached tree gives no valid proof of leaf {leaf.index}: "
                            "the tree's tables were edited (the records may be intact); run verify"
                        )
                    line["leaf_index"] = leaf.index
                    line["proof"] = [base64.b64encode(h).decode("ascii") for h in proof]
                    proven += 1
                    indices.append(leaf.index)
                else:
                    line["proof"] = []
                    uncovered += 1
                    not_covered += 1
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
            leaves_of[sid] = leaves_entry(indices, not_covered)
    private_file(out_dir / CHECKPOINT_FILE).write_text(notes[-1], encoding="utf-8")
    rows = proven + uncovered
    files = {
        CHECKPOINT_FILE: {
            "role": "checkpoint",
            "rows": 1,
            "bytes": (out_dir / CHECKPOINT_FILE).stat().st_size,
            "sha256": _sha256_file(out_dir / CHECKPOINT_FILE),
        },
        PROOFS_FILE: {
            "role": "proofs",
            "rows": rows,
            "bytes": (out_dir / PROOFS_FILE).stat().st_size,
            "sha256": _sha256_file(out_dir / PROOFS_FILE),
        },
    }
    entry = {
        "checkpoint": CHECKPOINT_FILE,
        "proofs": PROOFS_FILE,
        "origin": checkpoint.origin,
        "tree_size": size,
        "records_proven": proven,
        "records_not_covered": uncovered,
        # Leaves from this index on carry the record's commitment (docs/trust.md, "Commitments").
        "committed_from": key.first_leaf if key.key else None,
        "leaf": "SHA-256(0x00 || the record's 32-byte chain hash), and from leaf committed_from "
        "on SHA-256(0x00 || chain hash || the record's commitment C)",
        "node": "SHA-256(0x01 || left || right) (RFC 9162 section 2.1)",
    }
    return entry, files, leaves_of


def check(
    path: Path,
    manifest: dict,
    records: Iterator[dict],
    verifier: Verifier | None,
    tally: LeafTally | None = None,
    proven: list[tuple[object, object]] | None = None,
) -> list[tuple[str, str, str | None, int | None]]:
    """Check the bundle's checkpoint (its signature, with `verifier`; its origin must be the key's
    name) and every record's inclusion proof against it. Returns findings as (problem, detail,
    session, seq). `tally` gathers the leaf each record's proof names, and is marked complete once
    every record was seen. `proven`, when given, gets the (session, seq) of each redacted record
    whose leaf was recomputed from what it shows (its commitment) and proven."""
    entry = manifest.get("tree")
    if not isinstance(entry, dict):
        if verifier is not None:
            return [("no_checkpoint", "the bundle carries no signed checkpoint", None, None)]
        return []
    try:
        note = (path / CHECKPOINT_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [("checkpoint_unreadable", str(exc), None, None)]
    checkpoint: Checkpoint | None
    if verifier is not None:
        checkpoint, problem = open_checkpoint(note, [verifier], origin=verifier.name)
        if checkpoint is None:
            return [("checkpoint_refused", str(problem), None, None)]
    else:
        checkpoint = note_checkpoint(note)
        if checkpoint is None:
            return [("checkpoint_invalid", "checkpoint.txt is not a checkpoint", None, None)]
    found: list[tuple[str, str, str | None, int | None]] = []
    size, root = checkpoint.size, checkpoint.root_hash
    if tally is not None and (entry.get("tree_size"), entry.get("origin")) != (
        size,
        checkpoint.origin,
    ):
        found.append(
            (
                "checkpoint_mismatch",
                f"the manifest's tree is {entry.get('tree_size')!r} leaves of "
                f"{entry.get('origin')!r}, checkpoint.txt signs {size} of {checkpoint.origin!r}",
                None,
                None,
            )
        )
    try:
        proofs = (path / PROOFS_FILE).open(encoding="utf-8")
    except OSError as exc:
        return [("proofs_unreadable", str(exc), None, None)]
    with proofs:
        for rec in records:
            sid, seq = rec.get("session_id"), rec.get("seq")
            line = proofs.readline()
            try:
                doc = json.loads(line)
                index = doc["leaf_index"]
                proof = [base64.b64decode(h, validate=True) for h in doc["proof"]]
                chain_hash = bytes.fromhex(str(rec.get("hash")))
            except (ValueError, KeyError, TypeError, binascii.Error):
                found.append(("proof_invalid", "no readable proof for this record", sid, seq))
                if tally is not None:
                    tally.unreadable(str(sid))
                continue
            if (doc.get("session_id"), doc.get("seq")) != (sid, seq):
                found.append(("proof_invalid", "the proof is for another record", sid, seq))
                if tally is not None:
                    tally.unreadable(str(sid))
                continue
            if tally is not None:
                tally.add(str(sid), index if isinstance(index, int) else None)
            if index is None:
                if verifier is not None:
                    found.append(
                        ("not_covered", f"newer than the checkpoint of {size} records", sid, seq)
                    )
                continue
            committed = entry.get("committed_from")
            by_commitment = (
                isinstance(committed, int) and isinstance(index, int) and index >= committed
            )
            if by_commitment:
                try:
                    c = record_commitment(rec)
                    leaf = merkle.leaf_hash(commitment.leaf_input(chain_hash, c))
                except commitment.NotCommitted as exc:
                    found.append(("commitment_invalid", f"leaf {index}: {exc}", sid, seq))
                    continue
            else:
                leaf = merkle.leaf_hash(chain_hash)
            if not merkle.verify_inclusion(leaf, index, size, proof, root):
                found.append(
                    (
                        "not_included",
                        f"the record is not leaf {index} of the tree the checkpoint signs: "
                        "it was changed (its content, header or hash) or is not the log's",
                        sid,
                        seq,
                    )
                )
            elif by_commitment and rec.get("redacted") and proven is not None:
                proven.append((sid, seq))
        if proofs.readline():
            found.append(("proof_invalid", "proofs.jsonl has more lines than records", None, None))
    if tally is not None:
        tally.complete = True
    return found


def record_commitment(rec: dict) -> bytes:
    """C of a bundle row (recorder/log/commitment.py): from its raw and `salt` when it is shown
    whole, from its shown raw and `commitments` when it is redacted; NotCommitted when the row
    discloses neither, or what it discloses does not fit."""
    raw = rec.get("raw")
    if not isinstance(raw, bytes | bytearray):
        raise commitment.NotCommitted("the row has no raw bytes")
    record = chain.ChainRecord(
        str(rec.get("session_id")),
        _int(rec.get("seq")),
        _int(rec.get("wall_ns")),
        _int(rec.get("mono_ns")),
        str(rec.get("kind")),
        str(rec.get("direction")),
        bytes(raw),
        rec.get("raw_size") if isinstance(rec.get("raw_size"), int) else None,
        b"",
    )
    if rec.get("redacted"):
        disclosed = rec.get("commitments")
        try:
            entries = json.loads(disclosed) if isinstance(disclosed, str) else None
        except ValueError:
            entries = None
        if not isinstance(entries, list):
            raise commitment.NotCommitted(
                "a redacted record of a committed leaf has no commitments"
            )
        return commitment.commitment_of_disclosure(record, entries)
    salt = rec.get("salt")
    try:
        r = bytes.fromhex(salt) if isinstance(salt, str) else b""
    except ValueError:
        r = b""
    if len(r) != 32:
        raise commitment.NotCommitted("a record of a committed leaf has no 32-byte salt")
    return commitment.commit(record, r)


def _int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise commitment.NotCommitted(f"the row's header holds {value!r} where a number belongs")
