"""Signed notes and checkpoints: the published vectors of the formats, a round trip, and the
attacker's moves (an edited size or root, another key under our name, a forged key id, a moved
signature line, trailing garbage, bytes that are not UTF-8), each refused."""

from __future__ import annotations

import base64
import hashlib

import pytest
from blackbox.recorder.errors import BlackboxError
from blackbox.recorder.log.merkle import EMPTY_ROOT, leaf_hash, root
from blackbox.recorder.trust.checkpoint import (
    EM_DASH,
    Checkpoint,
    CheckpointError,
    Signer,
    Verifier,
    key_id,
    open_checkpoint,
    open_note,
    parse_checkpoint,
    parse_private_key,
    parse_vkey,
    sign_checkpoint,
    sign_note,
)

# --- published vectors ---

# The example of the signed-note specification, github.com/C2SP/C2SP, signed-note.md.
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n"
    "\n"
    "— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mF"
    "XmRKuwHjG1Yu72IneyaQM=\n"
)

# Go's note package tests, github.com/golang/mod, sumdb/note/note_test.go (TestSign, TestOpen).
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngot"
    "pRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLo"
    "x33WWd1RvMc+QQ=\n"
)

# A checkpoint of Go's checksum database as served at sum.golang.org/latest on 2024-09-23, and
# that database's verifier key as published in github.com/golang/go,
# src/cmd/go/internal/modfetch/key.go.
SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_CHECKPOINT = (
    "go.sum database tree\n"
    "30055305\n"
    "mXfgRcJ0bG0j3CPdKwgGWtUzBUbX67saZGRmFuJGGsM=\n"
    "\n"
    "— sum.golang.org Az3grpgEild5qw7+5dtV13Kf1C2Xurm8q4fhdxvcsDHnqNTaxL2AFjBY+2TyGKevucFcAAlWF"
    "JJYle3EJlDCrQ+y3A8=\n"
)

# The example body of the checkpoint specification, github.com/C2SP/C2SP, tlog-checkpoint.md.
C2SP_CHECKPOINT_TEXT = (
    "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
)


def vkey(text: str) -> Verifier:
    verifier, problem = parse_vkey(text)
    assert problem is None, problem
    assert verifier is not None
    return verifier


def test_the_signed_note_specification_example_verifies():
    note, problem = open_note(C2SP_NOTE, [vkey(C2SP_VKEY)])
    assert problem is None
    assert note.text == "This is an example message.\n"
    assert [s.key for s in note.verified] == ["example.com/foo+530d903a"]


def test_go_note_vectors_sign_and_open_the_same_bytes():
    signer, problem = parse_private_key(PETER_SKEY)
    assert problem is None
    assert signer.vkey == PETER_VKEY
    assert signer.private_key_text() == PETER_SKEY
    # Ed25519 is deterministic: our signature is byte for byte Go's.
    assert sign_note(GO_TEXT, signer) == GO_TEXT + "\n" + PETER_SIG
    # One signature by a known key, one by an unknown key: opened, the other kept aside.
    note, problem = open_note(GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG, [vkey(PETER_VKEY)])
    assert problem is None and note.text == GO_TEXT
    assert [s.key for s in note.verified] == ["PeterNeumann+c74f20a3"]
    assert [s.key for s in note.unverified] == ["EnochRoot+af0cfe78"]
    both = [vkey(PETER_VKEY), vkey(ENOCH_VKEY)]
    note, problem = open_note(GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG, both)
    assert problem is None and len(note.verified) == 2
    # No known key at all: refused, naming who did sign.
    note, problem = open_note(GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG, [])
    assert note is None and "PeterNeumann+c74f20a3" in problem


def test_go_note_malformed_messages_are_refused():
    # TestOpen's badMsgs, plus its corrupted signature.
    bad = [
        GO_TEXT,
        GO_TEXT + "\n",
        GO_TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + GO_TEXT + "\n" + PETER_SIG,
        b"\xff" + (GO_TEXT + "\n" + PETER_SIG).encode(),
        GO_TEXT + "\n" + "— Bad Name " + PETER_SIG.split(" ")[2],
        GO_TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
        GO_TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:],
        GO_TEXT + "\n" + PETER_SIG * 101,
    ]
    for message in bad:
        note, problem = open_note(message, [vkey(PETER_VKEY)])
        assert note is None and problem, message


def test_go_vkey_manglings_are_refused():
    # TestNewVerifier: every proper substring and every single-byte change of the key.
    assert parse_vkey(PETER_VKEY)[1] is None
    for i in range(len(PETER_VKEY) + 1):
        for j in range(i + 1, len(PETER_VKEY) + 1):
            if (i, j) != (0, len(PETER_VKEY)):
                assert parse_vkey(PETER_VKEY[i:j])[0] is None, PETER_VKEY[i:j]
    for i in range(len(PETER_VKEY)):
        changed = PETER_VKEY[:i] + chr(ord(PETER_VKEY[i]) + 1) + PETER_VKEY[i + 1 :]
        assert parse_vkey(changed)[0] is None, changed
    # A key of the wrong length, and one of an unknown type, each with its id recomputed.
    for raw in [b"\x01" + b"k" * 33, b"\x02" + b"k" * 32]:
        forged_id = hashlib.sha256(b"PeterNeumann\n" + raw).digest()[:4].hex()
        forged = f"PeterNeumann+{forged_id}+{base64.b64encode(raw).decode()}"
        assert parse_vkey(forged)[0] is None


def test_go_private_key_manglings_are_refused_without_echoing_the_secret():
    for i in range(len(PETER_SKEY)):
        changed = PETER_SKEY[:i] + chr(ord(PETER_SKEY[i]) + 1) + PETER_SKEY[i + 1 :]
        signer, problem = parse_private_key(changed)
        assert signer is None and problem
        assert "AYEKFALV" not in problem
    for cut in range(len(PETER_SKEY)):
        assert parse_private_key(PETER_SKEY[:cut])[0] is None


def test_a_real_checkpoint_of_the_go_checksum_database_verifies():
    checkpoint, problem = open_checkpoint(SUMDB_CHECKPOINT, [vkey(SUMDB_VKEY)])
    assert problem is None
    assert checkpoint.origin == "go.sum database tree"
    assert checkpoint.size == 30055305
    assert checkpoint.root_hash.hex() == (
        "9977e045c2746c6d23dc23dd2b08065ad5330546d7ebbb1a64646616e2461ac3"
    )
    assert checkpoint.text() == SUMDB_CHECKPOINT.split("\n\n")[0] + "\n"


def test_the_checkpoint_specification_example_parses():
    checkpoint, problem = parse_checkpoint(C2SP_CHECKPOINT_TEXT)
    assert problem is None
    assert (checkpoint.origin, checkpoint.size) == ("example.com/behind-the-sofa", 20852163)
    assert checkpoint.text() == C2SP_CHECKPOINT_TEXT


# --- our keys ---


def test_a_new_key_has_the_vkey_form_and_the_key_id_of_the_spec():
    signer = Signer.generate("blackbox.example/log")
    name, id_hex, material = signer.vkey.split("+", 2)  # base64 has plus signs of its own
    raw = base64.b64decode(material)
    assert name == "blackbox.example/log" and raw[0] == 1 and len(raw) == 33
    expected = hashlib.sha256(b"blackbox.example/log\n\x01" + raw[1:]).digest()[:4]
    assert id_hex == expected.hex() == key_id(name, raw[1:]).hex()
    assert vkey(signer.vkey) == signer.verifier
    again, problem = parse_private_key(signer.private_key_text())
    assert problem is None and again.vkey == signer.vkey
    # The secret does not show in a repr (a log line, a traceback).
    seed_b64 = signer.private_key_text().split("+", 4)[4]
    assert seed_b64 not in repr(signer) and "PRIVATE" not in repr(signer)


@pytest.mark.parametrize("name", ["", "has space", "has+plus", "tab\there", "nbsp\u00a0here"])
def test_a_key_name_with_spaces_or_plus_is_refused(name):
    with pytest.raises(CheckpointError):
        Signer.generate(name)


def test_checkpoint_error_is_a_blackbox_error():
    assert issubclass(CheckpointError, BlackboxError)


# --- round trip and the attacker's moves ---

ORIGIN = "blackbox.example/log"


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate(ORIGIN)


@pytest.fixture(scope="module")
def signed(signer) -> tuple[Checkpoint, str]:
    hashes = [leaf_hash(bytes([i])) for i in range(10)]
    checkpoint = Checkpoint(ORIGIN, 10, root(hashes))
    return checkpoint, sign_checkpoint(checkpoint, signer)


def test_round_trip(signer, signed):
    checkpoint, note = signed
    lines = note.split("\n")
    assert lines[:4] == [ORIGIN, "10", base64.b64encode(checkpoint.root_hash).decode(), ""]
    assert lines[4].startswith(f"{EM_DASH} {ORIGIN} ") and lines[5] == ""
    opened, problem = open_checkpoint(note, [signer.verifier], origin=ORIGIN)
    assert problem is None and opened == checkpoint
    opened, problem = open_checkpoint(note.encode("utf-8"), [vkey(signer.vkey)])
    assert problem is None and opened == checkpoint


def test_round_trip_with_extension_lines_and_the_empty_tree(signer):
    for checkpoint in [
        Checkpoint(ORIGIN, 0, EMPTY_ROOT),
        Checkpoint(ORIGIN, 7, EMPTY_ROOT, ("ext one", "ext two")),
    ]:
        opened, problem = open_checkpoint(sign_checkpoint(checkpoint, signer), [signer.verifier])
        assert problem is None and opened == checkpoint


def refused(note: str | bytes, verifiers: list[Verifier]) -> str:
    checkpoint, problem = open_checkpoint(note, verifiers)
    assert checkpoint is None and problem
    return problem


def test_an_edited_size_is_refused(signer, signed):
    _, note = signed
    problem = refused(note.replace("\n10\n", "\n9\n", 1), [signer.verifier])
    assert "does not verify" in problem


def test_an_edited_root_is_refused(signer, signed):
    checkpoint, note = signed
    good = base64.b64encode(checkpoint.root_hash).decode()
    forged = base64.b64encode(EMPTY_ROOT).decode()
    assert "does not verify" in refused(note.replace(good, forged), [signer.verifier])


def test_a_signature_by_another_key_with_our_name_is_refused(signer, signed):
    checkpoint, _ = signed
    impostor = Signer.generate(ORIGIN)  # same name, another key: another key id
    note = sign_checkpoint(checkpoint, impostor)
    problem = refused(note, [signer.verifier])
    assert "not signed by any trusted key" in problem and impostor.key_id.hex() in problem


def test_a_signature_that_claims_our_key_id_is_refused(signer, signed):
    # The attacker signs with their own key but writes our name and key id on the line (the
    # key id is short, an attacker could also grind a key whose id collides): it matches our key,
    # so it must verify under our key, and it does not.
    checkpoint, _ = signed
    impostor = Signer.generate(ORIGIN)
    forged_sig = impostor.sign(checkpoint.text().encode())
    line = f"{EM_DASH} {ORIGIN} {base64.b64encode(signer.key_id + forged_sig).decode()}\n"
    problem = refused(checkpoint.text() + "\n" + line, [signer.verifier])
    assert "does not verify" in problem
    # And a good signature followed by the forged one is refused as a whole.
    note = sign_checkpoint(checkpoint, signer)
    assert "does not verify" in refused(note + line, [signer.verifier])


def test_a_forged_checkpoint_under_a_second_verifier_with_our_name_is_refused(signer, signed):
    _, note = signed
    impostor = Signer.generate(ORIGIN)
    forged = Verifier(ORIGIN, signer.key_id, impostor.verifier.public_key)  # colliding id
    problem = refused(note, [signer.verifier, forged])
    assert "two different trusted keys" in problem


def test_a_note_with_its_signature_line_moved_is_refused(signer, signed):
    _, note = signed
    text, block = note.split("\n\n")
    lines = text.split("\n")
    # The signature line moved into the text, or above the blank line, or the blank line gone.
    moved = [
        block + text + "\n\n",
        f"{lines[0]}\n{block}{lines[1]}\n{lines[2]}\n\n",
        text + "\n" + block,
        text + "\n\n\n" + block,
    ]
    for message in moved:
        refused(message, [signer.verifier])


def test_trailing_garbage_is_refused(signer, signed):
    _, note = signed
    for tail in ["x", "garbage\n", "\n", f"{EM_DASH} ", " "]:
        refused(note + tail, [signer.verifier])
    refused(note[:-1] + " \n", [signer.verifier])


def test_a_note_that_is_not_utf8_is_refused(signer, signed):
    _, note = signed
    data = note.encode("utf-8")
    for bad in [b"\xff" + data, data.replace(b"\n", b"\n\xc3", 1), data + b"\x80"]:
        assert "UTF-8" in refused(bad, [signer.verifier])
    assert "UTF-8" in refused(note.replace("10", "1\udc80", 1), [signer.verifier])


def test_a_checkpoint_of_another_log_is_refused_when_the_origin_is_expected(signer):
    other = Checkpoint("other.example/log", 1, leaf_hash(b""))
    checkpoint, problem = open_checkpoint(
        sign_checkpoint(other, signer), [signer.verifier], origin=ORIGIN
    )
    assert checkpoint is None and "other.example/log" in problem


# --- strict parsing of the body ---

GOOD_ROOT = base64.b64encode(EMPTY_ROOT).decode()
# The last digit before "=" carries 4 bits of the hash and 2 bits that must be zero: set one.
NONCANONICAL_ROOT = GOOD_ROOT[:-2] + chr(ord(GOOD_ROOT[-2]) + 1) + "="
assert base64.b64decode(NONCANONICAL_ROOT) == EMPTY_ROOT


@pytest.mark.parametrize(
    "text",
    [
        f"{ORIGIN}\n010\n{GOOD_ROOT}\n",  # leading zero
        f"{ORIGIN}\n00\n{GOOD_ROOT}\n",
        f"{ORIGIN}\n-1\n{GOOD_ROOT}\n",
        f"{ORIGIN}\n+1\n{GOOD_ROOT}\n",
        f"{ORIGIN}\n 1\n{GOOD_ROOT}\n",
        f"{ORIGIN}\n1_0\n{GOOD_ROOT}\n",
        f"{ORIGIN}\n\u0661\n{GOOD_ROOT}\n",  # an Arabic-Indic digit one
        f"{ORIGIN}\n{1 << 63}\n{GOOD_ROOT}\n",  # beyond any log
        f"{ORIGIN}\n\n{GOOD_ROOT}\n",
        f"{ORIGIN}\n1\n{base64.b64encode(EMPTY_ROOT[:31]).decode()}\n",  # 31-byte root
        f"{ORIGIN}\n1\n{base64.b64encode(EMPTY_ROOT + b'x').decode()}\n",  # 33-byte root
        f"{ORIGIN}\n1\n{GOOD_ROOT[:-2]}\n",  # unpadded
        f"{ORIGIN}\n1\n{NONCANONICAL_ROOT}\n",  # the same bytes, non-canonical trailing bits
        f"{ORIGIN}\n1\n{EMPTY_ROOT.hex()}\n",  # hex, not base64
        f"\n1\n{GOOD_ROOT}\n",  # empty origin
        f"{ORIGIN}\n1\n",  # no root line
        f"{ORIGIN}\n1\n{GOOD_ROOT}",  # no final newline
        f"{ORIGIN}\n1\n{GOOD_ROOT}\n\next\n",  # an empty extension line
    ],
)
def test_a_malformed_checkpoint_body_is_a_problem(text):
    checkpoint, problem = parse_checkpoint(text)
    assert checkpoint is None and problem


def test_a_checkpoint_that_cannot_be_written_is_an_error():
    for args in [
        ("", 1, EMPTY_ROOT),
        ("two\nlines", 1, EMPTY_ROOT),
        (ORIGIN, -1, EMPTY_ROOT),
        (ORIGIN, True, EMPTY_ROOT),
        (ORIGIN, 1, EMPTY_ROOT[:31]),
        (ORIGIN, 1, EMPTY_ROOT, ("",)),
    ]:
        with pytest.raises(CheckpointError):
            Checkpoint(*args)
    with pytest.raises(CheckpointError):
        sign_note("no final newline", Signer.generate(ORIGIN))
    with pytest.raises(CheckpointError):
        sign_note("text\n")
