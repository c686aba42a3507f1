"""A pytest plugin: a project's own test suite replays recorded MCP sessions as tests.

A test marked `blackbox_replay` that takes the `blackbox_session` argument becomes one test item
per session; `blackbox_session.check()` replays it against the server command and fails the test
with the divergence report when the server no longer behaves as recorded:

    @pytest.mark.blackbox_replay(bundle="tests/sessions", against="python server.py")
    def test_recorded(blackbox_session):
        blackbox_session.check()

Sessions come from an export bundle directory (`bundle=`, committed with the project, no
database needed) or a store (`store=` URL, default BLACKBOX_STORE); `sessions=` names ids or
prefixes, `name=` a name glob, `suite=` a saved suite (store only); `ignore=` JSON paths to mask,
`url=` a Streamable HTTP endpoint instead of `against=`. Registered through the `pytest11` entry
point; imports nothing heavy until a marked test is collected.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from blackbox.replay import ReplayResult

MARKER = "blackbox_replay"
ARGNAME = "blackbox_session"


@dataclass
class ReplaySpec:
    """What a `blackbox_replay` marker asks for."""

    against: str | None = None
    url: str | None = None
    bundle: Path | None = None
    store: str | None = None
    sessions: list[str] = field(default_factory=list)
    name: str | None = None
    suite: str | None = None
    ignore: list[str] = field(default_factory=list)
    timeout: float = 10.0
    era: str | None = None
    # Calls the recording does not mark read-only (replay/safety.py): refuse the replay (the
    # default: a CI job must not write to a live server by surprise), allow, or skip them.
    writes: str = "refuse"

    @classmethod
    def from_marker(cls, marker: pytest.Mark, root: Path) -> ReplaySpec:
        kw: dict[str, Any] = dict(marker.kwargs)
        unknown = set(kw) - set(cls.__dataclass_fields__)
        if unknown:
            raise pytest.UsageError(f"unknown argument(s) {', '.join(sorted(unknown))}")
        sessions = kw.pop("sessions", None) or list(marker.args)
        if isinstance(sessions, str):
            sessions = [sessions]
        bundle = kw.pop("bundle", None)
        spec = cls(sessions=list(sessions), bundle=root / bundle if bundle else None, **kw)
        if spec.writes not in ("refuse", "allow", "skip"):
            raise pytest.UsageError(f"writes= must be refuse, allow or skip, not {spec.writes!r}")
        if spec.bundle is None and spec.store is None:
            spec.store = os.environ.get("BLACKBOX_STORE")
        if spec.bundle is None and spec.store is None:
            raise pytest.UsageError("give bundle= (a directory) or store= (a URL)")
        return spec


@dataclass
class RecordedSession:
    """One session to replay: the value a marked test receives as `blackbox_session`."""

    session_id: str
    name: str | None
    spec: ReplaySpec
    records: list[Any] | None = None  # from a bundle; None: read from the store
    handle: str = ""  # the session's short handle, as every command prints it

    @property
    def title(self) -> str:
        return f"{self.name or 'session'}-{self.handle or self.session_id}"

    def stored_records(self) -> list[Any]:
        if self.records is not None:
            return self.records
        from blackbox.recorder.store import open_store

        store = open_store(str(self.spec.store), create=False)
        try:
            return list(store.read_session(self.session_id))
        finally:
            store.close()

    def replay(self) -> ReplayResult:
        """Replay the session against the marker's server; the result (no verdict enforced)."""
        from blackbox.replay import (
            ReplayOptions,
            bridged_recording,
            build_recording,
            default_target,
            replay_recording,
        )

        options = ReplayOptions(ignore=self.spec.ignore, response_timeout_s=self.spec.timeout)
        step_masks = None
        if self.spec.era:
            rec, masks, step_masks = bridged_recording(
                self.session_id, self.stored_records(), self.spec.era
            )
            options.ignore = [*options.ignore, *masks]
        else:
            rec = build_recording(self.session_id, self.stored_records())
        target = default_target(rec, self.spec.against, self.spec.url)
        return replay_recording(rec, target, options, step_masks=step_masks, guard=self._guard)

    def _guard(self, rec: Any) -> frozenset[int]:
        from blackbox.replay import check_replay_safety, decide

        writes = self.spec.writes
        risky = check_replay_safety(rec)
        return decide(risky, allow_writes=writes == "allow", read_only=writes == "skip")

    def check(self) -> ReplayResult:
        """Replay; fail the test with the divergence report unless the replay is equivalent."""
        from blackbox.recorder import BlackboxError
        from blackbox.replay import render_text

        try:
            result = self.replay()
        except BlackboxError as exc:
            pytest.fail(f"cannot replay {self.title}: {exc}", pytrace=False)
        if result.exit_code:
            pytest.fail(render_text(result), pytrace=False)
        return result


def collect_sessions(spec: ReplaySpec) -> list[RecordedSession]:
    """The sessions a marker names, read from its bundle or store."""
    if spec.bundle is not None:
        from blackbox.recorder.compliance import read_bundle_sessions, select_bundle_sessions

        if spec.suite:
            raise pytest.UsageError("suite= needs a store, not a bundle")
        from blackbox.recorder.query import handles_for

        found = read_bundle_sessions(spec.bundle)
        chosen = select_bundle_sessions(found, spec.sessions, spec.name)
        handles = handles_for([s.session_id for s in chosen], found)
        return [
            RecordedSession(s.session_id, s.name, spec, s.records, handles[s.session_id])
            for s in chosen
        ]
    from blackbox.recorder.query import short_handles
    from blackbox.recorder.store import open_store
    from blackbox.replay import select_sessions

    store = open_store(str(spec.store), create=False)
    try:
        infos = select_sessions(
            store,
            spec.sessions,
            name_glob=spec.name if spec.name or spec.sessions or spec.suite else "*",
            suite=spec.suite,
        )
        handles = short_handles(store, [i.session_id for i in infos])
    finally:
        store.close()
    return [RecordedSession(i.session_id, i.name, spec, None, handles[i.session_id]) for i in infos]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(sessions=..., bundle=DIR | store=URL, against=CMD | url=URL, name=GLOB, "
        "suite=NAME, ignore=[JSONPATH], timeout=S, era=VERSION): replay recorded MCP sessions, "
        f"one test per session (the test takes `{ARGNAME}` and calls its check()).",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None or ARGNAME not in metafunc.fixturenames:
        return
    from blackbox.recorder import BlackboxError

    # A marker that cannot be served is a collection error of that test module, in one line.
    problem = None
    try:
        spec = ReplaySpec.from_marker(marker, metafunc.config.rootpath)
        sessions = collect_sessions(spec)
    except (BlackboxError, pytest.UsageError) as exc:
        problem, sessions = str(exc), []
    if not sessions:
        pytest.fail(f"{MARKER}: {problem or 'no recorded session selected'}", pytrace=False)
    metafunc.parametrize(ARGNAME, sessions, ids=[s.title for s in sessions])


def against_command(*argv: str) -> str:
    """A shell-quoted command line for `against=` (paths with spaces stay one argument)."""
    return shlex.join(argv)
