"""An independent verifier, written from docs/trust.md alone: the Python standard library and
`cryptography`, nothing of this project (`test_the_verifier_imports_nothing_of_the_project`
holds it to that). If the page and the code disagree, these tests fail.

The project only makes the evidence, in a child process: a store with sessions, a bundle
written by `blackbox export`, and a checkpoint signed with `blackbox.recorder.trust.checkpoint` over
a root from `blackbox.recorder.log.merkle`. Everything below the verifier line reads files and text,
nothing else.

One function per check, so that inclusion proofs (a bundle's checkpoint and a proof per record)
are added as functions of their own.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

# == The verifier (docs/trust.md, "Specification") ============================================

GENESIS_PREFIX = b"mcp-blackbox/chain/v1\x00"
SEAL_KIND = "session_sealed"
EM_DASH_PREFIX = "\u2014 "


def genesis(session_id: str) -> bytes:
    return hashlib.sha256(GENESIS_PREFIX + session_id.encode("utf-8")).digest()


def canonical(record: dict) -> bytes:
    """u16 lengths of session id, kind, direction; the three strings; i64 wall_ns, mono_ns,
    raw_size (-1 for null); u64 len(raw); raw."""
    sid = record["session_id"].encode("utf-8")
    kind = record["kind"].encode("utf-8")
    direction = record["direction"].encode("utf-8")
    raw = record["raw"]
    size = -1 if record["raw_size"] is None else record["raw_size"]
    return (
        struct.pack(">HHH", len(sid), len(kind), len(direction))
        + sid
        + kind
        + direction
        + struct.pack(">qqqQ", record["wall_ns"], record["mono_ns"], size, len(raw))
        + raw
    )


def chain_hash(prev: bytes, record: dict) -> bytes:
    return hashlib.sha256(prev + canonical(record)).digest()


def read_records_jsonl(path: Path) -> list[dict]:
    """The records file of a JSONL bundle: raw from base64, hash from hex."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            row["raw"] = base64.b64decode(row["raw"], validate=True)
            row["hash"] = bytes.fromhex(row["hash"])
            records.append(row)
    return records


def check_file_hashes(bundle: Path, manifest: dict) -> list[str]:
    problems = []
    for name, meta in manifest["files"].items():
        actual = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
        if actual != meta["sha256"]:
            problems.append(f"{name}: sha256 differs from the manifest")
    return problems


def check_chain(session_id: str, records: list[dict]) -> list[str]:
    """Seq 1..N without a gap; each unredacted record hashes from the previous hash; a redacted
    record's hash is taken as attested (the next record links from it)."""
    problems = []
    prev = genesis(session_id)
    for expected_seq, record in enumerate(records, start=1):
        if record["seq"] != expected_seq:
            problems.append(f"{session_id}: seq {record['seq']} where {expected_seq} was due")
            return problems
        if not record["redacted"] and chain_hash(prev, record) != record["hash"]:
            problems.append(f"{session_id}: seq {record['seq']} does not match its hash")
        prev = record["hash"]
    return problems


def check_seal(session_id: str, records: list[dict], sealed_count: int | None) -> list[str]:
    """The first seal is at seq count + 1, names the hash of record `count` and is last; a
    session the manifest says was sealed has a seal."""
    seals = [r for r in records if r["kind"] == SEAL_KIND]
    if not seals:
        return [f"{session_id}: sealed, but the seal is gone"] if sealed_count is not None else []
    seal = seals[0]
    doc = json.loads(seal["raw"])
    count, head = doc["count"], doc["head"]
    problems = []
    if seal["seq"] != count + 1:
        problems.append(f"{session_id}: sealed with {count} records, seal at seq {seal['seq']}")
    elif records[count - 1]["hash"].hex() != head:
        problems.append(f"{session_id}: the seal's head is not the hash of record {count}")
    if records[-1] is not seal:
        problems.append(f"{session_id}: records after the seal")
    if sealed_count is not None and sealed_count != count:
        problems.append(f"{session_id}: the manifest's sealed count is {sealed_count}")
    return problems


def check_against_manifest(session_id: str, records: list[dict], expect: dict) -> list[str]:
    problems = []
    if not records or records[-1]["hash"].hex() != expect["head"]:
        problems.append(f"{session_id}: the head differs from the manifest's")
    if len(records) != expect["records"]:
        problems.append(
            f"{session_id}: {len(records)} records, the manifest says {expect['records']}"
        )
    if sum(1 for r in records if r["redacted"]) != expect["redacted_records"]:
        problems.append(f"{session_id}: redacted records differ from the manifest's count")
    if expect.get("store_findings") or expect.get("chain_intact_at_export") is False:
        problems.append(f"{session_id}: the exporter found it broken in the store")
    return problems


def check_bundle(bundle: Path) -> list[str]:
    """Every check of docs/trust.md "How an auditor checks a bundle", steps 1 and 2."""
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["data_format"] == "jsonl", "this verifier reads JSONL bundles"
    problems = check_file_hashes(bundle, manifest)
    by_session: dict[str, list[dict]] = {}
    for record in read_records_jsonl(bundle / "records.jsonl"):
        by_session.setdefault(record["session_id"], []).append(record)
    for sid in sorted(set(by_session) | set(manifest["sessions"])):
        records = sorted(by_session.get(sid, []), key=lambda r: r["seq"])
        expect = manifest["sessions"].get(sid)
        if expect is None:
            problems.append(f"{sid}: records of a session the manifest does not list")
            continue
        problems += check_chain(sid, records)
        problems += check_seal(sid, records, expect["sealed_count"])
        problems += check_against_manifest(sid, records, expect)
    return problems


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_root(leaves: list[bytes]) -> bytes:
    """MTH (RFC 9162 2.1.1): split at the largest power of two smaller than n."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaf_hash(leaves[0])
    k = 1 << ((n - 1).bit_length() - 1)
    return node_hash(merkle_root(leaves[:k]), merkle_root(leaves[k:]))


def parse_vkey(vkey: str) -> tuple[str, bytes, bytes]:
    """`<name>+<8 hex key id>+<base64(0x01 || key)>` -> (name, key id, public key)."""
    name, id_hex, material = vkey.split("+", 2)
    raw = base64.b64decode(material, validate=True)
    if len(raw) != 33 or raw[0] != 0x01:
        raise ValueError("not an Ed25519 verifier key")
    public_key = raw[1:]
    key_id = hashlib.sha256(name.encode("utf-8") + b"\n\x01" + public_key).digest()[:4]
    if key_id.hex() != id_hex:
        raise ValueError("the key id does not match the name and key")
    return name, key_id, public_key


def open_checkpoint(note: str, vkey: str) -> tuple[str, int, bytes]:
    """Verify a signed checkpoint with one trusted key; (origin, size, root) or ValueError."""
    name, key_id, public_key = parse_vkey(vkey)
    split = note.rfind("\n\n")
    if split < 0:
        raise ValueError("not a signed note")
    text, block = note[: split + 1], note[split + 2 :]
    verified = False
    for line in block.rstrip("\n").split("\n"):
        if not line.startswith(EM_DASH_PREFIX):
            raise ValueError("a malformed signature line")
        signer, _, encoded = line[len(EM_DASH_PREFIX) :].partition(" ")
        blob = base64.b64decode(encoded, validate=True)
        if signer != name or blob[:4] != key_id:
            continue  # another key's signature: ignored
        try:
            Ed25519PublicKey.from_public_bytes(public_key).verify(blob[4:], text.encode("utf-8"))
        except InvalidSignature:
            raise ValueError("the signature does not verify") from None
        verified = True
    if not verified:
        raise ValueError("not signed by the trusted key")
    origin, size, root, *_extensions = text[:-1].split("\n")
    if size != str(int(size)) or base64.b64encode(base64.b64decode(root)).decode() != root:
        raise ValueError("a malformed checkpoint")
    root_hash = base64.b64decode(root)
    if len(root_hash) != 32:
        raise ValueError("the root is not 32 bytes")
    return origin, int(size), root_hash


def check_checkpoint_root(note: str, vkey: str, bundle: Path) -> list[str]:
    """The checkpoint verifies with the key, and its root is the MTH of the bundle's chain hashes
    in log order (the bundle holds the whole log here)."""
    try:
        _origin, size, root = open_checkpoint(note, vkey)
    except ValueError as exc:
        return [f"checkpoint: {exc}"]
    records = sorted(read_records_jsonl(bundle / "records.jsonl"), key=lambda r: r["position"])
    if size != len(records):
        return [f"checkpoint: size {size}, the log holds {len(records)} records"]
    if merkle_root([r["hash"] for r in records]) != root:
        return ["checkpoint: the root differs from the records' tree"]
    return []


def verify_inclusion(leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes) -> bool:
    """RFC 9162 2.1.3.2: fold the path from leaf `index` of a tree of `size` leaves."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf_hash(leaf)
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def check_bundle_proofs(bundle: Path, vkey: str) -> list[str]:
    """The bundle's checkpoint.txt verifies with the key, and proofs.jsonl (one line per record,
    in the records file's order) proves each record's chain hash is a leaf of its tree."""
    try:
        _origin, size, root = open_checkpoint((bundle / "checkpoint.txt").read_text(), vkey)
    except ValueError as exc:
        return [f"checkpoint: {exc}"]
    records = read_records_jsonl(bundle / "records.jsonl")
    proofs = [json.loads(line) for line in (bundle / "proofs.jsonl").read_text().splitlines()]
    if len(proofs) != len(records):
        return ["proofs: not one proof per record"]
    problems = []
    for record, proof in zip(records, proofs, strict=True):
        where = f"session {record['session_id']} seq {record['seq']}"
        if (proof["session_id"], proof["seq"]) != (record["session_id"], record["seq"]):
            problems.append(f"{where}: the proof is for another record")
            continue
        path = [base64.b64decode(h, validate=True) for h in proof["proof"]]
        index = proof["leaf_index"]
        if index is None or not verify_inclusion(record["hash"], index, size, path, root):
            problems.append(f"{where}: not in the tree the checkpoint signs")
    return problems


# == The evidence, made by the project in a child process =====================================

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).with_name("blackbox"))

MAKE_STORE = """
import sys
from blackbox.recorder.log.model import NewEvent
from blackbox.recorder.store import open_store
from tests.recorder.storekit import T0, frame, session_events

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

MAKE_CHECKPOINT = """
import json, sys
from blackbox.recorder.trust import checkpoint
from blackbox.recorder.log import merkle
from blackbox.recorder.store import open_store

store = open_store(sys.argv[1], create=False)
leaves = [ev.hash for ev in store.read_log()]
signer = checkpoint.Signer.generate("blackbox.example/log")
other = checkpoint.Signer.generate("blackbox.example/log")
note = checkpoint.sign_checkpoint(
    checkpoint.Checkpoint("blackbox.example/log", len(leaves), merkle.root_from_leaves(leaves)),
    signer,
)
print(json.dumps({"note": note, "vkey": signer.vkey, "other_vkey": other.vkey}))
"""


def run(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def make_evidence(tmp_path: Path, redact: bool) -> tuple[Path, dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), BLACKBOX_HOME=str(tmp_path / "home"))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    if not (tmp_path / "store.db").exists():
        run(sys.executable, "-c", MAKE_STORE, url, env=env)
    bundle = tmp_path / ("redacted" if redact else "bundle")
    flags = [] if redact else ["--no-redact"]
    run(CLI, "export", "--store", url, "--out", str(bundle), "--format", "jsonl", *flags, env=env)
    signed = json.loads(run(sys.executable, "-c", MAKE_CHECKPOINT, url, env=env))
    return bundle, signed


def make_signed_bundle(tmp_path: Path, redact: bool) -> tuple[Path, str]:
    """A bundle exported with a signing key configured: it carries checkpoint.txt and
    proofs.jsonl. Returns the bundle and the verifier key `keys init` printed last."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), BLACKBOX_HOME=str(tmp_path / "home"))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run(sys.executable, "-c", MAKE_STORE, url, env=env)
    vkey = run(CLI, "keys", "init", "--origin", "blackbox.example/log", env=env).split()[-1]
    bundle = tmp_path / "signed"
    flags = [] if redact else ["--no-redact"]
    run(CLI, "export", "--store", url, "--out", str(bundle), "--format", "jsonl", *flags, env=env)
    return bundle, vkey


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


def test_the_verifier_imports_nothing_of_the_project() -> None:
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports"
            imported.add((node.module or "").split(".")[0])
    outside = {name for name in imported if name not in sys.stdlib_module_names}
    assert outside == {"cryptography"}


def test_a_bundle_and_a_checkpoint_verify(tmp_path: Path) -> None:
    bundle, signed = make_evidence(tmp_path, redact=False)
    assert check_bundle(bundle) == []
    assert check_checkpoint_root(signed["note"], signed["vkey"], bundle) == []
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert len(manifest["sessions"]) == 3
    records = read_records_jsonl(bundle / "records.jsonl")
    assert any(r["raw_size"] == 70000 for r in records)  # a truncated frame's wire size, hashed
    assert sum(r["kind"] == SEAL_KIND for r in records) == 2  # two sealed, one open


def test_a_redacted_bundle_verifies_with_attested_hashes(tmp_path: Path) -> None:
    bundle, _signed = make_evidence(tmp_path, redact=True)
    records = read_records_jsonl(bundle / "records.jsonl")
    assert [r["seq"] for r in records if r["redacted"]] == [4]
    assert check_bundle(bundle) == []


def test_one_byte_changed_in_a_record_fails(tmp_path: Path) -> None:
    bundle, signed = make_evidence(tmp_path, redact=False)
    change_one_byte(bundle, seq=4)
    problems = check_bundle(bundle)
    assert len(problems) == 1 and "seq 4 does not match its hash" in problems[0]
    assert check_checkpoint_root(signed["note"], signed["vkey"], bundle) == []  # hashes kept


def test_an_edited_file_without_the_manifest_fails_on_its_hash(tmp_path: Path) -> None:
    bundle, _signed = make_evidence(tmp_path, redact=False)
    path = bundle / "records.jsonl"
    path.write_text(path.read_text().replace('"seq":2,', '"seq":2 ,', 1))
    assert check_bundle(bundle) == ["records.jsonl: sha256 differs from the manifest"]


def test_a_rewritten_record_with_its_chain_recomputed_passes_the_bundle_but_not_the_root(
    tmp_path: Path,
) -> None:
    """docs/trust.md: without a key a bundle proves only that it is consistent with itself."""
    bundle, signed = make_evidence(tmp_path, redact=False)
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
    assert check_checkpoint_root(signed["note"], signed["vkey"], bundle) == [
        "checkpoint: the root differs from the records' tree"
    ]


def test_a_forged_checkpoint_is_refused(tmp_path: Path) -> None:
    bundle, signed = make_evidence(tmp_path, redact=False)
    note, vkey = signed["note"], signed["vkey"]
    text, _, signature = note.partition("\n\n")
    origin, size, _root = text.split("\n")
    forged_root = base64.b64encode(hashlib.sha256(b"forged").digest()).decode()
    assert check_checkpoint_root(
        f"{origin}\n{size}\n{forged_root}\n\n{signature}", vkey, bundle
    ) == ["checkpoint: the signature does not verify"]
    # Signed by another key of the same name: its key id differs, so the signature is not the
    # trusted key's and the note is refused as unsigned.
    assert check_checkpoint_root(note, signed["other_vkey"], bundle) == [
        "checkpoint: not signed by the trusted key"
    ]
    # The checkpoint's hash of the chain hashes is the documented one: RFC 9162 over 0..n.
    assert merkle_root([]) == hashlib.sha256(b"").digest()
    leaves = [bytes([i]) * 32 for i in range(3)]
    expected = node_hash(
        node_hash(leaf_hash(leaves[0]), leaf_hash(leaves[1])), leaf_hash(leaves[2])
    )
    assert merkle_root(leaves) == expected


def test_a_session_the_exporter_found_broken_fails(tmp_path: Path) -> None:
    """A writer renames a session in the `sessions` projection (no trigger guards it): export
    refuses; with --include-broken the manifest marks the session, and the verifier fails it
    although its records are intact."""
    make_evidence(tmp_path, redact=False)
    db = sqlite3.connect(tmp_path / "store.db")
    with db:
        db.execute("UPDATE sessions SET name = 'innocent' WHERE name = 'keys'")
    db.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT), BLACKBOX_HOME=str(tmp_path / "home"))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    args = [CLI, "export", "--store", url, "--format", "jsonl", "--no-redact", "--out"]
    refused = subprocess.run(
        [*args, str(tmp_path / "refused")], env=env, capture_output=True, text=True, check=False
    )
    assert refused.returncode == 2 and "projection" in refused.stderr + refused.stdout
    run(*args, str(tmp_path / "marked"), "--include-broken", env=env)
    problems = check_bundle(tmp_path / "marked")
    assert len(problems) == 1 and problems[0].endswith("the exporter found it broken in the store")


def test_a_signed_bundle_proves_every_record_in_its_checkpoint(tmp_path: Path) -> None:
    bundle, vkey = make_signed_bundle(tmp_path, redact=True)
    assert check_bundle(bundle) == []
    assert check_bundle_proofs(bundle, vkey) == []  # redacted records too: their original hash
    other = make_evidence(tmp_path, redact=False)[1]["other_vkey"]
    assert check_bundle_proofs(bundle, other) == ["checkpoint: not signed by the trusted key"]


def test_a_record_rewritten_in_a_signed_bundle_fails_its_inclusion_proof(tmp_path: Path) -> None:
    bundle, vkey = make_signed_bundle(tmp_path, redact=False)
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
