"""Retention that runs by itself: `retention schedule` renders a systemd user timer and a cron
line that run `retention apply` with the store, the default age (90 days) and the archive root
spelled out; each rendering's command is run once, as the timer or cron would run it (a shell, a
bare environment), and removes the old unheld sessions; `retention status` then says when it ran,
what it removed and what the holds kept."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from blackbox.recorder.compliance.retention_schedule import ScheduleError, cron_when
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import DAY_NS, record_session
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.environment import BLACKBOX

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def aged(tmp_path: Path):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    now = time.time_ns()
    ids = {
        "old": record_session(store, now - 120 * DAY_NS),
        "old_held": record_session(store, now - 100 * DAY_NS),
        "recent": record_session(store, now - 10 * DAY_NS),
    }
    store.add_hold(ids["old_held"], "case 42")
    store.close()
    return url, ids


def _invoke(args: list[str], home: Path) -> str:
    out = CliRunner().invoke(
        main, args, env={"BLACKBOX_HOME": str(home), "BLACKBOX_RETENTION": None}
    )
    assert out.exit_code == 0, out.output
    return out.output


def _bare_env(tmp_path: Path) -> dict[str, str]:
    """What cron or a systemd user service gives a job: no BLACKBOX_* of the user's shell."""
    return {"HOME": str(tmp_path / "cronhome"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def _sessions(url: str) -> set[str]:
    store = open_store(url)
    try:
        return {s.session_id for s in store.list_sessions()}
    finally:
        store.close()


def test_cron_line_runs_retention_apply_with_the_configured_settings(aged, tmp_path: Path) -> None:
    url, ids = aged
    home, archive = tmp_path / "data", tmp_path / "archives"
    _invoke(["keys", "init", "--origin", "example.com/test-log"], home)  # signs the removals
    line = _invoke(
        [
            "retention",
            "schedule",
            "--as",
            "cron",
            "--print",
            "--store",
            url,
            "--archive-root",
            str(archive),
        ],
        home,
    ).strip()
    fields = line.split(" ", 5)
    assert fields[:5] == ["17", "3", "*", "*", "*"]  # --every 1d: daily at 03:17
    command = fields[5]
    argv = shlex.split(command.split(" >> ")[0])
    assert argv[0] == f"BLACKBOX_HOME={home}"
    assert argv[1] == BLACKBOX and argv[2:] == [
        *("retention", "apply", "--older-than", "90d"),
        *("--archive-root", str(archive), "--store", url),
    ]
    assert command.endswith(f">> {home / 'retention.log'} 2>&1")
    # Run it once as cron would: `sh -c` the command (cron unescapes \% first), bare environment.
    subprocess.run(
        ["sh", "-c", command.replace("\\%", "%")], env=_bare_env(tmp_path), check=True, timeout=120
    )
    left = _sessions(url)
    assert ids["old"] not in left and ids["old_held"] in left and ids["recent"] in left
    bundles = list(archive.glob("retention-*"))
    assert len(bundles) == 1 and (bundles[0] / "manifest.json").is_file()
    status = json.loads(_invoke(["retention", "status", "--store", url, "--format", "json"], home))
    assert status["last_run"]["sessions_removed"] == 1
    assert status["last_run"]["held_kept"] == [ids["old_held"]]
    assert status["recorded_runs"][0]["sessions_removed"] == 1
    assert status["recorded_runs"][0]["held_kept"] == 1
    assert [h["session_id"] for h in status["holds"]] == [ids["old_held"]]
    text = _invoke(["retention", "status", "--store", url], home)
    assert "last run: " in text and "removed 1 session(s)" in text and "kept 1 on hold" in text


def test_systemd_units_run_retention_apply_with_the_configured_settings(
    aged, tmp_path: Path
) -> None:
    url, ids = aged
    home, archive = tmp_path / "data", tmp_path / "archives"
    _invoke(["keys", "init", "--origin", "example.com/test-log"], home)  # signs the removals
    text = _invoke(
        [
            *("retention", "schedule", "--as", "systemd", "--print", "--every", "1d"),
            *("--older-than", "95d", "--store", url, "--archive-root", str(archive)),
        ],
        home,
    )
    assert "Type=oneshot" in text and "OnCalendar=daily" in text and "Persistent=true" in text
    assert "WantedBy=timers.target" in text
    exec_start = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)  # type: ignore[union-attr]
    environment = re.search(r"^Environment=(.*)$", text, re.M).group(1)  # type: ignore[union-attr]
    argv = shlex.split(exec_start)  # systemd's double-quoted words read the same here
    assert argv == [
        BLACKBOX,
        *("retention", "apply", "--older-than", "95d"),
        *("--archive-root", str(archive), "--store", url),
    ]
    key, _, value = shlex.split(environment)[0].partition("=")
    assert (key, value) == ("BLACKBOX_HOME", str(home))
    # Run ExecStart once, as the service would: no shell, its Environment= only.
    subprocess.run(argv, env={**_bare_env(tmp_path), key: value}, check=True, timeout=120)
    left = _sessions(url)
    assert ids["old"] not in left and ids["old_held"] in left and ids["recent"] in left
    status = json.loads(_invoke(["retention", "status", "--store", url, "--format", "json"], home))
    assert status["last_run"]["older_than"] == "95d"


def test_other_intervals_and_no_systemd_here(tmp_path: Path) -> None:
    assert cron_when(3600) == "17 * * * *"
    assert cron_when(15 * 60) == "*/15 * * * *"
    assert cron_when(6 * 3600) == "17 */6 * * *"
    assert cron_when(7 * 86400) == "17 3 * * 0"
    with pytest.raises(ScheduleError):
        cron_when(7 * 3600)
    out = CliRunner().invoke(
        main, ["retention", "schedule", "--every", "7h", "--as", "cron", "--print"]
    )
    assert out.exit_code == 2 and "cron cannot run every" in out.output
    assert "Traceback" not in out.output
    # In this container there is no systemd: `auto` prints the cron line and says so.
    if not os.path.isdir("/run/systemd/system"):
        out = CliRunner().invoke(
            main, ["retention", "schedule"], env={"BLACKBOX_HOME": str(tmp_path)}
        )
        assert out.exit_code == 0 and "retention apply --older-than 90d" in out.output
        assert "crontab" in out.output
    systemd = _invoke(
        ["retention", "schedule", "--as", "systemd", "--print", "--every", "6h"], tmp_path
    )
    assert "OnUnitActiveSec=21600s" in systemd
