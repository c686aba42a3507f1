"""A recorded session read back from the store (both backends) as steps, causal dependencies,
server requests with their answers, and faults pinned to steps; and the mock server over it."""

from __future__ import annotations

import json

import pytest
from blackbox.recorder.store import open_store
from blackbox.replay.mock_server import MockServer, ServerExit
from blackbox.replay.recording import load_recording

from tests.fixtures.replay_kit import c2s, s2c, store_session


def req(i: object, method: str, params: dict | None = None) -> dict:
    m: dict = {"jsonrpc": "2.0", "id": i, "method": method}
    if params is not None:
        m["params"] = params
    return m


def res(i: object, result: dict) -> dict:
    return {"jsonrpc": "2.0", "id": i, "result": result}


def text(i: object, value: str, is_error: bool = False) -> dict:
    return res(i, {"content": [{"type": "text", "text": value}], "isError": is_error})


def crash_session(store) -> str:  # type: ignore[no-untyped-def]
    frames = [
        c2s(req(1, "initialize", {"protocolVersion": "2025-11-25"}), 0),
        s2c(res(1, {"protocolVersion": "2025-11-25"}), 5),
        c2s({"jsonrpc": "2.0", "method": "notifications/initialized"}, 6),
        c2s(req(2, "tools/call", {"name": "echo", "arguments": {"message": "hi"}}), 10),
        s2c({"jsonrpc": "2.0", "method": "roots/list", "id": 0}, 11),
        c2s(res(0, {"roots": [{"uri": "file:///x"}]}), 12),
        s2c(text(2, "hi"), 15),
        c2s(req(3, "tools/call", {"name": "fail", "arguments": {}}), 20),
        s2c(text(3, "nope", is_error=True), 22),
        c2s(req(4, "tools/call", {"name": "crash", "arguments": {"code": 3}}), 30),
    ]
    ended = {"reason": "server_exited", "outcome": "crashed", "exit_code": 3, "signal": None}
    return store_session(store, frames, command=["server"], ended=ended)


def test_steps_dependencies_server_requests_and_faults(store_url: str) -> None:
    store = open_store(store_url)
    rec = load_recording(store, crash_session(store))
    assert [s.label for s in rec.steps] == [
        "initialize",
        "notifications/initialized",
        "tools/call echo",
        "tools/call fail",
        "tools/call crash",
    ]
    # notifications/initialized was sent after the initialize response: it waits for it
    assert rec.steps[1].deps == [1]
    assert rec.steps[3].deps == [3]
    assert rec.steps[4].response is None
    (roots,) = rec.server_requests
    assert roots.frame.method == "roots/list" and roots.answer is not None
    assert json.loads(roots.answer.raw)["result"]["roots"][0]["uri"] == "file:///x"
    faults = {(f.fault, f.step) for f in rec.faults}
    # the unanswered crash call is part of the exit, not a fault of its own
    assert faults == {("tool_error", 4), ("server_exit", 5)}
    exit_fault = next(f for f in rec.faults if f.fault == "server_exit")
    assert exit_fault.detail == "server exited with status 3" and exit_fault.label == (
        "tools/call crash"
    )
    store.close()


def test_mock_server_answers_from_the_recording(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    server = MockServer(load_recording(store, crash_session(store)))
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    call = req("a", "tools/call", {"name": "echo", "arguments": {"message": "hi"}, "_meta": meta})
    (reply,) = server.handle(json.dumps(call).encode())
    assert json.loads(reply) == text("a", "hi")
    miss = req(7, "tools/call", {"name": "echo", "arguments": {"message": "bye"}})
    (error,) = server.handle(json.dumps(miss).encode())
    error = json.loads(error)
    assert error["id"] == 7 and error["error"]["code"] == -32602
    message = error["error"]["message"]
    assert "$.params.arguments.message" in message and '"hi"' in message and '"bye"' in message
    assert "seq" in message
    (unknown,) = server.handle(json.dumps(req(8, "prompts/list")).encode())
    assert json.loads(unknown)["error"]["code"] == -32601
    assert server.handle(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') == []
    crash = req(9, "tools/call", {"name": "crash", "arguments": {"code": 3}})
    with pytest.raises(ServerExit) as exc:
        server.handle(json.dumps(crash).encode())
    assert exc.value.code == 3
    store.close()


def test_mock_server_strict_order(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    server = MockServer(load_recording(store, crash_session(store)), strict_order=True)
    echo = req(1, "tools/call", {"name": "echo", "arguments": {"message": "hi"}})
    (error,) = server.handle(json.dumps(echo).encode())
    assert "expected the recorded request at seq" in json.loads(error)["error"]["message"]
    (ok,) = server.handle(json.dumps(req(1, "initialize", {})).encode())
    assert "result" in json.loads(ok)
    (ok,) = server.handle(json.dumps(echo).encode())
    assert json.loads(ok)["result"]["content"][0]["text"] == "hi"
    store.close()


def test_evaluate_explains_a_miss_and_spares_fault_explained_steps(sqlite_url: str) -> None:
    """Unit test of the verdicts on a hand-made run (no server): a response that came back under
    another id type is named as the nearest candidate; a response where the recording crashed is
    'fault not reproduced', not a divergence."""
    from blackbox.replay.compare import Masks
    from blackbox.replay.evaluate import evaluate
    from blackbox.replay.recording import frame_from_raw
    from blackbox.replay.results import Run

    store = open_store(sqlite_url)
    rec = load_recording(store, crash_session(store))
    run = Run()
    for step in rec.steps:
        run.sent_at[step.number] = step.number
    for number in (1, 4):
        run.responses[number] = rec.steps[number - 1].response
    # step 3 (echo, id 2) came back with the id as a string: a different id
    run.stray_responses.append(frame_from_raw(9, 0, "s2c", json.dumps(text("2", "hi")).encode()))
    run.responses[5] = frame_from_raw(10, 0, "s2c", json.dumps(text(4, "fine")).encode())
    run.server_used = [1]
    results, extras, faults = evaluate(rec, run, Masks())
    status = {r.number: r.status for r in results}
    assert status == {1: "ok", 2: "ok", 3: "missing", 4: "ok", 5: "fault_not_reproduced"}
    assert "nearest unmatched response is replay seq 9 (id 2)" in results[2].note
    assert [e["what"] for e in extras] == ["response to no request"]
    verdicts = {f.fault.fault: f.reproduced for f in faults}
    assert verdicts == {"tool_error": True, "server_exit": False}
    store.close()


def test_cli_could_not_run_is_one_line_and_exit_2(sqlite_url: str) -> None:
    from click.testing import CliRunner

    from blackbox.cli.main import main

    store = open_store(sqlite_url)
    sid = crash_session(store)
    store.close()
    runner = CliRunner()
    # The synthetic session lists no tools: its calls may change something, so every replay
    # case allows them, to reach the error under test.
    cases = [
        (
            ["replay", sid, "--allow-writes", "--inject", "explode@3"],
            "blackbox: bad --inject 'explode@3'",
        ),
        (
            ["replay", sid, "--allow-writes", "--ignore", "$.a["],
            "blackbox: cannot parse path '$.a['",
        ),
        (
            ["replay", sid, "--allow-writes", "--against", "/nonexistent/server"],
            "blackbox: cannot start",
        ),
        (
            ["replay", sid, "--allow-writes", "--against", "x", "--url", "http://h/mcp"],
            "blackbox: give --against",
        ),
        (["serve", "0000"], "blackbox: no session matches '0000'"),
    ]
    for args, message in cases:
        result = runner.invoke(main, [*args, "--store", sqlite_url])
        assert result.exit_code == 2, (args, result.output)
        # progress lines may come first; the error is the one last line, without a traceback
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith(message), (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""


def test_missing_server_request_names_the_nearest_one_the_replay_got() -> None:
    from blackbox.replay.evaluate import _nearest_replayed
    from blackbox.replay.recording import frame_from_raw

    def sampling(i: int, tokens: int) -> bytes:
        params = {"maxTokens": tokens, "messages": [{"role": "user", "content": "a"}]}
        return json.dumps(req(i, "sampling/createMessage", params)).encode()

    recorded = frame_from_raw(5, 0, "s2c", sampling(0, 10))
    replayed = [
        frame_from_raw(7, 0, "s2c", json.dumps(req(2, "roots/list")).encode()),
        frame_from_raw(8, 0, "s2c", sampling(3, 20)),
    ]
    text = _nearest_replayed(recorded, replayed)
    assert text == (
        "nearest server request in the replay is sampling/createMessage (replay seq 8): "
        "$.params.maxTokens: recorded 10, replayed 20"
    )
    assert _nearest_replayed(recorded, []) == "the server did not send it in the replay"
