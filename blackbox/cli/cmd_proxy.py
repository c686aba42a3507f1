"""Commands of the proxy area: `blackbox proxy`, the recorder for remote (HTTP) MCP servers."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit

import click

from blackbox import config
from blackbox.cli.lifecycle_options import idle_after_option, idle_after_seconds
from blackbox.cli.options import DURATION_HELP, Duration, home_option, policy_option, store_option
from blackbox.cli.otel_options import otel_options, start_live
from blackbox.recorder import is_loopback
from blackbox.recorder.capture import (
    DEFAULT_IDLE_GAP_S,
    DEFAULT_LISTEN,
    ProxyConfig,
    ProxySettings,
    parse_listen,
    run_proxy,
)
from blackbox.recorder.privacy import load_or_create_key, store_key_path
from blackbox.recorder.store import normalise_url, open_store


def _notice(message: str) -> None:
    sys.stderr.write(f"blackbox proxy: {message}\n")
    sys.stderr.flush()


@click.command("proxy")
@click.option("--upstream", required=True, metavar="URL", help="The MCP server's URL.")
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    metavar="HOST:PORT",
    help="Where to accept connections (loopback unless you say otherwise).",
)
@store_option
@home_option
@click.option("--name", default=None, help="Name sessions are recorded under (default: host).")
@policy_option
@idle_after_option
@click.option(
    "--idle-gap",
    type=Duration(),
    default=None,
    help="A client without session id or trace id starts a new session after this much silence "
    f"({DURATION_HELP}; default: the --idle-after limit, 120min unless configured).",
)
@click.option(
    "--timeout",
    type=Duration(),
    default="300s",
    show_default=True,
    help="How long the upstream may stay silent (no answer, no stream bytes) before it is a fault "
    f"({DURATION_HELP}).",
)
@click.option(
    "--rewrite-host",
    is_flag=True,
    help="Send the upstream's own Host header (for virtual-hosted servers) instead of the "
    "client's. A client's Host is still checked first: a foreign one gets 403.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also serve requests whose Host is NAME (any port) or NAME:PORT, besides the listen "
    "address and the loopback names; repeatable. E.g. --allow-host mcp.internal",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="ORIGIN",
    help="Also serve browser requests from the web page at ORIGIN (scheme://host[:port]), "
    "besides loopback pages; repeatable. E.g. --allow-origin https://app.example.com",
)
@otel_options
def proxy(
    upstream: str,
    listen: str,
    store_url: str | None,
    name: str | None,
    policy_file: Path | None,
    idle_after: str | None,
    idle_gap: float | None,
    timeout: float,
    rewrite_host: bool,
    allow_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
    otel: bool,
    otel_endpoint: str | None,
    otel_protocol: str | None,
) -> None:
    """Record a remote MCP server: a streaming reverse proxy the host points at instead of the
    server. Every era works (Streamable HTTP, 2026-07-28 stateless, 2024-11-05 HTTP+SSE); every
    JSON-RPC message and each HTTP exchange is recorded, with credentials in headers kept only as
    fingerprints. Paths are forwarded unchanged, so point the host at the proxy's address with the
    server's path (the URL is printed at start).

    \b
    Recording sessions over HTTP, in this order:
      1. the legacy session id: Mcp-Session-Id, or the endpoint of a 2024-11-05 SSE stream;
      2. else the W3C trace id of traceparent (header or params._meta.traceparent);
      3. else the client: clientInfo name/version + remote address, a new session after
         --idle-gap of silence. An initialize request always begins a new session.

    Records are journaled locally before anything is forwarded (if the journal cannot be
    written the client gets 503 and nothing passes unrecorded) and reach the store in the
    background, so a slow or unreachable store never stalls the host. Stop with Ctrl-C.

    Against DNS rebinding, only requests for the proxy's own address are served: a Host other
    than the listen address (or localhost:PORT, 127.0.0.1:PORT, [::1]:PORT on loopback) or a
    browser's Origin other than a loopback page gets 403, recorded and not forwarded; name others
    with --allow-host and --allow-origin.

    \b
    Example:
      blackbox proxy --upstream https://mcp.example.com/mcp --listen 127.0.0.1:8750
      # then point the host at http://127.0.0.1:8750/mcp
      blackbox proxy --upstream http://10.0.0.7:9000/mcp --listen 0.0.0.0:8750 \\
          --allow-host mcp-recorder.internal
    """
    url = config.store_url(store_url)
    idle_seconds = idle_after_seconds(idle_after)
    if idle_gap is None:
        idle_gap = idle_seconds or DEFAULT_IDLE_GAP_S
    settings = ProxySettings(
        upstream=upstream,
        name=name,
        idle_gap_s=idle_gap,
        idle_after_s=idle_seconds,
        timeout_s=timeout,
        rewrite_host=rewrite_host,
        # Secret headers are kept as HMACs under the store's key (out of the store).
        fingerprint_key=load_or_create_key(store_key_path(config.data_dir(), url)),
        allow_hosts=allow_hosts,
        allow_origins=allow_origins,
    )
    host, _port = parse_listen(listen)
    if not is_loopback(host):
        _notice(
            f"listening on {host}, not loopback: anyone who can reach this address can use the "
            "upstream through the proxy (clients that reach it by a name need --allow-host NAME)"
        )
    upstream_host = urlsplit(upstream).hostname or ""
    if not rewrite_host and not is_loopback(upstream_host):
        _notice(
            f"forwarding the Host header the client sends (as a transparent proxy does); if "
            f"{upstream_host} answers 404 or 421 because it expects its own name, add "
            "--rewrite-host"
        )
    policy = None
    if policy_file is not None:
        from blackbox.recorder.gate import LivePolicy

        policy = LivePolicy(policy_file, on_notice=_notice)
    # A wrong URL is an error now; an unreachable store is only an outage the journal rides out.
    shown_store = normalise_url(url).render_as_string(hide_password=True)
    # The follower ends its work when this process ends (its stdin closes), however it ends.
    live = start_live(url, otel_endpoint, otel_protocol) if otel else None
    report = run_proxy(
        ProxyConfig(
            settings=settings,
            listen=listen,
            journal_dir=config.journal_dir(),
            store_factory=lambda: open_store(url),
            store_url=url,
            on_notice=_notice,
            policy=policy,
            on_ready=lambda proxy_url: _notice(
                f"recording {upstream} at {proxy_url} into {shown_store}; Ctrl-C stops"
            ),
        )
    )
    if live is not None:
        live.close()
    stats = report.stats
    _notice(
        f"stopped: {stats.exchanges} exchanges, {stats.frames} messages, {stats.sessions} "
        f"sessions, {stats.faults} faults recorded"
    )


COMMANDS = [proxy]
