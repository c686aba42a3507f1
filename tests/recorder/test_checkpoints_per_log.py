"""Checkpoints per log: any number of stores under one data directory are checkpointed, verified
and exported each on its own. The data directory used to hold one checkpoints file, so the second
store's first checkpoint was refused as "records before it were rewritten" (the first store's
last checkpoint read as its own)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store, tree
from blackbox.recorder.trust.signing import split_notes
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.storekit import T0, checkpoints_file, session_events


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def filled(url: str, sessions: int, start: int) -> str:
    store = open_store(url)
    for i in range(sessions):
        store.append(session_events(calls=2 + i, start_ns=T0 + (start + i) * 10**9))
    store.close()
    return url


def copy(source: str, target: str) -> None:
    """A SQLite database copied whole, write-ahead log included (sqlite3's backup)."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


@pytest.fixture
def two_stores(store_url: str, tmp_path: Path, blackbox_env: dict[str, str]) -> tuple[str, str]:
    """The backend's store and a SQLite store beside it, under one data directory and one key."""
    code, out = run("keys", "init", "--origin", "example.com/audit")
    assert code == 0, out
    other = f"sqlite:///{tmp_path / 'second.db'}"
    return filled(store_url, 2, 0), filled(other, 3, 10)


def test_two_stores_under_one_data_directory_checkpoint_verify_and_export_apart(
    two_stores: tuple[str, str], blackbox_env: dict[str, str], tmp_path: Path
) -> None:
    home = Path(blackbox_env["BLACKBOX_HOME"])
    code, out = run("keys", "show")
    vkey = out.strip()
    for url in two_stores:
        code, note = run("checkpoint", "--store", url)
        assert code == 0, note  # the second store's was refused when the file was shared
    files = [checkpoints_file(home, url) for url in two_stores]
    assert files[0] != files[1] and all(f.is_file() for f in files)
    # Each store grows and is checkpointed again: each file holds its own log's notes only.
    filled(two_stores[0], 1, 20)
    for url, filed in zip(two_stores, files, strict=True):
        code, note = run("checkpoint", "--store", url)
        assert code == 0, note
        assert split_notes(filed.read_text())[-1] == note
        code, out = run("verify", "--store", url, "--checkpoint", str(filed), "--key", vkey)
        assert code == 0, out
        bundle = tmp_path / f"bundle-{files.index(filed)}"
        code, out = run("export", "--store", url, "--out", str(bundle))
        assert code == 0, out
        code, out = run("verify-export", str(bundle), "--key", vkey)
        assert code == 0, out
    sizes = [json.loads((tmp_path / f"bundle-{i}" / "manifest.json").read_text()) for i in (0, 1)]
    assert sizes[0] != sizes[1]


def test_each_store_has_its_own_identity(two_stores: tuple[str, str]) -> None:
    ids = []
    for url in two_stores:
        store = open_store(url)
        with store.transaction(write=True) as conn:
            ids.append(tree.log_id(conn))
        with store.transaction(write=True) as conn:
            assert tree.log_id(conn) == ids[-1]  # made once, kept
        store.close()
    assert ids[0] != ids[1]


def test_a_rolled_back_store_is_still_refused_naming_its_own_file(
    two_stores: tuple[str, str], blackbox_env: dict[str, str], tmp_path: Path
) -> None:
    """Per-log files keep the guard they are for: a store rolled back below its own last
    checkpoint (a backup restored) is refused, the refusal naming that store's file, while the
    other store under the same data directory goes on being checkpointed."""
    url = two_stores[1]  # SQLite: a backup is a copy of its file
    db = url.removeprefix("sqlite:///")
    backup = str(tmp_path / "backup.db")
    copy(db, backup)
    filled(url, 1, 40)
    code, note = run("checkpoint", "--store", url)
    assert code == 0, note
    copy(backup, db)  # rolled back: the store forgot that checkpoint
    code, out = run("checkpoint", "--store", url)
    assert code == 2, out
    filed = checkpoints_file(Path(blackbox_env["BLACKBOX_HOME"]), url)
    assert "rolled back" in out and str(filed) in out
    code, out = run("checkpoint", "--store", two_stores[0])
    assert code == 0, out
