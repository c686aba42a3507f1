"""recorder/log/events.py: the one schema of record documents. Every kind round-trips, every
document written before the schema decodes through its upgrade steps, hostile bytes come back as a
problem value (never an exception), and docs/log-format.md is what the code says."""

from __future__ import annotations

import random
import sqlite3

import pytest
from blackbox.recorder.log import events
from blackbox.recorder.log.events import DOCUMENTS, decode, encode
from blackbox.recorder.log.format_page import schema_markdown

from tests.fixtures.environment import ROOT

V0_STORE = ROOT / "tests" / "fixtures" / "store-v0.sqlite"


def v0_documents() -> list[tuple[str, bytes]]:
    con = sqlite3.connect(f"file:{V0_STORE}?immutable=1", uri=True)  # never touch the fixture
    try:
        rows = con.execute("SELECT kind, raw FROM events WHERE kind <> 'frame' ORDER BY position")
        return [(kind, bytes(raw)) for kind, raw in rows]
    finally:
        con.close()


def test_the_written_schema_is_the_code() -> None:
    written = (ROOT / "docs" / "log-format.md").read_text(encoding="utf-8")
    assert written == schema_markdown(), (
        "python -m blackbox.recorder.log.events > docs/log-format.md"
    )
    for kind in DOCUMENTS:
        assert f"## `{kind}`" in written


@pytest.mark.parametrize("kind", sorted(DOCUMENTS))
def test_every_kind_round_trips_with_its_version(kind: str) -> None:
    cls = DOCUMENTS[kind]
    doc = cls(extra={"evidence": {"nested": [1, 2.5, "é"]}})  # type: ignore[call-arg]
    raw = encode(doc)
    assert raw.startswith(b'{"v":%d,' % cls.VERSION)
    again, problem = decode(kind, raw)
    assert problem is None
    assert again == doc
    assert encode(again) == raw


def test_v0_documents_of_every_kind_decode() -> None:
    seen: dict[str, int] = {}
    for kind, raw in v0_documents():
        doc, problem = decode(kind, raw)
        assert problem is None, (kind, raw[:200], problem)
        assert isinstance(doc, DOCUMENTS[kind])
        assert b'"v"' not in raw  # written before the schema
        seen[kind] = seen.get(kind, 0) + 1
        # Nothing the producer wrote is lost: every key is a field or kept in extra.
        import json

        written = json.loads(raw)
        upgraded = events.as_dict(doc)
        for key, value in written.items():
            assert upgraded[key] == value or (value is None and key in upgraded), (kind, key)
    # Kinds born at version 1 have no upgrade steps and no version-0 documents.
    born_v0 = {kind for kind in DOCUMENTS if kind in events.UPGRADES}
    assert set(seen) == born_v0, born_v0 - set(seen)


def test_v0_upgrade_steps_fill_what_version_1_requires() -> None:
    ended, problem = decode("session_ended", b'{"reason":"client_closed"}')
    assert problem is None and isinstance(ended, events.SessionEnded)
    assert (ended.outcome, ended.exit_code) == ("client_closed", None)
    fault, problem = decode("fault", b'{"fault":"broken_pipe"}')
    assert problem is None and isinstance(fault, events.Fault)
    assert (fault.stage, fault.detail, fault.seq) == ("transport", "broken_pipe", None)
    # A version-1 document is taken as written: no upgrade step runs on it.
    ended, _ = decode("session_ended", b'{"v":1,"reason":"x","outcome":"crashed"}')
    assert isinstance(ended, events.SessionEnded) and ended.outcome == "crashed"
    missing, problem = decode("session_ended", b'{"v":1,"outcome":"ok"}')
    assert missing is None and problem == "missing_field reason"


def test_one_encoder_one_float_spelling_exact_big_integers() -> None:
    doc = events.Fault(fault="f", extra={"a": 1e16, "b": 0.1, "c": 2**70, "d": -(2**64)})
    raw = encode(doc)
    assert raw == encode(
        events.Fault(fault="f", extra={"a": 1e16, "b": 0.1, "c": 2**70, "d": -(2**64)})
    )
    again, problem = decode("fault", raw)
    assert problem is None and isinstance(again, events.Fault)
    assert again.extra["c"] == 2**70 and again.extra["d"] == -(2**64)
    assert again.extra["a"] == 1e16 and again.extra["b"] == 0.1


@pytest.mark.parametrize(
    ("kind", "raw", "problem"),
    [
        ("frame", b'{"jsonrpc":"2.0"}', "not_a_document"),
        ("no_such_kind", b"{}", "unknown_kind"),
        ("fault", b"", "empty"),
        ("fault", b"{not json", "invalid_json"),
        ("fault", b'{"fault":"\xff"}', "invalid_utf8"),
        ("fault", b"[1,2]", "not_an_object"),
        ("fault", b'"text"', "not_an_object"),
        ("fault", b'{"v":2,"fault":"x"}', "unsupported_version 2"),
        ("fault", b'{"v":true,"fault":"x"}', "wrong_type v"),
        ("fault", b'{"v":"1","fault":"x"}', "wrong_type v"),
        ("fault", b'{"v":-1,"fault":"x"}', "wrong_type v"),
        ("fault", b'{"v":1,"fault":{"x":1}}', "wrong_type fault"),
        ("session_sealed", b'{"v":1,"count":true,"head":"ab"}', "wrong_type count"),
        ("session_sealed", b'{"v":1,"count":"12","head":"ab"}', "wrong_type count"),
        (
            "session_started",
            b'{"v":1,"name":"x","transport":"stdio","command":7}',
            "wrong_type command",
        ),
        ("decision", b'{"v":1,"source":"host"}', "missing_field decision"),
    ],
)
def test_hostile_documents_are_problems_not_exceptions(kind: str, raw: bytes, problem: str) -> None:
    assert decode(kind, raw) == (None, problem)


def test_random_bytes_never_raise() -> None:
    rng = random.Random(15)
    alphabet = b'{}[]":,0123456789.eE+-truefalsnul \\v\xff\x00'
    for _ in range(3000):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        for kind in ("fault", "session_sealed", "session_started", "frame"):
            doc, problem = decode(kind, raw)
            assert (doc is None) != (problem is None)


def test_field_lists_are_the_schema() -> None:
    assert events.field_names("session_sealed") == ("count", "head")
    assert "args_fingerprint" in events.field_names("decision")
    with pytest.raises(KeyError):
        events.fields_of("frame")


def test_encode_fields_writes_what_the_object_would() -> None:
    values = {"method": "POST", "path": "/mcp", "status": 200, "sse_events": None, "note": "n"}
    assert events.encode_fields(events.HttpExchange, **values) == encode(
        events.HttpExchange(**values)  # type: ignore[arg-type]
    )
    for cls in DOCUMENTS.values():
        assert events.encode_fields(cls, extra={"x": 1}) == encode(cls(extra={"x": 1}))
    with pytest.raises(TypeError, match="no field stauts"):
        events.encode_fields(events.HttpExchange, stauts=200)


def test_started_here_keeps_extra_keys_beside_the_fields() -> None:
    doc = events.started_here(name="n", transport="hook", command="h", extra={"host": "cursor"})
    written = events.as_dict(doc)
    assert written["host"] == "cursor" and "extra" not in written
    assert isinstance(written["pid"], int) and written["tap_version"]
    # A declared field given both ways: the field wins, as a producer's own value should.
    doc = events.started_here(name="n", transport="hook", command="h", extra={"name": "x"})
    assert events.as_dict(doc)["name"] == "n"
