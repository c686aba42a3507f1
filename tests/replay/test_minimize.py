"""Minimisation: a real SDK session of many calls ending in a crash cuts down to the crashing call
and the handshake, stored as a derived session that replays with the fault reproduced; a fault
that no longer reproduces is said so without a search; ddmin and the dependency rules on their
own."""

from __future__ import annotations

from pathlib import Path

import pytest
from blackbox.recorder.log import events
from blackbox.recorder.log.model import Direction, Kind
from blackbox.recorder.store import open_store
from blackbox.replay.minimize import EXIT_WAIT_S, _trial_options, closure, ddmin, dependencies
from blackbox.replay.recording import load_recording
from blackbox.replay.replayer import ReplayOptions, replay_session
from blackbox.replay.report import render_text
from blackbox.replay.results import ReplayResult, Run
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures import peers
from tests.fixtures.replay_kit import SERVERS, c2s, record_session, s2c, store_session

FIXED = f"{peers.PYTHON} {SERVERS / 'variant.py'} fixed"


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_many_calls_and_one_crash_minimise_to_the_crash_and_the_handshake(
    sqlite_url: str, tmp_path: Path
) -> None:
    store = open_store(sqlite_url)
    calls = [("echo", {"message": f"m{i}"}) for i in range(7)]
    calls += [("sleep", {"seconds": 0}), ("echo", {"message": "last"}), ("crash", {"code": 7})]
    sid = record_session(store, sqlite_url, tmp_path, peers.EXAMPLE_SERVER, calls, "legacy", "many")
    assert len(load_recording(store, sid).steps) == 13  # handshake, tools/list, 10 calls

    code, out, err = cli("minimize", sid, "--store", sqlite_url)
    assert code == 0, out + err
    assert "goal: fault server_exit at tools/call crash" in err
    assert "replay 2:" in err  # progress while it runs
    assert "kept: initialize, notifications/initialized, tools/call crash" in out
    summary = next(line for line in out.splitlines() if "requests ->" in line)
    assert summary.startswith("13 requests -> 3, ")
    replays = int(summary.split(", ")[1].split()[0])
    assert replays == 3  # the whole session, the handshake alone, the crash alone
    derived = out.split("derived session ")[1].split()[0]

    started = next(e for e in store.read_session(derived) if e.kind == Kind.SESSION_STARTED)
    doc = events.decode_dict(started.kind, started.raw) or {}
    assert (doc["derived_from"], doc["derived_by"]) == (sid, "minimize")
    assert doc["name"] == "minimized many"
    assert store.session(derived).sealed
    sent = [
        e.method for e in store.read_session(derived) if e.direction == Direction.CLIENT_TO_SERVER
    ]
    assert sent == ["initialize", "notifications/initialized", "tools/call"]

    again = replay_session(store, derived, options=ReplayOptions(expect_fault=True))
    assert again.exit_code == 0, render_text(again)
    assert [(f.fault.fault, f.reproduced) for f in again.faults] == [("server_exit", True)]

    # against a build where crash no longer crashes: said at once, nothing searched
    code, out, err = cli("minimize", sid, "--against", FIXED, "--store", sqlite_url)
    assert code == 1
    assert out.startswith("nothing to minimise: the recorded fault does not reproduce")
    assert "replay 2:" not in err
    store.close()


def test_dependencies_keep_the_subscribe_before_a_read(sqlite_url: str) -> None:
    store = open_store(sqlite_url)

    def req(i: int, method: str, **params: object) -> dict:
        return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}

    def ok(i: int) -> dict:
        return {"jsonrpc": "2.0", "id": i, "result": {}}

    frames = [c2s(req(1, "initialize")), s2c(ok(1))]
    frames += [c2s({"jsonrpc": "2.0", "method": "notifications/initialized"})]
    frames += [c2s(req(2, "resources/subscribe", uri="a://x")), s2c(ok(2))]
    frames += [c2s(req(3, "resources/subscribe", uri="a://y")), s2c(ok(3))]
    frames += [c2s(req(4, "resources/read", uri="a://x")), s2c(ok(4))]
    frames += [c2s(req(5, "tools/call", name="t")), s2c(ok(5))]
    frames += [c2s({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 5}})]  # fmt: skip
    sid = store_session(store, frames, command=peers.EXAMPLE_SERVER)
    rec = load_recording(store, sid)
    deps = dependencies(rec.steps)
    assert deps[5] == {3} and deps[7] == {6} and deps[6] == set() and deps[4] == set()
    assert closure({7, 5}, deps) == {7, 6, 5, 3}
    store.close()


def test_ddmin_is_one_minimal_and_cheap() -> None:
    calls: list[list[int]] = []

    def needs(required: set[int]):  # type: ignore[no-untyped-def]
        def test(subset: list[int]) -> bool:
            calls.append(subset)
            return required <= set(subset)

        return test

    assert ddmin(list(range(1000)), needs({637})) == [637]
    assert len(calls) < 30
    calls.clear()
    assert ddmin(list(range(100)), needs({3, 71})) == [3, 71]
    assert ddmin(list(range(10)), needs(set())) == []
    calls.clear()
    # the step the goal names, tried alone first: right, two tests; wrong, the search goes on
    assert ddmin(list(range(1000)), needs({637}), guess=637) == [637]
    assert calls == [[], [637]]
    assert ddmin(list(range(100)), needs({3, 71}), guess=71) == [3, 71]
    assert ddmin(list(range(100)), needs({5}), guess=500) == [5]


def test_trials_wait_for_an_exit_without_the_servers_start_up() -> None:
    """The first answer of the full replay also carries the server's start-up (1.5 s here; the
    calls took 10 ms, and 400 ms): the responses of a trial may take that long again, but the
    wait for an exit that does not come is counted from the calls alone."""
    ms = 1_000_000

    def trial(sent: dict[int, int], arrived: dict[int, int]) -> ReplayOptions:
        run = Run(sent_at={n: t * ms for n, t in sent.items()},
                  arrived_at={n: t * ms for n, t in arrived.items()})  # fmt: skip
        baseline = ReplayResult("s", None, "t", "stdio", None, "none", [], [], [], [], [], None,
                                2.0, False, run=run)  # fmt: skip
        return _trial_options(ReplayOptions(), baseline)

    fast = trial({1: 0, 3: 1500, 4: 1510}, {1: 1500, 3: 1510, 4: 1520})
    assert fast.response_timeout_s == pytest.approx(4.5) and fast.exit_wait_s == EXIT_WAIT_S
    # sent before the server was up: counted from its first answer
    early = trial({1: 0, 3: 0}, {1: 1500, 3: 1900})
    assert early.response_timeout_s == pytest.approx(5.7)
    assert early.exit_wait_s == pytest.approx(1.2)
    assert ReplayOptions().exit_wait_s is None  # a plain replay waits the response timeout


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A tool error, an echo and a crash: several faults to choose a goal from, and a call for
    a divergence. Recorded once for the tests below, which only read it (each minimisation adds
    a derived session of its own and leaves the recorded one as it was): (store URL, session id).

    Each call is of a kind a test needs, no more: with tools/list the search for a text (which
    names no step to try first) has four calls to cut down to the crash, 5 trials; a second
    echo and a sleep only made it 7, each trial a start of the SDK server."""
    tmp = tmp_path_factory.mktemp("mixed")
    url = f"sqlite:///{tmp / 'store.db'}"
    store = open_store(url)
    calls = [("fail", {"reason": "r"}), ("echo", {"message": "a"}), ("crash", {"code": 5})]
    try:
        sid = record_session(store, url, tmp, peers.EXAMPLE_SERVER, calls, "legacy", "mix")
    finally:
        store.close()
    return url, sid


def test_until_divergence_keeps_the_diverging_call(mixed: tuple[str, str]) -> None:
    url, sid = mixed
    louder = f"{peers.PYTHON} {SERVERS / 'variant.py'} louder"
    code, out, err = cli("minimize", sid, "--against", louder, "--until", "divergence",
                         "--store", url)  # fmt: skip
    assert code == 0, out + err
    assert "goal: tools/call echo diverged" in err
    assert "kept: initialize, notifications/initialized, tools/call echo\n" in out


def test_until_text_keeps_what_makes_the_server_print_it(mixed: tuple[str, str]) -> None:
    url, sid = mixed
    # a text of the server's stderr: the crash's own message
    code, out, err = cli("minimize", sid, "--until", "crashing with exit code 5",
                         "--store", url)  # fmt: skip
    assert code == 0, out + err
    assert "kept: initialize, notifications/initialized, tools/call crash\n" in out
    code, out, _ = cli("minimize", sid, "--until", "never printed", "--store", url)
    assert code == 1 and "'never printed' does not appear" in out


def test_of_several_faults_the_crash_is_the_goal(mixed: tuple[str, str]) -> None:
    url, sid = mixed
    # several faults reproduce (a tool error, then the crash): the crash is the goal
    code, out, err = cli("minimize", sid, "--store", url)
    assert code == 0, out + err
    assert "goal: fault server_exit at tools/call crash" in err
    assert "kept: initialize, notifications/initialized, tools/call crash\n" in out
