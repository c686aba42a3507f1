"""Export bundles carry the signed checkpoint and an inclusion proof per record: `verify-export
--key` checks both offline, and a record changed with its chain and manifest recomputed fails by
its inclusion proof."""

from __future__ import annotations

import base64
import hashlib
import json
import time

import pytest
from blackbox.recorder.log import chain
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import DAY_NS, record_session
from blackbox.recorder.trust.checkpoint import Signer
from click.testing import CliRunner

from blackbox.cli.main import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.fixture
def exported(store_url, blackbox_env, tmp_path):
    """Three sessions (one with secrets, redacted on export), a key, a JSONL bundle."""
    store = open_store(store_url)
    now = time.time_ns()
    ids = [
        record_session(store, now - 2 * DAY_NS, calls=2),
        record_session(store, now - DAY_NS, era="2026-07-28", secrets=True),
        record_session(store, now, calls=1),
    ]
    store.close()
    code, out = run("keys", "init", "--origin", "example.com/audit")
    vkey = out.strip().splitlines()[-1]
    bundle = tmp_path / "bundle"
    code, out = run("export", "--store", store_url, "--format", "jsonl", "--out", str(bundle))
    assert code == 0, out
    return bundle, vkey, ids


def test_bundle_verifies_with_the_key_and_says_what_without(exported):
    bundle, vkey, _ids = exported
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["tree"]["records_proven"] == manifest["counts"]["records"]
    assert manifest["tree"]["records_not_covered"] == 0
    assert manifest["counts"]["redacted_records"] > 0  # redacted records prove too
    code, out = run("verify-export", str(bundle), "--key", vkey)
    assert code == 0, out
    assert "origin: every record is in the log signed by example.com/audit" in out
    code, out = run("verify-export", str(bundle))
    assert code == 0, out
    assert "only the bundle's integrity was checked, not its origin" in out
    # the signing key is nowhere in the bundle
    secret = next(bundle.parent.rglob("checkpoint.key")).read_text().strip()
    seed = secret.split("+", 4)[4]
    for path in bundle.iterdir():
        data = path.read_bytes()
        assert seed.encode() not in data and base64.b64decode(seed)[1:] not in data


def test_a_bundle_signed_by_another_key_fails(exported):
    bundle, _vkey, _ids = exported
    other = Signer.generate("example.com/audit").vkey
    code, out = run("verify-export", str(bundle), "--key", other)
    assert code == 1 and "checkpoint_refused" in out


def test_an_edited_checkpoint_fails(exported):
    bundle, vkey, _ids = exported
    path = bundle / "checkpoint.txt"
    lines = path.read_text().split("\n")
    lines[1] = str(int(lines[1]) - 1)
    path.write_text("\n".join(lines))
    code, out = run("verify-export", str(bundle), "--key", vkey)
    assert code == 1 and "checkpoint_refused" in out


def test_one_record_changed_with_chain_and_manifest_recomputed_fails_by_its_proof(exported):
    bundle, _vkey, ids = exported
    path = bundle / "records.jsonl"
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    victim = ids[0]
    target = next(d for d in docs if d["session_id"] == victim and d["method"] == "tools/call")
    doc = json.loads(base64.b64decode(target["raw"]))
    doc["params"]["arguments"] = {"timezone": "America/New_York"}
    target["raw"] = base64.b64encode(json.dumps(doc).encode()).decode()
    target["raw_size"] = len(base64.b64decode(target["raw"]))
    # the session's chain recomputed from the change on, as a tamperer who knows the format would
    head = chain.genesis(victim)
    for d in docs:
        if d["session_id"] != victim:
            continue
        if d["kind"] == "session_sealed":
            d["raw"] = base64.b64encode(chain.seal_payload(d["seq"] - 1, head)).decode()
            d["raw_size"] = len(base64.b64decode(d["raw"]))
        record = chain.ChainRecord(
            victim,
            d["seq"],
            d["wall_ns"],
            d["mono_ns"],
            d["kind"],
            d["direction"],
            base64.b64decode(d["raw"]),
            d["raw_size"],
            b"",
        )
        head = chain.link(head, record)
        d["hash"] = head.hex()
    text = "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs)
    path.write_text(text)
    mpath = bundle / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["files"]["records.jsonl"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    manifest["files"]["records.jsonl"]["bytes"] = len(text.encode())
    manifest["sessions"][victim]["head"] = head.hex()
    mpath.write_text(json.dumps(manifest, indent=2))
    code, out = run("verify-export", str(bundle))
    assert code == 1, out
    lines = out.strip().splitlines()
    assert any("not_included" in line and f"session {victim}" in line for line in lines), out
    assert not any("modified" in line for line in lines), out  # the chain alone is fooled


def test_export_refuses_a_log_inconsistent_with_its_last_checkpoint(
    store_url, blackbox_env, tmp_path
):
    from tests.fixtures.storekit import tamper

    store = open_store(store_url)
    sid = record_session(store, time.time_ns())
    store.close()
    run("keys", "init")
    assert run("checkpoint", "--store", store_url)[0] == 0
    # The tree's cache says its first two leaves are each other's records: a reordered log.
    tamper(
        store_url,
        ("UPDATE tree_runs SET first_idx = -1 WHERE first_idx = 0", {}),
        (
            "INSERT INTO tree_runs (first_idx, first_position, leaves) "
            "SELECT 0, first_position + 1, 1 FROM tree_runs WHERE first_idx = -1",
            {},
        ),
        (
            "INSERT INTO tree_runs (first_idx, first_position, leaves) "
            "SELECT 1, first_position, 1 FROM tree_runs WHERE first_idx = -1",
            {},
        ),
        (
            "INSERT INTO tree_runs (first_idx, first_position, leaves) "
            "SELECT 2, first_position + 2, leaves - 2 FROM tree_runs WHERE first_idx = -1",
            {},
        ),
        ("DELETE FROM tree_runs WHERE first_idx = -1", {}),
    )
    out_dir = tmp_path / "x"
    code, out = run("export", "--store", store_url, "--session", sid, "--out", str(out_dir))
    assert code == 2 and "refusing to sign" in out
    assert not out_dir.exists()


def test_retention_archive_proves_its_records_and_earlier_checkpoints_still_verify(
    store_url, blackbox_env, tmp_path
):
    from blackbox.recorder.compliance.bundle_check import verify_export
    from blackbox.recorder.compliance.retention import apply_retention
    from blackbox.recorder.trust import logproof
    from blackbox.recorder.trust.checkpoint import parse_vkey

    store = open_store(store_url)
    now = time.time_ns()
    old = record_session(store, now - 120 * DAY_NS)
    record_session(store, now - DAY_NS)
    vkey = run("keys", "init")[1].strip().splitlines()[-1]
    code, earlier = run("checkpoint", "--store", store_url)
    assert code == 0
    result = apply_retention(store, 90 * DAY_NS, tmp_path / "archive", now_ns=now)
    assert result.removed == [old]
    report = verify_export(tmp_path / "archive", verifier=parse_vkey(vkey)[0])
    assert report.ok, [f.message() for f in report.findings]
    # retention.py passes no manifest_signer: the configured key signs the archive's manifest.
    assert (tmp_path / "archive" / "manifest.sig").is_file() and report.completeness_checked
    checked = logproof.verify_checkpoint(store, earlier, vkey)
    assert checked.findings == [] and checked.retained > 0
    store.close()
