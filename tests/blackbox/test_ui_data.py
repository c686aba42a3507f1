"""The UI's store reads on both backends: pages, never whole logs. A long session comes a page
at a time with each request's latency; the session list is newest first, keyset-paged, filtered
and counted per page; one record comes back byte for byte; the `checkpoints` table is read when
a store has one and ignored when it has not."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from blackbox.recorder.query.browse import (
    SessionQuery,
    newest_checkpoint,
    parse_cursor,
    session_counts,
    session_page,
    timeline_page,
)
from blackbox.recorder.store import EventStore, open_store

from blackbox.ui.data import record_detail
from tests.fixtures.analytics_kit import BASE_NS, Session
from tests.fixtures.environment import ROOT, backend_store_url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    with backend_store_url(request, request.param, tmp_path) as url:
        s = open_store(url)
        yield s
        s.close()


def test_a_long_session_comes_a_page_at_a_time_with_latencies(store: EventStore) -> None:
    s = Session("long")
    s.handshake()
    for i in range(600):
        s.call("echo", 10 + i * 10, 3 if i % 7 else None, {"i": i}, "ok" if i % 5 else "tool_error")
    s.end(7000)
    sid = s.save(store)
    page = timeline_page(store, sid)
    assert len(page["records"]) == 200 and page["last_seq"] == store.head(sid)[0]
    calls = [r for r in page["records"] if r["method"] == "tools/call"]
    answered = [r for r in calls if "latency_ms" in r]
    assert answered and all(r["latency_ms"] == pytest.approx(3.0) for r in answered)
    assert any(r["error"] for r in answered)  # isError results mark their request
    seen = [r["seq"] for r in page["records"]]
    while page["records"]:
        page = timeline_page(store, sid, after_seq=seen[-1])
        seen += [r["seq"] for r in page["records"]]
    assert seen == list(range(1, store.head(sid)[0] + 1))


def test_session_list_is_newest_first_paged_filtered_and_counted(store: EventStore) -> None:
    ids = []
    for i in range(230):
        s = Session(f"srv-{i % 3}", start_ns=BASE_NS + i * 1_000_000_000)
        s.handshake()
        s.call("echo", 5, 2, outcome="rpc_error" if i == 229 else "ok")
        if i % 10:
            s.end(10)
        ids.append(s.save(store))
    first = session_page(store, SessionQuery())
    assert [r["id"] for r in first["sessions"]] == ids[::-1][:100]
    counts = session_counts(store, [ids[-1], ids[0]])
    shown = {
        sid: (c["calls"], c["rpc_errors"], c["faults"], c["outcome"]) for sid, c in counts.items()
    }
    assert shown == {ids[-1]: (2, 1, 0, "errors"), ids[0]: (2, 0, 0, "open")}
    second = session_page(store, SessionQuery(before=parse_cursor(first["next"])))
    third = session_page(store, SessionQuery(before=parse_cursor(second["next"])))
    got = [r["id"] for p in (first, second, third) for r in p["sessions"]]
    assert got == ids[::-1] and third["next"] is None
    only = session_page(store, SessionQuery(q="srv-1"))["sessions"]
    assert only and all(r["name"] == "srv-1" for r in only)
    open_ones = session_page(store, SessionQuery(outcome="open", limit=500))["sessions"]
    assert len(open_ones) == 23 and all(r["outcome"] == "open" for r in open_ones)
    assert session_page(store, SessionQuery(q="100%_"))["sessions"] == []  # LIKE escaped


def test_a_record_comes_back_byte_for_byte(store: EventStore) -> None:
    s = Session()
    raw = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\xc3\xa9"}}  '
    s.raw("c2s", raw, 1)
    sid = s.save(store)
    detail = record_detail(store, sid, s.seq)
    assert detail is not None
    assert base64.b64decode(detail["raw_base64"]) == raw
    assert json.loads(detail["pretty"])["params"]["name"] == "é"
    assert record_detail(store, sid, s.seq + 5) is None


def test_the_newest_signed_checkpoint_is_shown(store: EventStore, tmp_path: Path) -> None:
    from blackbox.recorder.trust.keys import init_key
    from blackbox.recorder.trust.signing import issue

    assert newest_checkpoint(store) is None  # none signed yet: nothing, no error
    signer = init_key(tmp_path / "key", origin="ui.test")
    early = Session("early")
    early.call("t", 10, 2)
    early.end(20)
    early.save(store)
    first = issue(store, signer)
    later = Session("later", start_ns=BASE_NS + 10**9)
    later.call("t", 10, 2)
    later.end(20)
    later.save(store)
    second = issue(store, signer)
    shown = newest_checkpoint(store)
    assert shown is not None and second.size > first.size
    assert shown["size"] == second.size and shown["root_hash"] == second.root.hex()
    assert shown["note"] == second.note and shown["note"].startswith("ui.test\n")


def test_the_pages_assets_are_package_data() -> None:
    """The script and stylesheet ship in the distribution (no CDN): pyproject's package-data
    globs name every file under blackbox/ui/static."""
    import fnmatch
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["blackbox"]
    static = sorted((ROOT / "blackbox" / "ui" / "static").iterdir())
    assert {p.name for p in static} >= {"app.js", "style.css"}
    for path in static:
        relative = str(path.relative_to(ROOT / "blackbox"))
        assert any(fnmatch.fnmatch(relative, g) for g in globs), relative
