"""The gate decides on unambiguous JSON only, proved through a real `blackbox record --policy`
with a real SDK server behind it (and once through the HTTP proxy), written as the attacks: a
frame whose keys repeat (`"name":"write_file","name":"read_file"`, two `method`s, two `params`,
two argument keys, an escaped duplicate, one such call in a batch) means one call to our parser
(the last key wins) and another to a server whose parser keeps the first. Each is denied as
ambiguous, and a relay in front of the server (`tests/fixtures/capture_relay.py`) shows the
server never received it. Path rules with `normalize = "path"` see through `..` and `//`. Frames
without duplicates are decided as before.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures import peers
from tests.fixtures.documents import document
from tests.fixtures.fault_server import FaultServer
from tests.fixtures.http_kit import RecordingProxy, doc, of_kind
from tests.fixtures.taps import INIT, INITIALIZED, wait_sealed

SERVER = Path(__file__).parent / "servers" / "call_log_server.py"

POLICY = """\
default = "allow"

[[rule]]
id = "no-etc"
decision = "deny"
tool = "write_*"
reason = "nothing writes under /etc"
when = [{ arg = "path", matches = "^/etc/", normalize = "path" }]
"""


def _call(rpc_id: int, params: str) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}' % (
        rpc_id,
        params.encode(),
    )


# id -> (frame, the duplicated key as the decision's reason names it)
ATTACKS = {
    "two-names": (
        2,
        _call(2, '{"name":"write_file","name":"read_file","arguments":{"path":"/etc/passwd"}}'),
        '"name" in params',
    ),
    "two-methods": (
        3,
        b'{"jsonrpc":"2.0","id":3,"method":"tools/call","method":"tools/list",'
        b'"params":{"name":"write_file","arguments":{"path":"/etc/passwd","content":"pwned"}}}',
        '"method"',
    ),
    "two-params": (
        4,
        b'{"jsonrpc":"2.0","id":4,"method":"tools/call",'
        b'"params":{"name":"write_file","arguments":{"path":"/etc/passwd","content":"pwned"}},'
        b'"params":{"name":"echo","arguments":{"message":"harmless"}}}',
        '"params"',
    ),
    "two-argument-keys": (
        5,
        _call(
            5,
            '{"name":"write_file","arguments":{"path":"/etc/passwd","path":"/tmp/x",'
            '"content":"pwned"}}',
        ),
        '"path" in params.arguments',
    ),
    "escaped-key": (
        6,
        _call(
            6,
            '{"name":"write_file","na\\u006de":"echo",'
            '"arguments":{"path":"/etc/passwd","content":"pwned","message":"harmless"}}',
        ),
        '"name" in params',
    ),
    "batch": (
        8,
        b"["
        + _call(7, '{"name":"echo","arguments":{"message":"in a batch"}}')
        + b","
        + _call(
            8,
            '{"name":"write_file","arguments":{"path":"/etc/passwd","path":"/tmp/x",'
            '"content":"pwned"}}',
        )
        + b"]",
        '"path" in params.arguments',
    ),
}

# No duplicates: decided by the rules, with and without normalisation.
NORMALISED = {
    "dot-dot": (9, _call(9, '{"name":"write_file","arguments":{"path":"/tmp/../etc/passwd"}}')),
    "double-slash": (10, _call(10, '{"name":"write_file","arguments":{"path":"//etc/passwd"}}')),
    "plain": (11, _call(11, '{"name":"write_file","arguments":{"path":"/etc/passwd"}}')),
}
ALLOWED = [
    _call(12, '{"name":"write_file","arguments":{"path":"/home/u/notes.txt","content":"ok"}}'),
    _call(13, '{"name":"echo","arguments":{"message":"alive"}}'),
]


@dataclass
class Run:
    replies: dict[object, dict]  # by JSON-RPC id; a batch's replies are spread out
    received: list[bytes]  # every line the server got, from the relay in front of it
    server_log: list[dict]  # the calls the server ran, from its own log
    decisions: dict[str | None, list[dict]]  # decision documents by rpc_id
    store_url: str
    session_id: str
    policy_file: Path


def _reader(stream, out: queue.Queue) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        out.put(line)
    out.put(None)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("ambiguity")
    store_url = f"sqlite:///{tmp / 'store.db'}"
    policy_file = tmp / "policy.toml"
    policy_file.write_text(POLICY)
    log, capture = tmp / "calls.log", tmp / "capture"
    server = peers.capture_command([sys.executable, str(SERVER), str(log)], capture)
    env = dict(os.environ, BLACKBOX_HOME=str(tmp / "home"), BLACKBOX_STORE=store_url)
    proc = subprocess.Popen(
        peers.record_command(server, "calllog", None, "--policy", str(policy_file)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    replies: dict[object, dict] = {}

    def send_and_wait(frame: bytes, rpc_id: int, timeout: float = 15) -> None:
        # A reply the old gate let the server make (or none at all) is left for the tests to see.
        proc.stdin.write(frame + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        while rpc_id not in replies:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                return
            if line is None:
                return
            value = json.loads(line)
            for reply in value if isinstance(value, list) else [value]:
                replies[reply.get("id")] = reply

    try:
        send_and_wait(INIT.rstrip(b"\n"), 1)
        proc.stdin.write(INITIALIZED)
        for rpc_id, frame, _ in ATTACKS.values():
            send_and_wait(frame, rpc_id)
        for rpc_id, frame in NORMALISED.values():
            send_and_wait(frame, rpc_id)
        for rpc_id, frame in zip((12, 13), ALLOWED, strict=True):
            send_and_wait(frame, rpc_id)
        proc.stdin.close()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    store = open_store(store_url)
    try:
        (info,) = wait_sealed(store)
        docs = [document(ev) for ev in store.read_session(info.session_id) if ev.kind == "decision"]
    finally:
        store.close()
    decisions: dict[str | None, list[dict]] = {}
    for one in docs:
        decisions.setdefault(one["rpc_id"], []).append(one)
    received = (capture / "c2s.bin").read_bytes().splitlines()
    server_log = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
    yield Run(replies, received, server_log, decisions, store_url, info.session_id, policy_file)


@pytest.mark.parametrize("attack", ATTACKS)
def test_ambiguous_call_is_denied_and_never_reaches_the_server(run: Run, attack: str) -> None:
    rpc_id, frame, where = ATTACKS[attack]
    assert frame not in run.received
    assert not any(b"pwned" in line or b"/etc/passwd" in line for line in run.received)
    reply = run.replies.get(rpc_id)
    assert reply is not None, "no reply from the tap"
    assert reply["error"]["code"] == -32001
    assert reply["error"]["data"]["rule"] == "ambiguous"
    assert f"duplicate key {where} (" in reply["error"]["message"]
    (doc,) = run.decisions[str(rpc_id)]
    assert (doc["decision"], doc["final"], doc["decided_by"], doc["rule"]) == (
        "deny",
        "deny",
        "rule",
        "ambiguous",
    )
    assert doc["reason"].startswith(f"ambiguous JSON: duplicate key {where} (")


def test_the_rest_of_an_ambiguous_batch_is_denied_with_it(run: Run) -> None:
    assert run.replies[7]["error"]["data"]["rule"] == "ambiguous"
    (doc,) = run.decisions["7"]
    assert (doc["decision"], doc["final"], doc["batch_index"]) == ("allow", "deny", 0)
    assert run.decisions["8"][0]["batch_index"] == 1


@pytest.mark.parametrize("case", NORMALISED)
def test_normalised_path_rule_denies_dot_dot_and_double_slash(run: Run, case: str) -> None:
    rpc_id, frame = NORMALISED[case]
    assert frame not in run.received
    assert run.replies[rpc_id]["error"]["data"]["rule"] == "no-etc"
    (doc,) = run.decisions[str(rpc_id)]
    assert (doc["decision"], doc["rule"]) == ("deny", "no-etc")


def test_frames_without_duplicates_reach_the_server_as_before(run: Run) -> None:
    assert run.received == [INIT.rstrip(b"\n"), INITIALIZED.rstrip(b"\n"), *ALLOWED]
    assert run.server_log == [
        {"tool": "write_file", "arguments": {"path": "/home/u/notes.txt", "content": "ok"}},
        {"tool": "echo", "arguments": {"message": "alive"}},
    ]
    assert "result" in run.replies[12] and "result" in run.replies[13]
    assert [(d["decision"], d["rule"]) for d in run.decisions["12"] + run.decisions["13"]] == [
        ("allow", "default"),
        ("allow", "default"),
    ]


def test_policy_test_shows_the_ambiguous_calls_as_the_gate_decided(run: Run) -> None:
    result = CliRunner().invoke(
        main,
        [
            *("policy", "test", str(run.policy_file), run.session_id),
            *("--store", run.store_url, "--format", "json"),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in json.loads(result.output)}
    for rpc_id, _frame, _where in ATTACKS.values():
        assert rows[str(rpc_id)]["rule"] == "ambiguous"
        assert rows[str(rpc_id)]["recorded"] == "deny (ambiguous)"
    assert rows["12"]["rule"] == "default" and rows["9"]["rule"] == "no-etc"


def test_the_http_proxy_denies_ambiguous_calls_too(tmp_path: Path) -> None:
    """The proxy consults the same gate on every POSTed body: the ambiguous calls above never
    leave it, and an unambiguous one does."""
    from blackbox.recorder.gate.policy import Policy

    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    with FaultServer() as upstream:
        with RecordingProxy(
            f"{upstream.url}/json", tmp_path / "j", policy=Policy.from_text(POLICY)
        ) as proxy:
            replies = [
                httpx2.post(proxy.url, content=frame, headers=headers, timeout=10).json()
                for _id, frame, _where in ATTACKS.values()
            ]
            passed = httpx2.post(proxy.url, content=ALLOWED[1], headers=headers, timeout=10)
        bodies = [r[3] for r in upstream.requests]
    assert bodies == [ALLOWED[1]], "only the unambiguous call reached the upstream"
    assert passed.json()["result"] == {"ok": True}
    for reply in replies:
        for one in reply if isinstance(reply, list) else [reply]:
            assert one["error"]["data"]["rule"] == "ambiguous"
    decisions = [doc(e) for e in of_kind(proxy.records(), "decision")]
    assert [d["rule"] for d in decisions] == ["ambiguous"] * 5 + ["default", "ambiguous", "default"]
