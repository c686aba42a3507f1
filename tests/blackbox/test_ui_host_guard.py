"""The UI's Host guard, attacked over real HTTP: the names a DNS-rebinding page reaches 127.0.0.1
under (`attacker.example:PORT`, `127.0.0.1.attacker.example:PORT`, `127.attacker.example`), IPv6
literals that are not the UI's own, a missing Host, two Host headers; and the Origins a cross-site
page starts a replay from. Every refusal comes even with the token: rebinding gives the page the
UI's origin, so only the Host tells it apart. The same rule guards the proxy
(`blackbox.recorder.serving.HostGuard`; tests/recorder/test_proxy_guard.py attacks it there)."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from blackbox.recorder import serving
from blackbox.recorder.capture.taps.http_headers import HostGuard as ProxyGuard
from blackbox.recorder.store import open_store

from blackbox.ui.security import Guard
from blackbox.ui.server import Served, serve_in_thread

pytestmark = pytest.mark.timeout(120)

REBINDING_HOSTS = [
    "attacker.example:{port}",
    "attacker.example",
    "127.0.0.1.attacker.example:{port}",
    "127.attacker.example:{port}",
    "localhost.attacker.example:{port}",
    "127.0.0.1.nip.io:{port}",
    "127.0.0.1:{port}.attacker.example",
    "127.0.0.1:{port}@attacker.example",
    "[2001:db8::1]:{port}",
    "[::ffff:127.0.0.1]:{port}",
    "[::ffff:7f00:1]:{port}",
    "[::1]:1",
    "127.0.0.1:1",
    "127.0.0.2:{port}",
    "0.0.0.0:{port}",
    "",
]


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("uihost")
    store = open_store(f"sqlite:///{tmp / 'store.db'}")
    served = serve_in_thread(store, None, tmp / "analytics")
    yield served
    served.stop()
    store.close()


def call(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for key, value in headers.items():
        conn.putheader(key, value)
    if body:
        conn.putheader("Content-Length", str(len(body)))
        conn.putheader("Content-Type", "application/json")
    conn.endheaders(body or None)
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


def raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


@pytest.mark.parametrize("host", REBINDING_HOSTS)
def test_a_rebinding_host_is_refused_even_with_the_token(ui: Served, host: str) -> None:
    headers = {"Host": host.format(port=ui.port), "X-Blackbox-Token": ui.token}
    status, body = call(ui.port, "GET", "/api/sessions", headers)
    assert status == 421, (host, body)
    assert b"not the one the UI listens on" in body
    # The same request with the UI's own Host is served: the Host alone made the difference.
    own = {**headers, "Host": f"127.0.0.1:{ui.port}"}
    assert call(ui.port, "GET", "/api/sessions", own)[0] == 200


def test_a_missing_host_is_refused(ui: Served) -> None:
    answer = raw(
        ui.port,
        b"GET /api/sessions HTTP/1.0\r\nX-Blackbox-Token: %s\r\n\r\n" % ui.token.encode(),
    )
    assert answer.split(b" ")[1] == b"421", answer
    assert b"not the one the UI listens on" in answer


@pytest.mark.parametrize("order", ["foreign-first", "own-first"])
def test_two_host_headers_are_refused(ui: Served, order: str) -> None:
    """Two Hosts (one checked, the other read by whoever is behind): never served, whichever
    comes first. h11 itself refuses them before the guard sees them (400)."""
    hosts = [b"attacker.example:%d" % ui.port, b"127.0.0.1:%d" % ui.port]
    if order == "own-first":
        hosts.reverse()
    answer = raw(
        ui.port,
        b"GET /api/sessions HTTP/1.1\r\nHost: %s\r\nHost: %s\r\nX-Blackbox-Token: %s\r\n"
        b"Connection: close\r\n\r\n" % (hosts[0], hosts[1], ui.token.encode()),
    )
    assert answer.split(b" ")[1] in (b"400", b"421"), answer


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}"])
def test_the_uis_own_spellings_are_served(ui: Served, host: str) -> None:
    headers = {"Host": host.format(port=ui.port), "X-Blackbox-Token": ui.token}
    assert call(ui.port, "GET", "/api/sessions", headers)[0] == 200


def test_host_names_are_compared_without_case(ui: Served) -> None:
    """`Host` is case-insensitive (RFC 9110): the UI now says so as the proxy always did."""
    headers = {"Host": f"LocalHost:{ui.port}", "X-Blackbox-Token": ui.token}
    assert call(ui.port, "GET", "/api/sessions", headers)[0] == 200


@pytest.mark.parametrize(
    "origin",
    [
        "http://attacker.example:{port}",
        "http://127.0.0.1.attacker.example:{port}",
        "http://localhost:{port}@attacker.example",
        "http://localhost:3000",  # another page on this machine: not the UI
        "http://[::ffff:127.0.0.1]:{port}",
        "https://127.0.0.1:{port}",
        "http://127.0.0.1:{port}/sessions",
        "null",
    ],
)
def test_a_foreign_origin_cannot_start_a_replay(ui: Served, tmp_path: Path, origin: str) -> None:
    headers = {
        "Host": f"127.0.0.1:{ui.port}",
        "X-Blackbox-Token": ui.token,
        "Origin": origin.format(port=ui.port),
    }
    status, body = call(ui.port, "POST", "/api/sessions/last/replay", headers, b"{}")
    assert status == 403 and b"origin" in body, (origin, status, body)


def test_the_uis_own_origin_passes_the_guard(ui: Served) -> None:
    """The control: with its own Origin the POST reaches the replay route (which then finds no
    session in the empty store: 400 from the route, not 403 from the guard)."""
    for own in (f"http://127.0.0.1:{ui.port}", f"http://localhost:{ui.port}"):
        headers = {"Host": f"127.0.0.1:{ui.port}", "X-Blackbox-Token": ui.token, "Origin": own}
        status, body = call(ui.port, "POST", "/api/sessions/last/replay", headers, b"{}")
        assert status == 400 and b"refused" not in body, (own, status, body)


async def _app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    raise AssertionError("never reached")


@pytest.mark.parametrize("listen", [("127.0.0.1", 8765), ("::1", 8765), ("0.0.0.0", 8765)])
def test_the_ui_and_the_proxy_decide_by_one_rule(listen: tuple[str, int]) -> None:
    """Both guards are the kernel's `HostGuard`; on every attack above, and on the own
    spellings, they give the same answer."""
    ui_hosts = Guard(_app, "token", *listen).hosts
    proxy = ProxyGuard(listen)
    assert type(ui_hosts) is serving.HostGuard and isinstance(proxy, serving.HostGuard)
    own = ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "LOCALHOST:{port}"]
    for template in [*REBINDING_HOSTS, *own]:
        host = template.format(port=listen[1]).encode()
        ui_says = ui_hosts.admits(host)
        assert ui_says is (proxy.refusal(host, 1, None) is None), host
        if template in REBINDING_HOSTS and listen[0] != "0.0.0.0":
            assert not ui_says, host
    for ui_says in (ui_hosts.admits(None, 0), ui_hosts.admits(b"127.0.0.1:8765", 2)):
        assert not ui_says  # no Host, two Hosts
    assert proxy.refusal(None, 0, None) and proxy.refusal(b"127.0.0.1:8765", 2, None)


def test_on_a_wildcard_address_ip_literals_pass_and_names_do_not() -> None:
    """Listening on 0.0.0.0 the UI is reached by whichever address the client used: an IP
    literal with the port is admitted (a rebinding page's Host is its own DNS name, never an
    IP), a name is not."""
    hosts = Guard(_app, "token", "0.0.0.0", 8765).hosts
    assert hosts.admits(b"10.1.2.3:8765") and hosts.admits(b"[fe80::1]:8765")
    assert not hosts.admits(b"10.1.2.3:9999")
    for name in (b"attacker.example:8765", b"127.0.0.1.attacker.example:8765"):
        assert not hosts.admits(name)
