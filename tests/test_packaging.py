"""The distribution: what it installs and declares.

It installs one top-level import name, `blackbox`: the repository's folders recorder/, replay/,
analytics/ and migrations/ become its subpackages (pyproject's package-dir), so a user's own
`migrations` or `analytics` is never shadowed by ours inside their test suite, where our pytest
plugin runs. The design's arrows between contexts are checked in test_architecture.py.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.fixtures.environment import ROOT
from tests.fixtures.layout import FOLDERS, PACKAGES


def test_every_folder_with_an_init_is_a_declared_package():
    """setuptools installs the packages pyproject lists, no more: a new subpackage missing from
    the list would be absent from the wheel while every test in the checkout still passed."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            on_disk.add(".".join([package, *rel]))
    assert set(config["packages"]) == on_disk
    assert config["package-dir"] == {package: folder for folder, package in FOLDERS.items()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The project as `pip install .` puts it: a wheel built from this tree, installed alone
    (its dependencies are this environment's) into a directory of its own."""
    out = tmp_path_factory.mktemp("dist")
    # Built from a copy: setuptools leaves a build/ folder in the source, and a stale one would
    # carry deleted modules into the next wheel.
    source = out / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "node_modules", "build", "*.egg-info", "__pycache__", ".*cache"
        ),
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", out / "wheel", source], check=True)
    wheel = next((out / "wheel").glob("*.whl"))
    target = out / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", target, wheel], check=True)
    return target


def _run_installed(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_pip_install_adds_one_top_level_import_name_and_the_plugin_loads(installed, tmp_path):
    """One wheel built for both checks (a build is the slow part)."""
    names = {p.name for p in installed.iterdir()} - {"bin"}
    assert {n for n in names if not n.endswith(".dist-info")} == {"blackbox"}
    probe = _run_installed(
        installed,
        "import importlib.util, blackbox.recorder.log.chain as c, blackbox.migrations as m\n"
        "print(c.__file__); print(m.__file__)\n"
        "for name in ('recorder', 'replay', 'analytics', 'migrations'):\n"
        "    print(name, importlib.util.find_spec(name))\n",
        tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    lines = probe.stdout.splitlines()
    assert all(Path(line).is_relative_to(installed) for line in lines[:2]), lines
    assert lines[2:] == [f"{n} None" for n in ("recorder", "replay", "analytics", "migrations")]

    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    probe = _run_installed(
        installed,
        "import sys, pytest\n"
        "from importlib.metadata import entry_points\n"
        "(ep,) = [e for e in entry_points(group='pytest11') if e.name == 'blackbox']\n"
        "print(ep.load().__file__)\n"
        "sys.exit(pytest.main(['--markers', '-p', 'no:cacheprovider']))\n",
        tmp_path,
    )
    assert probe.returncode == 0, probe.stderr + probe.stdout
    assert Path(probe.stdout.splitlines()[0]).is_relative_to(installed)
    assert "@pytest.mark.blackbox_replay(" in probe.stdout


def test_console_script_is_declared():
    eps = importlib.metadata.distribution("mcp-blackbox").entry_points
    assert any(ep.name == "blackbox" and ep.value == "blackbox.cli.main:main" for ep in eps)


def test_every_command_is_registered_under_its_own_name():
    from blackbox.cli.main import COMMAND_MODULES, load_command

    modules = {importlib.import_module(m) for m in set(COMMAND_MODULES.values())}
    defined = {c.name for module in modules for c in module.COMMANDS}
    assert defined == set(COMMAND_MODULES)
    assert all(load_command(name).name == name for name in COMMAND_MODULES)


# Imported only where its own host has already loaded it: the pytest plugin runs inside pytest.
PROVIDED_BY_HOST = {"pytest"}


def _third_party_imports() -> set[str]:
    import ast
    import sys

    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "blackbox"}


def test_every_third_party_import_is_declared():
    """A module imported but arriving only through another package's dependencies (starlette,
    uvicorn, sse-starlette and httpx2 came with `mcp`) breaks when that package drops it."""
    from packaging.requirements import Requirement

    dist = importlib.metadata.distribution("mcp-blackbox")
    declared = {Requirement(r).name.lower().replace("_", "-") for r in dist.requires or []} - {
        "mcp-blackbox"
    }
    providers = importlib.metadata.packages_distributions()
    undeclared = {
        module: providers.get(module)
        for module in _third_party_imports() - PROVIDED_BY_HOST
        if not {d.lower().replace("_", "-") for d in providers.get(module, [])} & declared
    }
    assert undeclared == {}
