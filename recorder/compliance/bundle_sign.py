"""Completeness under signature: an export bundle's manifest signed with the log's key
(`manifest.sig`), and the offline check that a bundle holds exactly what its manifest lists.

Why it exists: the checkpoint and the inclusion proofs (`bundle_proof`) prove that each record *in*
a bundle is the log's; they say nothing of what is *not* in it. Whoever holds a bundle could drop a
whole session (its records, its sessions row, its proofs and its manifest entry, every file hash
recomputed) and the rest would still prove. So the manifest lists every session with its records
and its leaves in the log's tree (compact ranges of leaf indices), the selection that chose them
and every file's sha256, and the log's key signs the manifest's sha256: the list becomes the key
holder's word, which the holder of the bundle cannot change without the key.

`manifest.sig` is a C2SP signed note (c2sp.org/signed-note) by the log's key, whose name is the
log's origin. Its text is three lines, each ending in a newline:

    mcp-blackbox bundle manifest v1
    <origin>
    manifest <SHA-256 of manifest.json's bytes, 64 lowercase hex digits>

A checkpoint's second line is a decimal size, so neither note can pass for the other. The format
and what "complete" means are in docs/trust.md ("The signed manifest").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Literal, TypeGuard

from blackbox.recorder import BlackboxError, private_file
from blackbox.recorder.log import merkle
from blackbox.recorder.trust import (
    Signer,
    Verifier,
    keys,
    open_checkpoint,
    open_note,
    sign_note,
    split_notes,
)

MANIFEST_SIG = "manifest.sig"
MANIFEST_JSON = "manifest.json"  # export.MANIFEST is this name (export imports this module)
HEADER = "mcp-blackbox bundle manifest v1"
# `manifest_signer`'s default: the key configured for this user (keys.configured_signer), when it
# is the key that signed the bundle's checkpoint.
CONFIGURED: Literal["configured"] = "configured"
_SHA256_HEX = re.compile(r"[0-9a-f]{64}", re.ASCII)

# (problem, detail, file, session id): what bundle_check turns into its findings.
Finding = tuple[str, str, str | None, str | None]


class SignerMismatch(BlackboxError):
    """A key asked to sign a manifest is not the key that signed the bundle's checkpoint."""


# -- the note ------------------------------------------------------------------------------------


def note_text(origin: str, manifest_sha256: str) -> str:
    """The text `manifest.sig` signs: the format line, the origin, the manifest's sha256."""
    return f"{HEADER}\n{origin}\nmanifest {manifest_sha256}\n"


def parse_note_text(text: str) -> tuple[str, str] | None:
    """(origin, manifest sha256) of a manifest note's text, read strictly; None if it is not one."""
    lines = text.split("\n")
    if len(lines) != 4 or lines[3] != "" or lines[0] != HEADER or not lines[1]:
        return None
    kind, _, digest = lines[2].partition(" ")
    if kind != "manifest" or not _SHA256_HEX.fullmatch(digest):
        return None
    return lines[1], digest


def _body(note: str) -> str | None:
    """A signed note's text (up to and including the newline before the blank line)."""
    split = note.rfind("\n\n")
    return note[: split + 1] if split >= 0 else None


# -- signing at export ---------------------------------------------------------------------------


def manifest_signer(
    choice: Signer | Literal["configured"] | None, checkpoint_note: str | None
) -> Signer | None:
    """The key that signs a bundle's manifest, or None for an unsigned one.

    Only the key that signed the bundle's checkpoint signs its manifest: the leaves the manifest
    lists are leaves of that checkpoint's tree, and a verifier holds one key. `CONFIGURED` takes
    the configured key when it is that one (an export with no checkpoint, or with a stored
    checkpoint of another key, is unsigned); an explicit `Signer` that is not raises
    `SignerMismatch`."""
    if choice is None:
        return None
    if choice == CONFIGURED:
        if checkpoint_note is None:
            return None
        try:
            signer = keys.configured_signer()
        except BlackboxError:  # an unreadable key: note_for_export fell back to a stored note
            return None
        if signer is None or not _signed_by(checkpoint_note, signer):
            return None
        return signer
    if not isinstance(choice, Signer):
        raise TypeError(f"manifest_signer is a Signer, {CONFIGURED!r} or None, not {choice!r}")
    if checkpoint_note is None:
        raise SignerMismatch(
            "a signed manifest lists each session's leaves in the checkpoint's tree: sign the "
            "manifest only with a checkpoint (checkpoint_note)"
        )
    if not _signed_by(checkpoint_note, choice):
        raise SignerMismatch(
            f"the key {choice.name}+{choice.key_id.hex()} did not sign the checkpoint the bundle "
            "carries: the manifest is signed with the checkpoint's key"
        )
    return choice


def _signed_by(note: str, signer: Signer) -> bool:
    """Whether the checkpoint the bundle will carry (the last note, as bundle_proof takes it) is
    this key's, of the log it names."""
    notes = split_notes(note)
    if not notes:
        return False
    checkpoint, _problem = open_checkpoint(notes[-1], [signer.verifier], origin=signer.name)
    return checkpoint is not None


def sign(out_dir: Path, manifest_bytes: bytes, signer: Signer) -> str:
    """Write `manifest.sig` (0600, like the rest of the bundle) over these manifest bytes; returns
    the note."""
    note = sign_note(note_text(signer.name, hashlib.sha256(manifest_bytes).hexdigest()), signer)
    private_file(out_dir / MANIFEST_SIG).write_text(note, encoding="utf-8")
    return note


def manifest_entry(signer: Signer | None) -> dict[str, object] | None:
    """The manifest's `manifest_signature` entry: where the signature is and what it means."""
    if signer is None:
        return None
    return {
        "file": MANIFEST_SIG,
        "origin": signer.name,
        "text": f"{HEADER} / <origin> / manifest <sha256 of manifest.json>",
        "means": "the log's key vouches that the bundle holds exactly the sessions listed under "
        "sessions, each with exactly its records at its listed leaves of the checkpoint's tree, "
        "and exactly the files listed under files",
    }


# -- leaves --------------------------------------------------------------------------------------


def leaves_entry(indices: list[int], not_covered: int) -> dict[str, object]:
    """A session's `leaves` entry in the manifest."""
    return {
        "ranges": merkle.leaf_ranges(indices),
        "covered": len(indices),
        "not_covered": not_covered,
    }


@dataclass(slots=True)
class _Seen:
    ranges: list[list[int]] = field(default_factory=list)
    covered: int = 0
    not_covered: int = 0
    unreadable: int = 0


@dataclass(slots=True)
class LeafTally:
    """The leaves the bundle's proofs place each session's records at, gathered while the proofs
    are checked (`bundle_proof.check`): compact ranges, so memory grows with the ranges, not the
    records. `complete` only once every proof line was read."""

    sessions: dict[str, _Seen] = field(default_factory=dict)
    complete: bool = False

    def add(self, sid: str, index: int | None) -> None:
        seen = self.sessions.setdefault(sid, _Seen())
        if index is None:
            seen.not_covered += 1
            return
        seen.covered += 1
        last = seen.ranges[-1] if seen.ranges else None
        if last is not None and last[1] + 1 == index:
            last[1] = index
        else:
            seen.ranges.append([index, index])

    def unreadable(self, sid: str) -> None:
        self.sessions.setdefault(sid, _Seen()).unreadable += 1


def _normalised(ranges: list[list[int]]) -> list[list[int]]:
    """Ranges sorted and adjacent ones joined; overlapping ones (a leaf twice) kept apart, so
    they never equal a valid listing."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a == out[-1][1] + 1:
            out[-1][1] = b
        else:
            out.append([a, b])
    return out


def _listed(entry: object) -> tuple[list[list[int]], int, int] | str:
    """A manifest `leaves` entry read strictly: (ranges, covered, not_covered), or the problem."""
    if not isinstance(entry, dict):
        return "the manifest lists no leaves for this session"
    ranges, covered, not_covered = (
        entry.get("ranges"),
        entry.get("covered"),
        entry.get("not_covered"),
    )
    if not (_is_count(covered) and _is_count(not_covered) and isinstance(ranges, list)):
        return "the manifest's leaves entry is not ranges, covered and not_covered"
    out: list[list[int]] = []
    for pair in ranges:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(_is_count(v) for v in pair)
            or pair[0] > pair[1]
            or (out and pair[0] <= out[-1][1] + 1)
        ):
            return "the manifest's leaf ranges are not ascending, disjoint [first, last] pairs"
        out.append([pair[0], pair[1]])
    held = sum(b - a + 1 for a, b in out)
    if held != covered:
        return f"the manifest's leaf ranges hold {held} leaves, not {covered}"
    return out, covered, not_covered


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _spans(ranges: list[list[int]], limit: int = 4) -> str:
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges[:limit])
    more = f" and {len(ranges) - limit} more" if len(ranges) > limit else ""
    return (text or "none") + more


# -- checking a bundle ---------------------------------------------------------------------------


def check_signature(
    path: Path, manifest: Mapping[str, object], verifier: Verifier | None, allow_unsigned: bool
) -> tuple[list[Finding], bool]:
    """The manifest's signature: with `verifier`, manifest.sig must be a note signed by that key
    whose origin is the key's name and whose sha256 is manifest.json's; without, a manifest.sig
    present must at least name this manifest. Returns the findings and whether completeness was
    checked against the key's signature."""
    sig_path = path / MANIFEST_SIG
    declared = manifest.get("manifest_signature")
    if not sig_path.is_file():
        if verifier is not None and not allow_unsigned:
            return [
                (
                    "manifest_unsigned",
                    "the bundle's manifest is not signed, so which sessions and records belong "
                    "in it cannot be checked: it was exported with no signing key configured "
                    "(or before manifests were signed); export it again with the log's key "
                    "configured (`blackbox keys init`, or BLACKBOX_KEY_FILE) to get a signed "
                    "bundle, or pass --allow-unsigned-manifest to check the rest",
                    MANIFEST_SIG,
                    None,
                )
            ], False
        if declared is not None:
            return [
                (
                    "manifest_unsigned",
                    f"the manifest says it is signed ({MANIFEST_SIG}), and the file is missing",
                    MANIFEST_SIG,
                    None,
                )
            ], False
        return [], False
    try:
        note = sig_path.read_text(encoding="utf-8")
        digest = hashlib.sha256((path / MANIFEST_JSON).read_bytes()).hexdigest()
    except (OSError, UnicodeDecodeError) as exc:
        return [("manifest_signature_invalid", f"cannot read it: {exc}", MANIFEST_SIG, None)], False
    if verifier is not None:
        opened, problem = open_note(note, [verifier])
        if opened is None:
            return [
                (
                    "manifest_signature_invalid",
                    f"not signed by the key {verifier.name}: {problem}",
                    MANIFEST_SIG,
                    None,
                )
            ], False
        body: str | None = opened.text
    else:
        body = _body(note)
    parsed = parse_note_text(body or "")
    if parsed is None:
        return [
            (
                "manifest_signature_invalid",
                f"its text is not '{HEADER}', an origin and 'manifest <sha256>'",
                MANIFEST_SIG,
                None,
            )
        ], False
    origin, signed_digest = parsed
    found: list[Finding] = []
    if verifier is not None and origin != verifier.name:
        found.append(
            (
                "manifest_signature_invalid",
                f"it signs a manifest of the log {origin!r}, not the key's {verifier.name!r}",
                MANIFEST_SIG,
                None,
            )
        )
    if signed_digest != digest:
        found.append(
            (
                "manifest_signature_invalid",
                f"it signs a manifest of sha256 {signed_digest[:16]}…, manifest.json's is "
                f"{digest[:16]}…: the manifest was changed after it was signed",
                MANIFEST_SIG,
                None,
            )
        )
    tree = manifest.get("tree")
    if isinstance(tree, dict) and tree.get("origin") != origin:
        found.append(
            (
                "manifest_signature_invalid",
                f"it is of the log {origin!r}, the manifest's checkpoint of {tree.get('origin')!r}",
                MANIFEST_SIG,
                None,
            )
        )
    return found, verifier is not None and not found


def check_completeness(
    manifest: Mapping[str, object],
    records_name: str | None,
    counts: Mapping[str, int] | None,
    tally: LeafTally | None,
) -> list[Finding]:
    """The bundle against its manifest's list: every session listed holds exactly `records`
    records (`counts`: the records file's rows per session, None when it could not be read), its
    proofs place them at exactly its listed leaves (`tally`, None without proofs), no leaf is
    listed twice, and the manifest's totals agree with its sessions."""
    sessions = manifest.get("sessions")
    sessions = sessions if isinstance(sessions, dict) else {}
    tree_entry = manifest.get("tree")
    tree = tree_entry if isinstance(tree_entry, dict) else None
    found: list[Finding] = []
    owner: list[tuple[int, int, str]] = []  # every listed range, with its session
    for sid, meta in sessions.items():
        if not isinstance(meta, dict):
            continue
        listed_records = meta.get("records")
        have = counts.get(sid) if counts is not None else None
        if have is not None and _is_count(listed_records) and have != listed_records:
            if have < listed_records:
                found.append(
                    (
                        "record_missing",
                        f"{listed_records - have} of the {listed_records} records the manifest "
                        "lists are not in the bundle",
                        records_name,
                        sid,
                    )
                )
            else:
                found.append(
                    (
                        "unexpected_record",
                        f"{have - listed_records} record(s) more than the {listed_records} the "
                        "manifest lists",
                        records_name,
                        sid,
                    )
                )
        if tree is None or ("leaves" not in meta and manifest.get("manifest_signature") is None):
            continue  # no tree, or a bundle written before manifests listed leaves
        listed = _listed(meta.get("leaves"))
        if isinstance(listed, str):
            found.append(("leaves_mismatch", listed, MANIFEST_JSON, sid))
            continue
        ranges, covered, not_covered = listed
        owner += [(a, b, sid) for a, b in ranges]
        if _is_count(listed_records) and covered + not_covered != listed_records:
            found.append(
                (
                    "leaves_mismatch",
                    f"{covered} leaves and {not_covered} records not covered, for "
                    f"{listed_records} records",
                    MANIFEST_JSON,
                    sid,
                )
            )
        size = tree.get("tree_size")
        if ranges and _is_count(size) and ranges[-1][1] >= size:
            found.append(
                (
                    "leaves_mismatch",
                    f"leaf {ranges[-1][1]} is listed, the checkpoint's tree holds {size} leaves",
                    MANIFEST_JSON,
                    sid,
                )
            )
        if tally is None or not tally.complete:
            continue
        seen = tally.sessions.get(sid)
        if seen is None:
            continue  # no records at all: session_missing says so
        if seen.unreadable:
            continue  # proof_invalid says so
        got = _normalised(seen.ranges)
        if got != ranges or seen.not_covered != not_covered:
            found.append(
                (
                    "leaves_mismatch",
                    f"the proofs place its records at leaves {_spans(got)} ({seen.not_covered} "
                    f"not covered), the manifest lists {_spans(ranges)} ({not_covered} not "
                    "covered)",
                    MANIFEST_JSON,
                    sid,
                )
            )
    owner.sort()
    for (_a, b, first), (c, _d, second) in pairwise(owner):
        if c <= b:
            found.append(
                (
                    "leaves_mismatch",
                    f"leaf {c} is listed for this session and for session {first}",
                    MANIFEST_JSON,
                    second,
                )
            )
    found += _totals(manifest, sessions, tally)
    return found


def _totals(
    manifest: Mapping[str, object], sessions: dict, tally: LeafTally | None
) -> list[Finding]:
    """The manifest's counts against its own sessions, files and proofs."""
    metas = [m for m in sessions.values() if isinstance(m, dict)]
    want: dict[str, object] = {
        "sessions": len(sessions),
        "records": sum(m.get("records") or 0 for m in metas if _is_count(m.get("records"))),
        "redacted_records": sum(
            m.get("redacted_records") or 0 for m in metas if _is_count(m.get("redacted_records"))
        ),
    }
    files = manifest.get("files")
    if isinstance(files, dict):
        rows = [
            meta.get("rows")
            for meta in files.values()
            if isinstance(meta, dict) and meta.get("role") == "decisions"
        ]
        if len(rows) == 1:
            want["decisions"] = rows[0]
    counts = manifest.get("counts")
    counts = counts if isinstance(counts, dict) else {}
    found: list[Finding] = []
    for key, value in want.items():
        if counts.get(key) != value:
            what = "files" if key == "decisions" else "sessions"
            found.append(
                (
                    "counts_mismatch",
                    f"counts.{key} is {counts.get(key)!r}, the manifest's {what} make {value}",
                    MANIFEST_JSON,
                    None,
                )
            )
    tree = manifest.get("tree")
    if isinstance(tree, dict) and tally is not None and tally.complete:
        proven = sum(s.covered for s in tally.sessions.values())
        uncovered = sum(s.not_covered for s in tally.sessions.values())
        for key, value in (("records_proven", proven), ("records_not_covered", uncovered)):
            if tree.get(key) != value:
                found.append(
                    (
                        "counts_mismatch",
                        f"tree.{key} is {tree.get(key)!r}, the proofs make {value}",
                        MANIFEST_JSON,
                        None,
                    )
                )
    return found
