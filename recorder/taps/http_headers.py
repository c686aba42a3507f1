"""HTTP header rules of the proxy tap: what is forwarded, and what is recorded.

Why it exists: a transparent proxy must forward end-to-end headers unchanged (Host as the client
sent it, so an upstream's DNS-rebinding protection still sees the real Host; Mcp-Session-Id,
MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name, traceparent, Origin) and drop only the
hop-by-hop ones; and the record must never hold a credential in clear. Secret headers are stored
as a keyed fingerprint (`recorder.fingerprint`), enough to tell two tokens apart, not to recover
one.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from recorder import fingerprint as keyed

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
SECRET_NAMES = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "x-auth-token",
    }
)
SECRET_SUFFIXES = ("-key", "-token", "-secret", "-password", "-credential", "-credentials")


@lru_cache(maxsize=1024)
def is_secret(name: str) -> bool:
    """Whether a header's value is a credential (compared lower-case). Cached: every exchange
    record asks it of every header, and hosts send the same few names."""
    name = name.lower()
    return name in SECRET_NAMES or name.endswith(SECRET_SUFFIXES) or "apikey" in name


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
    """Headers as the record keeps them: lower-case names, secrets fingerprinted, repeats as a
    list."""
    out: dict[str, str | list[str]] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        if is_secret(name):
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
