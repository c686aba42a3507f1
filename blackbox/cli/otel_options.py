"""The `--otel` options the tap commands share, and the live follower they start: `record`, `proxy`
and `otel export` use them; command modules do not import each other.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from blackbox import config
from blackbox.cli.options import F

if TYPE_CHECKING:
    from blackbox.recorder.otel import LiveHandle


WATERMARK_FILE = "otel-watermark.sqlite"


def watermark_path() -> Path:
    return config.data_dir() / WATERMARK_FILE


endpoint_option = click.option(
    "--endpoint",
    metavar="URL",
    default=None,
    help="OTLP endpoint (default: OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318).",
)


protocol_option = click.option(
    "--protocol",
    type=click.Choice(["http/protobuf", "grpc"]),
    default=None,
    help="OTLP protocol (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).",
)


def otel_options(func: F) -> F:
    """`--otel` with its endpoint and protocol, for the tap commands."""
    func = click.option(
        "--otel-protocol", type=click.Choice(["http/protobuf", "grpc"]), default=None,
        help="OTLP protocol for --otel.",
    )(func)  # fmt: skip
    func = click.option(
        "--otel-endpoint", metavar="URL", default=None,
        help="OTLP endpoint for --otel (default: the OTEL_* variables).",
    )(func)  # fmt: skip
    return click.option(
        "--otel",
        is_flag=True,
        help="Also send calls as OpenTelemetry spans as they complete (from a background "
        "process; a dead collector never delays a frame; `blackbox otel export` sends the rest).",
    )(func)


NO_SDK = "OpenTelemetry export needs the otel extra: pip install 'mcp-blackbox[otel]'"


def has_sdk() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except ModuleNotFoundError:
        return False


def require_sdk() -> None:
    if not has_sdk():
        raise click.ClickException(NO_SDK)


def start_live(store_url: str, endpoint: str | None, protocol: str | None) -> LiveHandle | None:
    """Start the live follower for this process's sessions; returns a handle to close (None
    when the SDK is missing: recording goes on, and says once why nothing is sent)."""
    from blackbox.recorder.otel import start

    def notice(message: str) -> None:
        sys.stderr.write(f"blackbox: {message}\n")

    if not has_sdk():
        notice(f"--otel ignored: {NO_SDK}")
        return None

    return start(store_url, watermark_path(), endpoint, protocol, on_notice=notice)
