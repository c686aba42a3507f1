"""The design's contexts and their arrows, checked over the source import by import.

Each rule reads the imports of every library module with `ast` (absolute, relative, and those
inside functions or `TYPE_CHECKING` blocks alike) and names the file, line and import that breaks
it. A file's module name is its installed one: the repository's folders are subpackages of
`blackbox` (pyproject's package-dir mapping), so `recorder/log/chain.py` is
`blackbox.recorder.log.chain`. The checker itself is run on a small fake tree, so each rule is seen
failing too. Imports built from strings at run time (`importlib.import_module("click")`) are out
of its reach.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.layout import FOLDERS, PACKAGES, package_dir

ROOT = Path(__file__).resolve().parent.parent

# The bounded contexts, by installed package. A module belongs to the longest one it is under;
# `kernel` is what every context shares (the error types, owner-only files, the version).
CONTEXTS = {
    "blackbox.recorder.log": "log",
    "blackbox.recorder.capture": "capture",
    "blackbox.recorder.store": "store",
    "blackbox.recorder.trust": "trust",
    "blackbox.recorder.gate": "gate",
    "blackbox.recorder.privacy": "privacy",
    "blackbox.recorder.query": "query",
    "blackbox.recorder.compliance": "compliance",
    "blackbox.recorder.otel": "otel",
    "blackbox.recorder": "kernel",
    "blackbox.migrations": "migrations",
    "blackbox.replay": "replay",
    "blackbox.analytics": "analytics",
    "blackbox.cli": "cli",
    "blackbox.ui": "ui",
    "blackbox.hosts": "hosts",
    "blackbox": "shell",
}
# context -> the contexts it may import (besides itself). docs/architecture.md draws these arrows;
# the reason for each one that is not obvious is beside it.
ALLOWED: dict[str, set[str]] = {
    "kernel": set(),
    "log": {"kernel"},
    # The schema and its migrations are two halves of one thing: the store runs them, they read
    # the store's table metadata.
    "store": {"kernel", "log", "migrations"},
    "migrations": {"store"},
    # A keyed fingerprint's key is per store (named by the store's public URL).
    "privacy": {"kernel", "log", "store"},
    "gate": {"kernel", "log", "store"},
    "trust": {"kernel", "log", "store"},
    # The shipper signs checkpoints as it commits (`--checkpoint-every`).
    "capture": {"kernel", "log", "store", "gate", "privacy", "trust"},
    # The live feed reads the journals of running taps, not only the store.
    "query": {"kernel", "log", "store", "capture"},
    # A bundle lists each session's counts and outcome as every surface shows them.
    "compliance": {"kernel", "log", "store", "trust", "privacy", "query"},
    "otel": {"kernel", "log", "store", "privacy", "query"},
    "replay": {"kernel", "log", "store", "query"},
    # The doctor explains heartbeats and tool drift with their own rules.
    "analytics": {"kernel", "log", "store", "query", "capture", "gate"},
    "hosts": {"kernel", "shell"},
    "ui": {"kernel", "log", "store", "query", "replay", "analytics", "gate", "trust"},
    # The shell: configuration, the proxy service, the pytest plugin.
    "shell": {"kernel", "log", "store", "trust", "replay", "compliance", "query"},
    "cli": {
        *("kernel", "log", "store", "capture", "gate", "privacy", "trust", "query"),
        *("compliance", "otel", "replay", "analytics", "hosts", "ui", "shell", "migrations"),
    },
}
# third-party libraries confined to some folders (prefix of the path from the root)
CONFINED = {
    "click": ("blackbox/cli/",),
    # The read model's queries are SQL over the store's tables.
    "sqlalchemy": ("recorder/store/", "recorder/query/", "migrations/"),
    "alembic": ("recorder/store/", "migrations/"),
    "duckdb": ("analytics/",),
    # Records as Arrow columns: the columns (log), the export files and the Parquet copy.
    "pyarrow": ("analytics/", "recorder/compliance/", "recorder/log/columns.py"),
    # Every pattern goes through the one engine that keeps redaction linear and converts RE2's
    # errors: a module compiling with re2 itself would bypass the refusal of what RE2 cannot run.
    "re2": ("recorder/privacy/engine.py",),
}
# Display code the write side must not pull in: terminal rendering belongs to blackbox/cli/.
DISPLAY = ("rich", "blackbox.cli")
# The benches measure through the public APIs: they may read the Parquet files they time
# (pyarrow), but not drive a terminal command's library (click) or the database beside the store.
WITH_BENCH = [*PACKAGES, "bench"]
MAX_LINES = 700
# The hot stdio relay is kept in one piece by decision (its docstring says why).
OVERSIZE_ALLOWED = {"recorder/capture/taps/stdio.py"}
# No folder holds more than this share of the package's lines (its own files, not its subfolders).
MAX_FOLDER_SHARE = 0.25


@dataclass(frozen=True)
class Import:
    path: str  # from the root, with forward slashes
    line: int
    name: str  # the absolute module imported (or the name imported from it)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.name}"


def module_name(rel: Path) -> list[str]:
    """The installed module name of a file, as parts: folders map through FOLDERS."""
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts and parts[0] in FOLDERS:
        parts = FOLDERS[parts[0]].split(".") + parts[1:]
    return parts


@functools.cache
def imports_of(root: Path, rel: Path) -> tuple[Import, ...]:
    """Every module `rel` imports, relative imports resolved against its own package.

    `from pkg import name` counts as importing both `pkg` and `pkg.name` (the name may be a
    submodule, as in `from blackbox.cli import output`).
    """
    tree = ast.parse((root / rel).read_text(), filename=str(rel))
    package = module_name(rel)
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


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def context_of(name: str) -> str | None:
    """The context a module (or a name imported from one) belongs to; None outside the project."""
    best = max((p for p in CONTEXTS if _under(name, p)), key=len, default=None)
    return CONTEXTS[best] if best else None


# --- the rules: each returns its violations as lines naming file, line and import -------------


def context_violations(root: Path) -> list[str]:
    """Imports along an arrow ALLOWED does not draw. `from blackbox import X` reads as importing
    `blackbox.X` only: the bare parent of an imported name is not an arrow of its own."""
    found = []
    for rel in python_files(root, PACKAGES):
        source = context_of(".".join(module_name(rel)))
        imps = imports_of(root, rel)
        named = {(i.line, i.name.rpartition(".")[0]) for i in imps}
        for imp in imps:
            if imp.name == "blackbox" and (imp.line, "blackbox") in named:
                continue
            target = context_of(imp.name)
            if target and source and target != source and target not in ALLOWED[source]:
                found.append(f"{imp} ({source} -> {target})")
    return found


def face_names(root: Path, package: str) -> set[str]:
    """What a context's package offers other contexts: the names of its `_FACE` table and what
    its __init__ defines or imports itself (functions, classes, assignments, public imports)."""
    init = package_dir(root, package) / "__init__.py"
    if not init.exists():
        return set()
    names: set[str] = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom) and _under(node.module or "", package):
            # its own module's name, imported at the top level: offered as it is
            names |= {a.asname or a.name for a in node.names if (a.asname or a.name)[0] != "_"}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                    if target.id == "_FACE" and isinstance(node.value, ast.Dict):
                        names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return names


def face_violations(root: Path) -> list[str]:
    """Imports from another context that reach past its package (the context's one public
    face) into its modules, or ask the face for a name it does not offer."""
    found = []
    packages = {name: package for package, name in CONTEXTS.items()}
    for rel in python_files(root, PACKAGES):
        source = context_of(".".join(module_name(rel)))
        tree = ast.parse((root / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                pairs = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                pairs = [(node.module, [a.name for a in node.names])]
            else:
                continue
            for module, names in pairs:
                target = context_of(module)
                if target is None or target == source:
                    continue
                face = packages[target]
                where = f"{rel.as_posix()}:{node.lineno}"
                if module != face:
                    found.append(f"{where} imports {module}, not the face {face}")
                    continue
                offered = face_names(root, face)
                found.extend(
                    f"{where} asks {face} for {name}, which its face does not offer"
                    for name in names or []
                    # `from blackbox import migrations`: another context's face by its name
                    if name not in offered and f"{module}.{name}" not in CONTEXTS
                )
    return found


def replay_analytics_violations(root: Path) -> list[str]:
    other = {"replay": "blackbox.analytics", "analytics": "blackbox.replay"}
    legacy = {"replay": "analytics", "analytics": "replay"}
    return [
        str(imp)
        for imp in all_imports(root, ["replay", "analytics"])
        if _under(imp.name, other[imp.path.split("/")[0]])
        or _under(imp.name, legacy[imp.path.split("/")[0]])
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
    """The write side reaching up into replay, analytics, the shell or display code."""
    banned = ("blackbox.replay", "blackbox.analytics", "blackbox.ui", "blackbox.hosts", *DISPLAY)
    shell = {f"blackbox.{m}" for m in ("config", "proxy_service", "pytest_plugin")}
    return [
        str(imp)
        for imp in all_imports(root, ["recorder"])
        if any(_under(imp.name, b) for b in banned) or imp.name in shell
    ]


def old_name_imports(root: Path) -> list[str]:
    """Imports of the folders' own names (`import recorder`): they do not exist once installed."""
    old = ("recorder", "replay", "analytics", "migrations")
    return [
        str(imp)
        for imp in all_imports(root, [*PACKAGES, "bench", "tests", "examples"])
        if any(_under(imp.name, o) for o in old)
    ]


def command_cross_imports(root: Path) -> list[str]:
    """A command module (blackbox/cli/cmd_*.py) importing another: what two commands share lives
    in a module of its own (options, output, otel_options, ...), so each command loads alone."""
    return [
        str(imp)
        for imp in all_imports(root, ["blackbox"])
        if imp.path.startswith("blackbox/cli/cmd_")
        and imp.name.startswith("blackbox.cli.cmd_")
        and not imp.name.startswith(f"blackbox.cli.{Path(imp.path).stem}")
    ]


def cross_test_imports(root: Path) -> list[str]:
    """Tests importing another test module or a conftest: what tests share is in tests/fixtures."""
    found = []
    for imp in all_imports(root, ["tests"]):
        parts = imp.name.split(".")
        if parts[0] == "tests" and any(p.startswith("test_") or p == "conftest" for p in parts):
            found.append(str(imp))
    return found


def bench_violations(root: Path) -> list[str]:
    return [str(imp) for imp in all_imports(root, ["bench"]) if _under(imp.name, "tests")]


def oversize_modules(root: Path) -> list[str]:
    found = []
    for rel in python_files(root, PACKAGES):
        lines = len((root / rel).read_text().splitlines())
        if lines > MAX_LINES and rel.as_posix() not in OVERSIZE_ALLOWED:
            found.append(f"{rel.as_posix()} has {lines} lines (at most {MAX_LINES})")
    return found


def crowded_folders(root: Path) -> list[str]:
    """Folders whose own modules hold more than MAX_FOLDER_SHARE of the package's lines."""
    per_folder: dict[str, int] = {}
    for rel in python_files(root, PACKAGES):
        lines = len((root / rel).read_text().splitlines())
        folder = rel.parent.as_posix()
        per_folder[folder] = per_folder.get(folder, 0) + lines
    total = sum(per_folder.values())
    return [
        f"{folder}/ holds {lines} of {total} lines ({lines / total:.0%})"
        for folder, lines in sorted(per_folder.items())
        if lines > MAX_FOLDER_SHARE * total
    ]


# --- the rules over this project ----------------------------------------------------------------


def test_contexts_import_only_along_the_allowed_arrows() -> None:
    found = context_violations(ROOT)
    assert not found, "\n".join(found)


def test_contexts_import_each_other_only_through_their_faces() -> None:
    found = face_violations(ROOT)
    assert not found, "\n".join(found)


def test_no_face_offers_a_name_its_submodule_shadows() -> None:
    """Once a submodule is imported, Python sets it as the package's attribute of that name, and
    the face's lazy name is never asked: `from pkg import verify_export` gave the module, not the
    function. A face name that is not its submodule must not be a submodule's name."""
    clashes = []
    for package in CONTEXTS:
        directory = package_dir(ROOT, package)
        init = (directory / "__init__.py").read_text()
        tree = ast.parse(init)
        for node in tree.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Dict)):
                continue
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                assert isinstance(key, ast.Constant) and isinstance(value, ast.Tuple)
                attr = value.elts[1]
                is_module = isinstance(attr, ast.Constant) and attr.value is None
                shadowed = (directory / f"{key.value}.py").exists() or (
                    directory / str(key.value) / "__init__.py"
                ).exists()
                if shadowed and not is_module:
                    clashes.append(f"{package}: {key.value}")
    assert not clashes, clashes


def test_every_context_has_its_arrows_declared() -> None:
    assert set(ALLOWED) == set(CONTEXTS.values())
    assert all(targets <= set(ALLOWED) for targets in ALLOWED.values())
    assert not any("cli" in t or "ui" in t for c, t in ALLOWED.items() if c != "cli")


def test_replay_and_analytics_never_import_each_other() -> None:
    found = replay_analytics_violations(ROOT)
    assert not found, "\n".join(found)


def test_only_the_cli_imports_click() -> None:
    found = confined_violations(ROOT, "click")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("library", ["sqlalchemy", "alembic"])
def test_only_the_store_and_migrations_import_the_database_libraries(library: str) -> None:
    found = confined_violations(ROOT, library)
    assert not found, "\n".join(found)


def test_only_the_redaction_engine_imports_re2() -> None:
    found = confined_violations(ROOT, "re2")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("library", ["duckdb", "pyarrow"])
def test_only_analytics_and_the_export_import_the_columnar_libraries(library: str) -> None:
    found = confined_violations(ROOT, library, PACKAGES)
    assert not found, "\n".join(found)


def test_recorder_imports_no_application_replay_analytics_or_display_code() -> None:
    found = recorder_violations(ROOT)
    assert not found, "\n".join(found)


def test_nothing_imports_the_folders_by_their_own_names() -> None:
    found = old_name_imports(ROOT)
    assert not found, "\n".join(found)


def test_command_modules_do_not_import_each_other() -> None:
    found = command_cross_imports(ROOT)
    assert not found, "\n".join(found)


def test_tests_share_helpers_only_through_fixtures() -> None:
    found = cross_test_imports(ROOT)
    assert not found, "\n".join(found)


def test_bench_imports_nothing_from_tests() -> None:
    found = bench_violations(ROOT)
    assert not found, "\n".join(found)


def test_no_library_module_over_700_lines() -> None:
    found = oversize_modules(ROOT)
    assert not found, "\n".join(found)


def test_no_folder_holds_more_than_a_quarter_of_the_code() -> None:
    found = crowded_folders(ROOT)
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
            "recorder/store/sql.py": "import sqlalchemy\nfrom . import schema\n",
            "recorder/capture/taps/http.py": (
                "from ...store import sql\nfrom blackbox.recorder.log.model import Frame\n"
            ),
            "replay/__init__.py": "from blackbox.recorder.log.model import Frame\n",
            "analytics/parquet.py": "import pyarrow\nfrom .views import x\n",
            "blackbox/cli/main.py": "import click\nfrom blackbox.cli import output\nimport rich\n",
            "recorder/store/migrate.py": "from blackbox import migrations\n",
            "bench/ingest.py": "from blackbox.recorder.store import open_store\n",
        },
    )
    assert context_violations(root) == []
    assert replay_analytics_violations(root) == []
    assert confined_violations(root, "click") == []
    assert confined_violations(root, "sqlalchemy") == []
    assert recorder_violations(root) == []
    assert old_name_imports(root) == []
    assert bench_violations(root) == []
    assert oversize_modules(root) == []


def test_reaching_past_a_face_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/log/__init__.py": "_FACE = {'Kind': ('blackbox.recorder.log.model', 'Kind')}"
            "\ndef helper():\n    pass\n",
            "recorder/log/model.py": "Kind = 1\n",
            "recorder/store/sql.py": "from blackbox.recorder.log.model import Kind\n"
            "from blackbox.recorder.log import Kind, helper, secret\n"
            "import blackbox.recorder.log.model\n",
            "recorder/log/chain.py": "from blackbox.recorder.log.model import Kind\n",  # its own
        },
    )
    assert sorted(face_violations(root)) == [
        "recorder/store/sql.py:1 imports blackbox.recorder.log.model, not the face "
        "blackbox.recorder.log",
        "recorder/store/sql.py:2 asks blackbox.recorder.log for secret, which its face does "
        "not offer",
        "recorder/store/sql.py:3 imports blackbox.recorder.log.model, not the face "
        "blackbox.recorder.log",
    ]


def test_an_arrow_against_the_design_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            # the store reaching up into trust; a relative import resolves to its installed name
            "recorder/store/sql.py": "def f():\n    from ..trust import signing\n",
            # the log importing capture
            "recorder/log/chain.py": "from blackbox.recorder.capture.journal import Journal\n",
            # anyone importing the CLI
            "recorder/query/listing.py": "from blackbox.cli.output import table\n",
        },
    )
    assert sorted(context_violations(root)) == [
        "recorder/log/chain.py:1 imports blackbox.recorder.capture.journal (log -> capture)",
        "recorder/log/chain.py:1 imports blackbox.recorder.capture.journal.Journal"
        " (log -> capture)",
        "recorder/query/listing.py:1 imports blackbox.cli.output (query -> cli)",
        "recorder/query/listing.py:1 imports blackbox.cli.output.table (query -> cli)",
        "recorder/store/sql.py:2 imports blackbox.recorder.trust (store -> trust)",
        "recorder/store/sql.py:2 imports blackbox.recorder.trust.signing (store -> trust)",
    ]


def test_click_anywhere_but_the_cli_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/capture/taps/stdio.py": "def run():\n    import click\n",
            "analytics/report.py": "from click.testing import CliRunner\n",
            "blackbox/hosts/attach.py": "import click\n",
            "bench/attach.py": "import click as c\n",
        },
    )
    found = confined_violations(root, "click")
    assert sorted(v.split(" (")[0] for v in found) == sorted(
        [
            "analytics/report.py:1 imports click.testing",
            "analytics/report.py:1 imports click.testing.CliRunner",
            "blackbox/hosts/attach.py:1 imports click",
            "recorder/capture/taps/stdio.py:2 imports click",
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


def test_re2_beside_the_redaction_engine_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/privacy/engine.py": "import re2\n",
            "recorder/privacy/rules.py": "import re2 as fast\n",  # a rule compiled past the engine
            "recorder/gate/policy_rules.py": "from re2 import compile\n",
        },
    )
    found = confined_violations(root, "re2")
    assert sorted(v.split(" (")[0] for v in found) == sorted(
        [
            "recorder/privacy/rules.py:1 imports re2",
            "recorder/gate/policy_rules.py:1 imports re2",
            "recorder/gate/policy_rules.py:1 imports re2.compile",
        ]
    )


def test_replay_and_analytics_importing_each_other_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "replay/report.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from blackbox.analytics.views import V\n",
            # relative, through the installed parent `blackbox`
            "analytics/doctor_session.py": "from ..replay import matchers\n",
        },
    )
    assert sorted(replay_analytics_violations(root)) == [
        "analytics/doctor_session.py:1 imports blackbox.replay",
        "analytics/doctor_session.py:1 imports blackbox.replay.matchers",
        "replay/report.py:3 imports blackbox.analytics.views",
        "replay/report.py:3 imports blackbox.analytics.views.V",
    ]
    assert any("(replay -> analytics)" in v for v in context_violations(root))


def test_recorder_reaching_up_or_into_display_code_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/views.py": "from rich.table import Table\nfrom blackbox.cli import output\n",
            "recorder/capture/observer.py": (
                "import blackbox.analytics.parquet\nimport blackbox.replay\n"
            ),
            "recorder/richness.py": "import richer\nfrom blackbox import config\n",
        },
    )
    assert sorted(recorder_violations(root)) == [
        "recorder/capture/observer.py:1 imports blackbox.analytics.parquet",
        "recorder/capture/observer.py:2 imports blackbox.replay",
        "recorder/richness.py:2 imports blackbox.config",
        "recorder/views.py:1 imports rich.table",
        "recorder/views.py:1 imports rich.table.Table",
        "recorder/views.py:2 imports blackbox.cli",
        "recorder/views.py:2 imports blackbox.cli.output",
    ]


def test_importing_a_folder_by_its_own_name_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/store/migrate.py": "import migrations\n",
            "tests/test_x.py": "from recorder.log import chain\n",
            "bench/b.py": "from blackbox.recorder import recorder_things\n",  # not a folder name
        },
    )
    assert sorted(old_name_imports(root)) == [
        "recorder/store/migrate.py:1 imports migrations",
        "tests/test_x.py:1 imports recorder.log",
        "tests/test_x.py:1 imports recorder.log.chain",
    ]


def test_a_command_module_importing_another_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "blackbox/cli/cmd_replay.py": "from blackbox.cli.cmd_suite import suite_options\n"
            "from blackbox.cli.options import store_option\n",
            "blackbox/cli/cmd_suite.py": "from . import cmd_otel\n",
            "blackbox/cli/main.py": "from blackbox.cli import cmd_store\n",  # the registry may
        },
    )
    assert sorted(command_cross_imports(root)) == [
        "blackbox/cli/cmd_replay.py:1 imports blackbox.cli.cmd_suite",
        "blackbox/cli/cmd_replay.py:1 imports blackbox.cli.cmd_suite.suite_options",
        "blackbox/cli/cmd_suite.py:1 imports blackbox.cli.cmd_otel",
    ]


def test_a_test_importing_another_test_module_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "tests/recorder/test_a.py": "from tests.recorder.test_b import helper\n"
            "from tests.fixtures.taps import INIT\n",
            "tests/blackbox/test_c.py": "from tests.conftest import BLACKBOX\n",
        },
    )
    assert sorted(cross_test_imports(root)) == [
        "tests/blackbox/test_c.py:1 imports tests.conftest",
        "tests/blackbox/test_c.py:1 imports tests.conftest.BLACKBOX",
        "tests/recorder/test_a.py:1 imports tests.recorder.test_b",
        "tests/recorder/test_a.py:1 imports tests.recorder.test_b.helper",
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
            "recorder/capture/taps/stdio.py": long,
            "analytics/parquet.py": long,
            "replay/ok.py": "x = 1\n" * MAX_LINES,
        },
    )
    assert oversize_modules(root) == [
        f"analytics/parquet.py has {MAX_LINES + 1} lines (at most 700)"
    ]


def test_a_folder_with_more_than_a_quarter_of_the_code_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "recorder/a.py": "x = 1\n" * 30,
            "recorder/log/b.py": "x = 1\n" * 25,
            "replay/c.py": "x = 1\n" * 25,
            "analytics/d.py": "x = 1\n" * 20,
        },
    )
    assert crowded_folders(root) == ["recorder/ holds 30 of 100 lines (30%)"]
