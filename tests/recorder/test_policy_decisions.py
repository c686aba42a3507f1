"""Host decisions in the store (both backends): appends from many processes at once, the spool,
correlation rules, and `policy test` over batches."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from blackbox.recorder.gate.decisions import (
    SPOOL_NAME,
    CallRef,
    DecisionError,
    HostDecision,
    args_fingerprint,
    correlate,
    drain_spool,
    host_decisions,
    record_decision,
    session_started_doc,
    split_host_tool,
    spool_records,
)
from blackbox.recorder.gate.policy import Policy, evaluate_session
from blackbox.recorder.log.model import Direction, Kind, NewEvent, new_session_id
from blackbox.recorder.store import open_store

S = 1_000_000_000


def test_concurrent_writers_share_one_host_session_without_losing_a_record(
    store_url: str,
) -> None:
    writers, each = 4, 5
    errors: list[BaseException] = []
    open_store(store_url).close()  # migrate once first: this test is about appends

    def write(w: int) -> None:
        store = open_store(store_url)  # one store per writer, as separate hook processes have
        try:
            for i in range(each):
                record_decision(
                    store,
                    tool=f"mcp__srv__tool{w}",
                    decision="allow",
                    args={"i": i},
                    host="cursor",
                    host_session="shared",
                )
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    store = open_store(store_url)
    try:
        (info,) = store.list_sessions(name="cursor:shared")
        events = list(store.read_session(info.session_id))
        assert store.verify(info.session_id) == []
    finally:
        store.close()
    assert [ev.seq for ev in events] == list(range(1, writers * each + 2))
    assert [ev.kind for ev in events].count(Kind.SESSION_STARTED) == 1
    docs = [json.loads(ev.raw) for ev in events if ev.kind == Kind.DECISION]
    assert sorted((d["tool"], d["args_fingerprint"]) for d in docs) == sorted(
        (f"tool{w}", args_fingerprint({"i": i})) for w in range(writers) for i in range(each)
    )


def test_record_decision_refuses_words_outside_the_vocabulary(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        with pytest.raises(DecisionError, match="decision must be one of allow, deny, ask"):
            record_decision(store, tool="t", decision="maybe")
        with pytest.raises(DecisionError, match="decided_by"):
            record_decision(store, tool="t", decision="deny", decided_by="cat")
        assert store.list_sessions() == []
    finally:
        store.close()


def test_split_host_tool() -> None:
    assert split_host_tool("mcp__fs__write_file") == ("fs", "write_file")
    assert split_host_tool("mcp__my-srv__a__b") == ("my-srv", "a__b")
    assert split_host_tool("Bash") == (None, "Bash")
    assert split_host_tool("mcp__onlyserver") == (None, "mcp__onlyserver")


def test_spool_keeps_order_and_time_and_drains_once(sqlite_url: str, tmp_path: Path) -> None:
    started = session_started_doc("h:1", "h")
    for i in range(3):
        doc = json.dumps({"decision": "allow", "tool": f"t{i}"}).encode()
        spool_records(tmp_path, "h:1", started, [(Kind.DECISION, doc)], wall_ns=(i + 1) * S)
    (tmp_path / SPOOL_NAME).open("a").write("{torn line\n")
    store = open_store(sqlite_url)
    try:
        assert drain_spool(store, tmp_path) == 4
        assert drain_spool(store, tmp_path) == 0
        (info,) = store.list_sessions(name="h:1")
        events = list(store.read_session(info.session_id))
    finally:
        store.close()
    decisions = [ev for ev in events if ev.kind == Kind.DECISION]
    assert [json.loads(ev.raw)["tool"] for ev in decisions] == ["t0", "t1", "t2"]
    assert [ev.wall_ns for ev in decisions] == [S, 2 * S, 3 * S]


def test_spool_keeps_what_the_store_refused(tmp_path: Path) -> None:
    class DownStore:
        def list_sessions(self, **_kw):  # type: ignore[no-untyped-def]
            from blackbox.recorder.errors import StoreUnavailable

            raise StoreUnavailable("down")

    spool_records(tmp_path, "h:1", b"{}", [(Kind.DECISION, b"{}")])
    assert drain_spool(DownStore(), tmp_path) == 0  # type: ignore[arg-type]
    assert (tmp_path / SPOOL_NAME).read_text().count("\n") == 1


def _decision(tool: str, args: object, first: int, last: int, server: str | None = "my.srv"):  # type: ignore[no-untyped-def]
    return HostDecision(
        session_id="h",
        seq=1,
        wall_ns=last,
        first_wall_ns=first,
        server=server,
        tool=tool,
        args_fingerprint=args_fingerprint(args),
        decision="allow",
        final="allow",
        decided_by="user",
        asked=True,
        tool_use_id=f"{tool}@{first}",
        doc={},
    )


def _call(tool: str, args: object, at: int, seq: int, server: str | None = "my.srv") -> CallRef:
    return CallRef("tap", seq, at, server, tool, str(seq), args_fingerprint(args))


def test_correlate_needs_same_server_tool_and_arguments() -> None:
    d = _decision("echo", {"m": 1}, 10 * S, 12 * S, server="my_srv")  # as Claude Code spells it
    calls = [
        _call("echo", {"m": 2}, 11 * S, 1),  # other arguments
        _call("echo", {"m": 1}, 11 * S, 2, server="other"),  # other server
        _call("other", {"m": 1}, 11 * S, 3),  # other tool
        _call("echo", {"m": 1}, 11 * S, 4),  # the one
    ]
    joined = correlate([d], calls)
    assert [(dd.tool_use_id, c.seq) for dd, c in joined.matches] == [(d.tool_use_id, 4)]
    assert [c.seq for c in joined.undecided_calls] == [1, 2, 3]


def test_correlate_keeps_a_call_inside_its_use_and_takes_each_once() -> None:
    a = _decision("echo", {"m": 1}, 10 * S, 12 * S)
    b = _decision("echo", {"m": 1}, 20 * S, 21 * S)
    late = _decision("echo", {"m": 1}, 40 * S, 41 * S)  # a use whose call never came
    calls = [_call("echo", {"m": 1}, 11 * S, 1), _call("echo", {"m": 1}, int(20.5 * S), 2)]
    joined = correlate([a, b, late], calls)
    assert [(d.first_wall_ns, c.seq) for d, c in joined.matches] == [(10 * S, 1), (20 * S, 2)]
    assert joined.unmatched_decisions == (late,)
    assert joined.undecided_calls == ()


def test_a_lone_decision_matches_the_nearest_call_within_the_window() -> None:
    lone = _decision("echo", {"m": 1}, 100 * S, 100 * S)
    calls = [_call("echo", {"m": 1}, 40 * S, 1), _call("echo", {"m": 1}, 97 * S, 2)]
    assert [c.seq for _d, c in correlate([lone], calls).matches] == [2]
    assert correlate([lone], calls, window_ns=2 * S).matches == ()


def test_host_decisions_groups_records_by_tool_use(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        for wall, doc in [
            (1 * S, {"decision": None, "tool_use_id": "u1", "tool": "t", "hook_event": "Pre"}),
            (2 * S, {"decision": "ask", "tool_use_id": "u1", "tool": "t"}),
            (
                3 * S,
                {
                    "decision": "allow",
                    "final": "allow",
                    "decided_by": "user",
                    "tool_use_id": "u1",
                    "tool": "t",
                },
            ),
            (4 * S, {"decision": "deny", "final": "deny", "decided_by": "user", "tool": "x"}),
        ]:
            record_decision(
                store,
                tool=doc["tool"],
                decision=doc["decision"] or "ask",
                extra=doc,
                session_name="grp",
                wall_ns=wall,
            )
        (info,) = store.list_sessions(name="grp")
        uses = host_decisions(store, info.session_id)
    finally:
        store.close()
    assert [(u.tool_use_id, u.final, u.asked, u.first_wall_ns, u.wall_ns) for u in uses] == [
        ("u1", "allow", True, 1 * S, 3 * S),
        (None, "deny", False, 4 * S, 4 * S),
    ]


def test_policy_test_over_a_batch_and_a_prior_decision(store_url: str) -> None:
    policy = Policy.from_text('[[rule]]\nid = "no-rm"\ndecision = "deny"\ntool = "rm"\n')
    sid = new_session_id()
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ls"}},
        {"jsonrpc": "2.0", "id": "b", "method": "tools/call", "params": {"name": "rm"}},
    ]
    recorded = json.dumps(
        {"decision": "allow", "final": "allow", "source": "policy", "rule": "old", "rpc_id": "b"}
    ).encode()
    rows_in = [
        (Kind.SESSION_STARTED, Direction.NONE, b'{"name":"fs","transport":"stdio"}'),
        (Kind.FRAME, Direction.CLIENT_TO_SERVER, json.dumps(batch).encode()),
        (Kind.DECISION, Direction.NONE, recorded),
        (Kind.FRAME, Direction.SERVER_TO_CLIENT, b'{"jsonrpc":"2.0","id":1,"result":{}}'),
    ]
    store = open_store(store_url)
    try:
        store.append(
            [NewEvent(sid, i + 1, (i + 1) * S, i, k, d, r) for i, (k, d, r) in enumerate(rows_in)]
        )
        rows = evaluate_session(policy, store, sid)
    finally:
        store.close()
    assert [
        (r["seq"], r["id"], r["server"], r["tool"], r["decision"], r["rule"], r["recorded"])
        for r in rows
    ] == [
        (2, "1", "fs", "ls", "allow", "default", None),
        (2, "b", "fs", "rm", "deny", "no-rm", "allow (old)"),
    ]
