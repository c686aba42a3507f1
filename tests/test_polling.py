"""The shared polling helper returns what it waited for, and does fail when that never comes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from tests.fixtures.polling import eventually, listening, wait_listening


def test_returns_the_first_truthy_value() -> None:
    answers = iter([None, [], 0, ["sealed"]])
    assert eventually(lambda: next(answers), timeout=5, interval=0.001) == ["sealed"]


def test_a_value_already_there_is_returned_without_sleeping() -> None:
    started = time.monotonic()
    assert eventually(lambda: 42, timeout=5, interval=10) == 42
    assert time.monotonic() - started < 1


def test_fails_on_timeout_naming_what_was_awaited() -> None:
    calls = []

    def never() -> list:
        calls.append(1)
        return []

    started = time.monotonic()
    with pytest.raises(
        AssertionError, match=r"timed out after 0.3s waiting for the seal \(last: \[\]\)"
    ):
        eventually(never, timeout=0.3, interval=0.05, message="the seal")
    assert 0.3 <= time.monotonic() - started < 5
    assert len(calls) >= 2  # asked again, not only once


def test_without_a_message_the_predicate_is_named() -> None:
    def port_open() -> bool:
        return False

    with pytest.raises(AssertionError, match=r"waiting for .*port_open"):
        eventually(port_open, timeout=0.05, interval=0.01)


def test_an_exception_in_the_predicate_stops_the_wait_at_once() -> None:
    def server_died() -> bool:
        raise AssertionError("server exited with 1")

    started = time.monotonic()
    with pytest.raises(AssertionError, match="server exited with 1"):
        eventually(server_died, timeout=30)
    assert time.monotonic() - started < 1


def test_listening_sees_a_listener_and_a_dead_server() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert listening(server.getsockname()[1])
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"], stderr=subprocess.PIPE)
    dead.wait(30)
    with pytest.raises(AssertionError, match="exited with 3"):
        wait_listening(1, dead, timeout=5)
