"""Nothing lost, whatever the frame (issue 33): hostile frames in both directions, through `blackbox
record` (with a policy, tool pins, redaction, heartbeats and OpenTelemetry) and `blackbox proxy`
(with a policy, beside an SDK client of the same proxy), on SQLite and PostgreSQL.

A frame may carry any bytes: lone surrogate escapes, NUL, numbers beyond a double or a 64-bit
integer, duplicate keys, invalid UTF-8, 10,000-deep nesting, a BOM, CRLF, noise, eras no column
holds. Each is forwarded as it came and stored as it was forwarded; the tap keeps serving; the
session closes with its calls counted; `verify` and `ship` exit 0; the next session is stored too.
The gate refuses what it cannot read when it names a gated method (JSON-RPC Parse error, rule
`unparseable`) and keeps serving.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest
from blackbox.recorder.store import EventStore, open_store
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.documents import document
from tests.fixtures.environment import backend_store_url
from tests.fixtures.http_kit import check_session_integrity, server_process
from tests.fixtures.otlp import Receiver, attrs
from tests.fixtures.polling import eventually, free_port, wait_listening

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).resolve().parent
STDIO_SERVER = [sys.executable, str(HERE / "servers" / "hostile_server.py")]
HTTP_SERVER = HERE / "http_servers" / "hostile_server.py"

DEEP = b"[" * 10_000 + b"]" * 10_000
DOUBLE_OVERFLOW = b"1e400"
DIGITS_400 = b"9" * 400
DIGITS_5000 = b"9" * 5000  # beyond even Python's integer parsing (4,300 digits)
TWO_TO_THE_70 = str(2**70).encode()
SECRET = b"hunter2"
CRLF_FRAME = b'{"jsonrpc":"2.0","id":"crlf","method":"ping"}\r'  # a CRLF line, as the tap cuts it

POLICY = """
default = "allow"

[pin]
servers = ["hostile"]
trust_on_first_use = true

[[rule]]
id = "no-deletes"
decision = "deny"
tool = "delete_*"
reason = "nothing is deleted here"
"""

REDACT = """
builtins = false
key = "test-key"
keys = ["secret"]
"""

J = b'{"jsonrpc":"2.0",'  # every frame below starts so, but the batch, the BOM and the noise
MESSAGE = J + b'"method":"notifications/message"'
NOTE = MESSAGE + b',"params":'
ERA = b'"io.modelcontextprotocol/protocolVersion"'

# What the hostile server writes on `tools/call storm`, one frame a line, each with whether it is
# a JSON-RPC request as the recorder reads it (the sessions list counts requests as calls).
STORM: list[tuple[bytes, bool]] = [
    (J + rb'"id":"\udc00","method":"sampling/\ud800"}', True),
    (J + rb'"method":"notifications/\u0000"}', False),
    (J + rb'"id":"a\u0000b","method":"ping"}', True),
    (J + b'"id":1e400,"error":{"code":1e400,"message":"beyond a double"}}', False),
    (J + b'"id":%s,"error":{"code":%s,"message":"400 digits"}}' % (DIGITS_400, DIGITS_400), False),
    (J + rb'"id":"\ud800","error":{"code":%s,"message":"lone \udc00"}}' % TWO_TO_THE_70, False),
    (J + b'"id":%s,"method":"roots/list"}' % DIGITS_400, True),
    (J + b'"id":%s,"method":"ping"}' % DOUBLE_OVERFLOW, True),
    (J + b'"id":%s,"method":"ping"}' % DIGITS_5000, False),  # no parser here reads it
    (MESSAGE + b',"method":"notifications/progress","params":{"level":"a","level":"b"}}', False),
    (NOTE + b'{"data":"\xff\xfe"}}', False),
    (NOTE + b'{"data":%s}}' % DEEP, False),
    # Deep nesting the redactor cannot read, next to a key it must redact: hidden whole.
    (NOTE + b'{"secret":"%s","data":%s}}' % (SECRET, DEEP), False),
    (b"\xef\xbb\xbf" + NOTE + b'{"data":"bom"}}', False),
    (CRLF_FRAME, True),
    (b"DEBUG: this is not json", False),
    (J + b'"id":"init-2","result":{"protocolVersion":"2025-11-25%s"}}' % (b"x" * 10_000), False),
    (J + rb'"id":"init-3","result":{"protocolVersion":"2025-\udfff"}}', False),
    (J + rb'"id":"init-4","result":{"protocolVersion":"\u0000"}}', False),
    (NOTE + rb'{"_meta":{%s:"\ud800"},"data":"x"}}' % ERA, False),
    (b"[" + J + rb'"method":"\ud800"},' + J + rb'"id":"\udfff","method":"ping"}]', False),
]

PARSE_ERROR = "unparseable"  # the gate's own rule for what it cannot read


def line(doc: dict) -> bytes:
    return json.dumps(doc).encode() + b"\n"


def tools_call(rpc_id: object, tool: str, args: dict | None = None) -> bytes:
    return line(
        {
            "jsonrpc": "2.0",
            "id": rpc_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": args or {}},
        }
    )


INIT = line(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
)
INITIALIZED = line({"jsonrpc": "2.0", "method": "notifications/initialized"})
LIST = line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})

TOOLS_CALL = J + b'"method":"tools/call",'

# The client's frames after the handshake: (line, is a request, what the gate does with it:
# "forward", or the rule that refused it).
CLIENT: list[tuple[bytes, bool, str]] = [
    (J + rb'"id":"hb-\ud800","method":"ping"}' + b"\n", True, "forward"),
    (tools_call(3, "storm"), True, "forward"),
    (TOOLS_CALL + rb'"id":4,"params":{"name":"\ud800"}}' + b"\n", True, "forward"),
    (TOOLS_CALL + rb'"id":5,"params":{"name":"a\u0000b"}}' + b"\n", True, "forward"),
    (TOOLS_CALL + rb'"id":"x\u0000y","params":{"name":"echo"}}' + b"\n", True, "forward"),
    (J + rb'"id":6,"method":"tools\u0000/call"}' + b"\n", True, "forward"),
    (TOOLS_CALL + b'"id":7,"params":{"name":"echo"\n', False, PARSE_ERROR),
    (TOOLS_CALL + b'"id":8,"params":{"name":"\xff"}}\n', False, PARSE_ERROR),
    (TOOLS_CALL + b'"id":9,"params":{"name":"echo","arguments":%s}}\n' % DEEP, False, PARSE_ERROR),
    (tools_call(10, "delete_all"), True, "no-deletes"),
    (TOOLS_CALL + b'"id":11,"params":{"name":"echo","name":"delete_all"}}\n', True, "ambiguous"),
    (tools_call(12, "echo", {"secret": SECRET.decode(), "text": "kept"}), True, "forward"),
    (tools_call(13, "echo", {"text": "crlf"})[:-1] + b"\r\n", True, "forward"),
]
LAST_CALL = tools_call(14, "echo", {"text": "still serving"})


class Lines:
    """The tap's stdout, line by line, read by a thread so that the test can wait for a reply."""

    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        self.lines: list[bytes] = []
        self._q: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:  # type: ignore[no-untyped-def]
        for chunk in iter(stream.readline, b""):
            self._q.put(chunk)

    def _drain(self) -> None:
        while True:
            try:
                self.lines.append(self._q.get_nowait())
            except queue.Empty:
                return

    def reply_to(self, rpc_id: object, timeout: float = 20) -> dict:
        def find() -> dict | None:
            self._drain()
            for raw in self.lines:
                try:
                    msg = json.loads(raw)
                except (ValueError, RecursionError):  # the storm's lines, some deep
                    continue
                if isinstance(msg, dict) and "method" not in msg and msg.get("id") == rpc_id:
                    return msg
            return None

        return eventually(find, timeout=timeout, message=f"the reply to id {rpc_id!r}")

    def all(self) -> list[bytes]:
        self._drain()
        return self.lines


def sealed(store: EventStore, name: str, count: int = 1) -> list:
    def found() -> list:
        mine = [s for s in store.list_sessions() if s.name == name and s.sealed]
        return mine if len(mine) >= count else []

    return eventually(found, timeout=30, message=f"{count} sealed session(s) named {name}")


def frames(events: list, direction: str) -> list[bytes]:
    return [ev.raw for ev in events if ev.kind == "frame" and ev.direction == direction]


def split_lines(data: bytes) -> list[bytes]:
    """Lines as the stdio tap cuts them: at each newline, the newline left out."""
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


# -- stdio ---------------------------------------------------------------------------------------


def stdio_setup(tmp_path: Path, store_url: str) -> tuple[dict[str, str], list[str], list[str]]:
    """The environment, the hostile server's command and the tap's flags (policy with pins,
    redaction); the server logs what crossed into tmp_path/wire."""
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "redact.toml").write_text(REDACT)
    (tmp_path / "storm.bin").write_bytes(b"".join(frame + b"\n" for frame, _ in STORM))
    (tmp_path / "wire").mkdir()
    env = dict(os.environ, BLACKBOX_HOME=str(tmp_path / "home"), BLACKBOX_STORE=store_url)
    flags = ["--policy", str(tmp_path / "policy.toml"), "--redact", str(tmp_path / "redact.toml")]
    return env, [*STDIO_SERVER, str(tmp_path / "storm.bin"), str(tmp_path / "wire")], flags


def hostile_stdio_session(
    env: dict[str, str], server: list[str], *flags: str
) -> tuple[list[bytes], list[bytes]]:
    """One session through `blackbox record`: the handshake, the client's frames (the storm among
    them), then an ordinary call once all of those are answered. What the client wrote, and the
    lines it received."""
    proc = subprocess.Popen(
        peers.record_command(server, "hostile", None, *flags),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    out = Lines(proc.stdout)
    written: list[bytes] = []

    def send(data: bytes) -> None:
        written.append(data)
        proc.stdin.write(data)  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    try:
        send(INIT)
        assert out.reply_to(1)["result"]["serverInfo"]["name"] == "hostile"
        send(INITIALIZED)
        send(LIST)
        assert len(out.reply_to(2)["result"]["tools"]) == 3  # pinned on first use
        for frame, _request, _fate in CLIENT:
            send(frame)
        assert out.reply_to(13)["result"]["content"][0]["text"] == "called echo"
        # The tap survived all of it: a later ordinary call is answered.
        send(LAST_CALL)
        assert out.reply_to(14)["result"]["content"][0]["text"] == "called echo"
        proc.stdin.close()
        assert proc.wait(30) == 0, proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return written, out.all()


def ordinary_stdio_session(env: dict[str, str], server: list[str], *flags: str) -> bytes:
    """A plain session through the same tap setup; what the client wrote."""
    plain = INIT + INITIALIZED + tools_call(2, "echo", {"text": "plain"})
    proc = subprocess.Popen(
        peers.record_command(server, "hostile", None, *flags),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    stdout, stderr = proc.communicate(plain, timeout=30)
    assert proc.returncode == 0, stderr
    assert b'"called echo"' in stdout
    return plain


@dataclass
class StdioRecording:
    """The module's two stdio sessions through the same tap setup, one store: a hostile one
    (live OpenTelemetry on), then an ordinary one (left to the batch export)."""

    env: dict[str, str]
    store_url: str
    receiver: Receiver
    written: list[bytes]  # what the client wrote in the hostile session
    received: list[bytes]  # the lines it received
    c2s: bytes  # what crossed into the server in the hostile session, as it logged it
    s2c: bytes  # what the server wrote in the hostile session
    plain: bytes  # what the client wrote in the ordinary session


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stdio_recording(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StdioRecording]:
    """Recorded once per backend for both stdio tests (each session costs a tap and its store
    worker): the stdio test holds the store and the wire to the sessions, the OpenTelemetry test
    the spans. Neither test changes what the other reads: `verify` and `ship` find nothing to
    ship, `otel export` moves only its own watermark."""
    tmp = tmp_path_factory.mktemp(f"hostile-{request.param}")
    with backend_store_url(request, request.param, tmp) as store_url, Receiver() as receiver:
        env, server, flags = stdio_setup(tmp, store_url)
        otel = ["--otel", "--otel-endpoint", receiver.url]
        written, received = hostile_stdio_session(env, server, *flags, *otel)
        # The server logs every session into the same files: keep the hostile one's.
        wire = tmp / "wire"
        c2s, s2c = (wire / "c2s.bin").read_bytes(), (wire / "s2c.bin").read_bytes()
        plain = ordinary_stdio_session(env, server, *flags)  # no --otel
        yield StdioRecording(env, store_url, receiver, written, received, c2s, s2c, plain)


def test_stdio_hostile_frames_are_forwarded_stored_and_gated(
    stdio_recording: StdioRecording,
) -> None:
    rec = stdio_recording
    env, written, received = rec.env, rec.written, rec.received

    # What the server wrote reached the client byte for byte, the gate's replies between.
    server_out = rec.s2c
    assert b"".join(frame + b"\n" for frame, _ in STORM) in server_out
    assert b"".join(raw for raw in received if b"denied by policy" not in raw) == server_out
    refusals = [json.loads(raw) for raw in received if b"denied by policy" in raw]
    refused = [c for c in CLIENT if c[2] != "forward"]
    assert [r["error"]["data"]["rule"] for r in refusals] == [fate for _f, _r, fate in refused]
    for reply, (frame, _r, fate) in zip(refusals, refused, strict=True):
        if fate == PARSE_ERROR:  # the documented Parse error, with no id to answer
            assert reply["id"] is None and reply["error"]["code"] == -32700, frame[:80]
        else:
            assert reply["error"]["code"] == -32001 and reply["id"] == json.loads(frame)["id"]

    # What the client wrote reached the server byte for byte, less what the gate refused.
    forwarded = [INIT, INITIALIZED, LIST, *(f for f, _r, fate in CLIENT if fate == "forward")]
    assert rec.c2s == b"".join([*forwarded, LAST_CALL])

    # The store holds every frame as it was forwarded, in order; only redaction changed any.
    store = open_store(rec.store_url)
    info, second = sorted(sealed(store, "hostile", 2), key=lambda s: s.started_ns)
    events = list(store.read_session(info.session_id))
    stored_s2c = frames(events, "s2c")
    expected_s2c = split_lines(b"".join(received))
    assert len(stored_s2c) == len(expected_s2c)
    for stored, sent in zip(stored_s2c, expected_s2c, strict=True):
        if SECRET in sent:  # unreadable to the redactor, so hidden whole (fail closed)
            assert stored.startswith(b"[redacted:") and SECRET not in stored and DEEP in sent
        else:
            assert stored == sent
    stored_c2s = frames(events, "c2s")
    expected_c2s = split_lines(b"".join(written))
    assert len(stored_c2s) == len(expected_c2s)
    for stored, sent in zip(stored_c2s, expected_c2s, strict=True):
        if SECRET in sent:
            arguments = json.loads(stored)["params"]["arguments"]
            assert SECRET not in stored and arguments["secret"].startswith("[redacted:")
            assert arguments["text"] == "kept"
        else:
            assert stored == sent
    assert stored_c2s[-2].endswith(b"\r") and CRLF_FRAME in stored_s2c  # a CR is kept both ways

    # The derived columns hold what a column can, and say where they had to give way.
    by_raw = {ev.raw: ev for ev in events if ev.kind == "frame"}
    first = by_raw[STORM[0][0]]
    assert (first.method, first.rpc_id) == ("sampling/\ufffd", "\ufffd")
    assert first.degraded == "method:surrogate,rpc_id:surrogate"
    huge = by_raw[STORM[5][0]]
    assert huge.error_code is None and huge.degraded == "rpc_id:surrogate,error_code:out_of_range"
    long_era = by_raw[STORM[16][0]]
    assert long_era.era is None and long_era.degraded == "era:too_long"

    decisions = Counter(document(ev)["rule"] for ev in events if ev.kind == "decision")
    assert decisions[PARSE_ERROR] == 3 and decisions["no-deletes"] == decisions["ambiguous"] == 1
    found = {document(ev)["fault"] for ev in events if ev.kind == "fault"}
    assert {"invalid_json", "invalid_utf8", "stdout_pollution"} <= found
    assert "store_refused" not in found  # the store took every record as it came

    # The sessions list: closed, every request counted (both directions, refused ones too).
    # The commands run in this process: the question is what they print and how they exit.
    calls = 2 + sum(r for _f, r, _fate in CLIENT) + 1 + sum(r for _f, r in STORM)
    listing = run_blackbox("sessions", "--format", "json", "--name", "hostile", env=env)
    assert listing.returncode == 0, listing.stderr
    rows = {row["id"]: row for row in json.loads(listing.stdout)}
    assert rows.keys() == {info.session_id, second.session_id}
    row = rows[info.session_id]
    assert row["ended"] == "ok"
    assert row["calls"] == calls and row["outcome"] == "faults"
    assert row["frames"] == len(stored_c2s) + len(stored_s2c)

    verify = run_blackbox("verify", env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    ship = run_blackbox("ship", env=env)
    assert ship.returncode == 0, ship.stdout + ship.stderr
    assert "degraded" not in ship.stdout + ship.stderr

    # The ordinary session afterwards, same store, same tap setup: stored too.
    assert frames(list(store.read_session(second.session_id)), "c2s") == split_lines(rec.plain)
    store.close()


def test_otel_sends_a_hostile_session_and_the_ones_after(stdio_recording: StdioRecording) -> None:
    rec = stdio_recording
    store = open_store(rec.store_url)
    hostile, ordinary = sorted(sealed(store, "hostile", 2), key=lambda s: s.started_ns)
    store.close()

    def names(session_id: str) -> set[str]:
        return {
            s.name
            for _r, _s, s in rec.receiver.spans()
            if attrs(s).get("mcp_blackbox.session_id") == session_id
        }

    # Live, from the tap's follower: the hostile session's calls, and its end.
    eventually(
        lambda: "mcp.client.session" in names(hostile.session_id),
        timeout=12,
        message="the hostile session's spans",
    )
    assert {"tools/call storm", "tools/call echo"} <= names(hostile.session_id)
    # In batch: the session recorded after it (no --otel on its tap).
    batch = run_blackbox("otel", "export", "--endpoint", rec.receiver.url, env=rec.env)
    assert batch.returncode == 0, batch.stdout + batch.stderr
    assert "tools/call echo" in names(ordinary.session_id)


# -- HTTP ----------------------------------------------------------------------------------------

HTTP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def sse_data(body: bytes) -> list[bytes]:
    """The data of each event of an SSE body with one data line an event (the upstream's)."""
    return [
        part[len(b"data: ") :]
        for event in body.split(b"\n\n")
        for part in event.split(b"\n")
        if part.startswith(b"data: ")
    ]


def hostile_conversation(url: str) -> list[tuple[bytes, httpx2.Response]]:
    """The raw client's exchanges with /hostile through the proxy: each body it posted and the
    answer. Every storm frame comes back as a JSON body of its own, then all as one SSE reply."""
    sent: list[tuple[bytes, httpx2.Response]] = []
    headers = dict(HTTP_HEADERS)
    with httpx2.Client(timeout=20) as http:

        def post(body: bytes) -> httpx2.Response:
            reply = http.post(url, content=body, headers=headers)
            sent.append((body, reply))
            return reply

        headers["mcp-session-id"] = post(INIT[:-1]).headers["mcp-session-id"]
        assert post(INITIALIZED[:-1]).status_code == 202
        for i, (frame, _request) in enumerate(STORM):
            reply = post(tools_call(100 + i, "frame", {"i": i})[:-1])
            assert (reply.status_code, reply.content) == (200, frame)  # forwarded byte for byte
        for frame, _request, _fate in CLIENT:
            assert post(frame[:-1]).status_code == 200
        reply = post(LAST_CALL[:-1])  # the proxy still serves this client
        assert reply.json()["result"]["content"][0]["text"] == "called echo"
        assert http.delete(url, headers=headers).status_code == 200
    return sent


async def beside_an_sdk_client(base: str) -> dict:
    """An SDK client of the same proxy calls before, while and after the raw one is hostile."""
    out: dict = {}
    neighbour = Implementation(name="neighbour", version="1")
    async with Client(
        streamable_http_client(f"{base}/mcp"), mode="legacy", client_info=neighbour
    ) as client:
        out["before"] = (await client.call_tool("echo", {"message": "before"})).content[0].text
        out["hostile"] = await anyio.to_thread.run_sync(hostile_conversation, f"{base}/hostile")
        out["after"] = (await client.call_tool("echo", {"message": "after"})).content[0].text
    return out


def test_proxy_hostile_frames_beside_an_sdk_client(
    tmp_path: Path, store_url: str, blackbox_env: dict[str, str]
) -> None:
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "frames.bin").write_bytes(b"".join(frame + b"\n" for frame, _ in STORM))
    upstream_log = tmp_path / "upstream.log"
    upstream_port, port = free_port(), free_port()
    upstream = [sys.executable, str(HTTP_SERVER), str(upstream_port)]
    upstream += [str(tmp_path / "frames.bin"), str(upstream_log)]
    with server_process(upstream, upstream_port):
        proxy = subprocess.Popen(
            [peers.BLACKBOX, "proxy", "--upstream", f"http://127.0.0.1:{upstream_port}/mcp",
             "--store", store_url, "--name", "hostile-http", "--listen", f"127.0.0.1:{port}",
             "--policy", str(tmp_path / "policy.toml")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=blackbox_env,
        )  # fmt: skip
        try:
            wait_listening(port, proxy, timeout=20.0)
            seen = anyio.run(beside_an_sdk_client, f"http://127.0.0.1:{port}")
        finally:
            proxy.send_signal(signal.SIGINT)
            _out, err = proxy.communicate(timeout=30)
        assert proxy.returncode == 0, err
    assert (seen["before"], seen["after"]) == ("before", "after")
    exchanges: list[tuple[bytes, httpx2.Response]] = seen["hostile"]

    # The gate refused what it could not read, and what it denied, with the documented errors.
    refusals = [(body, r.json()) for body, r in exchanges if b"denied by policy" in r.content]
    refused = [c for c in CLIENT if c[2] != "forward"]
    assert [body + b"\n" for body, _r in refusals] == [frame for frame, _r, _f in refused]
    for (_body, reply), (frame, _r, fate) in zip(refusals, refused, strict=True):
        assert reply["error"]["data"]["rule"] == fate
        if fate == PARSE_ERROR:
            assert reply["id"] is None and reply["error"]["code"] == -32700, frame[:80]
        else:
            assert reply["error"]["code"] == -32001
    # ... and none of it reached the upstream; everything else did, byte for byte.
    reached = [bytes.fromhex(h) for h in upstream_log.read_text().split()]
    refused_bodies = {body for body, _r in refusals}
    assert reached == [body for body, _r in exchanges if body not in refused_bodies]

    store = open_store(store_url)
    sessions = [s for s in store.list_sessions() if s.name == "hostile-http"]
    assert len(sessions) == 2 and all(s.sealed for s in sessions)
    by_client = {}
    for info in sessions:
        events = list(store.read_session(info.session_id))
        first = json.loads(frames(events, "c2s")[0])
        by_client[first["params"]["clientInfo"]["name"]] = (info, events)

    # The SDK client's session is whole: both calls, each answered, nothing of the other's.
    info, events = by_client["neighbour"]
    check_session_integrity(events)
    calls = [json.loads(raw) for raw in frames(events, "c2s")]
    echoes = [m["params"]["arguments"]["message"] for m in calls if m.get("method") == "tools/call"]
    assert echoes == ["before", "after"] and info.outcome == "ok"

    # The hostile session holds every body posted and every frame answered, as they crossed.
    info, events = by_client["raw"]
    assert frames(events, "c2s") == [body for body, _r in exchanges]
    answered: list[bytes] = []
    for _body, reply in exchanges:
        kind = reply.headers.get("content-type", "")
        if kind.startswith("text/event-stream"):
            data = sse_data(reply.content)
            assert data[:-1] == [frame for frame, _ in STORM if b"\r" not in frame]
            answered += data
        elif kind.startswith("application/json") and reply.content:
            answered.append(reply.content)
    assert frames(events, "s2c") == answered
    assert info.outcome == "ok"  # closed by the client's DELETE
    found = {document(ev)["fault"] for ev in events if ev.kind == "fault"}
    assert "invalid_json" in found and "store_refused" not in found

    # The commands run in this process: the question is what they print and how they exit.
    listing = run_blackbox(
        "sessions",
        "--format",
        "json",
        "--name",
        "hostile-http",
        "--store",
        store_url,
        env=blackbox_env,
    )
    assert listing.returncode == 0, listing.stderr
    row = next(r for r in json.loads(listing.stdout) if r["id"] == info.session_id)
    storm_requests = sum(r for _f, r in STORM)
    sse_requests = sum(r for f, r in STORM if b"\r" not in f)
    client_requests = 1 + len(STORM) + sum(r for _f, r, _fate in CLIENT) + 1
    assert row["calls"] == client_requests + storm_requests + sse_requests
    assert row["ended"] == "ok" and row["outcome"] == "faults"
    for command in (["verify"], ["ship"]):
        done = run_blackbox(*command, "--store", store_url, env=blackbox_env)
        assert done.returncode == 0, done.stdout + done.stderr
    store.close()
