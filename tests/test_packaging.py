"""The distribution and the design's dependency direction.

Top-level names such as `analytics` or `replay` exist on PyPI too: every one must come from this
distribution. And the layering of the design card is checked over the source, import by import.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["blackbox", "recorder", "replay", "analytics", "migrations"]

# package -> project packages it may import
ALLOWED = {
    "recorder": {"recorder", "migrations"},
    "migrations": {"migrations", "recorder"},
    "replay": {"replay", "recorder"},
    "analytics": {"analytics", "recorder"},
    "blackbox": {"blackbox", "recorder", "replay", "analytics", "migrations"},
}
# third-party libraries confined to some packages (prefix of the module path)
CONFINED = {
    "click": {"blackbox"},
    "sqlalchemy": {"recorder/store", "migrations"},
    "alembic": {"recorder/store", "migrations"},
    "duckdb": {"analytics"},
    "pyarrow": {"analytics"},
}


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


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def source_files():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield package, path


def test_dependency_direction_holds():
    violations = []
    for package, path in source_files():
        rel = path.relative_to(ROOT).as_posix()
        for name in imports_of(path):
            top = name.split(".")[0]
            if top in ALLOWED and top not in ALLOWED[package]:
                violations.append(f"{rel} imports {name}")
            if top in CONFINED and not any(rel.startswith(p) for p in CONFINED[top]):
                violations.append(f"{rel} imports {name} (confined to {sorted(CONFINED[top])})")
    assert violations == []


def test_the_checker_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import click\nfrom analytics import views\n")
    assert imports_of(bad) == {"click", "analytics"}


def test_every_command_is_registered_under_its_own_name():
    from blackbox.cli import COMMAND_MODULES, load_command

    modules = {importlib.import_module(m) for m in set(COMMAND_MODULES.values())}
    defined = {c.name for module in modules for c in module.COMMANDS}
    assert defined == set(COMMAND_MODULES)
    assert all(load_command(name).name == name for name in COMMAND_MODULES)
