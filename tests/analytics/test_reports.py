"""Every report figure against a value computed independently in the test (numpy, statistics,
plain counting) over fixture sessions with known timings and outcomes."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest
from blackbox.analytics.reports import Filters, ReportError, run_report
from blackbox.recorder.store import open_store

from tests.fixtures.analytics_kit import BASE_NS, MS, Session, fingerprint

DAY = 86_400 * 10**9
TOOLS = {"search": (3.0, 0.8), "read": (1.5, 0.5), "write": (4.0, 1.2)}


def latency_sessions(seed: int = 7) -> tuple[list[Session], list[dict]]:
    """Four sessions on two days and two servers with random latencies and outcomes; returns the
    sessions and the truth, one dict per tools/call."""
    rng = np.random.default_rng(seed)
    sessions, truth = [], []
    for index in range(4):
        server = "alpha" if index % 2 == 0 else "beta"
        start = BASE_NS + (index // 2) * DAY + index * 60 * 10**9
        s = Session(name=server, start_ns=start)
        s.handshake(0)  # initialize, answered after 1 ms
        truth.append(
            {
                "session": s.sid,
                "server": server,
                "tool": None,
                "method": "initialize",
                "latency": 1.0,
                "outcome": "ok",
                "started_ns": start,
                "day": index // 2,
            }
        )
        at = 10.0
        for _ in range(60):
            tool = str(rng.choice(list(TOOLS)))
            mean, sigma = TOOLS[tool]
            latency = round(float(rng.lognormal(mean, sigma)), 3)
            outcome = str(rng.choice(["ok", "ok", "ok", "ok", "tool_error", "rpc_error", "none"]))
            s.call(tool, at, None if outcome == "none" else latency, {"q": at}, outcome=outcome)
            truth.append(
                {
                    "session": s.sid,
                    "server": server,
                    "tool": tool,
                    "method": "tools/call",
                    "latency": None if outcome == "none" else latency,
                    "outcome": "no_response" if outcome == "none" else outcome,
                    "started_ns": start + int(at * MS),
                    "day": index // 2,
                }
            )
            at += latency + 1.0
        s.end(at + 5)
        sessions.append(s)
    return sessions, truth


@pytest.mark.timeout(180)
def test_latency_and_errors_match_numpy(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    sessions, truth = latency_sessions()
    for s in sessions:
        s.save(store)
    report = run_report(store, tmp_path / "an", "latency", "tool")
    (section,) = report.sections
    assert {r["tool"] for r in section.rows} == set(TOOLS)
    for row in section.rows:
        values = [t["latency"] for t in truth if t["tool"] == row["tool"] and t["latency"]]
        assert row["calls"] == len(values)
        for q in (50, 95, 99):
            assert row[f"p{q}_ms"] == pytest.approx(np.percentile(values, q), abs=1e-3)
        assert row["max_ms"] == pytest.approx(max(values), abs=1e-3)
        assert row["mean_ms"] == pytest.approx(statistics.fmean(values), abs=1e-3)

    errors = run_report(store, tmp_path / "an", "errors", "server")
    summary, outcomes = errors.sections
    for row in summary.rows:
        mine = [t for t in truth if t["server"] == row["server"]]
        failed = sum(t["outcome"] != "ok" for t in mine)
        assert (row["calls"], row["failed"]) == (len(mine), failed)
        assert row["error_rate"] == pytest.approx(failed / len(mine), abs=1e-4)
    for row in outcomes.rows:
        mine = [t for t in truth if t["server"] == row["server"]]
        count = sum(t["outcome"] == row["outcome"] for t in mine)
        assert row["calls"] == count
        assert row["rate"] == pytest.approx(count / len(mine), abs=1e-4)
    store.close()


def test_filters_and_groupings(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    sessions, truth = latency_sessions(seed=11)
    for s in sessions:
        s.save(store)
    base = tmp_path / "an"

    def counts(**kw) -> dict:  # type: ignore[no-untyped-def]
        by = kw.pop("by", "tool")
        (section,) = run_report(store, base, "latency", by, Filters(**kw)).sections
        return {r[by]: r["calls"] for r in section.rows}

    def expect(pred, key="tool") -> dict:  # type: ignore[no-untyped-def]
        out: dict = {}
        for t in truth:
            if t["latency"] is not None and pred(t) and (key != "tool" or t["tool"]):
                out[t[key]] = out.get(t[key], 0) + 1
        return out

    day2 = BASE_NS + DAY
    assert counts(since_ns=day2) == expect(lambda t: t["started_ns"] >= day2)
    assert counts(until_ns=day2) == expect(lambda t: t["started_ns"] < day2)
    assert counts(server="beta") == expect(lambda t: t["server"] == "beta")
    sid = sessions[2].sid
    assert counts(session=sid[:13]) == expect(lambda t: t["session"] == sid)
    assert counts(by="server") == expect(lambda t: True, key="server")
    by_session = counts(by="session")
    assert by_session == expect(lambda t: True, key="session")
    by_day = counts(by="day")
    assert sorted(by_day.values()) == sorted(expect(lambda t: True, key="day").values())
    by_method = counts(by="method")
    assert by_method == expect(lambda t: True, key="method")
    assert by_method["initialize"] == 4
    with pytest.raises(ReportError):
        run_report(store, base, "sessions", "tool")


def test_sessions_report(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    durations = {"alpha": [], "beta": []}
    for i, (server, length, outcome) in enumerate(
        [("alpha", 100, "ok"), ("alpha", 300, "crashed"), ("alpha", 250, "ok"), ("beta", 50, None)]
    ):
        s = Session(name=server, start_ns=BASE_NS + i * 10**10)
        s.handshake(0)
        s.call("t", 5, 1.0)
        if outcome is not None:
            s.end(length, outcome=outcome)
        else:
            s.call("t", length, 1.0)  # still open: its duration runs to its last record
            length += 1
        durations[server].append(length / 1000)
        s.save(store)
    summary, outcomes, heartbeats = run_report(store, tmp_path / "an", "sessions").sections
    assert heartbeats.rows == []  # no pings in these sessions
    rows = {r["server"]: r for r in summary.rows}
    assert rows["alpha"]["sessions"] == 3 and rows["beta"]["sessions"] == 1
    assert rows["alpha"]["failed"] == 1 and rows["beta"]["open"] == 1
    assert rows["alpha"]["duration_p50_s"] == pytest.approx(statistics.median(durations["alpha"]))
    assert rows["alpha"]["duration_max_s"] == pytest.approx(0.3)
    assert rows["alpha"]["calls"] == 6 and rows["beta"]["calls"] == 3
    got = {(r["server"], r["outcome"]): r["sessions"] for r in outcomes.rows}
    assert got == {("alpha", "ok"): 2, ("alpha", "crashed"): 1, ("beta", "open"): 1}


def test_permissions_join_policy_and_host_decisions(sqlite_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_url)
    tap = Session(name="files")
    tap.handshake(0)
    # A policy decision: same session, request_seq.
    seq, _ = tap.call("delete", 10, 2.0, {"path": "/etc"})
    tap.decision(
        10.5,
        decision="deny",
        final="deny",
        rule="no-etc",
        tool="delete",
        server="files",
        request_seq=seq,
        args_fingerprint=fingerprint({"path": "/etc"}),
    )
    # Calls for host decisions, made by the tap session.
    ask_seq, _ = tap.call("read", 1000, 3.0, {"path": "a.txt"})
    near_seq, _ = tap.call("read", 20_000, 3.0, {"path": "b.txt"})
    far_seq, _ = tap.call("read", 21_000, 3.0, {"path": "b.txt"})
    quiet_seq, _ = tap.call("read", 30_000, 3.0, {"path": "never-asked"})
    tap.end(40_000)
    tap.save(store)
    # The host's hook writes its decisions into a session of its own, a moment before each call.
    host = Session(name=None, start_ns=BASE_NS, era=None)
    host.decision(
        990,
        decision="ask",
        final="allow",
        source="host",
        decided_by="user",
        tool="mcp__files__read",
        args_fingerprint=fingerprint({"path": "a.txt"}),
    )
    host.decision(
        19_990,
        decision="allow",
        source="host",
        decided_by="settings",
        tool="mcp__files__read",
        args_fingerprint=fingerprint({"path": "b.txt"}),
    )
    # Same tool and arguments but another server: no match.
    host.decision(
        20_000,
        decision="allow",
        source="host",
        decided_by="settings",
        tool="mcp__other__read",
        args_fingerprint=fingerprint({"path": "b.txt"}),
    )
    # Outside the 60 s window: no match.
    host.decision(
        200_000,
        decision="ask",
        final="deny",
        source="host",
        decided_by="user",
        tool="mcp__files__read",
        args_fingerprint=fingerprint({"path": "a.txt"}),
    )
    host.save(store)

    report = run_report(store, tmp_path / "an", "permissions", "tool")
    decided, undecided, unmatched = report.sections
    got = {
        (r["tool"], r["source"], r["rule"], r["verdict"]): (r["decisions"], r["matched_calls"])
        for r in decided.rows
    }
    assert got == {
        ("delete", "policy", "no-etc", "deny"): (1, 1),
        ("read", "host", "", "approved"): (1, 1),
        ("read", "host", "", "allow"): (2, 1),
        ("read", "host", "", "denied"): (1, 0),
    }
    # Calls with no decision: the two b.txt calls got one decision between them (the nearer one),
    # and the never-asked call none.
    assert {r["tool"]: r["calls"] for r in undecided.rows} == {"read": 2}
    assert sorted((r["server"], r["verdict"]) for r in unmatched.rows) == [
        ("files", "denied"),
        ("other", "allow"),
    ]
    from blackbox.analytics.reports import refreshed_connection

    con, _ = refreshed_connection(store, tmp_path / "an")
    matched = dict(
        con.execute(
            "SELECT call_request_seq, verdict FROM decisions WHERE matched_by = 'time_window'"
        ).fetchall()
    )
    assert matched == {ask_seq: "approved", near_seq: "allow"}
    assert far_seq not in matched and quiet_seq not in matched
    beside = dict(
        con.execute(
            "SELECT request_seq, decision || '/' || decision_source FROM calls "
            "WHERE request_seq IN (?, ?, ?)",
            [ask_seq, near_seq, far_seq],
        ).fetchall()
    )
    assert beside == {ask_seq: "approved/host", near_seq: "allow/host", far_seq: None}
    (denied,) = con.execute("SELECT outcome FROM calls WHERE request_seq = ?", [seq]).fetchall()
    assert denied == ("denied",)
