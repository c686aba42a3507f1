"""The design card's layering, checked over the source import by import.

Each rule reads the imports of every library module with `ast` (absolute, relative, and those
inside functions or `TYPE_CHECKING` blocks alike) and names the file, line and import that breaks
it. The checker itself is run on a small fake tree, so each rule is seen failing too. Imports built
from strings at run time (`importlib.import_module("click")`) are out of its reach.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
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
# third-party libraries confined to some folders (prefix of the path from the root)
CONFINED = {
    "click": ("blackbox/",),
    "sqlalchemy": ("recorder/store/", "migrations/"),
    "alembic": ("recorder/store/", "migrations/"),
    "duckdb": ("analytics/",),
    "pyarrow": ("analytics/",),
}
# Display code the write side must not pull in: terminal rendering belongs to blackbox/output.py.
DISPLAY = ("rich", "blackbox.output")
# The benches measure through the public APIs: they may read the Parquet files they time
# (pyarrow), but not drive a terminal command's library (click) or the database beside the store.
WITH_BENCH = [*PACKAGES, "bench"]
MAX_LINES = 700
# The hot stdio relay is kept in one piece by decision (its docstring says why).
OVERSIZE_ALLOWED = {"recorder/taps/stdio.py"}


@dataclass(frozen=True)
class Import:
    path: str  # from the root, with forward slashes
    line: int
    name: str  # the absolute module imported

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.name}"


def _module_parts(rel: Path) -> list[str]:
    parts = list(rel.with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


@functools.cache
def imports_of(root: Path, rel: Path) -> tuple[Import, ...]:
    """Every module `rel` imports, relative imports resolved against its own package.

    `from pkg import name` counts as importing both `pkg` and `pkg.name` (the name may be a
    submodule, as in `from blackbox import output`).
    """
    tree = ast.parse((root / rel).read_text(), filename=str(rel))
    package = _module_parts(rel)
    if rel.name != "__init__.py":
        package = package[:-1]
    where = rel.as_posix()
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(where, node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # A relative import climbing past the top package is refused by Python; resolve
                # it as if the root were a package anyway, so it cannot hide an import.
                keep = max(len(package) - (node.level - 1), 0)
                base = ".".join(package[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base:
                found.append(Import(where, node.lineno, base))
            found.extend(
                Import(where, node.lineno, f"{base}.{a.name}" if base else a.name)
                for a in node.names
                if a.name != "*"
            )
    return tuple(found)


def python_files(root: Path, packages: list[str]) -> Iterator[Path]:
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            yield path.relative_to(root)


def all_imports(root: Path, packages: list[str]) -> Iterator[Import]:
    for rel in python_files(root, packages):
        yield from imports_of(root, rel)


def _top(name: str) -> str:
    return name.split(".")[0]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# --- the rules: each returns its violations as lines naming file, line and import -------------


def layering_violations(root: Path) -> list[str]:
    return [
        str(imp)
        for imp in all_imports(root, PACKAGES)
        if _top(imp.name) in ALLOWED and _top(imp.name) not in ALLOWED[imp.path.split("/")[0]]
    ]


def replay_analytics_violations(root: Path) -> list[str]:
    other = {"replay": "analytics", "analytics": "replay"}
    return [
        str(imp)
        for imp in all_imports(root, ["replay", "analytics"])
        if _under(imp.name, other[imp.path.split("/")[0]])
    ]


def confined_violations(root: Path, library: str, scan: list[str] = WITH_BENCH) -> list[str]:
    """`library` imported outside the folders it is confined to, in the folders `scan`."""
    allowed = CONFINED[library]
    return [
        f"{imp} (confined to {', '.join(allowed)})"
        for imp in all_imports(root, scan)
        if _under(imp.name, library) and not imp.path.startswith(allowed)
    ]


def recorder_violations(root: Path) -> list[str]:
    banned = ("blackbox", "replay", "analytics", *DISPLAY)
    return [
        str(imp)
        for imp in all_imports(root, ["recorder"])
        if any(_under(imp.name, b) for b in banned)
    ]


def bench_violations(root: Path) -> list[str]:
    return [str(imp) for imp in all_imports(root, ["bench"]) if _under(imp.name, "tests")]


def oversize_modules(root: Path) -> list[str]:
    found = []
    for rel in python_files(root, PACKAGES):
        lines = len((root / rel).read_text().splitlines())
        if lines > MAX_LINES and rel.as_posix() not in OVERSIZE_ALLOWED:
            found.append(f"{rel.as_posix()} has {lines} lines (at most {MAX_LINES})")
    return found


# --- the rules over this project ----------------------------------------------------------------


def test_packages_import_only_the_layers_below_them() -> None:
    found = layering_violations(ROOT)
    assert not found, "\n".join(found)


def test_replay_and_analytics_never_import_each_other() -> None:
    found = replay_analytics_violations(ROOT)
    assert not found, "\n".join(found)


def test_only_blackbox_imports_click() -> None:
    found = confined_violations(ROOT, "click")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("library", ["sqlalchemy", "alembic"])
def test_only_the_store_and_migrations_import_the_database_libraries(library: str) -> None:
    found = confined_violations(ROOT, library)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("library", ["duckdb", "pyarrow"])
def test_only_analytics_imports_the_columnar_libraries(library: str) -> None:
    found = confined_violations(ROOT, library, PACKAGES)
    assert not found, "\n".join(found)


def test_recorder_imports_no_application_replay_analytics_or_display_code() -> None:
    found = recorder_violations(ROOT)
    assert not found, "\n".join(found)


def test_bench_imports_nothing_from_tests() -> None:
    found = bench_violations(ROOT)
    assert not found, "\n".join(found)


def test_no_library_module_over_700_lines() -> None:
    found = oversize_modules(ROOT)
    assert not found, "\n".join(found)


# --- the checker on a fake tree: every rule seen failing ------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_clean_fake_tree_passes(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/__init__.py": "",
            "recorder/store/sql.py": "import sqlalchemy\nfrom . import model\n",
            "recorder/taps/http.py": "from ..store import sql\nfrom recorder.model import Frame\n",
            "replay/__init__.py": "from recorder.model import Frame\n",
            "analytics/parquet.py": "import pyarrow\nfrom .views import x\n",
            "blackbox/cli.py": "import click\nfrom blackbox import output\nimport rich\n",
            "bench/ingest.py": "from recorder.store import open_store\n",
        },
    )
    assert layering_violations(root) == []
    assert sorted(replay_analytics_violations(root)) == []
    assert confined_violations(root, "click") == []
    assert confined_violations(root, "sqlalchemy") == []
    assert sorted(recorder_violations(root)) == []
    assert bench_violations(root) == []
    assert oversize_modules(root) == []


def test_click_anywhere_below_blackbox_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/taps/stdio.py": "def run():\n    import click\n",
            "analytics/report.py": "from click.testing import CliRunner\n",
            "bench/attach.py": "import click as c\n",
        },
    )
    found = confined_violations(root, "click")
    assert sorted(v.split(" (")[0] for v in found) == sorted(
        [
            "analytics/report.py:1 imports click.testing",
            "analytics/report.py:1 imports click.testing.CliRunner",
            "recorder/taps/stdio.py:2 imports click",
            "bench/attach.py:1 imports click",
        ]
    )


def test_sqlalchemy_outside_the_store_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/storekeeper.py": "from sqlalchemy import text\n",  # a prefix, not store/
            "bench/ingest.py": "if True:\n    from sqlalchemy.engine import create_engine\n",
            "migrations/env.py": "import sqlalchemy\n",
        },
    )
    found = confined_violations(root, "sqlalchemy")
    assert sorted(v.split(" (")[0] for v in found) == sorted(
        [
            "recorder/storekeeper.py:1 imports sqlalchemy",
            "recorder/storekeeper.py:1 imports sqlalchemy.text",
            "bench/ingest.py:2 imports sqlalchemy.engine",
            "bench/ingest.py:2 imports sqlalchemy.engine.create_engine",
        ]
    )


def test_replay_and_analytics_importing_each_other_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "replay/report.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from analytics.views import V\n",
            # climbing past the top package: refused by Python, still caught here
            "analytics/doctor.py": "from ..replay import matchers\n",
        },
    )
    assert sorted(replay_analytics_violations(root)) == [
        "analytics/doctor.py:1 imports replay",
        "analytics/doctor.py:1 imports replay.matchers",
        "replay/report.py:3 imports analytics.views",
        "replay/report.py:3 imports analytics.views.V",
    ]
    assert "replay/report.py:3 imports analytics.views" in layering_violations(root)


def test_recorder_reaching_up_or_into_display_code_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/views.py": "from rich.table import Table\nfrom blackbox import output\n",
            "recorder/taps/observer.py": "import analytics.parquet\nimport replay\n",
            "recorder/richness.py": "import richer\n",  # a prefix of a name, not the library
        },
    )
    assert sorted(recorder_violations(root)) == [
        "recorder/taps/observer.py:1 imports analytics.parquet",
        "recorder/taps/observer.py:2 imports replay",
        "recorder/views.py:1 imports rich.table",
        "recorder/views.py:1 imports rich.table.Table",
        "recorder/views.py:2 imports blackbox",
        "recorder/views.py:2 imports blackbox.output",
    ]


def test_bench_importing_tests_is_caught(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"bench/export.py": "from tests.analytics.kit import rows\n"})
    assert bench_violations(root) == [
        "bench/export.py:1 imports tests.analytics.kit",
        "bench/export.py:1 imports tests.analytics.kit.rows",
    ]


def test_an_oversize_module_is_caught_but_the_stdio_relay_is_allowed(tmp_path: Path) -> None:
    long = "x = 1\n" * (MAX_LINES + 1)
    root = _tree(
        tmp_path,
        {
            "recorder/taps/stdio.py": long,
            "analytics/parquet.py": long,
            "replay/ok.py": "x = 1\n" * MAX_LINES,
        },
    )
    assert oversize_modules(root) == [
        f"analytics/parquet.py has {MAX_LINES + 1} lines (at most 700)"
    ]
