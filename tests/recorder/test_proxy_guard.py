"""The proxy's door, attacked: DNS rebinding (a foreign Host or Origin), a body over the limit, and
credentials in URL query parameters and in headers nobody listed. Each refusal is recorded and
forwards nothing; no credential reaches the journal, the store or a default export."""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path

import anyio
import httpx2
import pytest
from blackbox.recorder.capture.taps.http_exchange import ProxyError, ProxySettings
from blackbox.recorder.capture.taps.http_headers import HostGuard, fingerprint, recorded_target
from blackbox.recorder.serving import is_loopback
from blackbox.recorder.store import open_store
from click.testing import CliRunner
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from blackbox.cli.main import main
from tests.fixtures.fault_server import CALL, JSON_HEADERS, FaultServer
from tests.fixtures.http_kit import RecordingProxy, doc, frames, of_kind, sdk_server

pytestmark = pytest.mark.timeout(90)


def _port(proxy: RecordingProxy) -> int:
    return proxy.server.port


def _exchanges(proxy: RecordingProxy) -> list[dict]:
    return [doc(e) for e in of_kind(proxy.records(), "http_exchange")]


# -- DNS rebinding ---------------------------------------------------------------------------


@pytest.mark.parametrize("rewrite_host", [False, True])
@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:{port}",
        "[2001:db8::1]:{port}",
        "[::ffff:7f00:1]:{port}",
        "localhost.evil.example:{port}",
        "127.0.0.1.nip.io:{port}",
        "127.0.0.1:{port}.evil.example",
        "127.0.0.1:1",
        "127.0.0.1.attacker.example:{port}",
        "127.attacker.example:{port}",
        "[::ffff:127.0.0.1]:{port}",
        "127.0.0.1:{port}@attacker.example",
        "127.0.0.2:{port}",
        "",
    ],
)
def test_foreign_host_is_refused_recorded_and_not_forwarded(
    faulty: FaultServer, tmp_path: Path, host: str, rewrite_host: bool
) -> None:
    """A page on evil.example rebound to 127.0.0.1 sends `Host: evil.example[:PORT]`: 403, the
    upstream sees nothing (not even with --rewrite-host, which would have hidden the Host from
    it), and the refusal is an http_exchange record with the Host it came with."""
    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j", rewrite_host=rewrite_host) as proxy:
        host = host.format(port=_port(proxy))
        before = len(faulty.requests)
        response = httpx2.post(proxy.url, content=CALL, headers={**JSON_HEADERS, "host": host})
        assert len(faulty.requests) == before, "a refused request must not reach the upstream"
    assert response.status_code == 403
    assert response.text.startswith("blackbox proxy: refused: Host ")
    assert response.text.count("\n") == 1, "a plain one-line body"
    records = proxy.records()
    assert frames(records) == [], "nothing of a refused request is recorded as a message"
    (exchange,) = _exchanges(proxy)
    assert exchange["status"] == 403 and exchange["upstream_answered"] is False
    assert exchange["note"].startswith("refused: Host ") and "--allow-host" in exchange["note"]
    assert exchange["request_headers"]["host"] == host
    assert proxy.tap.stats.rejected == 1


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "https://evil.example:{port}",
        "http://127.0.0.1.evil.example:{port}",
        "http://localhost:{port}@evil.example",
        "null",
        "file://",
    ],
)
def test_foreign_origin_is_refused(faulty: FaultServer, tmp_path: Path, origin: str) -> None:
    """A browser request from a foreign web page: the right Host, a foreign Origin: 403 (the MCP
    transport's rule for an Origin that is present and invalid)."""
    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j") as proxy:
        origin = origin.format(port=_port(proxy))
        before = len(faulty.requests)
        response = httpx2.post(proxy.url, content=CALL, headers={**JSON_HEADERS, "origin": origin})
        assert len(faulty.requests) == before
    assert response.status_code == 403
    assert "Origin" in response.text and response.text.count("\n") == 1
    (exchange,) = _exchanges(proxy)
    assert exchange["status"] == 403 and exchange["request_headers"]["origin"] == origin
    assert frames(proxy.records()) == []


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def test_repeated_or_missing_host_is_refused(faulty: FaultServer, tmp_path: Path) -> None:
    """Two Host headers (the proxy might check one and the upstream read the other), and an
    HTTP/1.0 request with none: neither is served."""
    length = str(len(CALL)).encode()
    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j") as proxy:
        port = _port(proxy)
        before = len(faulty.requests)
        twice = _raw(
            port,
            b"POST /json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nHost: evil.example\r\n"
            b"Content-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n\r\n"
            % (port, length)
            + CALL,
        )
        none = _raw(
            port,
            b"POST /json HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %s\r\n\r\n"
            % length
            + CALL,
        )
        assert len(faulty.requests) == before
    assert twice.split(b" ")[1] in (b"400", b"403")  # h11 itself refuses it first
    assert none.split(b" ")[1] == b"403" and b"no Host header" in none


@pytest.mark.parametrize(
    "target", [b"@evil.example/json", b"http://evil.example/json", b"*", b"evil.example/json"]
)
def test_a_target_that_is_not_a_path_is_refused(
    faulty: FaultServer, tmp_path: Path, target: bytes
) -> None:
    """`POST @evil.example/json` joined to the upstream's origin made the proxy connect to
    evil.example (`http://127.0.0.1:PORT@evil.example/json`); an absolute-form target made it
    fail with a 500. Only a path is forwarded."""
    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j") as proxy:
        port = _port(proxy)
        before = len(faulty.requests)
        got = _raw(
            port,
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (target, port, len(CALL)) + CALL,
        )
        assert len(faulty.requests) == before
    assert got.split(b" ")[1] == b"400" and b"is not a path" in got
    (exchange,) = _exchanges(proxy)
    assert exchange["status"] == 400 and exchange["note"].startswith("refused: request target")
    assert [f for f in of_kind(proxy.records(), "fault")] == []


def test_own_addresses_and_loopback_pages_are_served(faulty: FaultServer, tmp_path: Path) -> None:
    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j") as proxy:
        port = _port(proxy)
        for host in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            f"LocalHost:{port}",
            f"[::1]:{port}",
        ):
            reply = httpx2.post(proxy.url, content=CALL, headers={**JSON_HEADERS, "host": host})
            assert reply.status_code == 200, (host, reply.text)
        for origin in (f"http://127.0.0.1:{port}", "http://localhost:6274", "http://[::1]:3000"):
            reply = httpx2.post(proxy.url, content=CALL, headers={**JSON_HEADERS, "origin": origin})
            assert reply.status_code == 200, (origin, reply.text)
        # The upstream still sees the Host the client sent (its own rebinding check needs it).
        assert faulty.requests[-1][2]["host"] == f"127.0.0.1:{port}"


def test_allow_host_and_allow_origin_admit_the_named_ones(
    faulty: FaultServer, tmp_path: Path
) -> None:
    with RecordingProxy(
        f"{faulty.url}/json",
        tmp_path / "j",
        allow_hosts=("mcp.internal", "tunnel.example:443"),
        allow_origins=("https://app.example.com",),
    ) as proxy:
        port = _port(proxy)

        def post(**headers: str) -> int:
            return httpx2.post(
                proxy.url, content=CALL, headers={**JSON_HEADERS, **headers}
            ).status_code

        assert post(host=f"mcp.internal:{port}") == 200
        assert post(host="MCP.internal") == 200
        assert post(host="tunnel.example:443") == 200
        assert post(host="tunnel.example:8443") == 403
        assert post(host=f"evil.example:{port}") == 403
        assert post(origin="https://app.example.com") == 200
        assert post(origin="http://app.example.com") == 403
        # The page at the allowed name is the proxy's own origin.
        assert post(host=f"mcp.internal:{port}", origin=f"http://mcp.internal:{port}") == 200


def test_bad_allow_values_are_one_line_errors(tmp_path: Path) -> None:
    for bad in ("http://evil.example", "a b", "host:port", "x/y"):
        with pytest.raises(ProxyError, match="bad --allow-host"):
            ProxySettings("http://127.0.0.1:1/mcp", allow_hosts=(bad,))
    for bad in ("evil.example", "ftp://x", "http://x/path"):
        with pytest.raises(ProxyError, match="bad --allow-origin"):
            ProxySettings("http://127.0.0.1:1/mcp", allow_origins=(bad,))
    result = CliRunner().invoke(
        main, ["proxy", "--upstream", "http://127.0.0.1:1/mcp", "--allow-host", "http://x"]
    )
    assert result.exit_code == 2
    assert "bad --allow-host" in result.output and "Traceback" not in result.output


def test_wildcard_listen_admits_ip_literals_not_names() -> None:
    guard = HostGuard(("0.0.0.0", 8750))
    assert guard.refusal(b"10.1.2.3:8750", 1, None) is None
    assert guard.refusal(b"localhost:8750", 1, None) is None
    assert guard.refusal(b"[fe80::1]:8750", 1, None) is None
    assert guard.refusal(b"10.1.2.3:9999", 1, None) is not None
    assert guard.refusal(b"evil.example:8750", 1, None) is not None
    loopback = HostGuard(("::1", 8750))
    assert loopback.refusal(b"[::1]:8750", 1, None) is None
    assert loopback.refusal(b"127.0.0.1:8750", 1, None) is None
    assert loopback.refusal(b"evil.example:8750", 1, None) is not None
    assert loopback.refusal(None, 0, None) is not None


def test_sdk_client_sends_an_admitted_host(tmp_path: Path) -> None:
    """The official SDK client through the proxy: every exchange served, none refused."""

    async def run(url: str) -> str:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            return (await s.call_tool("echo", {"message": "through"})).content[0].text

    with sdk_server() as upstream, RecordingProxy(upstream, tmp_path / "j") as proxy:
        assert anyio.run(run, proxy.url) == "through"
    exchanges = _exchanges(proxy)
    assert exchanges and all(x["status"] in (200, 202) for x in exchanges)
    assert proxy.tap.stats.rejected == 0


# -- a body over the limit ---------------------------------------------------------------------


def test_oversize_body_is_refused_and_recorded(faulty: FaultServer, tmp_path: Path) -> None:
    """413, nothing forwarded, and an http_exchange that says so with the size: declared (the
    Content-Length, refused before reading) and streamed (chunked, refused past the limit)."""
    big = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"x":"' + b"a" * 5000 + b'"}}'

    def chunks():  # no Content-Length: the proxy counts as it reads
        for i in range(0, len(big), 1000):
            yield big[i : i + 1000]

    with RecordingProxy(f"{faulty.url}/json", tmp_path / "j", max_request_bytes=1000) as proxy:
        before = len(faulty.requests)
        declared = httpx2.post(proxy.url, content=big, headers=JSON_HEADERS)
        streamed = httpx2.post(proxy.url, content=chunks(), headers=JSON_HEADERS)
        assert len(faulty.requests) == before
    assert declared.status_code == streamed.status_code == 413
    assert frames(proxy.records()) == []
    first, second = _exchanges(proxy)
    assert first["status"] == second["status"] == 413
    assert f"Content-Length {len(big)}" in first["note"] and "1000-byte limit" in first["note"]
    assert first["bytes_in"] == 0
    assert second["bytes_in"] > 1000 and f"{second['bytes_in']} bytes received" in second["note"]
    assert first["request_headers"]["content-length"] == str(len(big))


# -- credentials in the query and in unlisted headers ----------------------------------------

QUERY_SECRETS = {
    "access_token": "SECRET-at-1f2e",
    "Api_Key": "SECRET-ak-9c8d",
    "code": "SECRET-oauth-code-77",
    "sig": "SECRET-sig-5b",
    "x-amz-signature": "SECRET-amz-0a",
    "password": "SECRET-pw-3",
}


def test_secret_query_parameters_are_fingerprinted() -> None:
    target = "/mcp?page=2&access_token=abc&flag&token=&Access%5FToken=def&q=a%3Db"
    assert recorded_target(target) == (
        f"/mcp?page=2&access_token={fingerprint('abc')}&flag&token="
        f"&Access%5FToken={fingerprint('def')}&q=a%3Db"
    )
    assert recorded_target("/mcp") == "/mcp"


def test_no_credential_reaches_the_journal_the_store_or_an_export(
    faulty: FaultServer, tmp_path: Path, store_url: str, blackbox_env: dict[str, str]
) -> None:
    query = "&".join(f"{k}={v}" for k, v in QUERY_SECRETS.items()) + "&page=2"
    header_secrets = {"x-custom-auth": "SECRET-custom-auth-4711", "x-tenant": "SECRET-tenant"}
    upstream = f"{faulty.url}/json?api_key=SECRET-upstream-key"
    harmless = {"user-agent": "attack-test-agent/1.0", "mcp-protocol-version": "2025-11-25"}
    with RecordingProxy(upstream, tmp_path / "j") as proxy:
        reply = httpx2.post(
            f"{proxy.base_url}/json?{query}",
            content=CALL,
            headers={**JSON_HEADERS, **header_secrets, **harmless},
        )
        # Forwarded unchanged: the upstream gets the query and headers as sent.
        _method, target, headers, _body = faulty.requests[-1]
    assert reply.status_code == 200
    assert target == f"/json?{query}"
    assert all(headers[k] == v for k, v in header_secrets.items())

    secrets = [*QUERY_SECRETS.values(), *header_secrets.values(), "SECRET-upstream-key"]
    journal = b"".join(path.read_bytes() for path in proxy.journal.segments())
    for secret in secrets:
        assert secret.encode() not in journal, secret
    (exchange,) = _exchanges(proxy)
    assert f"access_token={fingerprint(QUERY_SECRETS['access_token'])}" in exchange["path"]
    assert exchange["path"].endswith("&page=2")
    assert exchange["request_headers"]["user-agent"] == harmless["user-agent"]
    assert exchange["request_headers"]["x-custom-auth"] == fingerprint(
        header_secrets["x-custom-auth"]
    )

    assert proxy.ship(store_url) > 0
    store = open_store(store_url)
    try:
        stored = b"".join(ev.raw for ev in store.read_log())
        stored += repr(store.list_sessions()).encode()
    finally:
        store.close()
    if store_url.startswith("sqlite:///"):  # every byte of the database, projections included
        db = Path(store_url.removeprefix("sqlite:///"))
        stored += b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    for secret in secrets:
        assert secret.encode() not in stored, secret
    assert harmless["user-agent"].encode() in stored

    out = tmp_path / "bundle"
    result = CliRunner().invoke(
        main, ["export", "--out", str(out), "--format", "jsonl", "--store", store_url]
    )
    assert result.exit_code == 0, result.output
    exported = b"".join(p.read_bytes() for p in out.iterdir())
    for line in (out / "records.jsonl").read_text().splitlines():
        exported += base64.b64decode(json.loads(line)["raw"])
    for secret in secrets:
        assert secret.encode() not in exported, secret
    assert harmless["user-agent"].encode() in exported


# -- the one loopback rule ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LocalHost", True),
        # DNS names that start like loopback resolve wherever their owner points them
        ("127.attacker.example", False),
        ("127.0.0.1.attacker.example", False),
        ("127.0.0.1.nip.io", False),
        ("localhost.attacker.example", False),
        ("attacker.localhost", False),
        ("localhost.", False),
        # addresses that are not loopback, or not for certain
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.1", False),
        ("[2001:db8::1]", False),
        ("::ffff:127.0.0.1", False),
        ("[::ffff:7f00:1]", False),
        ("127.1", False),
        ("0177.0.0.1", False),
        ("[::1", False),
    ],
)
def test_one_loopback_rule(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
