"""Completeness under signature: a bundle exported with the log's key carries `manifest.sig`, a
signed note over the manifest's sha256, and the manifest lists every session with its leaves in
the log's tree. `verify-export --key` then fails a bundle from which a whole session, one record
or a file was dropped, even with every hash, count and proof in it recomputed.

Each attack test is the attacker's move on a JSONL bundle `blackbox export` wrote with a key
configured, on SQLite and PostgreSQL; each passed `verify-export --key` before manifests were
signed.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from blackbox.recorder.compliance.bundle_check import verify_export
from blackbox.recorder.compliance.export import ExportError, export_bundle
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import DAY_NS, record_session
from blackbox.recorder.trust.checkpoint import Signer, parse_vkey, sign_note
from blackbox.recorder.trust.signing import note_for_export
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures import bundlekit

ORIGIN = "example.com/audit"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@dataclass
class Bundle:
    path: Path
    vkey: str
    ids: list[str]
    store_url: str


def _export(store_url: str, out: Path) -> None:
    code, out_text = run("export", "--store", store_url, "--format", "jsonl", "--out", str(out))
    assert code == 0, out_text


@pytest.fixture
def signed(store_url: str, blackbox_env: dict[str, str], tmp_path: Path) -> Bundle:
    """Three sessions (one with secrets, redacted on export; one still open), a key, a bundle."""
    store = open_store(store_url)
    now = time.time_ns()
    ids = [
        record_session(store, now - 2 * DAY_NS, calls=2),
        record_session(store, now - DAY_NS, era="2026-07-28", secrets=True),
        record_session(store, now, calls=1, ended=False, name="git"),
    ]
    store.close()
    code, out = run("keys", "init", "--origin", ORIGIN)
    assert code == 0, out
    bundle = tmp_path / "bundle"
    _export(store_url, bundle)
    return Bundle(bundle, out.strip().splitlines()[-1], ids, store_url)


def drop_seal(bundle: Path, sid: str, rehash: bool = True) -> None:
    """The last record of a sealed session (its seal) removed from the records and proofs; with
    `rehash`, the session made to look never sealed and the manifest recomputed to match."""
    records = bundlekit.read_jsonl(bundle / "records.jsonl")
    seal = next(r for r in records if r["session_id"] == sid and r["kind"] == "session_sealed")
    before = next(r for r in records if r["session_id"] == sid and r["seq"] == seal["seq"] - 1)
    records.remove(seal)
    bundlekit.write_jsonl(bundle / "records.jsonl", records)
    gone = (sid, seal["seq"])
    proofs = [
        p
        for p in bundlekit.read_jsonl(bundle / "proofs.jsonl")
        if (p["session_id"], p["seq"]) != gone
    ]
    bundlekit.write_jsonl(bundle / "proofs.jsonl", proofs)
    if not rehash:
        return
    sessions = bundlekit.read_jsonl(bundle / "sessions.jsonl")
    for row in sessions:
        if row["session_id"] == sid:
            row.update(
                records=row["records"] - 1,
                last_seq=before["seq"],
                sealed=False,
                sealed_count=None,
                head=before["hash"],
            )
    bundlekit.write_jsonl(bundle / "sessions.jsonl", sessions)
    manifest = bundlekit.manifest_of(bundle)
    entry = manifest["sessions"][sid]
    entry.update(
        records=entry["records"] - 1, last_seq=before["seq"], head=before["hash"], sealed_count=None
    )
    manifest["counts"]["records"] -= 1
    manifest["chain_coverage"]["records_rehashed"] -= 1
    manifest["tree"]["records_proven"] -= 1
    bundlekit.relist_leaves(manifest, proofs)
    bundlekit.save_manifest(bundle, manifest)


def sign_as(bundle: Path, signer: Signer) -> None:
    """manifest.sig made afresh, as docs/trust.md specifies it, with the attacker's own key."""
    digest = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    text = f"mcp-blackbox bundle manifest v1\n{signer.name}\nmanifest {digest}\n"
    (bundle / "manifest.sig").write_text(sign_note(text, signer))


def problems(bundle: Path, *key: str) -> tuple[int, list[str]]:
    code, out = run("verify-export", str(bundle), *key)
    return code, out.strip().splitlines()


# -- a good bundle -------------------------------------------------------------------------------


def test_a_signed_bundle_lists_its_leaves_and_verifies_complete(signed: Bundle) -> None:
    manifest = bundlekit.manifest_of(signed.path)
    note = (signed.path / "manifest.sig").read_text()
    digest = hashlib.sha256((signed.path / "manifest.json").read_bytes()).hexdigest()
    text, _, signature = note.partition("\n\n")
    assert text.split("\n") == ["mcp-blackbox bundle manifest v1", ORIGIN, f"manifest {digest}"]
    assert signature.startswith(f"\u2014 {ORIGIN} ")
    assert manifest["manifest_signature"]["file"] == "manifest.sig"
    proofs = bundlekit.read_jsonl(signed.path / "proofs.jsonl")
    for sid in signed.ids:
        leaves = manifest["sessions"][sid]["leaves"]
        assert leaves["covered"] + leaves["not_covered"] == manifest["sessions"][sid]["records"]
        listed = {i for a, b in leaves["ranges"] for i in range(a, b + 1)}
        assert listed == {p["leaf_index"] for p in proofs if p["session_id"] == sid}
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 0, lines
    complete = f"complete: the manifest signed by {ORIGIN} lists"
    assert any(line.startswith(complete) for line in lines), lines
    code, lines = problems(signed.path)
    assert code == 0, lines
    assert any("completeness was not checked against a signature" in line for line in lines)
    report = verify_export(signed.path, verifier=parse_vkey(signed.vkey)[0])
    assert report.ok and report.completeness_checked
    assert report.as_dict()["completeness_checked"] is True


# -- the attacks ---------------------------------------------------------------------------------


def test_a_whole_session_dropped_with_every_hash_recomputed_fails(signed: Bundle) -> None:
    bundlekit.drop_session(signed.path, signed.ids[1])
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 1, lines
    assert any("manifest_signature_invalid" in line for line in lines), lines
    assert all("manifest.sig" in line for line in lines), lines
    # Without the key, the signature left in place still names another manifest ...
    code, lines = problems(signed.path)
    assert code == 1 and any("manifest_signature_invalid" in line for line in lines), lines
    # ... and with it gone too the bundle is consistent with itself, which is all it proves then.
    (signed.path / "manifest.sig").unlink()
    manifest = bundlekit.manifest_of(signed.path)
    manifest["manifest_signature"] = None
    bundlekit.save_manifest(signed.path, manifest)
    code, lines = problems(signed.path)
    assert code == 0 and any("completeness was not checked" in line for line in lines), lines


def test_a_session_dropped_under_the_signed_manifest_is_named(signed: Bundle) -> None:
    """The records, sessions row, decisions and proofs of one session gone; only the file hashes
    recomputed, so the manifest (still listing the session) no longer matches its signature."""
    victim = signed.ids[0]
    for stem in ("records", "sessions", "decisions", "proofs"):
        path = signed.path / f"{stem}.jsonl"
        bundlekit.write_jsonl(
            path, [r for r in bundlekit.read_jsonl(path) if r["session_id"] != victim]
        )
    bundlekit.save_manifest(signed.path, bundlekit.manifest_of(signed.path))
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 1
    assert any("manifest_signature_invalid" in line for line in lines), lines
    assert any("session_missing" in line and victim in line for line in lines), lines


def test_one_record_dropped_with_the_manifest_recomputed_fails(signed: Bundle) -> None:
    drop_seal(signed.path, signed.ids[0])
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 1
    assert any("manifest_signature_invalid" in line for line in lines), lines


def test_one_record_dropped_under_the_signed_manifest_is_named(signed: Bundle) -> None:
    victim = signed.ids[0]
    drop_seal(signed.path, victim, rehash=False)
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 1
    assert any("record_missing" in line and victim in line for line in lines), lines
    assert any("leaves_mismatch" in line and victim in line for line in lines), lines


def test_the_signature_dropped_fails_with_the_key(signed: Bundle) -> None:
    bundlekit.drop_session(signed.path, signed.ids[1])
    (signed.path / "manifest.sig").unlink(missing_ok=True)
    manifest = bundlekit.manifest_of(signed.path)
    manifest["manifest_signature"] = None  # and the manifest made to look unsigned
    bundlekit.save_manifest(signed.path, manifest)
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 1
    assert len(lines) == 1 and "manifest_unsigned" in lines[0], lines


def test_a_manifest_re_signed_with_another_key_of_the_same_name_fails(signed: Bundle) -> None:
    bundlekit.drop_session(signed.path, signed.ids[1])
    sign_as(signed.path, Signer.generate(ORIGIN))
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 1
    assert len(lines) == 1 and "manifest_signature_invalid" in lines[0], lines
    code, lines = problems(signed.path)  # its text is consistent: only the key tells
    assert code == 0, lines


def test_edited_manifest_counts_fail(signed: Bundle) -> None:
    manifest = bundlekit.manifest_of(signed.path)
    manifest["counts"]["records"] += 5
    manifest["tree"]["records_proven"] += 5
    bundlekit.save_manifest(signed.path, manifest, rehash=False)
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 1
    assert any("manifest_signature_invalid" in line for line in lines), lines
    assert any("counts_mismatch" in line and "counts.records" in line for line in lines), lines
    code, lines = problems(signed.path)  # without the key: manifest.sig names another manifest
    assert code == 1 and lines == [next(x for x in lines if "manifest_signature_invalid" in x)]


def test_the_manifest_s_tree_made_larger_than_the_checkpoint_fails(signed: Bundle) -> None:
    manifest = bundlekit.manifest_of(signed.path)
    manifest["tree"]["tree_size"] += 1
    bundlekit.save_manifest(signed.path, manifest, rehash=False)
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 1
    assert any("manifest_signature_invalid" in line for line in lines), lines
    assert any("checkpoint_mismatch" in line for line in lines), lines


def test_listed_leaves_moved_fail(signed: Bundle) -> None:
    manifest = bundlekit.manifest_of(signed.path)
    victim = signed.ids[2]
    leaves = manifest["sessions"][victim]["leaves"]
    leaves["ranges"] = [[a + 1, b + 1] for a, b in leaves["ranges"]]
    bundlekit.save_manifest(signed.path, manifest, rehash=False)
    code, lines = problems(signed.path, "--key", signed.vkey)
    assert code == 1
    assert any("manifest_signature_invalid" in line for line in lines), lines
    assert any("leaves_mismatch" in line and victim in line for line in lines), lines


# -- a bundle exported with no key configured ------------------------------------------------


def test_a_bundle_exported_without_a_key_says_so_in_one_line(
    store_url: str, blackbox_env: dict[str, str], tmp_path: Path
) -> None:
    store = open_store(store_url)
    record_session(store, time.time_ns())
    store.close()
    vkey = run("keys", "init", "--origin", ORIGIN)[1].strip().splitlines()[-1]
    assert run("checkpoint", "--store", store_url)[0] == 0
    key = next((Path(blackbox_env["BLACKBOX_HOME"]) / "keys").glob("checkpoint.key"))
    key.rename(tmp_path / "elsewhere.key")  # no key configured: the stored checkpoint is used
    _export(store_url, tmp_path / "b")
    assert not (tmp_path / "b" / "manifest.sig").exists()
    assert bundlekit.manifest_of(tmp_path / "b")["manifest_signature"] is None
    code, lines = problems(tmp_path / "b", "--key", vkey)
    assert code == 1
    assert len(lines) == 1 and "manifest_unsigned" in lines[0] and "keys init" in lines[0], lines
    code, lines = problems(tmp_path / "b", "--key", vkey, "--allow-unsigned-manifest")
    assert code == 0, lines
    assert any("completeness was not checked against a signature" in line for line in lines)


def test_an_explicit_signer_must_be_the_checkpoint_s(
    store_url: str, blackbox_env: dict[str, str], tmp_path: Path
) -> None:
    store = open_store(store_url)
    record_session(store, time.time_ns())
    assert run("keys", "init", "--origin", ORIGIN)[0] == 0
    note = note_for_export(store)
    with pytest.raises(ExportError, match="did not sign the checkpoint"):
        export_bundle(
            store, tmp_path / "x", checkpoint_note=note, manifest_signer=Signer.generate(ORIGIN)
        )
    assert not (tmp_path / "x").exists()
    result = export_bundle(store, tmp_path / "y", checkpoint_note=note, manifest_signer=None)
    assert result.manifest["manifest_signature"] is None
    assert not (tmp_path / "y" / "manifest.sig").exists()
    store.close()
