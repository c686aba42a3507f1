"""The cached tree is never trusted. Someone who can write the database edits a node of the
store's cached Merkle tree (its tables had no guard): `verify` must name the node and say the
records are intact; `checkpoint`, `export` and `prove` must refuse, naming the tree, instead of
signing, exporting or printing a root the records do not give, or blaming records that did not
change. On SQLite and PostgreSQL, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.storekit import T0, session_events, tamper

ZERO = bytes(32)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.fixture
def signed(store_url, blackbox_env, tmp_path):
    """Three sessions, a key, a checkpoint kept elsewhere; then a fourth session, not signed."""
    store = open_store(store_url)
    sessions = [session_events(calls=4, start_ns=T0 + i * 10**9) for i in range(4)]
    for events in sessions[:3]:
        store.append(events)
    code, out = run("keys", "init", "--origin", "example.com/audit")
    assert code == 0, out
    vkey = out.strip().splitlines()[-1]
    code, note = run("checkpoint", "--store", store_url)
    assert code == 0, note
    outside = tmp_path / "checkpoint.txt"
    outside.write_text(note)
    store.append(sessions[3])
    store.close()
    return store_url, vkey, outside, [s[0].session_id for s in sessions]


def zero_node(store_url: str, level: int = 4, idx: int = 0) -> None:
    tamper(
        store_url,
        (
            "UPDATE tree_nodes SET hash = :z WHERE level = :l AND idx = :i",
            {"z": ZERO, "l": level, "i": idx},
        ),
    )


def test_verify_names_a_zeroed_node_and_says_the_records_are_intact(signed) -> None:
    store_url, vkey, outside, _sids = signed
    zero_node(store_url)
    for args in ([], ["--checkpoint", str(outside), "--key", vkey]):
        code, out = run("verify", "--store", store_url, *args)
        assert code == 1, out
        assert "cached tree node at level 4, index 0 (leaves 0-15)" in out
        assert "the records are intact" in out
        assert "rewritten" not in out  # no record is blamed


def test_checkpoint_refuses_naming_the_tree_not_the_records(signed) -> None:
    store_url, _vkey, _outside, _sids = signed
    zero_node(store_url)
    code, out = run("checkpoint", "--store", store_url)
    assert code == 2, out
    assert "cached tree" in out and "the records agree" in out
    assert "records before it were rewritten" not in out


def test_a_damaged_frontier_is_not_signed(signed) -> None:
    """The stored frontier (tree_state) gives the new root: edited, nothing is signed over it."""
    store_url, _vkey, _outside, _sids = signed
    code, _ = run("checkpoint", "--store", store_url)  # the fourth session sequenced and signed
    assert code == 0
    store = open_store(store_url)
    store.append(session_events(calls=2, start_ns=T0 + 9 * 10**9))
    store.close()
    # The next sequencing extends the frontier: a frontier whose hashes are zeroed (same shape).
    tamper(store_url, ("UPDATE tree_state SET frontier = :f", {"f": _zeroed_frontier(store_url)}))
    code, out = run("checkpoint", "--store", store_url)
    assert code == 2, out
    assert "cached tree" in out and "refusing to sign" in out


def _zeroed_frontier(store_url: str) -> bytes:
    from blackbox.recorder.log import merkle
    from blackbox.recorder.store import tree

    store = open_store(store_url)
    with store.transaction() as conn:
        frontier = merkle.Frontier._trusted(
            tree.head(conn).size, [ZERO] * len(tree._state(conn)[2])
        )
    store.close()
    return frontier.to_bytes()


def test_prove_refuses_instead_of_printing_a_wrong_root(signed) -> None:
    store_url, _vkey, outside, sids = signed
    zero_node(store_url)
    code, out = run("prove", sids[0], "--store", store_url, "--checkpoint", str(outside))
    assert code == 2, out
    assert "cached tree does not agree with its records" in out
    assert "root_hash" not in out


def test_export_refuses_naming_the_tree(signed, tmp_path: Path) -> None:
    store_url, _vkey, _outside, _sids = signed
    zero_node(store_url)
    code, out = run("export", "--store", store_url, "--out", str(tmp_path / "bundle"))
    assert code == 2, out
    assert "cached tree" in out
    assert not (tmp_path / "bundle" / "manifest.json").exists()


def test_an_intact_cache_still_proves_and_signs(signed, tmp_path: Path) -> None:
    """The checks cost nothing to an honest store: the same commands succeed untouched."""
    store_url, _vkey, outside, sids = signed
    code, out = run("prove", sids[0], "--store", store_url, "--checkpoint", str(outside))
    assert code == 0, out
    assert json.loads(out)["inclusion"]
    code, out = run("checkpoint", "--store", store_url)
    assert code == 0, out
    code, out = run("verify", "--store", store_url)
    assert code == 0, out


def test_export_with_a_signed_checkpoint_never_writes_a_proof_the_records_do_not_give(
    signed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export that takes the checkpoint the store keeps (no key here to sign a fresh one)
    computes its proofs from the cache: a proof through the damaged node is refused before it
    is written (the auditor would otherwise be the first to find out)."""
    store_url, _vkey, _outside, _sids = signed
    code, out = run("checkpoint", "--store", store_url)  # all four sessions signed
    assert code == 0, out
    assert int(out.splitlines()[1]) >= 32  # node (4, 0) is a sibling on leaves 16-31's paths
    zero_node(store_url, level=4, idx=0)
    monkeypatch.setenv("BLACKBOX_KEY_FILE", "/nonexistent")  # export takes the stored checkpoint
    code, out = run("export", "--store", store_url, "--out", str(tmp_path / "bundle"))
    assert code == 2, out
    assert "gives no valid proof of leaf" in out or "cached tree" in out


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE tree_nodes SET hash = :z",
        "DELETE FROM tree_nodes",
        "UPDATE checkpoints SET root_hash = :z",
        "DELETE FROM checkpoints",
        "UPDATE log_identity SET store_id = 'another'",
        "DELETE FROM log_identity",
    ],
)
def test_the_tree_tables_refuse_edits_like_the_log(signed, statement: str) -> None:
    """Without dropping a trigger first, the cache, the checkpoints and the identity only grow."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import DBAPIError

    store_url = signed[0]
    engine = create_engine(store_url.replace("postgresql:", "postgresql+psycopg:", 1))
    try:
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text(statement), {"z": ZERO})
    finally:
        engine.dispose()
