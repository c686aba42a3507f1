"""Default redaction against a corpus of real-shaped MCP frames: secrets where they really turn up
(a JSON object quoted in a tool's text, a presigned URL, a curl line, an .env file read as a
resource, a PEM key, a key of a well-known service) must all go, and look-alikes (ids, hashes,
UUIDs, commit SHAs, prose about passwords, tool schemas, base64 of harmless data, code that
reads a secret without holding it) must all stay.

The corpus is `fixtures/redaction_corpus.jsonl`, one frame a line: `{"id", "expect": "redact" |
"keep", "frame": <a JSON-RPC message> | "text": <a line that is not JSON, as on stderr>,
"secrets": [...]}`. The test prints the recall (secrets removed) and the false-positive rate
(look-alike frames changed); docs/security.md quotes them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blackbox.recorder.privacy.redact import Redactor

CORPUS = Path(__file__).parent / "fixtures" / "redaction_corpus.jsonl"
KEY = b"corpus-key"


def _load() -> list[dict]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]


def _raw(entry: dict) -> bytes:
    if "frame" in entry:
        return json.dumps(entry["frame"]).encode()
    return entry["text"].encode()


def _leaked(out: bytes, secret: str) -> bool:
    """Whether the secret is still there, as it is or as the frame's JSON escapes it."""
    escaped = json.dumps(secret)[1:-1]
    return secret.encode() in out or escaped.encode() in out


def _measure() -> tuple[list[tuple[str, str]], list[str], int, int]:
    entries = _load()
    leaks = [e for e in entries if e["expect"] == "redact"]
    keeps = [e for e in entries if e["expect"] == "keep"]
    missed = []
    for entry in leaks:
        out = Redactor.default(key=KEY).redact_frame(_raw(entry))
        missed += [(entry["id"], s) for s in entry["secrets"] if _leaked(out, s)]
    changed = []
    for entry in keeps:
        raw = _raw(entry)
        if Redactor.default(key=KEY).redact_frame(raw) != raw:
            changed.append(entry["id"])
    secrets = sum(len(e["secrets"]) for e in leaks)
    return missed, changed, secrets, len(keeps)


def test_the_corpus_is_large_enough_and_well_formed() -> None:
    entries = _load()
    assert len({e["id"] for e in entries}) == len(entries)
    leaks = [e for e in entries if e["expect"] == "redact"]
    keeps = [e for e in entries if e["expect"] == "keep"]
    assert len(leaks) >= 50 and len(keeps) >= 50
    assert all(
        e["secrets"]
        and all(
            s in _raw(e).decode() or json.dumps(s)[1:-1] in _raw(e).decode() for s in e["secrets"]
        )
        for e in leaks
    )


def test_default_redaction_recall_and_false_positives(capsys: pytest.CaptureFixture[str]) -> None:
    missed, changed, secrets, keeps = _measure()
    recall = 1 - len(missed) / secrets
    false_positives = len(changed) / keeps
    with capsys.disabled():
        print(
            f"\nredaction corpus: recall {recall:.1%} ({secrets - len(missed)}/{secrets} secrets), "
            f"false positives {false_positives:.1%} ({len(changed)}/{keeps} look-alike frames)"
        )
    assert missed == [], f"secrets left in clear: {missed}"
    assert changed == [], f"look-alikes redacted: {changed}"
