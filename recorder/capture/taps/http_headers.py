"""HTTP header rules of the proxy tap: what is forwarded, what is recorded, and whose requests are
served at all.

Why it exists: a transparent proxy must forward end-to-end headers unchanged (Host as the client
sent it, so an upstream's DNS-rebinding protection still sees the real Host; Mcp-Session-Id,
MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name, traceparent, Origin) and drop only the
hop-by-hop ones; and the record must never hold a credential in clear. The rule for the record is
an allow-list: the harmless headers of `CLEAR_HEADERS` are stored as sent, every other header
(`Authorization`, `X-Custom-Auth`, a vendor's key header, `Mcp-Session-Id`) as a keyed
fingerprint (`blackbox.recorder.privacy.fingerprint`), enough to tell two values apart, not to
recover one. Query parameters named like credentials (`access_token`, `api_key`, `code`, `sig`, ...)
are fingerprinted in the recorded path the same way.
A deny-list would have to know every vendor's header name; an allow-list fails safe.

`HostGuard` is the DNS-rebinding check the MCP Streamable HTTP transport asks of local servers
(validate `Origin`, answer 403 when it is present and invalid): a request whose `Host` is not the
proxy's own address (or a name the user allowed; the rule `blackbox ui` uses too, in
`blackbox.recorder.serving`) or whose `Origin` is a foreign web page is refused before anything is
read, recorded or forwarded.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import unquote_plus, urlsplit

from blackbox.recorder import GuardError as GuardError
from blackbox.recorder import is_loopback, serving, split_host
from blackbox.recorder import normalise_allowed_host as normalise_allowed_host
from blackbox.recorder.privacy import fingerprint as keyed

# RFC 9110 section 7.6.1 hop-by-hop fields, plus the pre-standard ones proxies still meet.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Headers recorded in clear: standard HTTP metadata and the MCP transport's own headers, none of
# which carries a credential. Every other header is fingerprinted. `Mcp-Session-Id` is not here: a
# server hands it out to whoever initialized, and for its lifetime whoever holds it can post into
# the session (servers without auth accept nothing else), so it is a bearer secret; a fingerprint
# still groups the exchanges of one session. `Location` and `Referer` are not here either: URLs,
# which may carry an OAuth code or a token in their query.
CLEAR_HEADERS = frozenset(
    {
        # content and negotiation
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "content-encoding",
        "content-language",
        "content-length",
        "content-type",
        "vary",
        # connection and routing
        "connection",
        "keep-alive",
        "host",
        "origin",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "via",
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
        # caching and timing
        "age",
        "cache-control",
        "date",
        "etag",
        "expires",
        "if-modified-since",
        "if-none-match",
        "last-modified",
        "pragma",
        "retry-after",
        # who is talking
        "server",
        "user-agent",
        # MCP and tracing
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "last-event-id",
        "traceparent",
        "tracestate",
        "x-request-id",
        # browser and security policy metadata
        "access-control-allow-headers",
        "access-control-allow-methods",
        "access-control-allow-origin",
        "access-control-expose-headers",
        "access-control-max-age",
        "access-control-request-headers",
        "access-control-request-method",
        "content-security-policy",
        "referrer-policy",
        "sec-fetch-dest",
        "sec-fetch-mode",
        "sec-fetch-site",
        "strict-transport-security",
        "www-authenticate",
        "x-accel-buffering",
        "x-content-type-options",
        "x-frame-options",
    }
)

# Query parameters recorded as fingerprints: these names (compared lower-case, after percent-
# decoding), any name containing one of SECRET_PARAM_PARTS, and any ending in SECRET_PARAM_SUFFIXES.
SECRET_PARAMS = frozenset(
    {
        "access_token",
        "api_key",
        "apikey",
        "auth",
        "authorization",
        "client_secret",
        "code",
        "code_verifier",
        "id_token",
        "jwt",
        "key",
        "pass",
        "passwd",
        "password",
        "pwd",
        "refresh_token",
        "secret",
        "sessionid",
        "session_id",
        "sid",
        "sig",
        "signature",
        "token",
    }
)
SECRET_PARAM_PARTS = (
    "token",
    "secret",
    "passw",
    "apikey",
    "api_key",
    "api-key",
    "signature",
    "credential",
    "session",
    "verifier",
)
SECRET_PARAM_SUFFIXES = ("_key", "-key", ".key", "_sig", "-sig")


def is_secret(name: str) -> bool:
    """Whether a header's value is recorded as a fingerprint: every header not known harmless."""
    return name.lower() not in CLEAR_HEADERS


@lru_cache(maxsize=1024)
def is_secret_param(name: str) -> bool:
    """Whether a query parameter's value is a credential. Cached: hosts send the same few names."""
    name = unquote_plus(name).lower()
    return (
        name in SECRET_PARAMS
        or name.endswith(SECRET_PARAM_SUFFIXES)
        or any(part in name for part in SECRET_PARAM_PARTS)
    )


def fingerprint(value: str | bytes, key: bytes | None = None) -> str:
    """A stable stand-in for a secret value: HMAC-SHA256 under the store's key (this process's
    random key when none is given), so a short secret cannot be found by hashing candidates."""
    return "hmac:" + keyed.fingerprint(key or keyed.process_key(), value, 24)


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens


def forwardable(
    headers: Iterable[tuple[bytes, bytes]], drop: frozenset[bytes] = frozenset()
) -> list[tuple[bytes, bytes]]:
    """End-to-end headers: hop-by-hop ones (and any named by Connection) and `drop` removed.

    Names are lower-case bytes (as ASGI and httpx hand them over); order and repeats are kept.
    """
    headers = list(headers)
    dropped = _connection_tokens(headers) | drop
    return [
        (name, value)
        for name, value in headers
        if name.lower().decode("latin-1") not in HOP_BY_HOP and name.lower() not in dropped
    ]


def recorded(
    headers: Iterable[tuple[bytes, bytes]], key: bytes | None = None
) -> dict[str, str | list[str]]:
    """Headers as the record keeps them: lower-case names, every header not in `CLEAR_HEADERS`
    fingerprinted (keyed by `key`), repeats as a list."""
    out: dict[str, str | list[str]] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if name in CLEAR_HEADERS:
            value = raw_value.decode("latin-1")
        else:
            value = fingerprint(raw_value, key)
        if name in out:
            previous = out[name]
            if isinstance(previous, list):
                previous.append(value)
            else:
                out[name] = [previous, value]
        else:
            out[name] = value
    return out


@lru_cache(maxsize=512)
def recorded_target(target: str, key: bytes | None = None) -> str:
    """A request target (or a URL) as the record keeps it: the value of each query parameter named
    like a credential fingerprinted, the rest unchanged. Cached: a host sends to one or two
    targets."""
    path, mark, query = target.partition("?")
    if not mark or not query:
        return target
    parts = query.split("&")
    changed = False
    for i, part in enumerate(parts):
        name, eq, value = part.partition("=")
        if eq and value and is_secret_param(name):
            parts[i] = f"{name}={fingerprint(value, key)}"
            changed = True
    return f"{path}?{'&'.join(parts)}" if changed else target


def recorded_url(url: str, key: bytes | None = None) -> str:
    """A URL as the record keeps it: a password in it replaced, secret query values
    fingerprinted."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.rpartition("@")
        user = netloc[0].partition(":")[0]
        secret = fingerprint(parts.password, key)
        url = url.replace(parts.netloc, f"{user}:{secret}@{netloc[2]}", 1)
    return recorded_target(url, key)


# -- DNS rebinding -------------------------------------------------------------------------------
# The Host rule is the kernel's (`blackbox.recorder.serving`), shared with `blackbox ui`;
# `GuardError` and `normalise_allowed_host` (imported above) stay importable from here for the
# proxy's settings. The Origin rule and the refusal lines below are the proxy's own.


def normalise_allowed_origin(value: str) -> str:
    """An --allow-origin value as compared (`scheme://host[:port]`, lower-case), or GuardError."""
    text = value.strip().lower().rstrip("/")
    if text == "null":
        return text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
        raise GuardError(
            f"bad --allow-origin {value!r}: give a web page's origin, scheme://host[:port], e.g. "
            "http://localhost:6274"
        )
    return text


class HostGuard(serving.HostGuard):
    """Which `Host` and `Origin` values a proxy listening on `listen` (host, port) serves.

    Host: the one rule `blackbox ui` uses too (`blackbox.recorder.serving.HostGuard`: the listen
    address, the loopback names when it is loopback, IP literals when it is a wildcard, and the
    `allow_hosts` entries). Origin, when sent (the MCP transport's rule): the proxy's own
    (`http://` + an admitted Host), a page served from loopback (as the MCP SDKs admit by
    default: local tools such as an inspector), or an `allow_origins` entry.
    """

    def __init__(
        self,
        listen: tuple[str, int] | None,
        allow_hosts: Iterable[str] = (),
        allow_origins: Iterable[str] = (),
    ) -> None:
        super().__init__(listen, allow_hosts)
        self.origins = frozenset(normalise_allowed_origin(o) for o in allow_origins)

    def origin_ok(self, origin: str) -> bool:
        origin = origin.lower().rstrip("/")
        if origin in self.origins:
            return True
        try:
            parts = urlsplit(origin)
            hostname = parts.hostname
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not hostname or parts.path:
            return False
        if is_loopback(hostname):
            return True
        return self.own_origin(origin)

    def refusal(self, host: bytes | None, hosts: int, origin: bytes | None) -> str | None:
        """Why a request with these headers is refused (one line), or None to serve it."""
        if not self.admits(host, hosts):
            if hosts != 1 or host is None:
                what = "no Host header" if hosts == 0 else f"{hosts} Host headers"
                return f"refused: {what}; this proxy answers only requests for {self.shown}"
            text = host.decode("latin-1")
            return (
                f"refused: Host {_shown(text)} is not this proxy's address ({self.shown}), "
                "as a DNS-rebinding web page's would be; if the name is yours, start the "
                f"proxy with --allow-host {split_host(text.lower())[0] or 'NAME'}"
            )
        if origin is not None:
            text = origin.decode("latin-1")
            if not self.origin_ok(text):
                return (
                    f"refused: requests from the web page at {_shown(text)} are not served "
                    "(a foreign Origin); if the page is yours, start the proxy with "
                    "--allow-origin ORIGIN"
                )
        return None


def _shown(value: str) -> str:
    """An attacker's header value quoted for a one-line message: escaped, at most 100 chars."""
    text = value if len(value) <= 100 else value[:100] + "..."
    return repr(text)
