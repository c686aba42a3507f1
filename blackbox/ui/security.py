"""The guard in front of every page and API of `blackbox ui`.

Why it exists: the UI serves recorded MCP traffic (arguments, results, secrets a tool printed) on a
port any local process and any web page the user visits can reach. So, as Jupyter does, the URL
it prints carries a random token, and a request without it (in the query, a header, or the cookie
set on the first visit) is refused; a request whose `Host` is not the address the UI listens on is
refused (a DNS-rebinding page reaches loopback under its own host name; the rule is the proxy's
too, `blackbox.recorder.serving.HostGuard`); a state-changing request (starting a replay) needs the
token in a header AND an `Origin` of the UI itself, so a cross-site form or fetch cannot make one
even with the cookie. Every answer carries a strict Content Security
Policy (scripts and styles from the UI itself only, no frames).

It is a plain ASGI middleware, so it also guards the server-sent event streams.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from blackbox.recorder import HostGuard

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_PARAM = "token"
TOKEN_HEADER = "x-blackbox-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


def new_token() -> str:
    return secrets.token_urlsafe(24)


def cookie_name(port: int) -> str:
    # Cookies are not scoped by port: two UIs on one machine must not overwrite each other's.
    return f"blackbox_ui_{port}"


class Guard:
    """ASGI middleware: Host check, token check, same-origin check for writes, security headers.

    Which Host is the UI's, and so which Origin, is the rule the proxy uses too
    (`blackbox.recorder.serving.HostGuard`): exactly one Host header, the listen address with
    its port or, on loopback, `localhost`, `127.0.0.1` or `[::1]` with the port."""

    def __init__(self, app: ASGIApp, token: str, host: str, port: int) -> None:
        self.app = app
        self.token = token
        self.hosts = HostGuard((host, port))
        self.cookie = cookie_name(port)

    def _token_ok(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(
            candidate.encode(), self.token.encode()
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the UI has none: refuse before any handshake
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hosts = [v for k, v in scope["headers"] if k.lower() == b"host"]
        if not self.hosts.admits(hosts[0] if hosts else None, len(hosts)):
            await _refuse(send, 421, "refused: this address is not the one the UI listens on")
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        in_query = next((v for k, v in query if k == TOKEN_PARAM), None)
        in_header = headers.get(TOKEN_HEADER)
        in_cookie = _cookie(headers.get("cookie", ""), self.cookie)
        method = scope["method"]
        if method not in SAFE_METHODS:
            origin = headers.get("origin")
            if not self._token_ok(in_header) or not self.hosts.own_origin(origin or ""):
                await _refuse(send, 403, "refused: a change needs the token and the UI's origin")
                return
        elif not (
            self._token_ok(in_query) or self._token_ok(in_header) or self._token_ok(in_cookie)
        ):
            await _refuse(send, 403, "refused: open the URL blackbox ui printed (it has the token)")
            return
        set_cookie = self._token_ok(in_query) and not self._token_ok(in_cookie)
        if set_cookie and method == "GET" and not scope["path"].startswith("/api/"):
            # First visit: keep the token in a cookie and take it out of the address bar.
            rest = urlencode([(k, v) for k, v in query if k != TOKEN_PARAM])
            await _redirect(send, scope["path"] + (f"?{rest}" if rest else ""), self._cookie())
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
                if set_cookie:
                    message["headers"].append((b"set-cookie", self._cookie()))
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _cookie(self) -> bytes:
        return f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode()


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


async def _refuse(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Send, location: str, cookie: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", location.encode("latin-1")),
                (b"set-cookie", cookie),
                (b"content-length", b"0"),
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})
