"""The pytest plugin in a project of its own (pytester): a recorded session, committed as an
export bundle or read from a store, replays as a test item that passes against an unchanged server
and fails, with the divergence report as the failure text, against a changed one."""

from __future__ import annotations

from pathlib import Path

import pytest
from blackbox.recorder.compliance.export import export_bundle
from blackbox.recorder.store import open_store
from blackbox.replay.suite import save_suite

from tests.fixtures import peers
from tests.fixtures.replay_kit import SERVERS, record_session

VARIANT = str(SERVERS / "variant.py")

TEST_FILE = """
import pytest

@pytest.mark.blackbox_replay({source}, against={against!r})
def test_recorded(blackbox_session):
    blackbox_session.check()
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str, Path]:
    """Two sessions of the example server (one per era) and a bundle holding both, made once
    for the tests below (the bundle is only read; the store gains a suite and replays, which
    the bundle test never looks at): (store URL, legacy id, modern id, bundle)."""
    tmp_path = tmp_path_factory.mktemp("plugin")
    sqlite_url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(sqlite_url)
    server = peers.EXAMPLE_SERVER
    try:
        legacy = record_session(
            store, sqlite_url, tmp_path, server, [("echo", {"message": "hi"})], "legacy", "greet"
        )
        modern = record_session(
            store, sqlite_url, tmp_path, server, [("fail", {"reason": "no"})], "modern", "refuse"
        )
        bundle = tmp_path / "bundle"
        export_bundle(
            store, bundle, fmt="jsonl", sessions=[store.session(legacy), store.session(modern)]
        )
    finally:
        store.close()
    return sqlite_url, legacy, modern, bundle


def run(pytester: pytest.Pytester, source: str, variant: str) -> pytest.RunResult:
    against = f"{peers.PYTHON} {VARIANT} {variant}"
    pytester.makepyfile(test_replays=TEST_FILE.format(source=source, against=against))
    # In this process: the inner session still loads the plugin from its entry point into a
    # plugin manager of its own; a subprocess would only add a start of pytest and the SDK.
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-v")


def handle(session_id: str) -> str:
    """The session's handle as `blackbox sessions` prints it (the plugin names tests by it)."""
    return session_id.rsplit("-", 1)[1][-6:]


def test_bundle_sessions_pass_unchanged_and_fail_with_the_report_when_changed(
    pytester: pytest.Pytester, recorded: tuple[str, str, str, Path]
) -> None:
    _url, legacy, modern, bundle = recorded
    source = f"bundle={str(bundle)!r}"
    same = run(pytester, source, "same")
    same.assert_outcomes(passed=2)
    same.stdout.fnmatch_lines([f"*test_recorded?greet-{handle(legacy)}? PASSED*"])
    changed = run(pytester, source, "louder")
    changed.assert_outcomes(passed=1, failed=1)
    changed.stdout.fnmatch_lines(
        [
            f"*test_recorded?greet-{handle(legacy)}? FAILED*",
            f"*test_recorded?refuse-{handle(modern)}? PASSED*",
            "*tools/call echo: diverged*",
            '*$.result.content?0?.text: recorded "hi", replayed "hi!"*',
            "*verdict: diverged*",
        ]
    )
    assert "Traceback" not in changed.stdout.str()


def test_store_sessions_by_name(
    pytester: pytest.Pytester, recorded: tuple[str, str, str, Path]
) -> None:
    sqlite_url, legacy, _modern, _bundle = recorded
    source = f"store={sqlite_url!r}, name='greet'"
    changed = run(pytester, source, "louder")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines([f"*greet-{handle(legacy)}*FAILED*", "*verdict: diverged*"])
    store = open_store(sqlite_url)
    save_suite(store, "ci", [legacy])
    store.close()
    by_suite = run(pytester, f"store={sqlite_url!r}, suite='ci'", "same")
    by_suite.assert_outcomes(passed=1)
    missing = run(pytester, f"bundle={str(pytester.path / 'nowhere')!r}", "same")
    assert missing.ret != 0
    missing.stdout.fnmatch_lines(["blackbox_replay: *nowhere is not an export bundle*"])
    assert "_hookexec" not in missing.stdout.str()  # one line, no traceback
