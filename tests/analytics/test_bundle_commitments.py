"""A redacted record stays provable (issue 34, point 5): its leaf commits to every value it shows
with a salt, so a bundle's holder who edits what a redacted record shows, or shows a guess where a
secret was withheld, fails the record's inclusion proof, on both backends. Before commitments the
redacted record's hash was attested and each of these edits passed `verify-export` (the manifest
recomputed, `manifest.sig` removed: the holder has no key to sign again)."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from pathlib import Path

import pytest
from blackbox.recorder.compliance.export import record_row
from blackbox.recorder.log import Direction, Kind, NewEvent, StoredEvent, commitment, new_session_id
from blackbox.recorder.log.chain import ChainRecord
from blackbox.recorder.privacy import Redactor
from blackbox.recorder.store import open_store, tree
from blackbox.recorder.store.synthetic import DAY_NS, record_session
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.bundlekit import manifest_of, read_jsonl, save_manifest, write_jsonl
from tests.fixtures.storekit import tamper

KEY = bytes(range(32))


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.fixture
def bundle(store_url, blackbox_env, tmp_path) -> tuple[Path, str, str]:
    """Two sessions, one with secrets that the export redacts; a key; a JSONL bundle."""
    store = open_store(store_url)
    now = time.time_ns()
    record_session(store, now - DAY_NS, calls=2)
    secret = record_session(store, now, era="2026-07-28", secrets=True)
    store.close()
    code, out = run("keys", "init", "--origin", "example.com/audit")
    vkey = out.strip().splitlines()[-1]
    path = tmp_path / "bundle"
    code, out = run("export", "--store", store_url, "--format", "jsonl", "--out", str(path))
    assert code == 0, out
    return path, vkey, secret


def redacted_rows(path: Path) -> tuple[list[dict], list[int]]:
    rows = read_jsonl(path / "records.jsonl")
    return rows, [i for i, row in enumerate(rows) if row["redacted"]]


def holder_edits(path: Path, rows: list[dict]) -> None:
    """The records written back, the manifest's file hashes recomputed, and the signature the
    holder cannot make again removed, with the manifest's mention of it."""
    write_jsonl(path / "records.jsonl", rows)
    manifest = manifest_of(path)
    manifest["manifest_signature"] = None
    save_manifest(path, manifest)
    (path / "manifest.sig").unlink()


def shown_tokens(row: dict) -> tuple[list[bytes], list[list[str]]]:
    """A redacted row's shown tokens and its disclosures, one for one."""
    raw = base64.b64decode(row["raw"])
    return commitment.tokens(raw).tokens, json.loads(row["commitments"])


def replace_token(row: dict, index: int, token: bytes) -> None:
    """The row's shown raw bytes with token `index` replaced, the rest byte for byte."""
    split = commitment.tokens(base64.b64decode(row["raw"]))
    tokens = list(split.tokens)
    tokens[index] = token
    row["raw"] = base64.b64encode(split.joined(tokens)).decode()


def verify(path: Path) -> tuple[int, list[str]]:
    code, out = run("verify-export", str(path))
    return code, out.strip().splitlines()


def assert_found(path: Path, problem: str, session: str) -> None:
    """`verify-export` fails, naming `problem` for a record of `session`."""
    code, lines = verify(path)
    assert code == 1
    assert any(problem in line and f"session {session}" in line for line in lines), lines


def test_redacted_records_are_proven_leaf_by_leaf(bundle) -> None:
    path, vkey, secret = bundle
    manifest = manifest_of(path)
    assert manifest["tree"]["committed_from"] == 0  # a new store commits from its first leaf
    rows, redacted = redacted_rows(path)
    assert redacted and all(rows[i]["session_id"] == secret for i in redacted)
    for i in redacted:
        raw = base64.b64decode(rows[i]["raw"])
        entries = json.loads(rows[i]["commitments"])
        assert b"[redacted:" in raw and rows[i]["salt"] is None
        assert len(entries) == len(commitment.tokens(raw).tokens)
        assert any(kind == "digest" for kind, _ in entries)
    for i, row in enumerate(rows):
        if i not in redacted:
            assert len(bytes.fromhex(row["salt"])) == 32 and row["commitments"] is None
    code, out = run("verify-export", str(path), "--key", vkey)
    assert code == 0, out
    assert f"{len(redacted)} of them proven from what they show" in out
    code, out = run("verify-export", str(path), "--key", vkey, "--format", "json")
    assert json.loads(out)["records_redacted_proven"] == len(redacted)
    assert manifest["tree"]["records_proven"] == len(rows)


def test_the_holders_moves_alone_pass_without_the_key(bundle) -> None:
    """The control for the attacks below: rows written back unchanged, the manifest rehashed and
    its signature removed pass `verify-export` without the key; each edit below is what fails."""
    path, _vkey, _secret = bundle
    rows, _redacted = redacted_rows(path)
    holder_edits(path, rows)
    code, lines = verify(path)
    assert code == 0, lines


def test_editing_what_a_redacted_record_shows_fails_by_its_proof(bundle) -> None:
    path, _vkey, secret = bundle
    rows, redacted = redacted_rows(path)
    target = rows[redacted[0]]
    tokens, entries = shown_tokens(target)
    shown = next(
        i for i, (kind, _) in enumerate(entries) if kind == "salt" and tokens[i] == b'"2.0"'
    )
    replace_token(target, shown, b'"1.0"')
    holder_edits(path, rows)
    assert_found(path, "not_included", secret)


def test_editing_a_redacted_records_time_fails_by_its_proof(bundle) -> None:
    path, _vkey, secret = bundle
    rows, redacted = redacted_rows(path)
    rows[redacted[0]]["wall_ns"] += 1
    holder_edits(path, rows)
    assert_found(path, "not_included", secret)


def test_a_guess_shown_where_a_secret_was_withheld_fails(bundle) -> None:
    """The holder puts a value where a marker was and claims it shown, with a salt of their own:
    without the token's salt, which stays in the store, its digest cannot come out right."""
    path, _vkey, secret = bundle
    rows, redacted = redacted_rows(path)
    target = rows[redacted[0]]
    _tokens, entries = shown_tokens(target)
    hidden = next(i for i, (kind, _) in enumerate(entries) if kind == "digest")
    replace_token(target, hidden, b'"hunter2"')
    entries[hidden] = ["salt", "00" * 32]
    target["commitments"] = json.dumps(entries)
    holder_edits(path, rows)
    assert_found(path, "not_included", secret)


def test_a_redacted_record_without_its_commitments_fails(bundle) -> None:
    path, _vkey, secret = bundle
    rows, redacted = redacted_rows(path)
    rows[redacted[0]]["commitments"] = None
    holder_edits(path, rows)
    assert_found(path, "commitment_invalid", secret)


def test_a_replaced_commitment_key_fails_verify_against_the_checkpoint(
    store_url, blackbox_env, tmp_path
) -> None:
    """The administrator swaps the store's commitment key (its trigger dropped): the leaves
    recomputed with it are not the ones the checkpoint signed."""
    store = open_store(store_url)
    record_session(store, time.time_ns(), calls=2, secrets=True)
    store.close()
    code, out = run("keys", "init", "--origin", "example.com/audit")
    vkey = out.strip().splitlines()[-1]
    code, note = run("checkpoint", "--store", store_url)
    assert code == 0, note
    outside = tmp_path / "checkpoint.txt"
    outside.write_text(note)
    args = ("verify", "--store", store_url, "--checkpoint", str(outside), "--key", vkey)
    assert run(*args)[0] == 0
    tamper(store_url, ("UPDATE commitment_keys SET key = :k", {"k": bytes(32)}))
    code, out = run(*args)
    assert code == 1, out
    assert "differs from the checkpoint" in out, out


def test_a_withheld_value_is_disclosed_only_when_asked_and_checks_against_its_digest(
    bundle, store_url
) -> None:
    """The salts and originals stay in the store: the bundle holds neither; `blackbox disclose`
    hands one withheld token (or one whole record) to an auditor, who checks it against the
    digest (or the leaf) the bundle already shows."""
    path, _vkey, secret = bundle
    rows, redacted = redacted_rows(path)
    target = rows[redacted[0]]
    entries = json.loads(target["commitments"])
    hidden = [i for i, (kind, _) in enumerate(entries) if kind == "digest"]
    code, out = run(
        "disclose", secret, str(target["seq"]), "--store", store_url, "--token", str(hidden[0])
    )
    assert code == 0, out
    (told,) = json.loads(out)["tokens"]
    token, salt = base64.b64decode(told["token"]), bytes.fromhex(told["salt"])
    assert commitment.token_digest(salt, token).hex() == entries[hidden[0]][1]
    assert (path / "records.jsonl").read_bytes().find(token) == -1  # it was not in the bundle
    assert told["salt"] not in (path / "records.jsonl").read_text()
    # The whole record: its raw bytes and salt give the leaf its inclusion proof names.
    code, out = run("disclose", secret, str(target["seq"]), "--store", store_url)
    whole = json.loads(out)
    fields = ("seq", "wall_ns", "mono_ns", "kind", "direction")
    original = ChainRecord(
        secret,
        *(target[f] for f in fields),
        base64.b64decode(whole["raw"]),
        target["raw_size"],
        b"",
    )
    c = commitment.commit(original, bytes.fromhex(whole["salt"]))
    shown = original._replace(raw=base64.b64decode(target["raw"]))
    assert c == commitment.commitment_of_disclosure(shown, entries)
    code, out = run("disclose", secret, str(target["seq"]), "--store", store_url, "--token", "999")
    assert code == 2 and "not 999" in out and "Traceback" not in out


def exported_row(raw: bytes) -> dict:
    """The bundle row of a frame (session s-1, seq 2) under the built-in rules and KEY."""
    fields = dict.fromkeys(f.name for f in dataclasses.fields(StoredEvent))
    fields.update(
        position=1, session_id="s-1", seq=2, wall_ns=1, mono_ns=1, kind="frame",
        direction="c2s", raw=raw, raw_size=None, hash=bytes(32),
    )  # fmt: skip
    return record_row(StoredEvent(**fields), Redactor.default(key=b"k"), tree.CommitKey(KEY, 0))


def test_a_frame_the_redactor_changes_in_no_token_is_shown_whole() -> None:
    """An empty object under a secret's name holds no token: the redactor's marker for it
    withholds nothing, so the row shows the record whole, with its salt (it was a redacted row
    with no salt, which its verifier refused)."""
    raw = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        b'"params":{"name":"login","arguments":{"password":{},"user":"ada"}}}'
    )
    assert Redactor.default(key=b"k").redact_frame(raw) != raw  # the redactor did change it
    row = exported_row(raw)
    assert row["raw"] == raw and row["redacted"] is False and row["commitments"] is None
    assert row["salt"] == commitment.record_salt(KEY, "s-1", 2).hex()


@pytest.mark.parametrize("depth", [10, 980, 995, 5000])
def test_a_frame_nested_past_what_can_be_walked_is_withheld_whole(depth: int) -> None:
    """However deep a hostile frame nests, the export neither fails nor shows its secret: past
    what the parser or the walk can follow, every token is withheld."""
    raw = b'{"a":' * depth + b'{"password":"hunter2","user":"ada"}' + b"}" * depth
    row = exported_row(raw)
    assert row["redacted"] and b"hunter2" not in row["raw"]
    entries = json.loads(row["commitments"])
    original = ChainRecord("s-1", 2, 1, 1, "frame", "c2s", raw, None, b"")
    shown = original._replace(raw=row["raw"])
    r = commitment.record_salt(KEY, "s-1", 2)
    assert commitment.commitment_of_disclosure(shown, entries) == commitment.commit(original, r)


def test_hostile_frames_are_committed_exported_redacted_and_proven(
    store_url, blackbox_env, tmp_path
) -> None:
    """A NUL, a lone surrogate and 400-digit numbers in a frame, and bytes that are not UTF-8:
    stored, sequenced with their commitments, exported redacted and proven on both databases,
    the secrets in neither; an edit of what the hostile frame shows still fails its proof."""
    big = b"9" * 400
    frames = [
        b'{"jsonrpc":"2.0","id":' + big + b',"method":"tools/call\\u0000x","params":{"name":'
        b'"a\\ud800","arguments":{"password":"hunter2","n":' + big + b"}}}",
        b"not json \xff\xfe sk-proj-Abc123Def456Ghi789Jkl012 \x00 done",
    ]
    sid = new_session_id(time.time_ns())
    store = open_store(store_url)
    store.append(
        [
            NewEvent(sid, seq, seq, seq, Kind.FRAME, Direction.CLIENT_TO_SERVER, raw)
            for seq, raw in enumerate(frames, start=1)
        ]
    )
    store.close()
    vkey = run("keys", "init", "--origin", "example.com/audit")[1].strip().splitlines()[-1]
    path = tmp_path / "bundle"
    code, out = run("export", "--store", store_url, "--format", "jsonl", "--out", str(path))
    assert code == 0, out
    text = (path / "records.jsonl").read_bytes()
    rows, redacted = redacted_rows(path)
    assert len(redacted) == 2
    for secret in (b"hunter2", b"sk-proj-Abc123Def456Ghi789Jkl012"):
        assert secret not in text and all(secret not in base64.b64decode(r["raw"]) for r in rows)
    code, out = run("verify-export", str(path), "--key", vkey, "--format", "json")
    assert code == 0, out
    assert json.loads(out)["records_redacted_proven"] == 2
    tokens, entries = shown_tokens(rows[redacted[0]])
    shown = next(i for i, (kind, _) in enumerate(entries) if kind == "salt" and tokens[i] == big)
    replace_token(rows[redacted[0]], shown, b"8" + big[1:])
    holder_edits(path, rows)
    assert_found(path, "not_included", sid)
