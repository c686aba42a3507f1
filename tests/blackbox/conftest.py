"""Every test here gets a data directory of its own: attach keeps backups and its index of
attached configs there, and nothing a test does may land in the user's real one."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def own_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "bbhome"
    monkeypatch.setenv("BLACKBOX_HOME", str(home))
    monkeypatch.delenv("BLACKBOX_STORE", raising=False)
    return home
