"""Signed checkpoints against an attacker who can write the database, on SQLite and PostgreSQL,
through the CLI a user runs: keys, checkpoint, verify --checkpoint, prove. Each attack is made as
its author would make it — triggers dropped, hashes, seals, heads and the store's own tree
recomputed — and `verify --checkpoint` with nothing but the public key must say what happened."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from blackbox.recorder.capture.journal import Journal
from blackbox.recorder.capture.shipper import Shipper
from blackbox.recorder.log import chain, merkle
from blackbox.recorder.log.model import Kind
from blackbox.recorder.store import open_store, tree
from blackbox.recorder.trust import keys
from blackbox.recorder.trust.checkpoint import Signer, open_checkpoint, parse_vkey
from blackbox.recorder.trust.signing import split_notes
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from blackbox.cli.main import main
from tests.fixtures.storekit import (
    OF_S,
    T0,
    SignedLog,
    authorise,
    checkpoints_file,
    rebuild_tree,
    session_events,
    signed_log,
    signed_log_template,
    tamper,
)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def sqlite_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SignedLog]:
    return signed_log_template(tmp_path_factory, "example.com/audit")


@pytest.fixture
def signed(store_url, blackbox_env, request):
    """Three sessions recorded, a key made, a checkpoint signed and kept in a file elsewhere."""
    home = Path(blackbox_env["BLACKBOX_HOME"])
    template = lambda: request.getfixturevalue("sqlite_signed")  # noqa: E731
    (vkey, _note, sids), outside = signed_log(store_url, home, "example.com/audit", template)
    store = open_store(store_url)
    yield store, store_url, vkey, outside, sids
    store.close()


def verify_against(store_url: str, vkey: str, checkpoint: Path) -> tuple[int, str]:
    return run("verify", "--store", store_url, "--checkpoint", str(checkpoint), "--key", vkey)


def test_keys_init_is_0600_refuses_overwrite_and_ends_with_the_vkey(blackbox_env):
    code, out = run("keys", "init", "--origin", "example.com/audit")
    assert code == 0, out
    vkey = out.strip().splitlines()[-1]
    verifier, problem = parse_vkey(vkey)
    assert problem is None and verifier.name == "example.com/audit"
    path = Path(blackbox_env["BLACKBOX_HOME"]) / "keys" / "checkpoint.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_bytes()
    code, out = run("keys", "init")
    assert code == 2 and "never overwritten" in out
    assert path.read_bytes() == before
    assert run("keys", "show") == (0, vkey + "\n")
    os.chmod(path, 0o644)
    code, out = run("keys", "show")
    assert code == 2 and "chmod 600" in out


def test_key_file_flag_and_environment_variable(tmp_path, blackbox_env, monkeypatch):
    elsewhere = tmp_path / "vault" / "log.key"
    code, out = run("keys", "init", "--key-file", str(elsewhere))
    assert code == 0 and elsewhere.exists()
    monkeypatch.setenv("BLACKBOX_KEY_FILE", str(elsewhere))
    assert run("keys", "show") == (0, out.strip().splitlines()[-1] + "\n")


def test_checkpoint_is_signed_stored_filed_and_never_holds_the_private_key(signed, blackbox_env):
    store, store_url, vkey, outside, _ = signed
    note = outside.read_text()
    verifier, _ = parse_vkey(vkey)
    checkpoint, problem = open_checkpoint(note, [verifier])
    assert problem is None
    assert checkpoint.origin == "example.com/audit"
    assert checkpoint.size == sum(1 for _ in store.read_log())
    home = Path(blackbox_env["BLACKBOX_HOME"])
    assert split_notes(checkpoints_file(home, store.url).read_text()) == [note]
    secret = (home / "keys" / "checkpoint.key").read_text().strip()
    with store.transaction() as conn:
        kept = tree.stored_checkpoints(conn)
    assert [k.note for k in kept] == [note]
    seed = secret.split("+", 4)[4]
    for k in kept:
        assert seed not in k.note and "PRIVATE" not in k.note
    if store_url.startswith("sqlite"):
        db = Path(store_url.removeprefix("sqlite:///")).read_bytes()
        assert seed.encode() not in db and base64.b64decode(seed)[1:] not in db
    # a second checkpoint over an unchanged log is the same one; over a grown log, a new one
    assert run("checkpoint", "--store", store_url) == (0, note)
    store.append(session_events(calls=1, start_ns=T0 + 9 * 10**9))
    code, later = run("checkpoint", "--store", store_url)
    assert code == 0 and later != note
    assert verify_against(store_url, vkey, outside)[0] == 0


def test_intact_log_verifies_against_the_checkpoint(signed):
    _store, store_url, vkey, outside, _ = signed
    code, out = verify_against(store_url, vkey, outside)
    assert code == 0, out
    assert "consistent with the checkpoint" in out
    code, out = run("verify", "--store", store_url, "--checkpoint", str(outside))
    assert code == 2 and "--key" in out
    code, out = run("verify", "--store", store_url, "--format", "json", "--key", vkey)
    doc = json.loads(out)
    assert code == 0 and doc["intact"] and doc["checkpoints"]["signed_by_key"]


def test_rewrite_with_recomputed_hashes_is_caught(signed):
    store, store_url, vkey, outside, sids = signed
    victim = sids[1]
    records = list(store.read_session(victim))
    head = chain.genesis(victim)
    statements = []
    for r in records:
        raw = r.raw
        if r.kind == Kind.FRAME and b'"isError":true' in raw:
            raw = raw.replace(b'"isError":true', b'"isError":false')
        if r.kind == Kind.SESSION_SEALED:
            raw = chain.seal_payload(r.seq - 1, head)
        new = chain.ChainRecord(
            r.session_id, r.seq, r.wall_ns, r.mono_ns, r.kind, r.direction, raw, r.raw_size, b""
        )
        head = chain.link(head, new)
        statements.append(
            (
                "UPDATE events SET raw = :raw, hash = :hash, is_error = :err WHERE position = :p",
                {"raw": raw, "hash": head, "p": r.position, "err": r.is_error and raw == r.raw},
            )
        )
    statements.append(
        ("UPDATE sessions SET head_hash = :h WHERE session_id = :s", {"h": head, "s": victim})
    )
    tamper(store_url, *statements)
    rebuild_tree(store_url)
    assert store.verify() == []  # the chains alone cannot tell
    code, out = verify_against(store_url, vkey, outside)
    assert code == 1
    assert "root of the first" in out and "rewritten" in out


def test_whole_session_delete_is_caught(signed):
    _store, store_url, vkey, outside, sids = signed
    victim = sids[0]
    tamper(
        store_url,
        (f"DELETE FROM events WHERE {OF_S}", {"s": victim}),
        ("DELETE FROM sessions WHERE session_id = :s", {"s": victim}),
    )
    code, out = verify_against(store_url, vkey, outside)
    assert code == 1
    assert "gone from the log" in out
    rebuild_tree(store_url)  # and with the tree recomputed without them
    code, out = verify_against(store_url, vkey, outside)
    assert code == 1
    assert "fewer than the" in out or "root of the first" in out


def test_truncation_below_the_checkpoint_is_caught(signed):
    _store, store_url, vkey, outside, sids = signed
    last = sids[-1]
    tamper(
        store_url,
        (f"DELETE FROM events WHERE {OF_S}", {"s": last}),
        ("DELETE FROM sessions WHERE session_id = :s", {"s": last}),
    )
    rebuild_tree(store_url)
    code, out = verify_against(store_url, vkey, outside)
    assert code == 1
    assert "fewer than the" in out and "removed or the database was rolled back" in out
    # and the writer's side refuses to sign over the cut log
    code, out = run("checkpoint", "--store", store_url)
    assert code == 2 and "refusing to sign" in out


def test_a_forged_root_is_refused(signed):
    _store, store_url, vkey, outside, _ = signed
    lines = outside.read_text().split("\n")
    lines[2] = base64.b64encode(bytes(32)).decode()
    outside.write_text("\n".join(lines))
    code, out = verify_against(store_url, vkey, outside)
    assert code == 1
    assert "refused" in out and "does not verify" in out


def test_another_key_is_refused(signed):
    _store, store_url, _vkey, outside, _ = signed
    other = Signer.generate("example.com/audit").vkey
    code, out = verify_against(store_url, other, outside)
    assert code == 1 and "refused" in out


def test_retention_then_an_earlier_checkpoint_still_verifies(signed):
    store, store_url, vkey, outside, sids = signed
    store.remove_sessions([sids[0]], authorise=authorise(keys.configured_signer()))
    code, out = verify_against(store_url, vkey, outside)
    assert code == 0, out
    code, _later = run("checkpoint", "--store", store_url)
    assert code == 0
    code, out = run("verify", "--store", store_url)
    assert code == 0, out
    assert "only as trustworthy as the database" in out


def test_prove_gives_inclusion_and_consistency_proofs(signed):
    store, store_url, vkey, outside, sids = signed
    store.append(session_events(calls=1, start_ns=T0 + 9 * 10**9))
    assert run("checkpoint", "--store", store_url)[0] == 0
    code, out = run("prove", sids[1], "--store", store_url, "--checkpoint", str(outside))
    assert code == 0, out
    doc = json.loads(out)
    checkpoint, _ = open_checkpoint(outside.read_text(), [parse_vkey(vkey)[0]])
    assert doc["tree_size"] == checkpoint.size
    root = base64.b64decode(doc["root_hash"])
    assert root == checkpoint.root_hash
    records = {r.seq: r for r in store.read_session(sids[1])}
    assert [p["seq"] for p in doc["inclusion"]] == sorted(records)
    for p in doc["inclusion"]:
        # The leaf input: the record's chain hash, then its commitment (a new store commits
        # from its first leaf).
        assert p["commitment"] is not None
        leaf = merkle.leaf_hash(records[p["seq"]].hash + bytes.fromhex(p["commitment"]))
        proof = [base64.b64decode(h) for h in p["proof"]]
        assert merkle.verify_inclusion(leaf, p["leaf_index"], checkpoint.size, proof, root)
    code, out = run("prove", sids[1], "--store", store_url, "--consistency-from", "5")
    doc = json.loads(out)
    c = doc["consistency"]
    assert merkle.verify_consistency(
        5,
        doc["tree_size"],
        base64.b64decode(c["old_root_hash"]),
        base64.b64decode(doc["root_hash"]),
        [base64.b64decode(h) for h in c["proof"]],
    )


def test_stored_checkpoint_edited_is_found_by_plain_verify(signed):
    _store, store_url, _vkey, _outside, _ = signed
    engine = create_engine(store_url.replace("postgresql:", "postgresql+psycopg:", 1))
    with engine.begin() as conn:
        note = conn.execute(text("SELECT note FROM checkpoints")).scalar_one()
    engine.dispose()
    origin, size, rest = note.split("\n", 2)
    forged = f"{origin}\n{int(size) + 1000}\n{rest}"
    # The checkpoints table refuses edits: the attacker drops its trigger first.
    tamper(store_url, ("UPDATE checkpoints SET note = :n", {"n": forged}))
    code, out = run("verify", "--store", store_url)
    assert code == 1
    assert "fewer than the" in out


def ship_one_session(store_url: str, directory: Path) -> None:
    journal = Journal.create(directory, segment_bytes=4000)
    shipper = Shipper(journal, lambda: open_store(store_url), lambda _n: None, batch_records=5)
    shipper.start()
    journal.append("s1", "session_started", "-", b'{"name":"t","transport":"stdio"}')
    for i in range(20):
        journal.append("s1", "frame", "c2s", json.dumps({"jsonrpc": "2.0", "id": i}).encode())
    journal.append("s1", "session_ended", "-", b'{"reason":"client_closed","outcome":"ok"}')
    journal.close()
    assert shipper.stop(30)


@pytest.mark.parametrize("switch", ["on", "off"])
def test_the_shipper_checkpoints_on_seal_when_a_key_is_configured(
    store_url, blackbox_env, tmp_path, monkeypatch, switch
):
    monkeypatch.setenv("BLACKBOX_CHECKPOINT_EVERY", "3600")  # only the seal triggers one
    if switch == "off":
        monkeypatch.setenv("BLACKBOX_CHECKPOINTS", "off")
    _code, out = run("keys", "init", "--origin", "example.com/audit")
    vkey = out.strip().splitlines()[-1]
    ship_one_session(store_url, tmp_path / "j")
    filed = checkpoints_file(Path(blackbox_env["BLACKBOX_HOME"]), store_url)
    if switch == "off":
        assert not filed.exists()
        return
    notes = split_notes(filed.read_text())
    assert len(notes) == 1  # the seal, not every batch
    checkpoint, problem = open_checkpoint(notes[0], [parse_vkey(vkey)[0]])
    assert problem is None
    store = open_store(store_url)
    assert checkpoint.size == sum(1 for _ in store.read_log()) == 23
    store.close()
    assert verify_against(store_url, vkey, filed)[0] == 0


def test_publish_to_a_directory_and_to_a_command(signed, tmp_path):
    store, store_url, _vkey, _outside, _ = signed
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    store.append(session_events(calls=1, start_ns=T0 + 9 * 10**9))
    code, note = run("checkpoint", "--store", store_url, "--publish", str(shelf))
    assert code == 0
    size = note.split("\n")[1]
    assert (shelf / "checkpoint.txt").read_text() == note
    assert (shelf / f"checkpoint-{int(size):012d}.txt").read_text() == note
    store.append(session_events(calls=1, start_ns=T0 + 10 * 10**9))
    copied = tmp_path / "uploaded.txt"
    command = f"sh -c 'cat > {copied}'"
    code, note = run("checkpoint", "--store", store_url, "--publish", command)
    assert code == 0 and copied.read_text() == note
    store.append(session_events(calls=1, start_ns=T0 + 11 * 10**9))
    code, out = run("checkpoint", "--store", store_url, "--publish", "false")
    assert code == 1 and "publishing the checkpoint with false failed" in out
    assert "signed and kept, but not published" in out


def test_publish_hands_on_the_latest_when_nothing_new_was_signed(signed, tmp_path):
    """`checkpoint --publish DIR` exited 0 and wrote nothing when the log had not grown since
    the last checkpoint; a DIR that does not exist was run as a command."""
    _store, store_url, _vkey, _outside, _ = signed
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    code, note = run("checkpoint", "--store", store_url, "--publish", str(shelf))
    assert code == 0, note
    assert (shelf / "checkpoint.txt").read_text() == note
    missing = tmp_path / "no" / "such" / "dir"
    for target in (str(missing), f"{missing}/"):
        code, out = run("checkpoint", "--store", store_url, "--publish", target)
        assert code == 1, out
        assert "no such directory" in out and not missing.exists()
