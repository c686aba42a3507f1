"""Type-check the package as it is installed: `make typecheck`.

The repository's folders are installed as subpackages of `blackbox` (pyproject's package-dir),
which an editable install provides through an import hook that type checkers do not run. So the
installed shape is laid out as links in a scratch folder (blackbox/recorder -> recorder/, ...),
mypy checks that, and its report names the files as they are in the repository.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = ("recorder", "replay", "analytics", "migrations")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="blackbox-typecheck-") as scratch:
        package = Path(scratch) / "blackbox"
        package.mkdir()
        for entry in (ROOT / "blackbox").iterdir():
            if entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        for folder in MAPPED:
            (package / folder).symlink_to(ROOT / folder)
        mypy = [sys.executable, "-m", "mypy", "-p", "blackbox"]
        config = ["--config-file", str(ROOT / "pyproject.toml")]
        cache = ["--cache-dir", str(ROOT / ".mypy_cache")]
        done = subprocess.run([*mypy, *config, *cache], cwd=scratch, capture_output=True, text=True)
    for line in (done.stdout + done.stderr).splitlines():
        for folder in MAPPED:
            if line.startswith(f"blackbox/{folder}/"):
                line = line.removeprefix("blackbox/")
                break
        print(line)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
