"""What the proxy does when things go wrong: the upstream down, a 500, a stream cut mid-event, a
slow stream (not buffered), an upstream that never answers, a journal that cannot be written, a
policy that denies; and that secrets in headers never reach the record."""

from __future__ import annotations

import json
import socketserver
import statistics
import threading
import time
from pathlib import Path

import httpx2
import pytest
from blackbox.recorder.capture.journal import JournalError
from blackbox.recorder.capture.taps.http_headers import fingerprint

from tests.fixtures.fault_server import CALL, JSON_HEADERS, FaultServer
from tests.fixtures.http_kit import RecordingProxy, doc, frames, of_kind
from tests.fixtures.polling import free_port

pytestmark = pytest.mark.timeout(60)


def _faults(proxy: RecordingProxy) -> list[dict]:
    return [doc(ev) for ev in of_kind(proxy.records(), "fault")]


def test_upstream_down_gives_502_that_says_so(tmp_path: Path) -> None:
    upstream = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    with RecordingProxy(upstream, tmp_path / "j") as proxy:
        response = httpx2.post(proxy.url, content=CALL, headers=JSON_HEADERS, timeout=10)
        plain = httpx2.get(proxy.url, timeout=10)
    assert response.status_code == 502
    body = response.json()
    assert body["id"] == 7 and "unreachable" in body["error"]["message"]
    assert upstream in body["error"]["message"]
    assert plain.status_code == 502 and "unreachable" in plain.text
    (events,) = proxy.sessions().values()
    # The request was journaled before the attempt; the proxy's reply is what the client saw.
    assert [ev.direction for ev in frames(events)] == ["c2s", "s2c"]
    assert frames(events)[0].raw == CALL
    faults = _faults(proxy)
    assert [f["fault"] for f in faults] == ["upstream_unreachable", "upstream_unreachable"]
    assert faults[0]["stage"] == "transport" and faults[0]["seq"] == frames(events)[0].seq
    exchanges = [doc(e) for e in of_kind(events, "http_exchange")]
    assert [x["status"] for x in exchanges] == [502, 502]
    assert not any(x["upstream_answered"] for x in exchanges)


def test_upstream_500_is_forwarded_unchanged_and_recorded(
    faulty: FaultServer, tmp_path: Path
) -> None:
    direct = httpx2.post(f"{faulty.url}/500", content=CALL, headers=JSON_HEADERS)
    with RecordingProxy(f"{faulty.url}/500", tmp_path / "j") as proxy:
        through = httpx2.post(proxy.url, content=CALL, headers=JSON_HEADERS)
    assert (through.status_code, through.content) == (direct.status_code, direct.content)
    assert through.headers["content-type"] == direct.headers["content-type"]
    (fault,) = _faults(proxy)
    assert fault["fault"] == "http_status" and fault["status"] == 500
    assert fault["stage"] == "execution"
    (exchange,) = [doc(e) for e in of_kind(proxy.records(), "http_exchange")]
    assert exchange["status"] == 500 and exchange["note"] == direct.text


def _read_until_cut(url: str) -> bytes:
    """POST a call through the proxy and read the 200 reply until the connection is cut (it
    must be); the bytes the client got."""
    got = b""
    with (
        pytest.raises(httpx2.RemoteProtocolError),
        httpx2.stream("POST", url, content=CALL, headers=JSON_HEADERS) as resp,
    ):
        assert resp.status_code == 200
        for part in resp.iter_raw():
            got += part
    return got


@pytest.mark.parametrize("path", ["/cut", "/cut-clean"])
def test_stream_cut_mid_event(faulty: FaultServer, tmp_path: Path, path: str) -> None:
    """The complete event is recorded and forwarded; the half event is a stream_cut fault, and
    the client's stream is cut too (it gets the same bytes the server sent)."""
    with RecordingProxy(f"{faulty.url}{path}", tmp_path / "j") as proxy:
        got = _read_until_cut(proxy.url)
    assert got.startswith(b"id: e1\ndata: ")
    assert got.endswith(b'id: e2\ndata: {"jsonrpc":"2.0","id":1,"res')
    events = proxy.records()
    s2c = frames(events, "s2c")
    assert len(s2c) == 1 and json.loads(s2c[0].raw)["method"] == "notifications/progress"
    (fault,) = _faults(proxy)
    assert fault["fault"] == "stream_cut" and fault["stage"] == "execution"
    assert fault["partial"] == 'id: e2\ndata: {"jsonrpc":"2.0","id":1,"res'
    (exchange,) = [doc(e) for e in of_kind(events, "http_exchange")]
    assert exchange["sse_events"] == [{"seq": s2c[0].seq, "id": "e1"}]


def test_json_reply_cut_short(faulty: FaultServer, tmp_path: Path) -> None:
    """A JSON reply that ends before its Content-Length: the client gets the same bytes and a
    cut connection; no frame is recorded for the half message, a stream_cut fault keeps it."""
    with RecordingProxy(f"{faulty.url}/json-cut", tmp_path / "j") as proxy:
        got = _read_until_cut(proxy.url)
    assert got == b'{"jsonrpc": "2.0", "'  # the 20 bytes the server sent
    events = proxy.records()
    assert frames(events, "s2c") == []
    (fault,) = _faults(proxy)
    assert fault["fault"] == "stream_cut" and fault["partial"] == got.decode()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_json_replies_whole_and_oversize(faulty: FaultServer, tmp_path: Path, framing: str) -> None:
    """A JSON reply reaches the client byte for byte and is recorded whole, however it is
    framed; one past the limit is forwarded intact and stored as its first bytes, with an
    oversize_frame fault."""
    query = "&chunked=1" if framing == "chunked" else ""
    limit = 20_000
    with RecordingProxy(
        f"{faulty.url}/json-big", tmp_path / "j", max_json_reply_bytes=limit
    ) as proxy:
        small = httpx2.post(f"{proxy.url}?size=5000{query}", content=CALL, headers=JSON_HEADERS)
        big = httpx2.post(f"{proxy.url}?size=50000{query}", content=CALL, headers=JSON_HEADERS)
    assert len(small.json()["result"]["pad"]) == 5000
    assert len(big.json()["result"]["pad"]) == 50000
    s2c = frames(proxy.records(), "s2c")
    assert len(s2c) == 2 and s2c[0].raw == small.content
    assert s2c[1].raw_size == len(big.content) and big.content.startswith(s2c[1].raw)
    assert len(s2c[1].raw) == limit
    (fault,) = _faults(proxy)
    assert fault["fault"] == "oversize_frame" and fault["seq"] == s2c[1].seq
    exchanges = [doc(e) for e in of_kind(proxy.records(), "http_exchange")]
    assert [x["bytes_out"] for x in exchanges] == [len(small.content), len(big.content)]


def test_slow_stream_is_not_buffered(faulty: FaultServer, tmp_path: Path) -> None:
    """Each event reaches the client within a few ms of the server sending it (the server
    spaces them 200 ms apart, so a buffering proxy would show delays of hundreds of ms)."""
    with RecordingProxy(f"{faulty.url}/slow", tmp_path / "j") as proxy:
        delays = []
        url = proxy.url + "?n=6&gap=0.2"
        with httpx2.stream("POST", url, content=CALL, headers=JSON_HEADERS, timeout=10) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {") and '"sent"' in line:
                    sent = json.loads(line[6:])["params"]["data"]["sent"]
                    delays.append((time.time() - sent) * 1000)
    assert len(delays) == 6
    print(
        f"SSE event delay through the proxy: median {statistics.median(delays):.1f} ms, "
        f"max {max(delays):.1f} ms"
    )
    assert statistics.median(delays) < 25
    assert max(delays) < 150  # events are 200 ms apart: buffering would show
    events = proxy.records()
    assert len(frames(events, "s2c")) == 7  # 6 notifications + the response; not the primer
    (exchange,) = [doc(e) for e in of_kind(events, "http_exchange")]
    ids = [e.get("id") for e in exchange["sse_events"]]
    assert ids == ["p0", "s0", "s1", "s2", "s3", "s4", "s5", None]  # the reply had no id
    assert "seq" not in exchange["sse_events"][0]  # the empty priming event carries no message


def test_upstream_that_never_answers_times_out(faulty: FaultServer, tmp_path: Path) -> None:
    with RecordingProxy(f"{faulty.url}/hang", tmp_path / "j", timeout_s=0.5) as proxy:
        started = time.monotonic()
        response = httpx2.post(proxy.url, content=CALL, headers=JSON_HEADERS, timeout=10)
        waited = time.monotonic() - started
    assert response.status_code == 504 and "in time" in response.json()["error"]["message"]
    assert 0.4 < waited < 5
    (fault,) = _faults(proxy)
    assert fault["fault"] == "timeout" and fault["stage"] == "execution"


def test_journal_failure_answers_503_and_forwards_nothing(
    faulty: FaultServer, tmp_path: Path
) -> None:
    before = len(faulty.requests)
    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j") as proxy:

        def broken(*_args: object, **_kw: object) -> int:
            raise JournalError("cannot write the journal: the disk is full")

        proxy.journal.append = broken  # type: ignore[method-assign]
        response = httpx2.post(proxy.url, content=CALL, headers=JSON_HEADERS)
    assert response.status_code == 503
    assert "not forwarded" in response.text and "disk is full" in response.text
    assert len(faulty.requests) == before, "nothing may reach the server unrecorded"
    assert proxy.notices and "disk is full" in proxy.notices[0]


def test_secret_headers_are_fingerprinted(faulty: FaultServer, tmp_path: Path) -> None:
    secrets = {
        "authorization": "Bearer sk-live-very-secret",
        "cookie": "session=abc123",
        "x-api-key": "key-123",
        "x-github-token": "ghp_zzz",
        # Not a known secret name: the record's rule is an allow-list, so it is one anyway.
        "x-custom-auth": "custom-SECRET-4711",
        # A server's session id is a bearer secret (also in the session's key).
        "mcp-session-id": "sess-1-a5f0c2",
    }
    mcp = {
        "mcp-protocol-version": "2025-11-25",
        "last-event-id": "e-41",
        "origin": "http://localhost:3000",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }
    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j") as proxy:
        response = httpx2.post(proxy.url, content=CALL, headers={**JSON_HEADERS, **secrets, **mcp})
    assert response.json() == {"jsonrpc": "2.0", "id": 7, "result": {"ok": True}}
    # The upstream got every header unchanged (and the Host the client sent).
    _method, _target, headers, _body = faulty.requests[-1]
    assert all(headers[k] == v for k, v in {**secrets, **mcp}.items())
    assert headers["host"] == proxy.base_url.split("//")[1]
    raw = b"".join(ev.raw for ev in proxy.records())
    for value in secrets.values():
        assert value.encode() not in raw
    (exchange,) = [doc(e) for e in of_kind(proxy.records(), "http_exchange")]
    recorded = exchange["request_headers"]
    assert recorded["authorization"] == fingerprint(secrets["authorization"])
    assert recorded["x-github-token"] == fingerprint(secrets["x-github-token"])
    assert recorded["x-custom-auth"] == fingerprint(secrets["x-custom-auth"])
    assert recorded["mcp-session-id"] == fingerprint(secrets["mcp-session-id"])
    assert recorded["content-type"] == "application/json"
    assert all(recorded[k] == v for k, v in mcp.items()), "MCP headers are kept in clear"


def test_upstream_cookies_are_forwarded_never_kept(faulty: FaultServer, tmp_path: Path) -> None:
    """A Set-Cookie goes to the client that got it; the proxy keeps no cookie jar, so a later
    request (another client's, here) reaches the server without that cookie."""
    with RecordingProxy(f"{faulty.url}/cookie", tmp_path / "j") as proxy:
        first = httpx2.post(proxy.url, content=CALL, headers=JSON_HEADERS)
        before = len(faulty.requests)
        second = httpx2.post(proxy.url, content=CALL, headers=JSON_HEADERS)
    assert first.headers["set-cookie"] == "sid=only-for-the-first-client; Path=/"
    assert second.status_code == 200
    _method, _target, headers, _body = faulty.requests[before]
    assert "cookie" not in headers


def test_remote_is_the_peer_not_a_forwarded_for_header(faulty: FaultServer, tmp_path: Path) -> None:
    """Sessions are routed (and exchanges recorded) by the client's address: a local client
    cannot claim another with X-Forwarded-For."""
    spoofed = {**JSON_HEADERS, "x-forwarded-for": "203.0.113.9", "x-forwarded-proto": "https"}
    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j") as proxy:
        httpx2.post(proxy.url, content=CALL, headers=spoofed)
    (exchange,) = [doc(e) for e in of_kind(proxy.records(), "http_exchange")]
    assert exchange["remote"] == "127.0.0.1"
    # The header itself is forwarded unchanged: the proxy is transparent.
    assert faulty.requests[-1][2]["x-forwarded-for"] == "203.0.113.9"


def test_policy_denies_without_forwarding(faulty: FaultServer, tmp_path: Path) -> None:
    from blackbox.recorder.gate.policy import Policy

    policy = Policy.from_text(
        'default = "allow"\n[[rule]]\nid = "no-add"\ndecision = "deny"\ntool = "add"\n'
    )
    before = len(faulty.requests)
    allowed = CALL.replace(b'"add"', b'"echo"')
    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j", policy=policy) as proxy:
        denied = httpx2.post(proxy.url, content=CALL, headers=JSON_HEADERS)
        passed = httpx2.post(proxy.url, content=allowed, headers=JSON_HEADERS)
    assert denied.status_code == 200
    assert denied.json()["error"]["code"] == -32001 and "no-add" in denied.text
    assert passed.json()["result"] == {"ok": True}
    assert [r[3] for r in faulty.requests[before:]] == [allowed], "the denied call never left"
    events = proxy.records()
    decisions = [doc(e) for e in of_kind(events, "decision")]
    assert [(d["tool"], d["decision"]) for d in decisions] == [("add", "deny"), ("echo", "allow")]
    kinds = [(e.kind, e.direction) for e in events if e.kind in ("frame", "decision")]
    assert kinds == [
        ("frame", "c2s"),
        ("decision", "-"),
        ("frame", "s2c"),  # the denial the client got
        ("frame", "c2s"),
        ("decision", "-"),
        ("frame", "s2c"),
    ]


def test_legacy_sse_absolute_endpoint_is_rewritten(faulty: FaultServer, tmp_path: Path) -> None:
    """A 2024-11-05 stream that announces an absolute URL on the upstream is pointed back at the
    proxy, and the messages posted there join the stream's session."""
    sse = {"accept": "text/event-stream"}
    with (
        RecordingProxy(f"{faulty.url}/sse", tmp_path / "j") as proxy,
        httpx2.Client(timeout=10) as http,
        http.stream("GET", proxy.url, headers=sse) as resp,
    ):
        lines = resp.iter_lines()
        assert next(lines) == "event: endpoint"
        endpoint = next(lines)[len("data: ") :]
        assert endpoint.startswith(proxy.base_url + "/messages?session_id=")
        posted = http.post(endpoint, content=CALL, headers=JSON_HEADERS)
        assert posted.status_code == 202
        for line in lines:
            if line.startswith("data: "):
                assert json.loads(line[6:])["id"] == 7
                break
    sessions = proxy.sessions()
    assert len(sessions) == 1
    (events,) = sessions.values()
    assert doc(events[0])["session_rule"] == "sse-endpoint"
    assert [ev.direction for ev in frames(events)] == ["c2s", "s2c"]
    stream = next(doc(e) for e in of_kind(events, "http_exchange") if doc(e)["method"] == "GET")
    # The legacy session id in the endpoint's query admits its holder to the session: it is
    # recorded as a fingerprint, in the endpoint event and in the path of the POSTs to it.
    base, _, session_id = endpoint.partition("?session_id=")
    recorded_endpoint = f"{base}?session_id={fingerprint(session_id)}"
    assert stream["sse_events"][0]["rewritten_to"] == recorded_endpoint
    assert session_id.encode() not in b"".join(ev.raw for ev in events)
    assert doc(events[-1])["reason"] == "client_closed"


def test_tls_failure_is_a_tls_error_fault(tmp_path: Path) -> None:
    """An https upstream whose TLS handshake fails (here: a server answering plain HTTP) is a
    502 and a `tls_error` fault, not a generic unreachable one."""

    class PlainHttp(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), PlainHttp) as plain:
        threading.Thread(target=plain.serve_forever, daemon=True).start()
        upstream = f"https://127.0.0.1:{plain.server_address[1]}/mcp"
        try:
            with RecordingProxy(upstream, tmp_path / "j") as proxy:
                response = httpx2.post(proxy.url, content=CALL, headers=JSON_HEADERS, timeout=10)
        finally:
            plain.shutdown()
    assert response.status_code == 502
    assert "TLS" in response.json()["error"]["message"]
    (fault,) = _faults(proxy)
    assert fault["fault"] == "tls_error" and fault["stage"] == "transport"
