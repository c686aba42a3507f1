"""The data directory is private whatever the umask: the directory and every folder in it 0700,
the SQLite store with its -wal and -shm files, journals, keys and the checkpoints file 0600. Run
under a permissive umask (000) and under one that takes the owner's own bits away (277)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import record_session
from click.testing import CliRunner

from blackbox import config
from blackbox.cli.main import main
from tests.fixtures import peers
from tests.fixtures.file_modes import UMASKS, not_private, umask, under_umask
from tests.fixtures.taps import wait_sealed


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize("mask", UMASKS)
def test_the_store_and_its_wal_and_shm_are_private(tmp_path: Path, mask: int) -> None:
    home = tmp_path / "data" / "mcp-blackbox"  # its parent is missing too
    with umask(mask):
        store = open_store(f"sqlite:///{home / 'blackbox.db'}")
        try:
            record_session(store, time.time_ns())
            names = sorted(p.name for p in home.iterdir())
            assert names == ["blackbox.db", "blackbox.db-shm", "blackbox.db-wal"]
            assert not_private(tmp_path / "data") == []  # while SQLite has them open
        finally:
            store.close()


def test_a_store_that_exists_keeps_its_mode(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    open_store(url).close()
    (tmp_path / "shared.db").chmod(0o640)  # the user's choice, not ours to undo
    with umask(0o000):
        store = open_store(url)
        record_session(store, time.time_ns())
        store.close()
    assert stat.S_IMODE((tmp_path / "shared.db").stat().st_mode) == 0o640


def test_a_recorded_session_leaves_only_private_files(tmp_path: Path) -> None:
    home = tmp_path / "bbhome"
    tap = under_umask(0o000, peers.record_command(peers.EXAMPLE_SERVER, name="example"))
    outcome = peers.run_client(
        "legacy", peers.params(tap, peers.tap_env(home)), [("echo", {"message": "hi"})]
    )
    assert outcome.results
    store = open_store(f"sqlite:///{home / 'blackbox.db'}", create=False)
    try:
        wait_sealed(store)
    finally:
        store.close()
    assert (home / "journal").is_dir()  # the tap's journal folder, made with the data directory
    assert not_private(home) == []


@pytest.mark.parametrize("mask", UMASKS)
def test_keys_and_checkpoints_are_private(blackbox_env: dict[str, str], mask: int) -> None:
    home = Path(blackbox_env["BLACKBOX_HOME"])
    with umask(mask):
        code, out = run("keys", "init", "--origin", "example.com/audit")
        assert code == 0, out
        store = open_store(config.default_store_url())
        record_session(store, time.time_ns())
        store.close()
        code, out = run("checkpoint")
        assert code == 0, out
    assert (home / "keys" / "checkpoint.key").is_file()
    (filed,) = (home / "checkpoints").iterdir()  # one store: one log's file
    assert filed.read_text().startswith("example.com/audit\n")
    assert not_private(home) == []


def test_a_key_that_cannot_be_written_leaves_no_folder(blackbox_env: dict[str, str]) -> None:
    home = Path(blackbox_env["BLACKBOX_HOME"])
    too_long = home / "keys" / ("k" * 300)  # the folders can be made, the file cannot
    code, out = run("keys", "init", "--key-file", str(too_long))
    assert code == 2 and "cannot create" in out
    assert not home.exists()  # neither keys/ nor the data directory made for it
    with umask(0o000):
        code, out = run("keys", "init")
    assert code == 0, out
    assert not_private(home) == []
    os.remove(home / "keys" / "checkpoint.key")
    code, out = run("keys", "init", "--key-file", str(too_long))
    assert code == 2 and (home / "keys").is_dir()  # a folder made before is not ours to remove
