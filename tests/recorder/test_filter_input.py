"""A filter no stored value could hold finds nothing; it is never a driver error.

Filters are typed by users: a lone surrogate is what Python makes of undecodable bytes in argv
(`blackbox sessions --name $'\\xff*'`), and a NUL arrives in a URL's query (`/api/sessions?q=%00`)
though PostgreSQL's text cannot hold one. Before, the driver refused the query: a traceback from
the CLI, a 500 from the UI. Each filter of the read model is tried with each, on both databases,
beside a control that does match; so are a session reference (`show`, `replay`, `export
--session`) and the tool inventory's `--server`.
"""

from __future__ import annotations

import pytest
from blackbox.recorder import SessionNotFound
from blackbox.recorder.query import SessionQuery, session_page
from blackbox.recorder.query.listing import SessionFilter, list_summaries
from blackbox.recorder.store import open_store

from tests.fixtures.clirun import run_blackbox
from tests.fixtures.storekit import T0, session_events

HOSTILE = ["\udcff*", "a\udcffb", "\x00", "ti\x00*", "\ud800"]


@pytest.fixture
def store(store_url: str):  # type: ignore[no-untyped-def]
    store = open_store(store_url)
    store.append(session_events(name="time", start_ns=T0))
    yield store
    store.close()


@pytest.mark.parametrize("text", HOSTILE)
def test_sessions_filters_find_nothing(store, text: str) -> None:  # type: ignore[no-untyped-def]
    assert list_summaries(store, SessionFilter(name="ti*"))  # the control matches
    assert list_summaries(store, SessionFilter(name=text)) == []
    assert list_summaries(store, SessionFilter(server=text)) == []


@pytest.mark.parametrize("text", HOSTILE)
def test_the_ui_search_finds_nothing(store, text: str) -> None:  # type: ignore[no-untyped-def]
    assert session_page(store, SessionQuery(q="tim"))["sessions"]  # the control matches
    assert session_page(store, SessionQuery(q=text))["sessions"] == []


def test_the_cli_answers_with_an_empty_list(store, store_url: str) -> None:  # type: ignore[no-untyped-def]
    for option in ("--name", "--server"):
        done = run_blackbox("sessions", "--store", store_url, option, "\udcff*", "--format", "json")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("text", HOSTILE)
def test_a_session_reference_is_not_found(store, text: str) -> None:  # type: ignore[no-untyped-def]
    assert store.resolve("last")  # the control: the session is there
    with pytest.raises(SessionNotFound, match="no session matches"):
        store.resolve(text)


def test_the_tool_inventory_answers_an_empty_list(store, store_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The filter reaches DuckDB's query over the analytics copy; before, its driver refused it.
    env = {"BLACKBOX_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    for text in HOSTILE:
        done = run_blackbox(
            "tools", "--store", store_url, "--server", text, "--format", "json", env=env
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]"
