"""Nothing written before breaks: a store and a bundle written by each earlier version of the
schema still migrate, verify (with their signed checkpoint, where they have one), list, replay and
export, and the old bundles still verify offline.

tests/fixtures/stores/schema-NNNN/ was written by the code of the commit its README names, through
that version's own CLI (tests/fixtures/stores/write_store.py), and is never regenerated.
"""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import record_session

from blackbox import migrations
from tests.fixtures.bundlekit import manifest_of, read_jsonl, save_manifest, write_jsonl
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.storekit import T0, session_events, tamper

ROOT = Path(__file__).resolve().parents[1]
STORES = ROOT / "tests" / "fixtures" / "stores"
VERSIONS = sorted(p.name for p in STORES.glob("schema-*"))

pytestmark = pytest.mark.timeout(180)


def test_there_is_a_fixture_for_every_earlier_schema() -> None:
    """A migration added without the store of the version before it is a version untested."""
    revisions = sorted(
        p.stem.split("_")[0] for p in (ROOT / "migrations" / "versions").glob("0*.py")
    )
    written = [v.removeprefix("schema-") for v in VERSIONS]
    # The head's own store is written when the next revision comes, by the code before it.
    assert written in (revisions, revisions[:-1]), (written, revisions)


class Old:
    """One fixture version, copied: its store in a scratch data directory of its own."""

    def __init__(self, version: str, tmp: Path, env: dict[str, str]) -> None:
        self.source = STORES / version
        self.db = tmp / "store.sqlite"
        shutil.copyfile(self.source / "store.sqlite", self.db)
        self.env = dict(env, BLACKBOX_STORE=f"sqlite:///{self.db}")
        key = self.source / "verifier.key"
        self.vkey = key.read_text().strip() if key.exists() else None

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_blackbox(*args, env=self.env, cwd=ROOT)

    def sessions(self) -> dict[str, dict]:
        out = self.run("sessions", "--format", "json")
        assert out.returncode == 0, out.stderr
        return {row["name"]: row for row in json.loads(out.stdout)}


@pytest.fixture(params=VERSIONS)
def old(request: pytest.FixtureRequest, tmp_path: Path, blackbox_env: dict[str, str]) -> Old:
    return Old(request.param, tmp_path, blackbox_env)


def test_an_old_store_migrates_lists_verifies_and_exports(old: Old, tmp_path: Path) -> None:
    """One copy of the store through every reading command: each step on the migrated store."""
    rows = old.sessions()
    assert set(rows) == {"legacy-demo", "stateless-demo"}
    assert rows["legacy-demo"]["frames"] == 12
    assert rows["stateless-demo"]["frames"] == 4
    revision = sqlite3.connect(old.db).execute("SELECT version_num FROM alembic_version")
    assert revision.fetchone()[0] == migrations.HEAD
    verified = old.run("verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "intact" in verified.stdout
    if old.vkey is not None:
        # Its signed checkpoint still checks, with the key alone, and another key refuses it.
        checkpoint = str(old.source / "checkpoint.txt")
        verified = old.run("verify", "--checkpoint", checkpoint, "--key", old.vkey)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        other = old.run("verify", "--checkpoint", checkpoint, "--key", old.vkey[:-4] + "AAA=")
        assert other.returncode != 0
    else:  # written before checkpoints existed: there is nothing signed to check
        assert not (old.source / "checkpoint.txt").exists()
    bundle = tmp_path / "bundle"
    exported = old.run("export", "--out", str(bundle))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    checked = old.run("verify-export", str(bundle))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_an_old_session_replays_equivalent(old: Old) -> None:
    legacy = old.sessions()["legacy-demo"]["id"]
    # Recorded before the example server annotated its tools (readOnlyHint), in the older
    # versions: the annotations are all that may differ.
    server = f"{sys.executable} examples/server.py"
    out = old.run(
        "replay", legacy, "--against", server, "--allow-writes", "--ignore", "$..annotations"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verdict: equivalent" in out.stdout


def test_an_old_bundle_still_verifies_offline(old: Old, tmp_path: Path) -> None:
    bundle = tmp_path / "old-bundle"
    shutil.copytree(old.source / "bundle", bundle)
    key = ["--key", old.vkey] if old.vkey else []
    # Bundles made before manifests were signed: with the key, only when unsigned ones are
    # allowed (stripping manifest.sig from a new bundle would otherwise pass as old). From
    # schema-0008 on, the bundle's manifest is signed and verifies as it is.
    if key and not (bundle / "manifest.sig").exists():
        refused = old.run("verify-export", str(bundle), *key)
        assert refused.returncode == 1 and "manifest_unsigned" in refused.stdout, refused.stdout
        key.append("--allow-unsigned-manifest")
    checked = old.run("verify-export", str(bundle), *key)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # And it is really checked: one byte of a frame's raw bytes changed is found.
    records = bundle / "records.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    echo = next(r for r in rows if b"hello, flight recorder" in base64.b64decode(r["raw"]))
    raw = base64.b64decode(echo["raw"]).replace(b"hello, flight", b"hello, fright")
    echo["raw"] = base64.b64encode(raw).decode()
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tampered = old.run("verify-export", str(bundle), *key)
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr


def test_a_mixed_store_verifies_against_checkpoints_of_both_layouts(
    tmp_path: Path, blackbox_env: dict[str, str]
) -> None:
    """The last store of the text layout (schema-0008) upgraded to record format v2, then
    written by this version: one log whose older records were converted and whose newer ones
    were appended compact. Its old checkpoint still checks (the converted records hash to the
    same leaves), a checkpoint signed now covers both, and its bundle verifies."""
    old = Old("schema-0008", tmp_path, blackbox_env)
    store = open_store(f"sqlite:///{old.db}")  # upgrades in place
    try:
        new = session_events(calls=3, start_ns=T0 + 10**12)
        store.append(new)
    finally:
        store.close()
    rows = old.sessions()
    assert {"legacy-demo", "stateless-demo"} <= set(rows) and len(rows) == 3
    db = sqlite3.connect(old.db)
    try:
        # Both kinds of record sit in the compact table: 16 id bytes, small-integer kinds.
        shapes = set(db.execute("SELECT length(sid), typeof(kind_code) FROM events"))
        assert shapes == {(16, "integer")}, shapes
    finally:
        db.close()
    checkpoint = str(old.source / "checkpoint.txt")
    before = old.run("verify", "--checkpoint", checkpoint, "--key", str(old.vkey))
    assert before.returncode == 0, before.stdout + before.stderr
    made = old.run("keys", "init", "--origin", "mixed.example/log")
    assert made.returncode == 0, made.stdout + made.stderr
    vkey = made.stdout.strip().splitlines()[-1]
    signed = old.run("checkpoint")
    assert signed.returncode == 0, signed.stdout + signed.stderr
    now = tmp_path / "now.txt"
    now.write_text(signed.stdout)
    after = old.run("verify", "--checkpoint", str(now), "--key", vkey)
    assert after.returncode == 0, after.stdout + after.stderr
    bundle = tmp_path / "bundle"
    exported = old.run("export", "--out", str(bundle))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    checked = old.run("verify-export", str(bundle), "--key", vkey)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The converted records are really checked: one byte of an old frame changed is found.
    tamper(
        f"sqlite:///{old.db}",
        ("UPDATE events SET raw = replace(raw, 'hello, flight', 'hello, fright')", {}),
    )
    broken = old.run("verify", "--checkpoint", checkpoint, "--key", str(old.vkey))
    assert broken.returncode == 1, broken.stdout + broken.stderr


def test_a_store_from_before_commitments_commits_from_its_next_leaf(
    tmp_path: Path, blackbox_env: dict[str, str]
) -> None:
    """The last store whose leaves carry no commitment (schema-0010), upgraded and written by
    this version: its first committed leaf is the tree's size at the upgrade, so its signed
    checkpoint still checks; the leaves after carry commitments, which a checkpoint signed now,
    `prove` and a redacted bundle all show, and an edit of what a new redacted record shows
    fails its proof."""
    old = Old("schema-0010", tmp_path, blackbox_env)
    db = sqlite3.connect(old.db)
    try:
        (size,) = db.execute("SELECT size FROM tree_state").fetchone()
    finally:
        db.close()
    assert size > 0
    store = open_store(f"sqlite:///{old.db}")  # upgrades in place
    try:
        secret = record_session(store, T0 + 10**12, calls=2, secrets=True)
    finally:
        store.close()
    db = sqlite3.connect(old.db)
    try:
        (first_leaf,) = db.execute("SELECT first_leaf FROM commitment_keys").fetchone()
    finally:
        db.close()
    assert first_leaf == size
    checkpoint = str(old.source / "checkpoint.txt")
    before = old.run("verify", "--checkpoint", checkpoint, "--key", str(old.vkey))
    assert before.returncode == 0, before.stdout + before.stderr
    made = old.run("keys", "init", "--origin", "mixed.example/log")
    vkey = made.stdout.strip().splitlines()[-1]
    signed = old.run("checkpoint")
    assert signed.returncode == 0, signed.stdout + signed.stderr
    now = tmp_path / "now.txt"
    now.write_text(signed.stdout)
    for note, key in ((checkpoint, str(old.vkey)), (str(now), vkey)):
        checked = old.run("verify", "--checkpoint", note, "--key", key)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    proofs = {}
    for name, sid in (
        ("legacy-demo", old.sessions()["legacy-demo"]["id"]),
        ("new", secret),
    ):
        out = old.run("prove", sid, "--checkpoint", str(now))
        assert out.returncode == 0, out.stdout + out.stderr
        proofs[name] = json.loads(out.stdout)["inclusion"]
    assert all(
        p["leaf_index"] < first_leaf and p["commitment"] is None for p in proofs["legacy-demo"]
    )
    assert all(p["leaf_index"] >= first_leaf and p["commitment"] for p in proofs["new"])
    bundle = tmp_path / "bundle"
    exported = old.run("export", "--out", str(bundle), "--format", "jsonl")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert manifest_of(bundle)["tree"]["committed_from"] == first_leaf
    checked = old.run("verify-export", str(bundle), "--key", vkey)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rows = read_jsonl(bundle / "records.jsonl")
    target = next(r for r in rows if r["session_id"] == secret and r["redacted"])
    raw = base64.b64decode(target["raw"])
    target["raw"] = base64.b64encode(raw.replace(b'"2.0"', b'"1.0"', 1)).decode()
    write_jsonl(bundle / "records.jsonl", rows)
    manifest = manifest_of(bundle)
    manifest["manifest_signature"] = None
    save_manifest(bundle, manifest)
    (bundle / "manifest.sig").unlink()
    edited = old.run("verify-export", str(bundle))
    assert edited.returncode == 1
    assert "not_included" in edited.stdout and secret in edited.stdout, edited.stdout
