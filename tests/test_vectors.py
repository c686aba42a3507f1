"""The test vectors of docs/vectors/ stay true: every vector of vectors.json, run through our CLI on
a temporary copy, exits as the vector says with the findings it names, and the independent
verifier (tests/fixtures/independent_verifier.py, written from docs/trust.md alone) gives every
vector the same verdict. A third party runs the same vectors against their own verifier
(docs/trust.md, "Test vectors"); these tests are what keeps the vectors and the page in step with
the code. The vectors are written by tests/fixtures/vectors/write_vectors.py, by hand.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from blackbox.cli.main import main
from tests.fixtures import independent_verifier as iv
from tests.fixtures.vectors.write_vectors import KNOWN_DISAGREEMENTS

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "docs" / "vectors"
INDEX = json.loads((VECTORS / "vectors.json").read_text(encoding="utf-8"))
COMMANDS = ("verify", "verify --checkpoint", "verify-export --key", "verify-proof")


def cli_args(v: dict[str, Any], base: Path, vkey: str) -> list[str]:
    """The `blackbox` command line docs/trust.md gives each vector's command, JSON output."""
    paths = {name: str(base / rel) for name, rel in v["paths"].items()}
    command = v["command"]
    if command == "verify-export --key":
        return ["verify-export", paths["bundle"], "--key", vkey, "--format", "json"]
    if command == "verify-proof":
        return [
            "verify-proof",
            paths["proof"],
            "--checkpoint",
            paths["checkpoint"],
            "--key",
            vkey,
            "--format",
            "json",
        ]
    args = ["verify", "--store", f"sqlite:///{paths['store']}", "--key", vkey]
    if command == "verify --checkpoint":
        args += ["--checkpoint", paths["checkpoint"]]
    return [*args, "--format", "json"]


def problem_names(doc: dict[str, Any]) -> set[str]:
    """The problem names of a JSON report: each finding's `problem`."""
    return {f["problem"] for f in doc.get("findings", []) if isinstance(f, dict)}


def independent_verdict(v: dict[str, Any], base: Path, vkey: str) -> list[str]:
    """What the independent verifier finds in the vector (empty: valid)."""
    paths = {name: base / rel for name, rel in v["paths"].items()}
    command = v["command"]
    if command == "verify-proof":
        return iv.check_proof_file(
            paths["proof"].read_text(encoding="utf-8"),
            paths["checkpoint"].read_text(encoding="utf-8"),
            vkey,
        )
    if command == "verify-export --key":
        bundle = paths["bundle"]
        problems = iv.check_bundle(bundle) + iv.check_bundle_proofs(bundle, vkey)
        problems += iv.check_manifest_signature(bundle, vkey)
        return problems + iv.check_completeness(bundle)
    checkpoint = None
    if command == "verify --checkpoint":
        checkpoint = paths["checkpoint"].read_text(encoding="utf-8")
    return iv.check_store(paths["store"], vkey, checkpoint)


def vector_params() -> list[Any]:
    params = []
    for v in INDEX["vectors"]:
        marks = []
        if v["id"] in KNOWN_DISAGREEMENTS:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_DISAGREEMENTS[v["id"]]))
        params.append(pytest.param(v, id=v["id"], marks=marks))
    return params


@pytest.fixture
def vectors(tmp_path: Path, blackbox_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of docs/vectors to run on (`verify` opens the stores read-write); no signing key
    configured, so only `--key` speaks for the log."""
    monkeypatch.delenv("BLACKBOX_KEY_FILE", raising=False)
    return Path(shutil.copytree(VECTORS, tmp_path / "vectors"))


@pytest.mark.parametrize("v", vector_params())
def test_our_cli_gives_each_vector_its_verdict(v: dict[str, Any], vectors: Path) -> None:
    vkey = (vectors / INDEX["key"]).read_text(encoding="utf-8").strip()
    result = CliRunner().invoke(main, cli_args(v, vectors, vkey))
    assert result.exit_code == v["exit_code"], result.output
    doc = json.loads(result.output)
    assert set(v["findings"]) <= problem_names(doc), result.output
    for message in v["messages"]:
        assert message in result.output


@pytest.mark.parametrize("v", [pytest.param(v, id=v["id"]) for v in INDEX["vectors"]])
def test_the_independent_verifier_gives_each_vector_its_verdict(v: dict[str, Any]) -> None:
    """Read-only: the independent verifier opens the stores with mode=ro, so no copy."""
    vkey = (VECTORS / INDEX["key"]).read_text(encoding="utf-8").strip()
    problems = independent_verdict(v, VECTORS, vkey)
    assert (1 if problems else 0) == v["exit_code"], problems


def test_the_index_is_well_formed_and_names_every_file() -> None:
    """Ids unique, commands and exit codes the page defines, every path relative and present,
    every file of the folder used by some vector, no machine path, under 2 MB."""
    ids = [v["id"] for v in INDEX["vectors"]]
    assert len(ids) == len(set(ids))
    used = {VECTORS / INDEX["key"], VECTORS / "vectors.json", VECTORS / "README.md"}
    for v in INDEX["vectors"]:
        assert v["command"] in COMMANDS and v["exit_code"] in (0, 1), v
        assert v["description"] and isinstance(v["findings"], list)
        for rel in v["paths"].values():
            assert not Path(rel).is_absolute() and ".." not in Path(rel).parts, rel
            path = VECTORS / rel
            assert path.exists(), rel
            used |= set(path.rglob("*")) if path.is_dir() else {path}
    files = {p for p in VECTORS.rglob("*") if p.is_file()}
    assert files <= used, sorted(str(p.relative_to(VECTORS)) for p in files - used)
    assert sum(p.stat().st_size for p in files) < 2_000_000
    for path in files:
        data = path.read_bytes()
        assert str(ROOT).encode() not in data and b"/tmp/" not in data, path
    assert {v["exit_code"] for v in INDEX["vectors"]} == {0, 1}
    assert {v["command"] for v in INDEX["vectors"]} == set(COMMANDS)


def test_the_verifier_key_is_the_one_the_documented_seed_makes() -> None:
    """The key is derived as vectors.json says, with `cryptography` and the page's key format
    (docs/trust.md, "Keys"), so anyone can re-sign vectors of their own under it."""
    seed = hashlib.sha256(INDEX["seed_text"].encode("utf-8")).digest()
    assert seed.hex() == INDEX["seed"]
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
    name = INDEX["origin"]
    key_id = hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4]
    material = base64.b64encode(b"\x01" + public).decode()
    vkey = f"{name}+{key_id.hex()}+{material}"
    assert (VECTORS / INDEX["key"]).read_text(encoding="utf-8") == vkey + "\n"
