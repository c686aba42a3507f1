"""A request body cut short, attacked: a POST whose client closes (or half-closes) its connection
before the body its Content-Length declares has arrived, and a chunked POST cut in the middle of a
chunk. Neither may reach the upstream as a request (the bytes that arrived are not a complete
message); each is a transport fault saying what happened; and the proxy serves the next request
as before."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from pathlib import Path

import httpx2
import pytest
from blackbox.recorder.capture.journal import Journal, read_journal
from blackbox.recorder.capture.taps.http import HttpProxyTap
from blackbox.recorder.capture.taps.http_exchange import ProxySettings
from blackbox.recorder.store import open_store

from tests.fixtures.documents import document
from tests.fixtures.fault_server import CALL, JSON_HEADERS, FaultServer
from tests.fixtures.http_kit import RecordingProxy, doc, frames, of_kind
from tests.fixtures.polling import eventually

pytestmark = pytest.mark.timeout(60)

DECLARED = 200
SENT = 50


def _call_of(size: int) -> bytes:
    """A tools/call of exactly `size` bytes (padded in its arguments)."""
    head = (
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"add","arguments":{"pad":"'
    )
    tail = b'"}}}'
    body = head + b"x" * (size - len(head) - len(tail)) + tail
    assert len(body) == size and json.loads(body)
    return body


BODY = _call_of(DECLARED)


def _truncated_request(port: int, framing: str) -> bytes:
    """The bytes of a POST to /json whose body stops after SENT of its DECLARED bytes."""
    head = (
        f"POST /json HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
    ).encode()
    if framing == "content-length":
        return head + f"Content-Length: {DECLARED}\r\n\r\n".encode() + BODY[:SENT]
    # One whole chunk of 20 bytes, then a chunk announcing the other 180 of which 30 arrive.
    first, rest = BODY[:20], BODY[20:]
    return (
        head
        + b"Transfer-Encoding: chunked\r\n\r\n"
        + f"{len(first):x}\r\n".encode()
        + first
        + b"\r\n"
        + f"{len(rest):x}\r\n".encode()
        + rest[: SENT - len(first)]
    )


def _send_and_hang_up(port: int, request: bytes, how: str) -> bytes:
    """Send `request`, give the proxy time to read it, then close the connection (`close`) or
    only its sending half (`shutdown`, reading what comes back); the bytes the client got."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(request)
        time.sleep(0.5)  # the bytes that were sent are read before the close is seen
        if how == "close":
            return b""
        sock.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        return got
    finally:
        sock.close()


@pytest.mark.parametrize("how", ["shutdown", "close"])
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_truncated_request_body_is_not_forwarded_and_is_a_fault(
    faulty: FaultServer,
    tmp_path: Path,
    store_url: str,
    framing: str,
    how: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    before = len(faulty.requests)
    with (
        RecordingProxy(f"{faulty.url}/json", tmp_path / "j") as proxy,
        httpx2.Client(headers=JSON_HEADERS, timeout=10) as client,
    ):
        # Another client, on a kept-alive connection opened before the attack and used after it.
        assert client.post(proxy.url, content=CALL).status_code == 200
        got = _send_and_hang_up(
            proxy.server.port, _truncated_request(proxy.server.port, framing), how
        )
        eventually(
            lambda: len(of_kind(proxy.records(), "http_exchange")) == 2,
            message="the truncated request's exchange record",
        )
        after = client.post(proxy.url, content=CALL)
        # A new connection after it is served as ever.
        fresh = httpx2.post(proxy.url, content=CALL, headers=JSON_HEADERS, timeout=10)
        received = [body for _m, _t, _h, body in faulty.requests[before:]]
    assert not got.startswith(b"HTTP/1.1 2"), "the half-sent request was answered as if whole"
    assert received == [CALL, CALL, CALL], "the upstream got the truncated request"
    assert after.status_code == fresh.status_code == 200
    assert after.json()["id"] == fresh.json()["id"] == 7

    records = proxy.records()
    # The bytes that arrived are not a message: no frame, only the fault and the exchange.
    assert [ev.raw for ev in frames(records, "c2s")] == [CALL, CALL, CALL]
    (fault,) = [doc(ev) for ev in of_kind(records, "fault")]
    assert fault["fault"] == "request_incomplete"
    assert fault["stage"] == "transport"
    assert fault["http_method"] == "POST" and fault["path"] == "/json"
    assert fault["received_bytes"] == SENT
    assert fault["partial"] == BODY[:SENT].decode()
    if framing == "content-length":
        assert fault["detail"].startswith(f"request body incomplete: {SENT} of {DECLARED} bytes")
        assert fault["declared_bytes"] == DECLARED
    else:
        assert fault["detail"].startswith(
            f"request body incomplete: {SENT} bytes of a chunked body"
        )
        assert "declared_bytes" not in fault
    assert "not forwarded" in fault["detail"]
    exchanges = [doc(ev) for ev in of_kind(records, "http_exchange")]
    cut = exchanges[1]
    assert cut["status"] is None and cut["upstream_answered"] is False
    assert cut["client_disconnected"] is True and cut["bytes_in"] == SENT
    assert cut["note"] == fault["detail"]
    assert [x["status"] for x in exchanges] == [200, None, 200, 200]

    # No traceback, nothing the operator is told: a client hanging up is not the proxy's error.
    assert proxy.notices == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert proxy.tap.stats.fault_names == {"request_incomplete": 1}

    # And the store holds it, as any other fault.
    assert proxy.ship(store_url) == len(records)
    store = open_store(store_url)
    try:
        stored = [document(ev) for ev in store.read_log() if ev.kind == "fault"]
    finally:
        store.close()
    assert stored == [fault]


# -- where "whole" ends: the ASGI app driven directly, the disconnect placed exactly ------------


def _drive(tmp_path: Path, headers: list[tuple[bytes, bytes]], messages: list[dict]) -> tuple:
    """Run one POST through the tap with `messages` as what the server delivers; what the
    upstream got (bodies) and the fault documents recorded."""
    forwarded: list[bytes] = []

    def upstream(request: httpx2.Request) -> httpx2.Response:
        forwarded.append(request.read())
        reply = b'{"jsonrpc":"2.0","id":9,"result":{}}'
        # A stream, as a real connection's: the relay reads the reply raw.
        headers = {"content-type": "application/json", "content-length": str(len(reply))}
        return httpx2.Response(200, headers=headers, stream=httpx2.ByteStream(reply))

    journal = Journal.create(tmp_path / "j")
    tap = HttpProxyTap(
        ProxySettings("http://upstream.test/mcp"),
        journal,
        transport=httpx2.MockTransport(upstream),
    )
    pending = list(messages)

    async def receive() -> dict:
        if pending:
            return pending.pop(0)
        await asyncio.sleep(3600)  # a client that says nothing more
        raise AssertionError("unreachable")

    async def send(_message: dict) -> None:
        return None

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8750"), *headers],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8750),
    }
    asyncio.run(asyncio.wait_for(tap(scope, receive, send), 10))
    records = [ev for path in journal.segments() for ev in read_journal(path)]
    journal.close()
    return forwarded, [doc(ev) for ev in of_kind(records, "fault")]


GONE = {"type": "http.disconnect"}


def _part(body: bytes, more: bool) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


@pytest.mark.parametrize(
    ("headers", "messages", "whole"),
    [
        # The server reported the close before the app read a body there was none of.
        ([], [GONE], True),
        ([(b"content-length", b"0")], [GONE], True),
        # Every declared byte arrived, then the close: the request is whole.
        ([(b"content-length", b"85")], [_part(CALL, True), GONE], True),
        # Short of the declared length, by any amount.
        ([(b"content-length", b"85")], [_part(CALL[:84], True), GONE], False),
        ([(b"content-length", b"85")], [GONE], False),
        # A chunked body has no length: only its last chunk ends it.
        ([(b"transfer-encoding", b"chunked")], [_part(CALL, True), GONE], False),
        ([(b"transfer-encoding", b"chunked")], [GONE], False),
        ([(b"transfer-encoding", b"chunked")], [_part(CALL, False)], True),
        # No framing header, yet bytes that never ended (not from h11; another server's ASGI).
        ([], [_part(CALL, True), GONE], False),
    ],
    ids=[
        "no-body",
        "length-0",
        "all-85-then-close",
        "84-of-85",
        "0-of-85",
        "chunked-no-end",
        "chunked-nothing",
        "chunked-ended",
        "unframed-cut",
    ],
)
def test_a_body_is_whole_only_when_it_ended_or_all_declared_bytes_came(
    tmp_path: Path, headers: list[tuple[bytes, bytes]], messages: list[dict], whole: bool
) -> None:
    assert len(CALL) == 85
    sent = b"".join(m.get("body", b"") for m in messages)
    forwarded, faults = _drive(tmp_path, headers, messages)
    if whole:
        assert forwarded == [sent] and faults == []
        return
    assert forwarded == [], "an incomplete body reached the upstream"
    (fault,) = faults
    assert fault["fault"] == "request_incomplete" and fault["stage"] == "transport"
    assert fault["received_bytes"] == len(sent)
    assert fault["detail"].startswith("request body incomplete: ")
    assert ("partial" in fault) == bool(sent)
