"""The copies of the log are as private as the log, whatever the umask: the analytics copy
(Parquet files, state, the DuckDB view database) and export bundles are folders 0700 and files
0600, and `export` makes no keys/ folder it does not write a key into."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import DAY_NS, record_session
from click.testing import CliRunner

from blackbox import config
from blackbox.cli.main import main
from tests.fixtures.environment import BLACKBOX
from tests.fixtures.file_modes import UMASKS, not_private, umask, under_umask


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def recorded(url: str, sessions: int = 2) -> None:
    store = open_store(url)
    now = time.time_ns()
    for n in range(sessions):
        record_session(store, now - (n + 1) * DAY_NS, secrets=True)  # two day partitions
    store.close()


@pytest.mark.parametrize("mask", UMASKS)
def test_the_analytics_copy_is_private(blackbox_env: dict[str, str], mask: int) -> None:
    home = Path(blackbox_env["BLACKBOX_HOME"])
    with umask(mask):
        recorded(config.default_store_url())
        code, out = run("sql", "SELECT count(*) AS n FROM sessions", "--format", "json")
        assert code == 0 and '"n": 2' in out, out
    copy = home / "analytics"
    assert list(copy.rglob("day=*/p*.parquet")) and list(copy.rglob("views-*.duckdb"))
    assert list(copy.rglob("state.json")) and list(copy.rglob("_schema.parquet"))
    assert not_private(home) == []


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize("mask", UMASKS)
def test_an_export_bundle_is_private(
    blackbox_env: dict[str, str], tmp_path: Path, mask: int, fmt: str
) -> None:
    home = Path(blackbox_env["BLACKBOX_HOME"])
    bundle = tmp_path / "audits" / "2026-11"  # both folders made by the export
    with umask(mask):
        recorded(config.default_store_url())
        assert run("keys", "init", "--origin", "example.com/audit")[0] == 0
        code, out = run("export", "--out", str(bundle), "--format", fmt)
        assert code == 0, out
    names = sorted(p.name for p in bundle.iterdir())
    assert names == sorted(
        [f"{stem}.{fmt}" for stem in ("records", "sessions", "decisions")]
        + ["manifest.json", "manifest.sig", "checkpoint.txt", "proofs.jsonl"]
    )
    assert not_private(tmp_path / "audits") == []
    assert list((home / "keys").glob("fingerprint-*.key"))  # the redaction key, made here
    assert not_private(home) == []
    assert run("verify-export", str(bundle))[0] == 0


def test_an_export_without_redaction_makes_no_keys_folder(
    blackbox_env: dict[str, str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    recorded(url)
    code, out = run("export", "--store", url, "--no-redact", "--out", str(tmp_path / "b"))
    assert code == 0, out
    assert not Path(blackbox_env["BLACKBOX_HOME"]).exists()  # no key, no folder for one


def _without_root_powers(argv: list[str]) -> list[str]:
    """`argv` run without the power to ignore file modes: as root, with every capability dropped
    (setpriv), so a folder its owner cannot write stops it as it stops any user."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("root ignores file modes, and setpriv (util-linux) is missing to drop that")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-all", *argv]


def test_an_export_under_a_umask_without_owner_write_writes_its_key(
    blackbox_env: dict[str, str], tmp_path: Path
) -> None:
    # The data directory exists already (a tap made it); the export makes keys/ for the store's
    # fingerprint key. Made 0700 less a umask of 200 it was 0500: the key could not be written,
    # the export failed and left an empty keys/ behind.
    home = Path(blackbox_env["BLACKBOX_HOME"])
    home.mkdir(mode=0o700)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    recorded(url)
    bundle = tmp_path / "bundle"
    argv = [BLACKBOX, "export", "--store", url, "--out", str(bundle)]
    done = subprocess.run(
        _without_root_powers(under_umask(0o200, argv)),
        env=blackbox_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert len(list((home / "keys").iterdir())) == 1
    assert not_private(home) == [] and not_private(bundle) == []
