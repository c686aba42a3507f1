"""A replay's divergences side by side (replay/side_by_side.py, what the web UI's replay shows):
each step that is not ok carries the recorded answer and the replayed one, whole; the report
around them is the `--format json` one."""

from __future__ import annotations

import json

import pytest
from blackbox.recorder.store import open_store
from blackbox.replay.side_by_side import replay_side_by_side, shown

from tests.fixtures import peers
from tests.fixtures.replay_kit import c2s, s2c, store_session

pytestmark = pytest.mark.timeout(120)

INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "side-by-side-test", "version": "1"},
}


def _request(i: int, method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


def _echo(i: int, message: str) -> dict:
    return _request(i, "tools/call", {"name": "echo", "arguments": {"message": message}})


def _text(i: int, value: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": i,
        "result": {"content": [{"type": "text", "text": value}], "isError": False},
    }


def test_a_divergent_call_shows_both_answers(sqlite_url: str) -> None:
    """Recorded: echo answered "hi?"; the example server answers "hi". The step diverges, and
    both answers come whole, pretty-printed, next to the differing path."""
    store = open_store(sqlite_url)
    try:
        sid = store_session(
            store,
            [
                c2s(_request(1, "initialize", INIT), 0),
                s2c({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "x"}}, 5),
                c2s({"jsonrpc": "2.0", "method": "notifications/initialized"}, 6),
                c2s(_echo(2, "hi"), 10),
                s2c(_text(2, "hi?"), 15),
            ],
            command=peers.EXAMPLE_SERVER,
        )
        # No tools/list was recorded: echo may change something until confirmed.
        against = " ".join(peers.EXAMPLE_SERVER)
        doc = replay_side_by_side(store, sid, against, allow_tools=["echo"])
        assert doc["original"] == sid and doc["replay"] and doc["verdict"] == "diverged"
        assert [s["status"] for s in doc["sides"]] == [s["status"] for s in doc["steps"]]
        (echo,) = [s for s in doc["sides"] if s["tool"] == "echo"]
        assert echo["status"] == "diverged" and echo["label"]
        assert "$.result.content[0].text" in [d["path"] for d in echo["differences"]]
        assert json.loads(echo["recorded"]) == _text(2, "hi?")
        assert echo["recorded"] == json.dumps(_text(2, "hi?"), indent=2)
        replayed = json.loads(echo["replayed"])
        assert replayed["id"] == 2 and replayed["result"]["content"][0]["text"] == "hi"
        # The replay is a session of its own, and the replayed answer is one of its records.
        assert store.session(doc["replay"]).replay_of == sid
    finally:
        store.close()


def test_shown_pretty_prints_json_and_keeps_other_bytes_readable() -> None:
    assert shown(b'{"a":[1,"\xc3\xa9"]}') == '{\n  "a": [\n    1,\n    "\u00e9"\n  ]\n}'
    assert shown(b"not json \xff") == "not json \\xff"
    assert shown(b"") == ""
