"""Checking a proof file written by `blackbox prove`, with nothing but a signed checkpoint and the
verifier key: `blackbox verify-proof PROOF --checkpoint CP --key VKEY`.

A proof means something only against a root someone signed, so the checkpoint's signature is
checked first (with the key alone; the checkpoint's origin must be the key's name), then the
proof's tree size and root against the signed ones, then every inclusion proof (RFC 9162
§2.1.3.2: the leaf is the hash of the record's chain hash) and the consistency proof, if the file
holds one (§2.1.4.2). When the checkpoint file holds several notes, the one of the proof's size is
the one checked, and the consistency proof's old root is checked against the note of its old size
when there is one. No store, no network: this is what a third party runs.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from blackbox.recorder.log import commitment, merkle
from blackbox.recorder.trust.checkpoint import Checkpoint, open_checkpoint
from blackbox.recorder.trust.logproof import read_verifier
from blackbox.recorder.trust.signing import split_notes


@dataclass
class ProofVerdict:
    """What checking a proof file found: each problem as a sentence; empty when valid."""

    findings: list[str] = field(default_factory=list)
    tree_size: int | None = None
    inclusions: int = 0
    consistency: bool = False

    @property
    def valid(self) -> bool:
        return not self.findings


def _hash(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == merkle.HASH_SIZE else None


def _hashes(values: object) -> list[bytes] | None:
    if not isinstance(values, list):
        return None
    out = [_hash(v) for v in values]
    return None if any(h is None for h in out) else [h for h in out if h is not None]


def _signed(checkpoint_text: str, vkey: str) -> tuple[list[Checkpoint], str | None]:
    """Every note of the checkpoint file opened with the key: (checkpoints, None) or ([], why)."""
    verifier = read_verifier(vkey)
    opened = []
    for text in split_notes(checkpoint_text) or [checkpoint_text]:
        checkpoint, problem = open_checkpoint(text, [verifier], origin=verifier.name)
        if checkpoint is None:
            return [], f"the checkpoint is refused: {problem}"
        opened.append(checkpoint)
    return opened, None


def check_proof(proof_text: str, checkpoint_text: str, vkey: str) -> ProofVerdict:
    """Check a `prove` document against a signed checkpoint (see the module's docstring). A bad
    `vkey` raises ProofError (a usage error); everything else is a finding."""
    verdict = ProofVerdict()
    signed, problem = _signed(checkpoint_text, vkey)
    try:
        doc: Any = json.loads(proof_text)
        if not isinstance(doc, dict):
            verdict.findings.append("the proof is not a JSON object")
    except ValueError as exc:
        doc = None
        verdict.findings.append(f"the proof is not JSON: {exc}")
    if problem:
        verdict.findings.append(problem)
    if verdict.findings:
        return verdict
    size, root = doc.get("tree_size"), _hash(doc.get("root_hash"))
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or root is None:
        verdict.findings.append("the proof has no tree_size and root_hash")
        return verdict
    verdict.tree_size = size
    by_size = {c.size: c for c in signed}
    head = by_size.get(size)
    if head is None:
        sizes = ", ".join(str(s) for s in sorted(by_size))
        verdict.findings.append(
            f"the proof is for a tree of {size} records; the checkpoint signs {sizes}: "
            "prove against this checkpoint (`blackbox prove --checkpoint`)"
        )
        return verdict
    if head.root_hash != root:
        verdict.findings.append(
            f"the proof's root of {size} records is not the one the checkpoint signs"
        )
        return verdict
    _check_inclusions(doc.get("inclusion", []), size, root, verdict)
    if "consistency" in doc:
        _check_consistency(doc["consistency"], size, root, by_size, verdict)
    return verdict


def _check_inclusions(items: object, size: int, root: bytes, verdict: ProofVerdict) -> None:
    if not isinstance(items, list):
        verdict.findings.append("the proof's inclusion is not a list")
        return
    for n, item in enumerate(items):
        where = f"inclusion {n}"
        if isinstance(item, dict) and "seq" in item:
            where = f"the record of seq {item['seq']}"
        try:
            chain_hash = bytes.fromhex(item["chain_hash"])
            index, path = item["leaf_index"], _hashes(item["proof"])
            # A committed leaf's input is the chain hash, then the record's commitment.
            committed = item.get("commitment")
            c = b"" if committed is None else bytes.fromhex(committed)
        except (KeyError, TypeError, ValueError, AttributeError):
            verdict.findings.append(f"{where}: no chain_hash, leaf_index and proof")
            continue
        if len(chain_hash) != 32 or len(c) not in (0, 32):
            verdict.findings.append(f"{where}: chain_hash or commitment is not 32 bytes")
            continue
        leaf = merkle.leaf_hash(commitment.leaf_input(chain_hash, c))
        if path is None or not merkle.verify_inclusion(leaf, index, size, path, root):
            verdict.findings.append(
                f"{where}: the inclusion proof does not lead to the signed root"
            )
            continue
        verdict.inclusions += 1


def _check_consistency(
    item: object,
    size: int,
    root: bytes,
    by_size: dict[int, Checkpoint],
    verdict: ProofVerdict,
) -> None:
    if not isinstance(item, dict):
        verdict.findings.append("the proof's consistency is not an object")
        return
    old_size, new_size = item.get("old_size"), item.get("new_size")
    old_root, path = _hash(item.get("old_root_hash")), _hashes(item.get("proof"))
    if not isinstance(old_size, int) or new_size != size or old_root is None or path is None:
        verdict.findings.append(
            "the consistency proof needs old_size, old_root_hash, proof and the proof's new_size"
        )
        return
    if not merkle.verify_consistency(old_size, size, old_root, root, path):
        verdict.findings.append(
            f"the tree of {old_size} records is not a prefix of the signed one: the log was "
            "rewritten between them"
        )
        return
    old = by_size.get(old_size)
    if old is not None and old.root_hash != old_root:
        verdict.findings.append(
            f"the consistency proof's old root is not the one the checkpoint of {old_size} "
            "records signs"
        )
        return
    verdict.consistency = True
