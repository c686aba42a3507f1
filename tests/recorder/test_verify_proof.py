"""`blackbox verify-proof`: a proof file written by `prove`, checked with nothing but a signed
checkpoint and the verifier key, on SQLite and PostgreSQL stores. Each attack is a move someone
holding the proof file, the checkpoint file or the database would make, and must be refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.storekit import OF_S, T0, rebuild_tree, session_events, tamper


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.fixture
def proven(store_url, blackbox_env, tmp_path):
    """Two sessions and a checkpoint, a third session and a second checkpoint (both notes in one
    file, kept elsewhere), and a proof of the second session with a consistency proof from the
    first checkpoint's size."""
    store = open_store(store_url)
    sessions = [session_events(calls=3, start_ns=T0 + i * 10**9) for i in range(3)]
    for events in sessions[:2]:
        store.append(events)
    code, out = run("keys", "init", "--origin", "example.com/audit")
    assert code == 0, out
    vkey = out.strip().splitlines()[-1]
    code, first = run("checkpoint", "--store", store_url)
    assert code == 0, first
    store.append(sessions[2])
    code, second = run("checkpoint", "--store", store_url)
    assert code == 0, second
    notes = tmp_path / "checkpoints.txt"
    notes.write_text(first + "\n" + second)
    latest = tmp_path / "latest.txt"
    latest.write_text(second)
    old_size = int(first.splitlines()[1])
    sid = sessions[1][0].session_id
    code, out = run(
        "prove", sid, "--store", store_url, "--checkpoint", str(latest),
        "--consistency-from", str(old_size),
    )  # fmt: skip
    assert code == 0, out
    proof = tmp_path / "proof.json"
    proof.write_text(out)
    yield store_url, vkey, notes, latest, proof, sid
    store.close()


def check(proof: Path, checkpoint: Path, vkey: str) -> tuple[int, str]:
    return run("verify-proof", str(proof), "--checkpoint", str(checkpoint), "--key", vkey)


def edit(proof: Path, change) -> Path:
    doc = json.loads(proof.read_text())
    change(doc)
    proof.write_text(json.dumps(doc))
    return proof


def flip(b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[0] ^= 1
    return base64.b64encode(bytes(raw)).decode()


def test_a_proof_checks_against_its_checkpoint_alone(proven) -> None:
    _url, vkey, notes, latest, proof, _sid = proven
    code, out = check(proof, notes, vkey)
    assert code == 0, out
    doc = json.loads(proof.read_text())
    assert f"valid: {len(doc['inclusion'])} inclusion proof(s) and the consistency proof" in out
    # the latest note alone: the consistency proof's old root is then taken on the proof's word
    code, out = check(proof, latest, vkey)
    assert code == 0, out
    code, out = run(
        "verify-proof", str(proof), "--checkpoint", str(notes), "--key", vkey, "--format", "json"
    )
    verdict = json.loads(out)
    assert code == 0 and verdict["valid"] and verdict["consistency"] and verdict["findings"] == []


def test_an_edited_inclusion_proof_is_refused(proven) -> None:
    _url, vkey, notes, _latest, proof, _sid = proven
    edit(
        proof,
        lambda d: d["inclusion"][1]["proof"].__setitem__(0, flip(d["inclusion"][1]["proof"][0])),
    )
    code, out = check(proof, notes, vkey)
    assert code == 1 and "does not lead to the signed root" in out


def test_a_proof_claiming_another_record_is_refused(proven) -> None:
    _url, vkey, notes, _latest, proof, _sid = proven

    def claim(doc: dict) -> None:
        doc["inclusion"][0]["chain_hash"] = "00" * 32

    code, out = check(edit(proof, claim), notes, vkey)
    assert code == 1 and "seq 1: the inclusion proof does not lead" in out


def test_a_proof_with_its_own_root_is_refused(proven) -> None:
    """An attacker who rewrote the log makes proofs that hold against the rewritten tree: the
    root they lead to is not the one the key signed."""
    _url, vkey, notes, _latest, proof, _sid = proven
    code, out = check(edit(proof, lambda d: d.update(root_hash=flip(d["root_hash"]))), notes, vkey)
    assert code == 1 and "not the one the checkpoint signs" in out


def test_a_proof_made_after_the_database_was_rewritten_is_refused(proven, tmp_path) -> None:
    store_url, vkey, notes, latest, _proof, sid = proven
    # A record of the proven session given another hash, the store's tree recomputed over it.
    tamper(
        store_url,
        (
            f"UPDATE events SET hash = :h WHERE {OF_S} AND seq = 2",
            {"s": sid, "h": b"x" * 32},
        ),
    )
    rebuild_tree(store_url)
    code, out = run("prove", sid, "--store", store_url, "--checkpoint", str(latest))
    assert code == 0, out
    forged = tmp_path / "forged.json"
    forged.write_text(out)
    code, out = check(forged, notes, vkey)
    assert code == 1, out


def test_an_edited_consistency_proof_is_refused(proven) -> None:
    _url, vkey, notes, _latest, proof, _sid = proven

    def rewrite(doc: dict) -> None:
        doc["consistency"]["old_root_hash"] = flip(doc["consistency"]["old_root_hash"])

    edit(proof, rewrite)
    code, out = check(proof, notes, vkey)
    assert code == 1 and "is not a prefix of the signed one" in out


def test_a_checkpoint_of_another_key_or_edited_is_refused(proven, blackbox_env, tmp_path) -> None:
    _url, vkey, _notes, latest, proof, _sid = proven
    other = tmp_path / "other.key"
    code, out = run("keys", "init", "--origin", "example.com/audit", "--key-file", str(other))
    assert code == 0, out
    code, out = check(proof, latest, out.strip().splitlines()[-1])
    assert code == 1 and "the checkpoint is refused" in out
    lines = latest.read_text().splitlines(keepends=True)
    lines[1] = f"{int(lines[1]) + 1}\n"  # the signed size changed
    forged = tmp_path / "forged.txt"
    forged.write_text("".join(lines))
    code, out = check(proof, forged, vkey)
    assert code == 1 and "the checkpoint is refused" in out


def test_a_proof_for_a_size_the_checkpoint_does_not_sign_is_refused(proven, tmp_path) -> None:
    store_url, vkey, notes, _latest, _proof, sid = proven
    code, out = run("prove", sid, "--store", store_url)  # the tree as it stands, unsigned
    assert code == 0
    doc = json.loads(out)
    doc["tree_size"] += 1
    other = tmp_path / "unsigned.json"
    other.write_text(json.dumps(doc))
    code, out = check(other, notes, vkey)
    assert code == 1 and "the checkpoint signs" in out


def test_empty_consistency_proofs_are_valid(proven, tmp_path) -> None:
    store_url, vkey, notes, latest, _proof, sid = proven
    size = int(latest.read_text().splitlines()[1])
    for old in (0, size):
        code, out = run(
            "prove", sid, "--store", store_url, "--checkpoint", str(latest),
            "--consistency-from", str(old),
        )  # fmt: skip
        assert code == 0, out
        assert json.loads(out)["consistency"]["proof"] == []
        path = tmp_path / f"from-{old}.json"
        path.write_text(out)
        code, out = check(path, notes, vkey)
        assert code == 0, out


def test_usage_errors_exit_2(proven, tmp_path) -> None:
    _url, vkey, notes, _latest, proof, _sid = proven
    code, out = check(proof, notes, "not-a-key")
    assert code == 2 and "--key is not a verifier key" in out
    code, out = check(tmp_path / "missing.json", notes, vkey)
    assert code == 2 and "cannot read" in out
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    code, out = check(garbage, notes, vkey)
    assert code == 1 and "not JSON" in out
