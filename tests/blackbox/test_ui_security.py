"""The UI's guard, tested as the attacks it stops: a request without the token (another local
process, a web page guessing the port), a request under a foreign `Host` (DNS rebinding), a
cross-origin or origin-less POST (CSRF, even with the cookie). Each attack is also run against the
same routes WITHOUT the guard, where it succeeds: the tests would catch the guard's absence.
Plus: the first visit trades the token for a cookie, every answer carries a CSP, the replay API
runs a real replay and returns a side-by-side diff, and `blackbox ui` warns off loopback."""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from blackbox.recorder.serving import Server, bind
from blackbox.recorder.store import open_store

from blackbox.ui.app import Context, unguarded_app
from blackbox.ui.server import serve_in_thread
from tests.fixtures import peers
from tests.fixtures.clirun import run_blackbox
from tests.fixtures.taps import record, wait_sessions

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("uisec")
    url = f"sqlite:///{tmp / 'store.db'}"
    record(tmp / "home", url, "sec", [("echo", {"message": "hi"})])
    wait_sessions(url, 1)
    yield url, tmp


@pytest.fixture(scope="module")
def guarded(store_url: tuple[str, Path]) -> Iterator:  # type: ignore[type-arg]
    url, tmp = store_url
    store = open_store(url, create=False)
    served = serve_in_thread(store, tmp / "home" / "journal", tmp / "analytics")
    yield served
    served.stop()
    store.close()


@pytest.fixture(scope="module")
def unguarded(store_url: tuple[str, Path]) -> Iterator[int]:
    """The same routes with no guard in front: the control group of every attack."""
    url, tmp = store_url
    store = open_store(url, create=False)
    ctx = Context(store, None, tmp / "analytics", "unused")
    server = Server(unguarded_app(ctx), bind("127.0.0.1", 0))
    assert server.start()
    yield server.port
    server.stop()
    store.close()


def call(
    port: int, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    sent = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    if body:
        sent["Content-Length"] = str(len(body))
        sent.setdefault("Content-Type", "application/json")
    for key, value in sent.items():
        if value is not None:
            conn.putheader(key, value)
    conn.endheaders(body or None)
    resp = conn.getresponse()
    data = (
        resp.read()
        if resp.status != 200 or "event-stream" not in (resp.getheader("content-type") or "")
        else b""
    )
    out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    conn.close()
    return out


PAGES = ["/", "/sessions", "/sql?q=SELECT+1", "/api/sessions", "/api/overview", "/static/app.js"]


@pytest.mark.parametrize("path", PAGES)
def test_no_token_is_refused(guarded, unguarded: int, path: str) -> None:  # type: ignore[no-untyped-def]
    status, _, body = call(guarded.port, "GET", path)
    assert status == 403 and b"token" in body
    assert call(guarded.port, "GET", path, {"X-Blackbox-Token": "wrong" * 6})[0] == 403
    assert call(guarded.port, "GET", path, {"Cookie": f"blackbox_ui_{guarded.port}=nope"})[0] == 403
    assert call(unguarded, "GET", path)[0] == 200  # without the guard the attack succeeds


def test_the_live_stream_needs_the_token_too(guarded) -> None:  # type: ignore[no-untyped-def]
    assert call(guarded.port, "GET", "/api/live")[0] == 403


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1:1", ""])
def test_foreign_host_is_refused_even_with_the_token(guarded, unguarded: int, host: str) -> None:  # type: ignore[no-untyped-def]
    headers = {"Host": host.format(port=guarded.port), "X-Blackbox-Token": guarded.token}
    status, _, body = call(guarded.port, "GET", "/api/sessions", headers)
    assert status == 421 and b"not the one the UI listens on" in body
    control = {"Host": host.format(port=unguarded)}
    assert call(unguarded, "GET", "/api/sessions", control)[0] == 200


def test_localhost_spelling_of_loopback_is_accepted(guarded) -> None:  # type: ignore[no-untyped-def]
    headers = {"Host": f"localhost:{guarded.port}", "X-Blackbox-Token": guarded.token}
    assert call(guarded.port, "GET", "/api/sessions", headers)[0] == 200


def test_cross_origin_post_is_refused(guarded, unguarded: int, store_url) -> None:  # type: ignore[no-untyped-def]
    store = open_store(store_url[0], create=False)
    sid = store.resolve("last")
    store.close()
    path = f"/api/sessions/{sid}/replay"
    body = json.dumps({"against": "true"}).encode()
    cookie = f"blackbox_ui_{guarded.port}={guarded.token}"
    own = f"http://127.0.0.1:{guarded.port}"
    attacks = [
        {"Cookie": cookie, "Origin": "http://evil.example"},  # a cross-site form with the cookie
        {"Cookie": cookie, "X-Blackbox-Token": guarded.token, "Origin": "http://evil.example"},
        {"X-Blackbox-Token": guarded.token},  # no Origin at all
        {"Cookie": cookie, "Origin": own},  # same origin but only the cookie (no header token)
        {"X-Blackbox-Token": guarded.token, "Origin": "null"},
    ]
    for headers in attacks:
        status, _, answer = call(guarded.port, "POST", path, headers, body)
        assert status == 403, (headers, status)
        assert b"origin" in answer
    # The control: unguarded, the same cross-site POST reaches the replay (of `true`, which
    # answers nothing) and gets the replay's own answer, not a refusal.
    status, _, answer = call(unguarded, "POST", path, {"Origin": "http://evil.example"}, body)
    assert status in (200, 400), answer
    assert b"refused" not in answer


def test_first_visit_trades_the_token_for_a_cookie_and_headers(guarded) -> None:  # type: ignore[no-untyped-def]
    status, headers, _ = call(guarded.port, "GET", f"/sessions?q=sec&token={guarded.token}")
    assert status == 303
    assert headers["location"] == "/sessions?q=sec"  # the token leaves the address bar
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, headers, body = call(guarded.port, "GET", "/sessions", {"Cookie": cookie.split(";")[0]})
    assert status == 200 and b"Sessions" in body
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "default-src 'none'" in csp
    assert headers["x-frame-options"] == "DENY"


def test_replay_from_the_ui_shows_a_side_by_side_diff(guarded, store_url) -> None:  # type: ignore[no-untyped-def]
    """A real replay of the recorded example-server session against mcp-server-time: the echo
    call diverges, and the answer carries both responses' JSON for the side-by-side view."""
    store = open_store(store_url[0], create=False)
    sid = next(s.session_id for s in store.list_sessions() if s.replay_of is None)
    store.close()
    headers = {"X-Blackbox-Token": guarded.token, "Origin": f"http://127.0.0.1:{guarded.port}"}
    against = " ".join(peers.EXAMPLE_SERVER)
    body = json.dumps({"against": against}).encode()
    status, _, answer = call(guarded.port, "POST", f"/api/sessions/{sid}/replay", headers, body)
    assert status == 200, answer
    doc = json.loads(answer)
    assert doc["verdict"] == "equivalent" and doc["sides"] == []
    time_server = " ".join(peers.TIME_SERVER)
    body = json.dumps({"against": time_server}).encode()
    status, _, answer = call(guarded.port, "POST", f"/api/sessions/{sid}/replay", headers, body)
    doc = json.loads(answer)
    assert status == 200 and doc["verdict"] != "equivalent"
    sides = [s for s in doc["sides"] if s["recorded"] and s["replayed"]]
    assert sides, doc["sides"]
    assert any(s["differences"] for s in sides)
    first = sides[0]  # initialize: both sides are the answers, each naming its server
    assert '"result"' in first["recorded"] and '"result"' in first["replayed"]
    assert "mcp-time" in first["replayed"] and "blackbox-example" in first["recorded"]


def test_cli_warns_off_loopback_and_prints_the_url(store_url) -> None:  # type: ignore[no-untyped-def]
    url, tmp = store_url
    for listen, warned in (("127.0.0.1:0", False), ("0.0.0.0:0", True)):
        proc = subprocess.Popen(
            [peers.BLACKBOX, "ui", "--no-open", "--listen", listen, "--store", url],
            env=peers.tap_env(tmp / "home") | {"PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line.startswith("http://") and "/?token=" in line, line
            port = int(line.split(":")[2].split("/")[0])
            assert call(port, "GET", "/api/sessions")[0] == 403
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=15)
        assert ("not loopback" in err) is warned, err


def test_a_bad_listen_address_is_one_line(store_url) -> None:  # type: ignore[no-untyped-def]
    # The question is what the command prints and exits with, not how a process behaves: run
    # in this process (a traceback would be raised by run_blackbox, not returned).
    url, tmp = store_url
    for listen in ("nonsense", "127.0.0.1:99999", "203.0.113.9:0"):
        proc = run_blackbox(
            "ui", "--no-open", "--listen", listen, "--store", url, env=peers.tap_env(tmp / "home")
        )
        assert proc.returncode == 2, (listen, proc.stderr)
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("blackbox: ") and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("page", ["/sessions/{ref}", "/sessions/{ref}/replay"])
def test_a_session_reference_is_never_echoed_as_html(guarded, page: str) -> None:  # type: ignore[no-untyped-def]
    """A link with markup in the session reference: the 404 page names the reference, escaped,
    so it cannot inject markup into a page served with the token."""
    ref = quote("<img src=x onerror=alert(1)>", safe="")
    headers = {"X-Blackbox-Token": guarded.token}
    status, _, body = call(guarded.port, "GET", page.format(ref=ref), headers)
    assert status == 404
    assert b"<img" not in body and b"&lt;img src=x onerror=alert(1)&gt;" in body
