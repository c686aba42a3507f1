"""Retention that runs by itself: a systemd user timer, or a cron line where there is no systemd,
running `blackbox retention apply` on a schedule; and `retention status`, what the last runs did.

Why it exists: retention ran only when someone remembered to run it, so logs outlived the period
their owners promised (90 days is the common one, and the default here). The scheduled command is
the ordinary `retention apply` with every setting spelled out (store, age, archive root): a timer
or cron has none of the shell's environment. Each run writes the archive bundle into a new
`retention-<time>` directory under the archive root, records its removal in the store as it
always has (`retention_applied`), and leaves a small last-run file beside the data directory so
that a run that found nothing to remove is still seen to have run.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blackbox.recorder import FILE_MODE, BlackboxError, private_dir
from blackbox.recorder.compliance.export import iso
from blackbox.recorder.compliance.retention import RETENTION_SESSION, RetentionResult, list_holds
from blackbox.recorder.log import events
from blackbox.recorder.store import EventStore

UNIT = "blackbox-retention"
LAST_RUN_FILE = "retention-last-run.json"
RENDERINGS = ("systemd", "cron")


class ScheduleError(BlackboxError):
    """A schedule that cannot be written or expressed (an interval cron cannot say)."""


@dataclass(frozen=True)
class Schedule:
    """What `retention schedule` installs: the command, how often, and its two renderings."""

    argv: list[str]
    env: dict[str, str]  # what the run needs of the environment (the data directory)
    every_s: float
    rendering: str  # systemd or cron
    service: str | None  # systemd unit texts
    timer: str | None
    cron: str | None  # the crontab line

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def apply_argv(
    blackbox: str, store_url: str, older_than: str, archive_root: Path, idle: str | None = None
) -> list[str]:
    """The `retention apply` command a scheduled run executes, every setting explicit."""
    argv = [blackbox, "retention", "apply", "--older-than", older_than]
    argv += ["--archive-root", str(archive_root), "--store", store_url]
    if idle:
        argv += ["--idle", idle]
    return argv


def has_systemd() -> bool:
    """Whether a systemd user manager can run timers here (not in most containers)."""
    return Path("/run/systemd/system").is_dir() and shutil.which("systemctl") is not None


def _systemd_quote(arg: str) -> str:
    """systemd's own quoting: in double quotes, with \\ and " escaped and % doubled."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def systemd_units(argv: list[str], every_s: float, env: dict[str, str]) -> tuple[str, str]:
    """The service and timer unit texts."""
    calendar = {3600.0: "hourly", 86_400.0: "daily", 604_800.0: "weekly"}.get(every_s)
    when = (
        f"OnCalendar={calendar}\nPersistent=true\n"
        if calendar
        else f"OnBootSec=5min\nOnUnitActiveSec={int(every_s)}s\n"
    )
    exec_start = " ".join(_systemd_quote(a) for a in argv)
    environment = "".join(f"Environment={_systemd_quote(f'{k}={v}')}\n" for k, v in env.items())
    service = (
        "[Unit]\n"
        "Description=mcp-blackbox retention: archive and remove old sessions\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"{environment}"
        f"ExecStart={exec_start}\n"
    )
    timer = (
        "[Unit]\n"
        f"Description=Run {UNIT}.service on schedule\n\n"
        "[Timer]\n"
        f"{when}"
        "RandomizedDelaySec=10min\n\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )
    return service, timer


def cron_when(every_s: float) -> str:
    """The five cron time fields for an interval; ScheduleError when cron cannot say it. Runs
    at a quarter past (and at 03:17 for daily ones), away from the top of the hour."""
    minutes = every_s / 60
    if minutes != int(minutes) or minutes < 1:
        raise ScheduleError(f"cron runs at whole minutes: {every_s:g} s cannot be scheduled")
    m = int(minutes)
    if m < 60 and 60 % m == 0:
        return "* * * * *" if m == 1 else f"*/{m} * * * *"
    if m % 60 == 0 and (h := m // 60) < 24 and 24 % h == 0:
        return "17 * * * *" if h == 1 else f"17 */{h} * * *"
    if m % 1440 == 0:
        d = m // 1440
        if d == 1:
            return "17 3 * * *"
        if d == 7:
            return "17 3 * * 0"
        if d < 31:
            return f"17 3 */{d} * *"
    raise ScheduleError(
        f"cron cannot run every {every_s:g} s evenly: use minutes dividing an hour, hours "
        "dividing a day, or whole days"
    )


def cron_line(argv: list[str], every_s: float, log: Path, env: dict[str, str]) -> str:
    """The crontab line (cron's `%` escaped), output appended to `log`."""
    assign = "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())
    command = f"{assign}{shlex.join(argv)} >> {shlex.quote(str(log))} 2>&1".replace("%", "\\%")
    return f"{cron_when(every_s)} {command}"


def make_schedule(
    argv: list[str], env: dict[str, str], every_s: float, rendering: str, log: Path
) -> Schedule:
    if rendering not in RENDERINGS:
        raise ScheduleError(f"unknown rendering {rendering!r}: systemd or cron")
    if every_s < 60:
        raise ScheduleError("retention runs at most once a minute")
    if rendering == "systemd":
        service, timer = systemd_units(argv, every_s, env)
        return Schedule(argv, env, every_s, rendering, service, timer, None)
    cron = cron_line(argv, every_s, log, env)
    return Schedule(argv, env, every_s, rendering, None, None, cron)


def systemd_user_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def install_systemd(schedule: Schedule, unit_dir: Path, run: Any = None) -> list[Path]:
    """Write the units (readable by the user only: the command names the store) and enable the
    timer with `systemctl --user`; `run` is how commands are run (subprocess.run by default)."""
    import subprocess

    assert schedule.service is not None and schedule.timer is not None
    run = run or subprocess.run
    unit_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix, text in (("service", schedule.service), ("timer", schedule.timer)):
        path = unit_dir / f"{UNIT}.{suffix}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        written.append(path)
    for args in (["daemon-reload"], ["enable", "--now", f"{UNIT}.timer"]):
        done = run(["systemctl", "--user", *args], capture_output=True, text=True)
        if done.returncode != 0:
            why = (done.stderr or done.stdout or "").strip().splitlines()
            raise ScheduleError(
                f"systemctl --user {' '.join(args)} failed: {why[-1] if why else 'no reason'}"
            )
    return written


# -- status --------------------------------------------------------------------------------------


def write_last_run(data_dir: Path, result: RetentionResult, older_than: str) -> Path:
    """Note that a run happened and what it did (also a run that removed nothing)."""
    doc = result.as_dict()
    doc.update({"ran_at": iso(time.time_ns()), "older_than": older_than})
    path = data_dir / LAST_RUN_FILE
    private_dir(data_dir)  # 0700 if made here (recorder/private.py)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    os.chmod(tmp, FILE_MODE)
    os.replace(tmp, path)
    return path


def retention_status(store: EventStore, data_dir: Path) -> dict[str, Any]:
    """When retention last ran (the last-run file), the runs the store recorded (newest
    first: what each removed, what holds kept), and the holds in force now."""
    from blackbox.recorder.store import records_of_kinds

    last_run = None
    path = data_dir / LAST_RUN_FILE
    if path.is_file():
        try:
            last_run = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            last_run = {"error": f"{path} cannot be read"}
    runs = []
    for sid, _kind, wall_ns, raw in records_of_kinds(store, [events.RetentionApplied.KIND]):
        doc = events.decode_as(events.RetentionApplied, raw)
        if doc is None:
            continue
        runs.append(
            {
                "at": iso(wall_ns),
                "session": sid,
                "cutoff": doc.cutoff,
                "sessions_removed": doc.sessions_removed,
                "records_removed": doc.records_removed,
                "abandoned_sealed": len(doc.abandoned_sealed),
                "held_kept": len(doc.held_kept),
                "broken_kept": len(doc.broken_kept),
                "archive": doc.archive,
            }
        )
    runs.reverse()
    return {
        "last_run": last_run,
        "recorded_runs": runs,
        "holds": list_holds(store),
        "retention_session": RETENTION_SESSION,
    }
