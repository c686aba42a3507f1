"""Fixtures the recorder's tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.fault_server import FaultServer


@pytest.fixture(scope="module")
def faulty() -> Iterator[FaultServer]:
    """A deliberately misbehaving HTTP server, one per test module."""
    with FaultServer() as server:
        yield server
