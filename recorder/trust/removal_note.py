"""Signed removals: the log key's signature over what a retention run removes.

Once retention has deleted a session's records, nothing left in the store shows whose leaves they
were: whoever can write the database could delete a session and write a retention record that
claims it. So every removal carries a signed note (c2sp.org/signed-note, by the log's key, its
name the log's origin) over the sessions it removes, each with its leaf indices in the log's
tree, and the archive bundle that holds them. `verify` checks the note against the record's own
document and, with the log's verifier key, its signature: a database administrator without the
key cannot remove a record without `verify` failing (docs/trust.md, signed removals).

The note's text, one line each, ending in a newline:

    mcp-blackbox removal v1
    <origin: the key's name>
    store <the log's store id>
    archive <SHA-256 hex of the archive's manifest.json, or ->
    session <session id as a JSON string> <leaf count> <first>-<last>[,<first>-<last>...]

one `session` line per removed session, in order of session id (ranges inclusive, in order).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from blackbox.recorder.log import events as docs
from blackbox.recorder.store import EventStore, removals, tree
from blackbox.recorder.trust.checkpoint import Signer, Verifier, open_note, sign_note

HEADER = "mcp-blackbox removal v1"


def removal_text(origin: str, store_id: str, doc: docs.RetentionApplied) -> str | None:
    """The text a removal's note signs, from its document; None when the document names no
    leaves (a removal made before removals were signed)."""
    if doc.removed_leaves is None:
        return None
    lines = [HEADER, origin, f"store {store_id}", f"archive {doc.archive_manifest_sha256 or '-'}"]
    for sid in sorted(doc.removed_leaves):
        ranges = doc.removed_leaves[sid]
        spans = (
            [r for r in ranges if isinstance(r, list) and len(r) == 2]
            if isinstance(ranges, list)
            else []
        )
        count = sum(int(b) - int(a) + 1 for a, b in spans)
        text = ",".join(f"{a}-{b}" for a, b in spans) or "-"
        lines.append(f"session {json.dumps(sid)} {count} {text}")
    return "\n".join(lines) + "\n"


def sign_removal(signer: Signer, doc: docs.RetentionApplied, store_id: str) -> str:
    """The signed note authorising `doc`'s removal (its `removed_leaves` filled in)."""
    text = removal_text(signer.name, store_id, doc)
    if text is None:
        raise ValueError("a removal is signed once its leaves are named")
    return sign_note(text, signer)


def _body(note: str) -> str | None:
    split = note.rfind("\n\n")
    return note[: split + 1] if split >= 0 else None


def check_removal(
    doc: docs.RetentionApplied, store_id: str, verifier: Verifier | None
) -> str | None:
    """Why `doc`'s signed note does not authorise it, or None. Without `verifier` the note's
    text is checked against the document only, not its signature."""
    note = doc.authorisation
    if not note:
        return "it carries no signature"
    body = _body(note)
    lines = body.split("\n") if body else []
    if len(lines) < 2 or lines[0] != HEADER:
        return "its signed note is not a removal note"
    origin = lines[1]
    if verifier is not None:
        if origin != verifier.name:
            return f"its note names the log {origin!r}, not the key's {verifier.name!r}"
        opened, problem = open_note(note, [verifier])
        if opened is None:
            return f"its note is refused: {problem}"
        body = opened.text
    if body != removal_text(origin, store_id, doc):
        return (
            "its signed note does not say what the record says it removes (other sessions, "
            "leaves, store or archive): the record was edited"
        )
    return None


@dataclass
class RemovalReport:
    """Each signed removal's check: findings (sentences), and how many were checked with a key,
    only against their own documents (no key), or made before removals were signed."""

    findings: list[str] = field(default_factory=list)
    signed_checked: int = 0
    unchecked: int = 0
    legacy: int = 0


def check_removals(store: EventStore, verifier: Verifier | None) -> RemovalReport:
    """Check every retention record that removes sessions against its signed note."""
    report = RemovalReport()
    with store.transaction() as conn:
        records = removals.retention_records(conn)
        start = removals.signed_from(conn)
        store_id = tree.known_log_id(conn) or "-"
    for position, rec in sorted(records.items()):
        doc = rec.doc
        if doc is None or not doc.removed:
            continue
        if position < start and (doc.removed_leaves is None or not doc.authorisation):
            report.legacy += 1
            continue
        problem = check_removal(doc, store_id, verifier)
        if problem is not None:
            report.findings.append(
                f"the retention record at log position {position} is not authorised by the "
                f"log's key: {problem}"
            )
        elif verifier is not None:
            report.signed_checked += 1
        else:
            report.unchecked += 1
    return report
