"""Serving HTTP on this machine: the one Host guard and the one uvicorn setup that `blackbox ui`
and `blackbox proxy` share.

Why it exists: both commands listen on a local port that any process, and any web page the user
visits, can reach; a page whose DNS name is rebound to 127.0.0.1 reaches it as its own origin, and
only the `Host` header it sends gives it away. So both answer only requests for their own address,
by one rule (`HostGuard`, built on `is_loopback`). And both bind the listening socket before they
say where they listen (port 0 picks a free port, the line printed names the real one), then run
uvicorn with the project's settings, stopping gracefully on SIGINT and SIGTERM (`bind`,
`http_url`, `Server`).

What each command does beyond that stays with it: the UI's token, Origin rule for writes and 421
(`blackbox.ui.security`), the proxy's Origin rule, --allow-host messages and recorded 403s
(`blackbox.recorder.capture.taps.http_headers`), their output lines and exit behaviour. Kernel:
imports nothing of the project; uvicorn only when a server is made.
"""

from __future__ import annotations

import contextlib
import ipaddress
import signal
import socket
import threading
import time
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import uvicorn

# -- the Host guard ------------------------------------------------------------------------------

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARD = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """True when `host` is certainly this machine's loopback: the name `localhost` (in any case),
    or an IP literal in 127.0.0.0/8 or `::1`, bare or in brackets (`[::1]`).

    The one rule for the UI, the proxy and `blackbox attach`, and the stricter of the two the
    project had: the proxy's said yes to anything that starts with `127.`, so
    `127.attacker.example` and `127.0.0.1.nip.io` (DNS names, resolving wherever their owner
    likes) counted as loopback. This one parses the address. Of names, only `localhost` is
    trusted (RFC 6761 keeps it for loopback); not `*.localhost` nor `localhost.`; of addresses,
    not the shortened or octal IPv4 forms (`127.1`, `0177.0.0.1`) nor IPv4-mapped IPv6
    (`::ffff:127.0.0.1`, which Python itself counts as loopback only from 3.13: pinned here so
    the rule does not change with the interpreter). A wrong "no" costs a warning or a refused
    request; a wrong "yes" admits a rebinding page or hides that a port is open to the network.
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if bare.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return False
    return address.is_loopback


def split_host(value: str) -> tuple[str, str | None]:
    """`name[:port]` or `[v6][:port]` as (name, port or None); the name keeps its brackets."""
    if value.startswith("["):
        name, bracket, rest = value.partition("]")
        if not bracket:
            return value, None
        port = rest[1:] if rest.startswith(":") else None
        return name + "]", port
    name, colon, port = value.rpartition(":")
    if not colon or ":" in name:  # no port, or a bare IPv6 address
        return value, None
    return name, port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


class GuardError(ValueError):
    """An --allow-host or --allow-origin value that cannot be a Host or an Origin."""


def normalise_allowed_host(value: str) -> str:
    """An --allow-host value as compared (lower-case), or GuardError saying what is wrong."""
    text = value.strip().lower()
    name, port = split_host(text)
    bad = (
        not name
        or any(c in text for c in "/ @?#\t")
        or (port is not None and not port.isdigit())
        or (":" in name.strip("[]") and not name.startswith("["))
    )
    if bad:
        raise GuardError(
            f"bad --allow-host {value!r}: give a name as the client's Host header has it, e.g. "
            "mcp.internal or mcp.internal:8750"
        )
    return text


class HostGuard:
    """Which `Host` values a server listening on `listen` (host, port) answers: the check against
    DNS rebinding of both `blackbox ui` and `blackbox proxy`.

    Admitted, compared lower-case (RFC 9110: Host is case-insensitive): the listen address as
    `IP:PORT` (bare `IP` too on port 80); when it is loopback (`is_loopback`), also
    `localhost:PORT`, `127.0.0.1:PORT` and `[::1]:PORT`; when it is a wildcard (0.0.0.0, ::),
    those and any IP literal with the port (a rebinding page's Host is always its own DNS name,
    never an IP); and each `allow_hosts` entry (a name alone admits any port). With `listen`
    None (an address the server cannot tell), the loopback names on any port. A request must
    carry exactly one Host: none (HTTP/1.0) or two (one checked, the other read by whoever is
    behind) are refused. `own_origin` is the same rule for an `Origin`: a page this server
    served itself.
    """

    def __init__(self, listen: tuple[str, int] | None, allow_hosts: Iterable[str] = ()) -> None:
        exact: set[str] = set()
        names: set[str] = set()
        self.port: str | None = None
        self.wildcard = False
        self.shown = "?"
        if listen is None:
            names.update(LOOPBACK_NAMES)
        else:
            host, port = listen[0], int(listen[1])
            self.port = str(port)
            shown = f"[{host}]" if ":" in host else host
            self.shown = f"{shown}:{port}"
            self.wildcard = host in WILDCARD
            forms = {shown.lower()}
            if self.wildcard or is_loopback(host):
                forms.update(LOOPBACK_NAMES)
            for form in forms:
                exact.add(f"{form}:{port}")
                if port == 80:
                    exact.add(form)
        for value in allow_hosts:
            text = normalise_allowed_host(value)
            (exact if split_host(text)[1] is not None else names).add(text)
        self.exact = frozenset(exact)
        self.exact_bytes = frozenset(h.encode("latin-1") for h in exact)
        self.names = frozenset(names)

    def host_ok(self, host: str) -> bool:
        """Whether one Host value (as text) is this server's."""
        host = host.lower()
        if host in self.exact:
            return True
        name, port = split_host(host)
        if name in self.names:
            return True
        return (
            self.wildcard
            and _is_ip(name)
            and (port == self.port or (port is None and self.port == "80"))
        )

    def admits(self, host: bytes | None, count: int = 1) -> bool:
        """Whether a request whose Host header is `host`, sent `count` times, is for this
        server. The common case (the exact listen address) is one set lookup."""
        if count != 1 or host is None:
            return False
        return host in self.exact_bytes or self.host_ok(host.decode("latin-1"))

    def own_origin(self, origin: str) -> bool:
        """Whether an `Origin` is a page this server served: `http://` and an admitted Host,
        nothing else (no user part, path or query)."""
        try:
            parts = urlsplit(origin.lower().rstrip("/"))
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            return False
        if parts.scheme != "http" or not parts.hostname or "@" in parts.netloc:
            return False
        if parts.path or parts.query or parts.fragment:
            return False
        return self.host_ok(parts.netloc)


# -- the server ------------------------------------------------------------------------------------


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port), made before anything is printed: port 0 picks a
    free port and `getsockname` names it. Raises OSError (the socket closed); each command says
    it in its own words."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it Nagle + delayed ACK add ~40 ms to every reply written in two parts.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        # A deep backlog: connections made as soon as the address is printed wait, not fail.
        sock.listen(2048)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def http_url(host: str, port: int, path: str = "") -> str:
    """`http://host:port` + path, an IPv6 host in brackets."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}{path}"


def _uvicorn_config(app: Any, lifespan: bool, graceful_s: int, own_headers: bool) -> Any:
    import uvicorn

    return uvicorn.Config(
        app,
        http="h11",
        loop="asyncio",
        ws="none",
        lifespan="on" if lifespan else "off",
        # The process's own logging decides where uvicorn's warnings go; its info lines
        # (started, stopped) are not the commands' output.
        log_config=None,
        log_level="warning",
        access_log=False,
        server_header=own_headers,
        date_header=own_headers,
        # The client's address is the peer's: never one taken from an X-Forwarded-For header a
        # local client could set.
        proxy_headers=False,
        timeout_graceful_shutdown=graceful_s,
        timeout_keep_alive=30,
    )


_graceful: type[uvicorn.Server] | None = None


def _graceful_server_class() -> type[uvicorn.Server]:
    """uvicorn's server, except that a SIGINT or SIGTERM only stops it gracefully: uvicorn
    re-raises the signal afterwards, which would end the process before the command has done
    its own work (the proxy ships its journal). The signals are kept in `stop_signals`."""
    global _graceful
    if _graceful is None:
        import uvicorn

        class Graceful(uvicorn.Server):
            stop_signals: list[int]

            @contextlib.contextmanager
            def capture_signals(self) -> Generator[None, None, None]:
                self.stop_signals = []
                with super().capture_signals():
                    try:
                        yield
                    finally:
                        self.stop_signals = list(self._captured_signals)
                        self._captured_signals.clear()

        _graceful = Graceful
    return _graceful


class Server:
    """An ASGI app served by uvicorn on a bound socket, with the project's settings (h11, the
    asyncio loop, no websockets, no access log, no proxy headers, a 30 s keep-alive).

    What differs between the commands is said here: `lifespan` (the proxy opens and closes its
    upstream pool in it), `graceful_s` (how long open requests get at stop), `own_headers`
    (uvicorn's Server and Date headers; off for the proxy, which passes the upstream's).
    `run` serves in the calling thread (a signal stops it, and `reraise_signals` then ends the
    process as the signal would have); `start` and `stop` serve in a thread (tests, benchmarks).
    """

    def __init__(
        self,
        app: Any,
        sock: socket.socket,
        *,
        lifespan: bool = False,
        graceful_s: int = 1,
        own_headers: bool = True,
        name: str = "blackbox-server",
    ) -> None:
        self.sock = sock
        self.host, self.port = sock.getsockname()[:2]
        self._server = _graceful_server_class()(
            _uvicorn_config(app, lifespan, graceful_s, own_headers)
        )
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    @property
    def stop_signals(self) -> list[int]:
        """The signals that stopped `run` (SIGINT, SIGTERM), in the order they came."""
        return list(getattr(self._server, "stop_signals", []))

    def run(self) -> None:
        """Serve until a signal or `stop`."""
        self._server.run(sockets=[self.sock])

    def reraise_signals(self) -> None:
        """Raise again the signals that stopped `run`, last first, as uvicorn itself does: a
        SIGINT becomes KeyboardInterrupt, a SIGTERM ends the process by it."""
        for sig in reversed(self.stop_signals):
            signal.raise_signal(sig)

    def start(self, timeout: float | None = 10.0) -> bool:
        """Serve in a background thread; True once it accepts connections, False when it could
        not start (the thread ended, or `timeout` seconds passed)."""
        self._thread.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                return False
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (open requests get `graceful_s`), wait for the thread, close the
        socket."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.sock.close()
