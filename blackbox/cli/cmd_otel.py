"""Commands of the OpenTelemetry area: `blackbox otel export`, and the `--otel` options the tap
commands share (`otel_options`, `start_live`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from blackbox.cli.options import (
    Moment,
    moment_ns,
    open_configured_store,
    rules_file_option,
    store_option,
)
from blackbox.cli.otel_options import (
    endpoint_option,
    protocol_option,
    require_sdk,
    watermark_path,
)

if TYPE_CHECKING:
    pass


@click.group()
def otel() -> None:
    """Send recorded calls to an OpenTelemetry collector as spans and metrics (MCP semantic
    conventions).

    \b
    Example:
      blackbox otel export --since 7d --endpoint http://collector:4318
    """


@otel.command("export")
@store_option
@click.option("--since", type=Moment(), help="Only calls that ended since: 7d, 12h or a date.")
@click.option("--session", "session_ref", metavar="ID", help="Only this session (prefix, last).")
@endpoint_option
@protocol_option
@click.option("--all", "resend_all", is_flag=True, help="Resend what was sent before.")
@click.option(
    "--content",
    is_flag=True,
    help="Include tool arguments and results (redacted with the default rules): opt-in.",
)
@rules_file_option("Redaction rules (TOML) for --content instead of the default ones.")
def export_command(
    store_url: str | None,
    since: str | None,
    session_ref: str | None,
    endpoint: str | None,
    protocol: str | None,
    resend_all: bool,
    content: bool,
    redact_file: Path | None,
) -> None:
    """Send the calls not sent yet as OTLP spans and duration histograms. A watermark in the
    data directory makes a second run send nothing twice; --all resends.

    Endpoint, headers, timeout, service name and resource attributes follow the standard
    OTEL_EXPORTER_OTLP_* / OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES variables.

    \b
    Example:
      blackbox otel export --since 7d
      OTEL_EXPORTER_OTLP_HEADERS=x-api-key=... blackbox otel export --endpoint https://otlp.example
    """
    require_sdk()
    from blackbox.recorder.otel import Options, Target, Watermark, export
    from blackbox.recorder.privacy import Redactor

    redactor = Redactor.load(redact_file) if redact_file is not None else None
    # The exporters log each retry; the one line below says what matters.
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    since_ns = moment_ns(since) if since else None
    store = open_configured_store(store_url)
    try:
        sid = store.resolve(session_ref) if session_ref else None
        target = Target(endpoint, protocol)
        target.chosen_protocol()
        report = export(
            store,
            Watermark(watermark_path(), store.url),
            target,
            since_ns=since_ns,
            session_id=sid,
            resend_all=resend_all,
            options=Options(capture_content=content, redactor=redactor),
        )
    finally:
        store.close()
    rate = report.spans / report.seconds if report.seconds else 0.0
    click.echo(
        f"sent {report.spans} spans from {report.sessions} session(s) in {report.seconds:.2f}s"
        f" ({rate:,.0f}/s); {report.skipped} already sent"
    )
    if report.failure:
        raise click.ClickException(
            f"the collector stopped taking spans ({report.failure}); what was not sent goes"
            " with the next export"
        )


COMMANDS = [otel]
