"""The distribution: what it installs and declares.

Top-level names such as `analytics` or `replay` exist on PyPI too: every one must come from this
distribution. The layering of the design card is checked in test_architecture.py.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["blackbox", "recorder", "replay", "analytics", "migrations"]


@pytest.mark.parametrize("name", PACKAGES)
def test_top_level_package_comes_from_this_distribution(name):
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().is_relative_to(ROOT), module.__file__
    dist = importlib.metadata.distribution("mcp-blackbox")
    assert dist.metadata["Name"] == "mcp-blackbox"
    assert set(importlib.metadata.packages_distributions()[name]) == {"mcp-blackbox"}


def test_console_script_is_declared():
    eps = importlib.metadata.distribution("mcp-blackbox").entry_points
    assert any(ep.name == "blackbox" and ep.value == "blackbox.cli:main" for ep in eps)


def test_every_command_is_registered_under_its_own_name():
    from blackbox.cli import COMMAND_MODULES, load_command

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
    return {m for m in found if m not in sys.stdlib_module_names and m not in PACKAGES}


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
