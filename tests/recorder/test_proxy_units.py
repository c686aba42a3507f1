"""Unit tests of the proxy's parts: the SSE parser, the header rules, the session-grouping rule,
the stage a fault is filed under and the listen address."""

from __future__ import annotations

import itertools

import pytest
from blackbox.recorder.capture.taps.http_exchange import ProxyError, ProxySettings
from blackbox.recorder.capture.taps.http_headers import (
    fingerprint,
    forwardable,
    is_secret,
    recorded,
)
from blackbox.recorder.capture.taps.http_relay import fault_stage
from blackbox.recorder.capture.taps.http_server import is_loopback, parse_listen
from blackbox.recorder.capture.taps.http_sessions import SessionRouter, client_label, trace_id
from blackbox.recorder.capture.taps.http_sse import SseParser

STREAM = (
    b": keep-alive comment\n\n"
    b"id: 1\nretry: 500\ndata: \n\n"  # a priming event: id and retry, empty data
    b'event: message\nid: 2\ndata: {"jsonrpc":"2.0",\ndata: "method":"x"}\n\n'
    b"data:no-space\r\n\r\n"
    b"event: endpoint\rdata: /messages?s=1\r\r"
)


def _feed_all(chunks: list[bytes]) -> tuple[list, bytes]:
    parser = SseParser()
    events = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.finish())
    return events, parser.pending()


def test_sse_parser_fields_and_raw_bytes() -> None:
    events, pending = _feed_all([STREAM])
    assert pending == b""
    assert b"".join(e.raw for e in events) == STREAM, "raw bytes are kept exactly"
    assert [(e.event, e.id, e.data) for e in events] == [
        (None, None, None),
        (None, "1", b""),
        ("message", "2", b'{"jsonrpc":"2.0",\n"method":"x"}'),
        (None, None, b"no-space"),
        ("endpoint", None, b"/messages?s=1"),
    ]
    assert events[1].retry == 500


def test_sse_parser_any_chunking_gives_the_same_events() -> None:
    whole, _ = _feed_all([STREAM])
    # Every split point, including between CR and LF of a CRLF.
    for cut in range(1, len(STREAM)):
        parts, pending = _feed_all([STREAM[:cut], STREAM[cut:]])
        assert parts == whole, f"split at {cut}"
        assert pending == b""
    bytewise, _ = _feed_all([bytes([b]) for b in STREAM])
    assert bytewise == whole


def test_sse_parser_pending_is_the_unfinished_event_and_bom_is_skipped() -> None:
    parser = SseParser()
    events = parser.feed(b'\xef\xbb\xbfid: a\ndata: 1\n\nid: b\ndata: {"par')
    assert [(e.id, e.data) for e in events] == [("a", b"1")]
    assert events[0].raw.startswith(b"\xef\xbb\xbf")
    assert parser.pending() == b'id: b\ndata: {"par'
    assert parser.feed(b'tial"}\n\n')[0].data == b'{"partial"}'
    assert parser.pending() == b""


def test_forwardable_drops_hop_by_hop_and_connection_named_headers() -> None:
    headers = [
        (b"host", b"127.0.0.1:8750"),
        (b"connection", b"keep-alive, x-private"),
        (b"keep-alive", b"timeout=5"),
        (b"x-private", b"1"),
        (b"transfer-encoding", b"chunked"),
        (b"mcp-session-id", b"abc"),
        (b"last-event-id", b"7"),
        (b"content-length", b"10"),
    ]
    assert forwardable(headers, frozenset({b"content-length"})) == [
        (b"host", b"127.0.0.1:8750"),
        (b"mcp-session-id", b"abc"),
        (b"last-event-id", b"7"),
    ]


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("cookie", True),
        ("Set-Cookie", True),
        ("X-API-Key", True),
        ("x-goog-api-key", True),
        ("X-Auth-Token", True),
        ("x-custom-apikey", True),
        # The rule is an allow-list: a header no one listed is a secret.
        ("X-Custom-Auth", True),
        ("x-my-company-thing", True),
        # A server's session id admits whoever holds it to the session: a bearer secret.
        ("mcp-session-id", True),
        ("content-type", False),
        ("Content-Length", False),
        ("mcp-protocol-version", False),
        ("last-event-id", False),
        ("user-agent", False),
        ("host", False),
    ],
)
def test_secret_header_names(name: str, secret: bool) -> None:
    assert is_secret(name) is secret


def test_recorded_headers_fingerprint_secrets_and_keep_repeats() -> None:
    out = recorded(
        [
            (b"Authorization", b"Bearer t0ken"),
            (b"set-cookie", b"a=1"),
            (b"set-cookie", b"b=2"),
            (b"Accept", b"text/event-stream"),
        ]
    )
    assert out == {
        "authorization": fingerprint(b"Bearer t0ken"),
        "set-cookie": [fingerprint(b"a=1"), fingerprint(b"b=2")],
        "accept": "text/event-stream",
    }
    assert fingerprint("x") == fingerprint(b"x") != fingerprint("y")
    assert "t0ken" not in str(out)


def test_trace_id_and_client_label() -> None:
    assert trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") == (
        "4bf92f3577b34da6a3ce929d0e0e4736"
    )
    assert trace_id("00-00000000000000000000000000000000-00f067aa0ba902b7-01") is None
    assert trace_id("garbage") is None and trace_id(None) is None
    assert client_label({"name": "claude", "version": "1.2"}) == "claude/1.2"
    assert client_label({"version": "1"}) is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _router(gap: float = 10.0) -> tuple[SessionRouter, Clock]:
    clock = Clock()
    ids = (f"s{i}" for i in itertools.count(1))
    return SessionRouter(gap, clock=clock, new_id=lambda: next(ids)), clock


def test_router_binds_the_session_id_the_server_assigns() -> None:
    router, _ = _router()
    init = router.route(remote="1.2.3.4", client_info={"name": "c"}, handshake=True)
    assert init.created and init.session.rule == "initialize"
    router.bind("mcp:abc", init.session)
    later = router.route(remote="9.9.9.9", legacy_id="mcp:abc")
    assert later.session is init.session and not later.created
    # A second handshake from the same client is a new session; the first lives on by its id.
    again = router.route(remote="1.2.3.4", client_info={"name": "c"}, handshake=True)
    assert again.created and again.session is not init.session and not again.closed
    assert router.route(remote="1.2.3.4", legacy_id="mcp:abc").session is init.session


def test_router_keeps_an_auto_clients_probe_with_its_handshake() -> None:
    router, _ = _router()
    probe = router.route(remote="h", client_info={"name": "c", "version": "1"})
    init = router.route(remote="h", client_info={"name": "c", "version": "1"}, handshake=True)
    assert init.session is probe.session and not init.created


def test_router_idle_gap_and_expiry() -> None:
    router, clock = _router(gap=10)
    first = router.route(remote="h", client_info={"name": "agent"}).session
    clock.now = 5
    assert router.route(remote="h").session is first, "same address, last known client"
    clock.now = 16
    nxt = router.route(remote="h", client_info={"name": "agent"})
    assert nxt.created and nxt.closed == (first,)
    assert first.closing == ("idle_gap", "ok")
    router.mark_ended(first)  # what the proxy does with a closed session: record its end
    # expire() closes what has been idle past the gap, never a session with an exchange open.
    router.enter(nxt.session)
    clock.now = 100
    assert router.expire() == []
    assert router.leave(nxt.session) is False
    clock.now = 200
    assert router.expire() == [nxt.session]


def test_router_trace_id_groups_across_clients() -> None:
    router, _ = _router()
    a = router.route(remote="h1", trace="t1", client_info={"name": "a"})
    b = router.route(remote="h2", trace="t1", client_info={"name": "b"})
    assert a.session is b.session and a.session.rule == "traceparent"


def test_router_close_waits_for_the_last_exchange() -> None:
    router, _ = _router()
    session = router.route(remote="h", legacy_id="mcp:x").session
    router.enter(session)
    router.enter(session)
    router.close(session, "client_closed", "ok")
    assert not router.knows("mcp:x")
    assert router.leave(session) is False
    assert router.leave(session) is True


@pytest.mark.parametrize(
    ("method", "stage"),
    [
        (None, "transport"),
        ("initialize", "handshake"),
        ("notifications/initialized", "handshake"),
        ("server/discover", "handshake"),
        ("tools/list", "discovery"),
        ("resources/templates/list", "discovery"),
        ("tools/call", "execution"),
        ("ping", "execution"),
    ],
)
def test_fault_stage_follows_the_first_method(method: str | None, stage: str) -> None:
    assert fault_stage(method) == stage


def test_listen_and_upstream_validation() -> None:
    assert parse_listen("127.0.0.1:8750") == ("127.0.0.1", 8750)
    assert parse_listen("[::1]:9000") == ("::1", 9000)
    assert parse_listen("8000") == ("127.0.0.1", 8000)
    assert is_loopback("127.0.0.2") and is_loopback("::1") and not is_loopback("0.0.0.0")
    for bad in ("nowhere", "host:", "h:99999"):
        with pytest.raises(ProxyError):
            parse_listen(bad)
    with pytest.raises(ProxyError, match="bad upstream URL"):
        ProxySettings("localhost:8000/mcp")
    settings = ProxySettings("https://api.example.com:8443/v1/mcp?x=1")
    assert settings.origin == "https://api.example.com:8443"
    assert settings.path == "/v1/mcp?x=1"
    assert settings.server_name == "api.example.com"
