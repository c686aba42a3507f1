"""A replay started from the UI is as safe as one started from the CLI. A real SDK session with
the notes server (tests/replay/servers/notes.py: `read_note` read-only, `write_note` destructive)
is recorded; then the note changes, and the attack is a POST that starts a replay without
confirming `write_note` (no confirmation, one naming another tool, one in the wrong shape): the
server skips the write and the note stays as it is. The control, a POST naming `write_note`,
sends it (the note is written again), so the tests would catch a server that ignored the rule.
A cross-site POST carrying a confirmation is refused before any replay."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from blackbox.recorder.store import open_store

from blackbox.ui.server import Served, serve_in_thread
from tests.fixtures.replay_kit import SERVERS, record_session

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def notes_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str, Path]]:
    tmp = tmp_path_factory.mktemp("uisafety")
    notes = tmp / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("first")
    url = f"sqlite:///{tmp / 'store.db'}"
    store = open_store(url)
    server = [sys.executable, str(SERVERS / "notes.py"), str(notes)]
    calls = [("read_note", {"name": "a.txt"}), ("write_note", {"name": "a.txt", "text": "again"})]
    sid = record_session(store, url, tmp / "home", server, calls, "legacy", "notes")
    served = serve_in_thread(store, tmp / "home" / "journal", tmp / "analytics")
    yield served, sid, notes
    served.stop()
    store.close()


def request(
    ui: Served, method: str, path: str, body: Any = None, origin: str | None = None
) -> tuple[int, Any]:
    """A request as the page makes it (the token header, the UI's own Origin), or from
    `origin`; the answer's JSON (or text, for a refusal)."""
    conn = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=120)
    headers = {
        "Host": f"127.0.0.1:{ui.port}",
        "X-Blackbox-Token": ui.token,
        "Origin": origin or f"http://127.0.0.1:{ui.port}",
        "Content-Type": "application/json",
    }
    conn.request(method, path, None if body is None else json.dumps(body), headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, data.decode()


def test_the_risks_name_the_writing_tool(notes_ui) -> None:  # type: ignore[no-untyped-def]
    ui, sid, _ = notes_ui
    status, doc = request(ui, "GET", f"/api/sessions/{sid}/replay/risks")
    assert status == 200, doc
    assert doc["tools"] == ["write_note"]
    assert [(c["tool"], c["reason"]) for c in doc["calls"]] == [("write_note", "destructive")]


@pytest.mark.parametrize(
    "confirmation",
    [{}, {"allow_tools": ["read_note"]}, {"allow_tools": "write_note"}],
    ids=["none", "another-tool", "a-string"],
)
def test_a_replay_without_confirming_the_write_does_not_send_it(notes_ui, confirmation) -> None:  # type: ignore[no-untyped-def]
    ui, sid, notes = notes_ui
    (notes / "a.txt").write_text("changed since")
    status, doc = request(ui, "POST", f"/api/sessions/{sid}/replay", confirmation)
    assert status == 200, doc
    assert (notes / "a.txt").read_text() == "changed since"  # write_note was not sent
    assert doc["skipped_tools"] == ["write_note"]
    skipped = [s["tool"] for s in doc["steps"] if s["status"] == "skipped"]
    assert skipped == ["write_note"] and doc["summary"]["skipped"] == 1


def test_a_confirmed_tool_is_sent(notes_ui) -> None:  # type: ignore[no-untyped-def]
    """The control: naming the tool sends it, so the tests above see the rule, not a replay
    that never sends anything."""
    ui, sid, notes = notes_ui
    (notes / "a.txt").write_text("changed since")
    body = {"allow_tools": ["write_note"]}
    status, doc = request(ui, "POST", f"/api/sessions/{sid}/replay", body)
    assert status == 200, doc
    assert (notes / "a.txt").read_text() == "again"
    assert doc["skipped_tools"] == [] and doc["summary"]["skipped"] == 0


def test_a_cross_site_confirmation_is_refused(notes_ui) -> None:  # type: ignore[no-untyped-def]
    ui, sid, notes = notes_ui
    (notes / "a.txt").write_text("changed since")
    body = {"allow_tools": ["write_note"]}
    path = f"/api/sessions/{sid}/replay"
    status, text = request(ui, "POST", path, body, origin="http://evil.example")
    assert status == 403 and "origin" in text
    assert (notes / "a.txt").read_text() == "changed since"
    # Starting a replay is a POST only: a GET (a link, an <img>) cannot start one.
    assert request(ui, "GET", path)[0] == 405
    assert (notes / "a.txt").read_text() == "changed since"
