"""First steps as a new user takes them: `make demo`'s script ends by saying how to get
`blackbox` on PATH, the top-level help names the data directory variable, and `make demo`
installs the package alone (no test tools)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.fixtures.environment import BLACKBOX, ROOT


def test_the_demo_ends_with_how_to_get_blackbox_on_path(tmp_path: Path) -> None:
    env = {**os.environ, "BLACKBOX_HOME": str(tmp_path / "home")}
    env.pop("BLACKBOX_STORE", None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-4:]
    venv_bin = Path(BLACKBOX).parent
    assert last[0].startswith(f"blackbox is installed in {venv_bin}, not on your PATH")
    assert f"source {venv_bin / 'activate'}" in last[1]
    assert "pipx install ." in last[2] and "uv tool install ." in last[2]


def test_top_level_help_names_blackbox_home() -> None:
    proc = subprocess.run([BLACKBOX, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "BLACKBOX_HOME" in proc.stdout and "blackbox where" in proc.stdout


def test_make_demo_installs_only_the_package() -> None:
    makefile = (ROOT / "Makefile").read_text()
    demo = re.search(r"^demo: (.*)$", makefile, re.MULTILINE)
    assert demo is not None and demo.group(1).split() == ["$(DEMO_STAMP)"]
    recipe = makefile.split("$(DEMO_STAMP): pyproject.toml\n", 1)[1].split("\n\n", 1)[0]
    assert "pip install --quiet --disable-pip-version-check -e .\n" in recipe + "\n"
    assert "[test]" not in recipe and "npm" not in recipe


def test_the_readme_quick_start_installs_blackbox_for_the_user() -> None:
    quick = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "pipx install ." in quick and "uv tool install ." in quick
