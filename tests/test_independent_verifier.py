"""An independent verifier, written from docs/trust.md alone: the Python standard library and
`cryptography`, nothing of this project (`test_the_verifier_imports_nothing_of_the_project`
holds it to that). If the page and the code disagree, these tests fail. The verifier itself is
tests/fixtures/independent_verifier.py, one function per check, so that the store's contract test
can check with it too.

The project only makes the evidence, in a child process: a store with sessions, a bundle
written by `blackbox export`, and a checkpoint signed with `blackbox.recorder.trust.checkpoint` over
a root from `blackbox.recorder.log.merkle`. This module imports the verifier, pytest (to scope its
fixtures) and the standard library only: everything here and in the verifier reads files and text,
nothing else.

Each kind of evidence is made once per module, by one child process that runs every step of its
making (scripts and `blackbox` commands) in turn: a process start costs far more CPU than any
check here. A test that tampers with evidence tampers with its own copy.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.independent_verifier import (
    DIRECTION_CODES,
    EMPTY_ROOT,
    KIND_CODES,
    MARKER_PATTERN,
    SEAL_KIND,
    bundle_commitment,
    chain_hash,
    check_bundle,
    check_bundle_proofs,
    check_checkpoint_root,
    check_completeness,
    check_manifest_signature,
    check_proof_file,
    check_removals,
    check_store,
    genesis,
    leaf_hash,
    merkle_root,
    node_hash,
    open_checkpoint,
    page_tokens,
    read_records_jsonl,
    read_store,
    sid_bytes,
    split_notes,
    split_tokens,
    verify_consistency,
    verify_inclusion,
)

# == The evidence, made by the project in a child process =====================================

ROOT = Path(__file__).resolve().parents[1]

MAKE_STORE = """
import sys
from blackbox.recorder.log.model import NewEvent
from blackbox.recorder.store import open_store
from tests.fixtures.storekit import T0, frame, session_events

store = open_store(sys.argv[1])
store.append(session_events(calls=3))
# A session with a secret in a call (redacted on export) and a frame stored as a prefix of its
# 70,000 bytes on the wire (raw_size is hashed), renumbered after the handshake.
other = session_events(calls=1, start_ns=T0 + 10**9, name="keys")
sid = other[0].session_id
arguments = {"api_key": "sk-ant-abcdefghijklmnop0123"}
secret = frame({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "login", "arguments": arguments}})
extra = [
    NewEvent(sid, 4, T0 + 10**9 + 4, 4, "frame", "c2s", secret),
    NewEvent(sid, 5, T0 + 10**9 + 5, 5, "frame", "s2c", b'{"jsonrpc":', 70000),
]
rest = [
    NewEvent(sid, seq, e.wall_ns + 10, e.mono_ns + 10, e.kind, e.direction, e.raw)
    for seq, e in enumerate(other[3:], start=6)
]
store.append(other[:3] + extra + rest)
store.append(session_events(calls=0, ended=False, start_ns=T0 + 2 * 10**9, name="open"))
"""

# The leaves are the log's (below the store's `first_leaf` the chain hash, from it on the chain
# hash and C: storekit computes them as the page says); `first_leaf` is printed with the note, as
# a bundle exported without a checkpoint does not carry it.
MAKE_CHECKPOINT = """
import json, sys
from sqlalchemy import text
from blackbox.recorder.trust import checkpoint
from blackbox.recorder.log import merkle
from blackbox.recorder.store import open_store
from tests.fixtures.storekit import log_leaves

store = open_store(sys.argv[1], create=False)
leaves = log_leaves(store)
with store.transaction() as conn:
    first = conn.execute(text("SELECT first_leaf FROM commitment_keys WHERE id = 1")).scalar_one()
signer = checkpoint.Signer.generate("blackbox.example/log")
other = checkpoint.Signer.generate("blackbox.example/log")
note = checkpoint.sign_checkpoint(
    checkpoint.Checkpoint("blackbox.example/log", len(leaves), merkle.root(leaves)), signer
)
print(json.dumps({"note": note, "vkey": signer.vkey, "other_vkey": other.vkey, "first": first}))
"""

# Runs the steps given as JSON in argv[1], in order: ["py", code, *argv] runs a script as
# `python -c code *argv` would, ["cli", *args] runs `blackbox ARGS` (in this process, as
# tests/fixtures/clirun.py does). Prints, as JSON, each step's [exit status, stdout, stderr].
STEPS = """
import contextlib, io, json, sys
from tests.fixtures.clirun import run_blackbox

results = []
for step in json.loads(sys.argv[1]):
    if step[0] == "cli":
        done = run_blackbox(*step[1:])
        results.append([done.returncode, done.stdout, done.stderr])
        continue
    sys.argv = ["-c", *step[2:]]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(step[1], {"__name__": "__main__"})
    results.append([0, out.getvalue(), ""])
print(json.dumps(results))
"""


def script(code: str, *argv: str) -> list[str]:
    return ["py", code, *argv]


def blackbox(*args: str) -> list[str]:
    return ["cli", *args]


def in_one_child(steps: list[list[str]], home: Path) -> list[tuple[int, str, str]]:
    """Every step run in turn by one child process with `home` as its data directory: each
    step's (exit status, stdout, stderr). A script that fails fails the child."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), BLACKBOX_HOME=str(home))
    done = subprocess.run(
        [sys.executable, "-c", STEPS, json.dumps(steps)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The results are the child's last line: anything printed before them is not ours to parse.
    last_line = done.stdout.splitlines()[-1]
    return [(code, out, err) for code, out, err in json.loads(last_line)]


def made(steps: list[list[str]], home: Path) -> list[str]:
    """The stdout of each step, every step having succeeded."""
    results = in_one_child(steps, home)
    for (code, out, err), step in zip(results, steps, strict=True):
        assert code == 0, (step[:3], out + err)
    return [out for _code, out, _err in results]


def copy_store(db: Path, to: Path) -> Path:
    """A SQLite store copied with its write-ahead log, if one was left beside it."""
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            shutil.copyfile(f"{db}{suffix}", f"{to}{suffix}")
    return to


def export(url: str, out: Path, *flags: str) -> list[str]:
    return blackbox("export", "--store", url, "--out", str(out), "--format", "jsonl", *flags)


@dataclass(frozen=True)
class Evidence:
    """A store of three sessions, its bundle exported with and without redaction (no key
    configured), and a checkpoint over its log signed by a fresh key."""

    store: Path
    bundle: Path
    redacted: Path
    note: str
    vkey: str
    other_vkey: str  # another key of the same name as the one that signed `note`
    committed_from: int  # the store's `commitment_keys.first_leaf`


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> Evidence:
    where = tmp_path_factory.mktemp("evidence")
    url = f"sqlite:///{where / 'store.db'}"
    steps = [
        script(MAKE_STORE, url),
        export(url, where / "bundle", "--no-redact"),
        export(url, where / "redacted"),
        script(MAKE_CHECKPOINT, url),
    ]
    signed = json.loads(made(steps, where / "home")[-1])
    return Evidence(
        where / "store.db",
        where / "bundle",
        where / "redacted",
        signed["note"],
        signed["vkey"],
        signed["other_vkey"],
        signed["first"],
    )


@pytest.fixture
def bundle(evidence: Evidence, tmp_path: Path) -> Path:
    """This test's copy of the unredacted bundle, to tamper with."""
    return Path(shutil.copytree(evidence.bundle, tmp_path / "bundle"))


@dataclass(frozen=True)
class SignedBundles:
    """Bundles exported, redacted and not, with a signing key configured: they carry
    checkpoint.txt, proofs.jsonl and manifest.sig."""

    home: Path
    redacted: Path
    plain: Path
    vkey: str  # the verifier key `keys init` printed last


@pytest.fixture(scope="module")
def signed_bundles(tmp_path_factory: pytest.TempPathFactory) -> SignedBundles:
    where = tmp_path_factory.mktemp("signed")
    url = f"sqlite:///{where / 'store.db'}"
    steps = [
        script(MAKE_STORE, url),
        blackbox("keys", "init", "--origin", "blackbox.example/log"),
        export(url, where / "signed-redacted"),
        export(url, where / "signed", "--no-redact"),
    ]
    vkey = made(steps, where / "home")[1].split()[-1]
    return SignedBundles(where / "home", where / "signed-redacted", where / "signed", vkey)


@pytest.fixture
def signed_plain(signed_bundles: SignedBundles, tmp_path: Path) -> Path:
    """This test's copy of the unredacted signed bundle, to tamper with."""
    return Path(shutil.copytree(signed_bundles.plain, tmp_path / "signed"))


def rewrite_manifest_hash(bundle: Path, name: str) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"][name]["sha256"] = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2))


def change_one_byte(bundle: Path, seq: int) -> None:
    """One byte of one record's raw changed, the file's sha256 in the manifest recomputed."""
    path = bundle / "records.jsonl"
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        row = json.loads(line)
        if row["seq"] == seq and not row["redacted"]:
            raw = bytearray(base64.b64decode(row["raw"]))
            raw[-2] ^= 0x01
            row["raw"] = base64.b64encode(bytes(raw)).decode()
            lines[i] = json.dumps(row, separators=(",", ":"))
            break
    path.write_text("\n".join(lines) + "\n")
    rewrite_manifest_hash(bundle, "records.jsonl")


# == The tests ================================================================================


def imports_of(path: Path) -> set[str]:
    """The modules a file imports (`from a.b import c` counts as `a.b`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports"
            imported.add(node.module or "")
    return {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names}


def test_the_verifier_imports_nothing_of_the_project() -> None:
    verifier = imports_of(ROOT / "tests" / "fixtures" / "independent_verifier.py")
    assert {name.split(".")[0] for name in verifier} == {"cryptography"}
    # This module adds the verifier and pytest (for its fixtures' scope) and nothing else: the
    # evidence is made in child processes.
    assert imports_of(Path(__file__)) == {"pytest", "tests.fixtures.independent_verifier"}


def test_a_bundle_and_a_checkpoint_verify(evidence: Evidence) -> None:
    bundle = evidence.bundle
    assert check_bundle(bundle) == []
    assert (
        check_checkpoint_root(evidence.note, evidence.vkey, bundle, evidence.committed_from) == []
    )
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert len(manifest["sessions"]) == 3
    records = read_records_jsonl(bundle / "records.jsonl")
    assert any(r["raw_size"] == 70000 for r in records)  # a truncated frame's wire size, hashed
    assert sum(r["kind"] == SEAL_KIND for r in records) == 2  # two sealed, one open


def test_a_redacted_bundle_verifies_with_attested_hashes(evidence: Evidence) -> None:
    records = read_records_jsonl(evidence.redacted / "records.jsonl")
    assert [r["seq"] for r in records if r["redacted"]] == [4]
    assert check_bundle(evidence.redacted) == []
    # The redacted record's leaf is recomputed from what it shows (docs/trust.md "Commitments").
    note, vkey, first = evidence.note, evidence.vkey, evidence.committed_from
    assert check_checkpoint_root(note, vkey, evidence.redacted, first) == []


def test_one_byte_changed_in_a_record_fails(evidence: Evidence, bundle: Path) -> None:
    change_one_byte(bundle, seq=4)
    problems = check_bundle(bundle)
    assert len(problems) == 1 and "seq 4 does not match its hash" in problems[0]
    # The chain hashes are kept, but the leaf commits to the raw bytes too (C, from its salt).
    assert check_checkpoint_root(evidence.note, evidence.vkey, bundle, evidence.committed_from) == [
        "checkpoint: the root differs from the records' tree"
    ]


def test_an_edited_file_without_the_manifest_fails_on_its_hash(bundle: Path) -> None:
    path = bundle / "records.jsonl"
    path.write_text(path.read_text().replace('"seq":2,', '"seq":2 ,', 1))
    assert check_bundle(bundle) == ["records.jsonl: sha256 differs from the manifest"]


def test_a_rewritten_record_with_its_chain_recomputed_passes_the_bundle_but_not_the_root(
    evidence: Evidence, bundle: Path
) -> None:
    """docs/trust.md: without a key a bundle proves only that it is consistent with itself."""
    path = bundle / "records.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    victim = rows[0]["session_id"]
    prev = genesis(victim)
    for row in rows:
        if row["session_id"] != victim:
            continue
        raw = base64.b64decode(row["raw"])
        if row["seq"] == 4:
            raw = raw.replace(b"get_current_time", b"delete_all_files")
            row["raw"] = base64.b64encode(raw).decode()
        if row["kind"] == SEAL_KIND:
            doc = json.loads(raw)
            doc["head"] = prev.hex()
            raw = json.dumps(doc, separators=(",", ":")).encode()
            row["raw"] = base64.b64encode(raw).decode()
        record = dict(row, raw=raw)
        prev = chain_hash(prev, record)
        row["hash"] = prev.hex()
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["sessions"][victim]["head"] = prev.hex()
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    rewrite_manifest_hash(bundle, "records.jsonl")
    assert check_bundle(bundle) == []
    assert check_checkpoint_root(evidence.note, evidence.vkey, bundle, evidence.committed_from) == [
        "checkpoint: the root differs from the records' tree"
    ]


def test_a_forged_checkpoint_is_refused(evidence: Evidence) -> None:
    bundle, note, vkey = evidence.bundle, evidence.note, evidence.vkey
    text, _, signature = note.partition("\n\n")
    origin, size, _root = text.split("\n")
    forged_root = base64.b64encode(hashlib.sha256(b"forged").digest()).decode()
    assert check_checkpoint_root(
        f"{origin}\n{size}\n{forged_root}\n\n{signature}", vkey, bundle
    ) == ["checkpoint: the signature does not verify"]
    # Signed by another key of the same name: its key id differs, so the signature is not the
    # trusted key's and the note is refused as unsigned.
    assert check_checkpoint_root(note, evidence.other_vkey, bundle) == [
        "checkpoint: not signed by the trusted key"
    ]
    # The checkpoint's hash of the chain hashes is the documented one: RFC 9162 over 0..n.
    assert merkle_root([]) == hashlib.sha256(b"").digest()
    leaves = [bytes([i]) * 32 for i in range(3)]
    expected = node_hash(
        node_hash(leaf_hash(leaves[0]), leaf_hash(leaves[1])), leaf_hash(leaves[2])
    )
    assert merkle_root(leaves) == expected


def test_a_session_the_exporter_found_broken_fails(evidence: Evidence, tmp_path: Path) -> None:
    """A writer renames a session in the `sessions` projection (no trigger guards it): export
    refuses; with --include-broken the manifest marks the session, and the verifier fails it
    although its records are intact."""
    store = copy_store(evidence.store, tmp_path / "store.db")
    db = sqlite3.connect(store)
    with db:
        db.execute("UPDATE sessions SET name = 'innocent' WHERE name = 'keys'")
    db.close()
    url = f"sqlite:///{store}"
    refused, marked = in_one_child(
        [
            export(url, tmp_path / "refused", "--no-redact"),
            export(url, tmp_path / "marked", "--no-redact", "--include-broken"),
        ],
        tmp_path / "home",
    )
    assert refused[0] == 2 and "projection" in refused[2] + refused[1]
    assert marked[0] == 0, marked
    problems = check_bundle(tmp_path / "marked")
    assert len(problems) == 1 and problems[0].endswith("the exporter found it broken in the store")


def test_a_signed_bundle_proves_every_record_in_its_checkpoint(
    signed_bundles: SignedBundles, evidence: Evidence
) -> None:
    bundle, vkey = signed_bundles.redacted, signed_bundles.vkey
    assert check_bundle(bundle) == []
    assert check_bundle_proofs(bundle, vkey) == []  # redacted records too: their original hash
    assert check_bundle_proofs(bundle, evidence.other_vkey) == [
        "checkpoint: not signed by the trusted key"
    ]


def test_a_record_rewritten_in_a_signed_bundle_fails_its_inclusion_proof(
    signed_bundles: SignedBundles, signed_plain: Path
) -> None:
    bundle, vkey = signed_plain, signed_bundles.vkey
    path = bundle / "records.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    victim = rows[0]["session_id"]
    prev = genesis(victim)
    for row in rows:
        if row["session_id"] != victim:
            continue
        raw = base64.b64decode(row["raw"])
        if row["seq"] == 4:
            raw = raw.replace(b"get_current_time", b"delete_all_files")
            row["raw"] = base64.b64encode(raw).decode()
        if row["kind"] == SEAL_KIND:
            doc = json.loads(raw)
            doc["head"] = prev.hex()
            raw = json.dumps(doc, separators=(",", ":")).encode()
            row["raw"] = base64.b64encode(raw).decode()
        prev = chain_hash(prev, dict(row, raw=raw))
        row["hash"] = prev.hex()
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["sessions"][victim]["head"] = prev.hex()
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    rewrite_manifest_hash(bundle, "records.jsonl")
    assert check_bundle(bundle) == []  # consistent with itself
    problems = check_bundle_proofs(bundle, vkey)
    assert problems and all(victim in p and "not in the tree" in p for p in problems)
    assert any("seq 4:" in p for p in problems)


def drop_session(bundle: Path, sid: str) -> None:
    """A whole session taken out of a JSONL bundle by someone who knows the format: its records,
    sessions row, decisions, proofs and manifest entry, every count and file hash recomputed."""
    kept = {}
    for stem in ("records", "sessions", "decisions", "proofs"):
        path = bundle / f"{stem}.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        kept[stem] = [r for r in rows if r["session_id"] != sid]
        path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept[stem]))
    manifest = json.loads((bundle / "manifest.json").read_text())
    gone = manifest["sessions"].pop(sid)
    counts = manifest["counts"]
    counts["sessions"] -= 1
    counts["records"] -= gone["records"]
    counts["redacted_records"] -= gone["redacted_records"]
    counts["decisions"] = len(kept["decisions"])
    proven = sum(1 for p in kept["proofs"] if p["leaf_index"] is not None)
    manifest["tree"]["records_proven"] = proven
    manifest["tree"]["records_not_covered"] = len(kept["proofs"]) - proven
    for name, meta in manifest["files"].items():
        data = (bundle / name).read_bytes()
        meta.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        if name.endswith(".jsonl"):
            meta["rows"] = len(data.splitlines())
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def test_a_signed_bundle_s_manifest_is_signed_and_lists_exactly_what_it_holds(
    signed_bundles: SignedBundles, evidence: Evidence
) -> None:
    bundle, vkey = signed_bundles.redacted, signed_bundles.vkey
    assert check_manifest_signature(bundle, vkey) == []
    assert check_completeness(bundle) == []
    assert check_manifest_signature(bundle, evidence.other_vkey) == [
        "manifest.sig: not signed by the trusted key"
    ]


def test_a_bundle_missing_a_session_fails_in_both_verifiers(
    signed_bundles: SignedBundles, signed_plain: Path, tmp_path: Path
) -> None:
    bundle, vkey = signed_plain, signed_bundles.vkey
    manifest = json.loads((bundle / "manifest.json").read_text())
    victim = next(sid for sid, meta in manifest["sessions"].items() if meta["sealed_count"])
    drop_session(bundle, victim)
    # What is left is consistent with itself, proven and complete against the edited manifest ...
    assert check_bundle(bundle) == []
    assert check_bundle_proofs(bundle, vkey) == []
    assert check_completeness(bundle) == []
    # ... which is not the manifest the key signed.
    assert check_manifest_signature(bundle, vkey) == ["manifest.sig: signs another manifest"]
    # Without manifest.sig both say the manifest is not signed.
    unsigned = Path(shutil.copytree(bundle, tmp_path / "unsigned"))
    (unsigned / "manifest.sig").unlink()
    assert check_manifest_signature(unsigned, vkey) == ["manifest.sig: the manifest is not signed"]
    # Our verifier, on both, in one child process (the data directory `keys init` made, copied).
    home = shutil.copytree(signed_bundles.home, tmp_path / "home")
    resigned, stripped = in_one_child(
        [
            blackbox("verify-export", str(bundle), "--key", vkey),
            blackbox("verify-export", str(unsigned), "--key", vkey),
        ],
        Path(home),
    )
    assert resigned[0] == 1, resigned
    assert "manifest_signature_invalid" in resigned[1]
    assert stripped[0] == 1 and "manifest_unsigned" in stripped[1], stripped


# == Commitments (docs/trust.md "Commitments") ================================================


def test_the_token_scanner_cuts_as_the_page_s_regular_expression() -> None:
    """The verifier cuts raw bytes by the page's words (a `"` starts a string token, a byte that
    is not skeleton a bare token); the page's regular expression must find the same tokens, and
    the skeleton and tokens must put the raw bytes back together."""
    rng = random.Random(11)
    alphabet = b' \t\n\r{}[],:"\\ab1-.\x00\xff\xc3'
    samples = [
        b"",
        b'{"jsonrpc":"2.0","id":0,"method":"ping"}',
        b'{"a":"x\\"y","b":[1,-2.5e3,true,null]}',
        b'"unterminated',
        b'"ends in a backslash\\',
        b'word"string"word',
        b"not json at all \xff\xfe",
        *(bytes(rng.choice(alphabet) for _ in range(rng.randrange(40))) for _ in range(3000)),
    ]
    samples += [b'{"k" : 1, "[redacted:0123456789abcdef]": 2, "v": "k" }', b'x"a":"b":']
    for raw in samples:
        skeleton, tokens = split_tokens(raw)
        assert tokens == page_tokens(raw), raw
        assert len(skeleton) == len(tokens) + 1
        rebuilt = skeleton[0] + b"".join(t + k for t, k in zip(tokens, skeleton[1:], strict=True))
        assert rebuilt == raw


def test_a_redacted_bundle_s_leaves_are_recomputed_from_what_it_shows(
    signed_bundles: SignedBundles,
) -> None:
    """From the manifest's `tree.committed_from` on, a redacted record's leaf is SHA256(0x00 ||
    its chain hash || C), C from its shown raw and `commitments`: it is proven, not attested."""
    bundle, vkey = signed_bundles.redacted, signed_bundles.vkey
    manifest = json.loads((bundle / "manifest.json").read_text())
    first = manifest["tree"]["committed_from"]
    assert isinstance(first, int)
    _origin, size, root = open_checkpoint((bundle / "checkpoint.txt").read_text(), vkey)
    records = read_records_jsonl(bundle / "records.jsonl")
    proofs = [json.loads(line) for line in (bundle / "proofs.jsonl").read_text().splitlines()]
    redacted = [(r, p) for r, p in zip(records, proofs, strict=True) if r["redacted"]]
    assert len(redacted) == manifest["counts"]["redacted_records"] == 1
    for record, proof in redacted:
        index, path = proof["leaf_index"], [base64.b64decode(h) for h in proof["proof"]]
        assert index >= first and record["salt"] is None
        disclosures = json.loads(record["commitments"])
        _skeleton, tokens = split_tokens(record["raw"])
        withheld = [t for t, (kind, _) in zip(tokens, disclosures, strict=True) if kind == "digest"]
        assert withheld and all(MARKER_PATTERN.fullmatch(t) for t in withheld), withheld
        c = bundle_commitment(record)
        assert isinstance(c, bytes), c
        assert verify_inclusion(record["hash"] + c, index, size, path, root)
        # The attested chain hash alone is not the leaf: nothing of the record is taken on trust.
        assert not verify_inclusion(record["hash"], index, size, path, root)
    assert all(r["redacted"] or len(bytes.fromhex(r["salt"])) == 32 for r in records)
    assert check_bundle(bundle) == []
    assert check_bundle_proofs(bundle, vkey) == []


def edit_redacted(bundle: Path, edit: Callable[[dict], None]) -> tuple[str, int]:
    """The bundle's redacted record changed by `edit` (on its JSONL row, `raw` decoded), the
    records file's sha256 in the manifest recomputed and `manifest.sig` removed: what a holder
    of the bundle can do. Its (session id, seq)."""
    path = bundle / "records.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    row = next(r for r in rows if r["redacted"])
    row["raw"] = base64.b64decode(row["raw"])
    edit(row)
    row["raw"] = base64.b64encode(row["raw"]).decode()
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    rewrite_manifest_hash(bundle, "records.jsonl")
    (bundle / "manifest.sig").unlink()
    return row["session_id"], row["seq"]


def show_a_guess(row: dict) -> None:
    """The withheld secret's marker replaced by the secret itself, its digest left in place."""
    marker = MARKER_PATTERN.search(row["raw"])
    assert marker is not None
    row["raw"] = row["raw"].replace(marker.group(), b'"sk-ant-abcdefghijklmnop0123"')


REDACTED_EDITS: dict[str, tuple[Callable[[dict], None], str, str]] = {
    # name: (the edit, what the independent verifier says, the problem verify-export names)
    "a shown value": (
        lambda row: row.update(raw=row["raw"].replace(b'"login"', b'"logout"')),
        "not in the tree the checkpoint signs",
        "not_included",
    ),
    "its time": (
        lambda row: row.update(wall_ns=row["wall_ns"] + 1),
        "not in the tree the checkpoint signs",
        "not_included",
    ),
    "a guess in a marker's place": (
        show_a_guess,
        "is withheld but not shown as a marker",
        "commitment_invalid",
    ),
}


def test_a_redacted_record_edited_fails_in_both_verifiers(
    signed_bundles: SignedBundles, tmp_path: Path
) -> None:
    """A redacted record's chain hash cannot be recomputed, so it passes the bundle's own checks
    whatever it shows; its leaf's commitment is what finds the edit, in both verifiers."""
    vkey = signed_bundles.vkey
    steps = [blackbox("verify-export", str(signed_bundles.redacted), "--key", vkey)]
    expected = []
    for i, (edit, ours, problem) in enumerate(REDACTED_EDITS.values()):
        bundle = Path(shutil.copytree(signed_bundles.redacted, tmp_path / f"edited-{i}"))
        sid, seq = edit_redacted(bundle, edit)
        assert check_bundle(bundle) == []  # consistent with itself: the hash is attested
        found = check_bundle_proofs(bundle, vkey)
        assert len(found) == 1 and found[0].startswith(f"session {sid} seq {seq}: "), found
        assert ours in found[0], found
        steps.append(blackbox("verify-export", str(bundle), "--key", vkey, "--format", "json"))
        expected.append(problem)
    home = shutil.copytree(signed_bundles.home, tmp_path / "home")
    (code, out, _err), *edited = in_one_child(steps, Path(home))
    assert code == 0, out
    for (code, out, _err), problem in zip(edited, expected, strict=True):
        # The manifest names manifest.sig, which is gone: that is said too, even with
        # --allow-unsigned-manifest; the edit itself is the record's finding.
        problems = sorted(f["problem"] for f in json.loads(out)["findings"])
        assert code == 1 and problems == sorted([problem, "manifest_unsigned"]), out


# == Proofs (docs/trust.md "Checking a proof") ================================================

APPEND_SESSION = """
import sys
from blackbox.recorder.store import open_store
from tests.fixtures.storekit import T0, session_events

open_store(sys.argv[1], create=False).append(
    session_events(calls=2, start_ns=T0 + 5 * 10**9, name="later")
)
"""


def subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    """RFC 9162 2.1.4.1 SUBPROOF, to make consistency proofs for the verifier to check."""
    n = len(leaves)
    if m == n:
        return [] if whole else [merkle_root(leaves)]
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        return [*subproof(m, leaves[:k], whole), merkle_root(leaves[k:])]
    return [*subproof(m - k, leaves[k:], False), merkle_root(leaves[:k])]


def inclusion_path(index: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 9162 2.1.3.1 PATH, leaf side first."""
    n = len(leaves)
    if n == 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if index < k:
        return [*inclusion_path(index, leaves[:k]), merkle_root(leaves[k:])]
    return [*inclusion_path(index - k, leaves[k:]), merkle_root(leaves[:k])]


def test_the_proof_algorithms_accept_rfc_9162_proofs_and_refuse_any_other() -> None:
    leaves = [hashlib.sha256(bytes([i])).digest() for i in range(19)]
    for n in range(1, len(leaves) + 1):
        root = merkle_root(leaves[:n])
        for i in range(n):
            path = inclusion_path(i, leaves[:n])
            assert verify_inclusion(leaves[i], i, n, path, root)
            assert not verify_inclusion(leaves[i], (i + 1) % n, n, path, root) or n == 1
            if path:
                bad = [path[0][:-1] + bytes([path[0][-1] ^ 1]), *path[1:]]
                assert not verify_inclusion(leaves[i], i, n, bad, root)
        for m in range(1, n):
            old = merkle_root(leaves[:m])
            proof = subproof(m, leaves[:n], True)
            assert verify_consistency(m, n, old, root, proof), (m, n)
            assert not verify_consistency(m, n, root, root, proof)
            assert not verify_consistency(m, n, old, root, proof[:-1])
            assert not verify_consistency(m, n, old, root, [])
    # The cases the RFC leaves open, decided as the page says.
    root = merkle_root(leaves)
    assert verify_consistency(0, 19, EMPTY_ROOT, root, [])
    assert not verify_consistency(0, 19, EMPTY_ROOT, root, [root])
    assert not verify_consistency(0, 19, root, root, [])
    assert verify_consistency(19, 19, root, root, [])
    assert not verify_consistency(19, 19, root, root, [root])
    assert not verify_consistency(19, 19, EMPTY_ROOT, root, [])


def make_proof(tmp_path: Path) -> tuple[str, str, str, str]:
    """A store, a checkpoint, a later session, a second checkpoint, and `blackbox prove` of the
    later session against the second with consistency from the first: (proof, the last note,
    the file of both notes, the verifier key)."""
    home = tmp_path / "home"
    url = f"sqlite:///{tmp_path / 'store.db'}"
    steps = [
        script(MAKE_STORE, url),
        blackbox("keys", "init", "--origin", "blackbox.example/log"),
        blackbox("checkpoint", "--store", url),
        script(APPEND_SESSION, url),
        blackbox("checkpoint", "--store", url),
    ]
    _, keys, first, _, last = made(steps, home)
    (tmp_path / "cp.txt").write_text(last)
    size = first.split("\n")[1]
    against = ["--checkpoint", str(tmp_path / "cp.txt"), "--consistency-from", size]
    [proof] = made([blackbox("prove", "last", "--store", url, *against)], home)
    filed = next((home / "checkpoints").glob("*.txt")).read_text()
    return proof, last, filed, keys.split()[-1]


def our_verify_proofs(tmp_path: Path, checkpoint: str, vkey: str, *proofs: str) -> list[int]:
    """`blackbox verify-proof`'s exit status on each proof, all in one child process."""
    (tmp_path / "c.txt").write_text(checkpoint)
    steps = []
    for i, proof in enumerate(proofs):
        (tmp_path / f"p{i}.json").write_text(proof)
        args = [str(tmp_path / f"p{i}.json"), "--checkpoint", str(tmp_path / "c.txt")]
        steps.append(blackbox("verify-proof", *args, "--key", vkey))
    return [code for code, _out, _err in in_one_child(steps, tmp_path / "verifier-home")]


def test_a_proof_checks_against_its_checkpoint_and_every_change_fails_in_both(
    evidence: Evidence, tmp_path: Path
) -> None:
    proof, note, filed, vkey = make_proof(tmp_path)
    doc = json.loads(proof)
    assert doc["inclusion"] and doc["consistency"]["old_size"] < doc["tree_size"]
    assert check_proof_file(proof, note, vkey) == []
    assert check_proof_file(proof, filed, vkey) == []  # old root checked against its note too
    assert len(split_notes(filed)) == 2
    flipped = json.loads(proof)
    path = flipped["inclusion"][0]["proof"]
    path[0] = base64.b64encode(bytes(32)).decode()
    moved = json.loads(proof)
    moved["inclusion"][-1]["leaf_index"] -= 1
    forked = json.loads(proof)
    forked["consistency"]["old_root_hash"] = base64.b64encode(bytes(32)).decode()
    # A store made at 0011 commits every leaf: the leaf input is chain_hash then commitment.
    assert all(len(bytes.fromhex(item["commitment"])) == 32 for item in doc["inclusion"])
    uncommitted = json.loads(proof)
    uncommitted["inclusion"][0]["commitment"] = None
    for bad in (flipped, moved, forked, uncommitted):
        assert check_proof_file(json.dumps(bad), filed, vkey), bad
    # tests/test_vectors.py holds our CLI to each such verdict; once here, in a child process.
    bad_ones = (json.dumps(forked), json.dumps(uncommitted))
    assert our_verify_proofs(tmp_path, filed, vkey, proof, *bad_ones) == [0, 1, 1]
    # Another key named as the log's key is.
    assert check_proof_file(proof, note, evidence.other_vkey) == [
        "checkpoint: not signed by the trusted key"
    ]


# == Signed removals (docs/trust.md "Retention, in detail") ===================================

MAKE_RETAINED = """
import sys
from pathlib import Path
from blackbox.recorder.compliance.retention import apply_retention
from blackbox.recorder.store import open_store
from blackbox.recorder.trust import keys, signing
from tests.fixtures.storekit import T0, session_events

DAY = 86_400 * 10**9
store = open_store(sys.argv[1])
for i in range(3):
    store.append(session_events(calls=2, start_ns=T0 + i * 10**9, name=f"old-{i}"))
store.append(session_events(calls=1, start_ns=T0 + 100 * DAY, name="recent"))
signer = keys.configured_signer()
signing.issue(store, signer, keys.data_dir())
result = apply_retention(
    store, 90 * DAY, Path(sys.argv[2]), now_ns=T0 + 101 * DAY, archive_format="jsonl"
)
assert len(result.removed) == 3, result.removed
signing.issue(store, signer, keys.data_dir())
"""


@dataclass(frozen=True)
class Retained:
    """A store whose three old sessions a signed retention run removed, checkpoints before and
    after, and the data directory holding the log's key and its filed checkpoints."""

    store: Path
    home: Path
    vkey: str


@pytest.fixture(scope="module")
def retained_evidence(tmp_path_factory: pytest.TempPathFactory) -> Retained:
    where = tmp_path_factory.mktemp("retained")
    steps = [
        blackbox("keys", "init", "--origin", "blackbox.example/log"),
        script(MAKE_RETAINED, f"sqlite:///{where / 'store.db'}", str(where / "arc")),
    ]
    vkey = made(steps, where / "home")[0].split()[-1]
    return Retained(where / "store.db", where / "home", vkey)


@pytest.fixture
def retained(retained_evidence: Retained, tmp_path: Path) -> Retained:
    """This test's copy of the store and of its data directory (checkpoints are filed by the
    log's id, which the copy keeps), to edit and to verify."""
    return Retained(
        copy_store(retained_evidence.store, tmp_path / "store.db"),
        Path(shutil.copytree(retained_evidence.home, tmp_path / "home")),
        retained_evidence.vkey,
    )


def raw_sql(db: Path, *statements: tuple[str, tuple]) -> None:
    """Triggers dropped, then rows edited: what the database's administrator can do."""
    conn = sqlite3.connect(db)
    with conn:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f'DROP TRIGGER "{name}"')
        for sql, params in statements:
            conn.execute(sql, params)
    conn.close()


def our_verify(retained: Retained, *dbs: Path) -> list[tuple[int, str]]:
    """`blackbox verify --key` on each store, all in one child process: (exit status, stdout)."""
    steps = [blackbox("verify", "--store", f"sqlite:///{db}", "--key", retained.vkey) for db in dbs]
    return [(code, out) for code, out, _err in in_one_child(steps, retained.home)]


def test_a_signed_removal_verifies_from_the_store_s_tables(
    retained: Retained, evidence: Evidence
) -> None:
    db, vkey = retained.store, retained.vkey
    store = read_store(db)
    [record] = [r for r in store["event_log"] if r["kind"] == "retention_applied"]
    doc = json.loads(record["raw"])
    assert len(doc["removed_leaves"]) == 3 and doc["authorisation"]
    assert len(store["tree_removed_leaves"]) == doc["records_removed"]
    assert store["signed_removals"][0]["from_position"] == 1
    assert check_removals(store, vkey) == []
    assert check_store(db, vkey) == []
    filed = next((retained.home / "checkpoints").glob("*.txt")).read_text()
    assert check_store(db, vkey, filed) == []
    [(code, out)] = our_verify(retained, db)
    assert code == 0, out
    # The note is the log key's: another key of the same name does not open it.
    other = evidence.other_vkey
    assert any("not signed by the trusted key" in p for p in check_removals(store, other))


def test_a_kept_leaf_deleted_or_a_held_session_removed_fails_in_both(
    retained: Retained, tmp_path: Path
) -> None:
    db, vkey = retained.store, retained.vkey
    first = read_store(db)["tree_removed_leaves"][0]
    removed = first["session_id"]
    cut = copy_store(db, tmp_path / "cut.db")
    raw_sql(cut, ("DELETE FROM tree_removed_leaves WHERE idx = ?", (first["idx"],)))
    problems = check_store(cut, vkey)
    assert any(f"{removed}: the record at" in p for p in problems), problems
    assert any("leaves gone with no kept hash" in p for p in problems), problems
    held = copy_store(db, tmp_path / "held.db")
    raw_sql(held, ("INSERT INTO holds VALUES (?, 'litigation', 1)", (removed,)))
    assert check_removals(read_store(held), vkey) == [
        f"{removed}: removed at {read_store(held)['tree_removed_leaves'][0]['removed_by']} "
        "while on legal hold"
    ]
    (code, out), (held_code, held_out) = our_verify(retained, cut, held)
    assert code == 1 and "removed" in out, out
    assert held_code == 1 and "held" in held_out, held_out


# A record's columns in the log's table (record format v2), and a forged record's row in it.
TABLE_COLUMNS = [
    "position",
    "sid",
    "seq",
    "wall_ns",
    "mono_ns",
    "kind_code",
    "direction_code",
    "raw",
    "raw_size",
    "hash",
]


def table_row(record: dict) -> tuple:
    coded = {
        "sid": sid_bytes(record["session_id"]),
        "kind_code": KIND_CODES[record["kind"]],
        "direction_code": DIRECTION_CODES[record["direction"]],
    }
    return tuple(coded.get(c, record.get(c)) for c in TABLE_COLUMNS)


def forge_retention_session(session_id: str, first_position: int) -> list[dict]:
    """A `retention` session whose `retention_applied` record names no session, chained with the
    page's hashes alone, as rows of `events` from `first_position` on."""
    documents = [
        ("session_started", {"v": 1, "name": "retention", "transport": None, "command": []}),
        ("retention_applied", {"v": 1, "removed": [], "sessions_removed": 0}),
        ("session_ended", {"v": 1, "reason": "completed"}),
    ]
    prev, rows = genesis(session_id), []
    for seq, (kind, doc) in enumerate(documents, start=1):
        record = {
            "session_id": session_id,
            "seq": seq,
            "wall_ns": seq,
            "mono_ns": seq,
            "kind": kind,
            "direction": "-",
            "raw": json.dumps(doc).encode(),
            "raw_size": None,
        }
        prev = chain_hash(prev, record)
        rows.append(dict(record, position=first_position + seq - 1, hash=prev))
    return rows


def test_a_deletion_laundered_as_retention_fails_in_both(retained: Retained) -> None:
    """The administrator's attack, written with the page alone: a retention session that names
    no session, chained with the page's hashes and inserted row by row; a live session deleted
    and its leaf hashes kept under that record."""
    db, vkey = retained.store, retained.vkey
    store = read_store(db)
    victim = next(r["session_id"] for r in store["sessions"] if r["name"] == "recent")
    top = max(r["position"] for r in store["event_log"])
    forger = "01a0c450-6c00-7000-8000-0000000000ff"
    forged = forge_retention_session(forger, top + 1)
    by = forged[1]["position"]

    def index(position: int) -> int:
        run_ = next(
            r for r in store["tree_runs"] if 0 <= position - r["first_position"] < r["leaves"]
        )
        return run_["first_idx"] + position - run_["first_position"]

    insert = f"INSERT INTO events ({', '.join(TABLE_COLUMNS)}) VALUES ({', '.join('?' * 10)})"
    keep = "INSERT INTO tree_removed_leaves VALUES (?, ?, ?, ?)"
    victims = [r for r in store["event_log"] if r["session_id"] == victim]
    raw_sql(
        db,
        ("INSERT INTO session_ids VALUES (?, ?)", (sid_bytes(forger), forger)),
        *((insert, table_row(r)) for r in forged),
        ("DELETE FROM events WHERE sid = ?", (sid_bytes(victim),)),
        ("DELETE FROM sessions WHERE session_id = ?", (victim,)),
        *((keep, (index(r["position"]), leaf_hash(r["hash"]), by, victim)) for r in victims),
        ("INSERT INTO retention_removals VALUES (?, ?)", (victim, by)),
    )
    problems = check_store(db, vkey)
    assert any(f"does not name {victim}" in p for p in problems), problems
    [(code, out)] = our_verify(retained, db)
    assert code == 1 and f"which does not name session {victim} with that leaf" in out, out


def test_a_session_unmapped_from_its_records_fails_in_both(
    retained: Retained, tmp_path: Path
) -> None:
    """Record format v2's own attack, from the page: a session's `session_ids` row deleted (and
    its `sessions` row), so that its records, still in `events`, show in no reader's view."""
    db, vkey = retained.store, retained.vkey
    store = read_store(db)
    victim = next(r["session_id"] for r in store["sessions"] if r["name"] == "recent")
    hidden = copy_store(db, tmp_path / "hidden.db")
    raw_sql(
        hidden,
        ("DELETE FROM session_ids WHERE session_id = ?", (victim,)),
        ("DELETE FROM sessions WHERE session_id = ?", (victim,)),
    )
    key = sid_bytes(victim).hex()
    problems = check_store(hidden, vkey)
    assert f"{key}: records whose session id maps to no session" in problems, problems
    [(code, out)] = our_verify(retained, hidden)
    assert code == 1 and key in out and "maps to no session" in out, out


# == The commitment key (docs/trust.md "What a verifier reads from the store", item 5) =========


def test_a_replaced_commitment_key_fails_against_the_checkpoint_in_both(
    retained: Retained, tmp_path: Path
) -> None:
    """From `first_leaf` on every leaf is recomputed with the store's key: an administrator who
    replaces the key (or deletes its row: "no committed leaf") changes every committed leaf, and
    the checkpoint kept outside no longer matches."""
    db, vkey = retained.store, retained.vkey
    filed = next((retained.home / "checkpoints").glob("*.txt"))
    store = read_store(db)
    [key_row] = store["commitment_keys"]
    assert key_row["first_leaf"] == 0 and len(key_row["key"]) == 32
    assert check_store(db, vkey, filed.read_text()) == []
    replaced, deleted = copy_store(db, tmp_path / "replaced.db"), copy_store(db, tmp_path / "d.db")
    other_key = hashlib.sha256(b"another key").digest()
    raw_sql(replaced, ("UPDATE commitment_keys SET key = ? WHERE id = 1", (other_key,)))
    raw_sql(deleted, ("DELETE FROM commitment_keys WHERE id = 1", ()))
    size = max(r["size"] for r in store["checkpoints"])
    for tampered in (replaced, deleted):
        problems = check_store(tampered, vkey, filed.read_text())
        assert f"tree: the root of the first {size} records differs" in problems, problems
    # Ours, after ours (`verify` may write to the store it opens), in one child process.
    against = ["--checkpoint", str(filed), "--key", vkey]
    steps = [blackbox("verify", "--store", f"sqlite:///{t}", *against) for t in (replaced, deleted)]
    for code, out, err in in_one_child(steps, retained.home):
        assert code == 1, out + err
        assert f"the root of the first {size} records differs from the checkpoint's" in out, out


# A store from before migration 0011, as its upgrade leaves it: the leaves the tree already held
# keep their input (the chain hash) and the key's `first_leaf` is the tree's size then. Made by
# setting `first_leaf` before anything is sequenced (as tests/recorder/test_migrations.py does),
# so that it falls inside the session with the secret: its first records below, the redacted one
# above.
FIRST_LEAF = 14
AS_UPGRADED = """
import sys
from blackbox.recorder.store import open_store
from tests.fixtures.storekit import tamper

open_store(sys.argv[1]).close()
first = {"f": int(sys.argv[2])}
tamper(sys.argv[1], ("UPDATE commitment_keys SET first_leaf = :f WHERE id = 1", first))
"""


@dataclass(frozen=True)
class Upgraded:
    """A store whose leaves carry commitments from FIRST_LEAF on, its redacted signed bundle, its
    checkpoints file and `blackbox prove` of the session with the secret against it, and what
    `verify --checkpoint` and `verify-export --key` said of them."""

    store: Path
    bundle: Path
    filed: str
    proof: str
    vkey: str
    ours: list[tuple[int, str, str]]


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> Upgraded:
    where = tmp_path_factory.mktemp("upgraded")
    url, home = f"sqlite:///{where / 'store.db'}", where / "home"
    steps = [
        script(AS_UPGRADED, url, str(FIRST_LEAF)),
        script(MAKE_STORE, url),
        blackbox("keys", "init", "--origin", "blackbox.example/log"),
        export(url, where / "bundle"),
    ]
    vkey = made(steps, home)[2].split()[-1]
    filed = next((home / "checkpoints").glob("*.txt"))
    records = read_records_jsonl(where / "bundle" / "records.jsonl")
    sid = next(r["session_id"] for r in records if r["redacted"])
    ours = in_one_child(
        [
            blackbox("prove", sid, "--store", url, "--checkpoint", str(filed)),
            blackbox("verify", "--store", url, "--checkpoint", str(filed), "--key", vkey),
            blackbox("verify-export", str(where / "bundle"), "--key", vkey),
        ],
        home,
    )
    proof = ours[0][1]
    return Upgraded(where / "store.db", where / "bundle", filed.read_text(), proof, vkey, ours)


def test_an_upgraded_store_commits_from_first_leaf_on_in_both(
    upgraded: Upgraded, tmp_path: Path
) -> None:
    """Below `first_leaf` the leaf input is the chain hash, from it on the chain hash and C: in
    the store, in the bundle (`tree.committed_from`) and in a proof (`commitment` null below)."""
    assert [code for code, _out, _err in upgraded.ours] == [0, 0, 0], upgraded.ours
    vkey, filed = upgraded.vkey, upgraded.filed
    assert read_store(upgraded.store)["commitment_keys"][0]["first_leaf"] == FIRST_LEAF
    assert check_store(upgraded.store, vkey) == []
    assert check_store(upgraded.store, vkey, filed) == []
    # The bundle: the session with the secret straddles the first committed leaf.
    bundle = upgraded.bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["tree"]["committed_from"] == FIRST_LEAF
    assert check_bundle(bundle) == [] and check_bundle_proofs(bundle, vkey) == []
    # The proof: `commitment` is null exactly below `first_leaf`.
    doc = json.loads(upgraded.proof)
    committed = [item["commitment"] is not None for item in doc["inclusion"]]
    assert committed == [item["leaf_index"] >= FIRST_LEAF for item in doc["inclusion"]]
    assert True in committed and False in committed
    assert check_proof_file(upgraded.proof, filed, vkey) == []
    # The boundary matters: one leaf off, on either side, and that leaf no longer verifies.
    for moved in (FIRST_LEAF - 1, FIRST_LEAF + 1):
        copy = Path(shutil.copytree(bundle, tmp_path / f"from-{moved}"))
        manifest["tree"]["committed_from"] = moved
        (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
        problems = check_bundle_proofs(copy, vkey)
        assert len(problems) == 1 and "not in the tree the checkpoint signs" in problems[0]
    [first] = [item for item in doc["inclusion"] if item["leaf_index"] == FIRST_LEAF]
    first["commitment"] = None
    assert check_proof_file(json.dumps(doc), filed, vkey) == [
        f"seq {first['seq']}: the inclusion proof does not lead to the root"
    ]
