"""Span and metric data -> the official OpenTelemetry SDK -> OTLP, honouring the OTEL_* variables.

Why it exists: one place knows the SDK. Spans are encoded from the span data directly (their
times, ids and parents come from the record, which a tracer cannot be told) and sent through the
SDK's OTLP exporters in chunks; the two duration histograms are aggregated here with the
conventions' bucket boundaries and go out through the OTLP metric exporter. The exporter is
http/protobuf unless the user picks gRPC (`--protocol grpc` or
OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=grpc); endpoint, headers, timeout, compression, service name
and resource attributes come from the standard variables, which the SDK reads itself. A failed
export is reported, never raised: the caller keeps its watermark.
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from blackbox.recorder import BlackboxError, __version__
from blackbox.recorder.otel import CONVENTIONS, SCHEMA_URL, wire
from blackbox.recorder.otel.spans import (
    DURATION_BUCKETS,
    OPERATION_METRIC,
    SESSION_METRIC,
    SpanData,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope as PbScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

SERVICE_NAME = "mcp-blackbox"
CHUNK = 2000
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)
_SCOPE = InstrumentationScope("mcp-blackbox", __version__, SCHEMA_URL, {"conventions": CONVENTIONS})


class OtelConfigError(BlackboxError):
    """The OTLP settings cannot work (an unknown protocol)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where to send: `endpoint` as the user gave it (None: the OTEL_* variables decide)."""

    endpoint: str | None = None
    protocol: str | None = None
    timeout: float | None = None

    def chosen_protocol(self) -> str:
        value = (
            self.protocol
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        ).strip()
        if value not in ("http/protobuf", "grpc"):
            raise OtelConfigError(
                f"OTLP protocol {value!r} is not supported: http/protobuf or grpc"
            )
        return value


def resource() -> Resource:
    """The SDK's resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME), named mcp-blackbox
    when the user named nothing."""
    res = Resource.create({})
    name = res.attributes.get("service.name", "")
    if isinstance(name, str) and name.startswith("unknown_service"):
        res = res.merge(Resource({"service.name": SERVICE_NAME}))
    return res


def _signal_url(endpoint: str, signal: str) -> str:
    # Like OTEL_EXPORTER_OTLP_ENDPOINT: a base URL gets the signal's path; a full one is kept.
    if endpoint.rstrip("/").endswith(f"/v1/{signal}"):
        return endpoint
    return endpoint.rstrip("/") + f"/v1/{signal}"


def span_exporter(target: Target) -> SpanExporter:
    """The OTLP span exporter the target and environment ask for."""
    kwargs: dict = {}
    if target.timeout is not None:
        kwargs["timeout"] = target.timeout
    if target.chosen_protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as G

        return G(endpoint=target.endpoint, insecure=_insecure(target.endpoint), **kwargs)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as H

    if target.endpoint:
        kwargs["endpoint"] = _signal_url(target.endpoint, "traces")
    return H(**kwargs)


def metric_exporter(target: Target) -> MetricExporter:
    """The OTLP metric exporter the target and environment ask for."""
    kwargs: dict = {}
    if target.timeout is not None:
        kwargs["timeout"] = target.timeout
    if target.chosen_protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as G

        return G(endpoint=target.endpoint, insecure=_insecure(target.endpoint), **kwargs)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as H

    if target.endpoint:
        kwargs["endpoint"] = _signal_url(target.endpoint, "metrics")
    return H(**kwargs)


def _insecure(endpoint: str | None) -> bool | None:
    if endpoint is None:
        return None
    return endpoint.startswith("http://")


def readable(span: SpanData, res: Resource) -> ReadableSpan:
    """A `ReadableSpan` for the exporter, built directly (no tracer: the times are the
    record's)."""
    state = TraceState.from_header([span.tracestate]) if span.tracestate else None
    context = SpanContext(span.trace_id, span.span_id, False, _SAMPLED, state)
    parent = None
    if span.parent_id is not None:
        parent = SpanContext(span.trace_id, span.parent_id, span.remote_parent, _SAMPLED, state)
    status = _UNSET
    if span.error:
        status = Status(StatusCode.ERROR, span.status_message)
    events = [Event(name, attrs, ts) for name, ts, attrs in span.events] if span.events else ()
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=res,
        attributes=span.attributes,
        events=events,
        kind=SpanKind.CLIENT,
        instrumentation_scope=_SCOPE,
        status=status,
        start_time=span.start_ns,
        end_time=span.end_ns,
    )


def _value(value: object) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


_KV_CACHE: dict[tuple[str, object], KeyValue] = {}
_KV_CACHE_MAX = 50_000
_UNIQUE = frozenset({"mcp_blackbox.position", "mcp_blackbox.seq", "jsonrpc.request.id"})


def _attributes(attrs: dict) -> list[KeyValue]:
    # Most attribute pairs repeat from span to span (method, tool, transport, version, session):
    # a cached KeyValue is copied by the protobuf runtime in C, far cheaper than building one.
    out = []
    cache = _KV_CACHE
    for k, v in attrs.items():
        if k in _UNIQUE:
            out.append(KeyValue(key=k, value=_value(v)))
            continue
        key = (k, v if not isinstance(v, bool) else ("bool", v))
        kv = cache.get(key)
        if kv is None:
            kv = KeyValue(key=k, value=_value(v))
            if len(cache) < _KV_CACHE_MAX:
                cache[key] = kv
        out.append(kv)
    return out


def _scope() -> PbScope:
    return PbScope(
        name=_SCOPE.name,
        version=_SCOPE.version or "",
        attributes=_attributes(dict(_SCOPE.attributes or {})),
    )


def encode(spans: Sequence[SpanData], res: Resource) -> ExportTraceServiceRequest:
    """The OTLP request for `spans` as protobuf message objects: the reference `wire` is tested
    against (the export sends `wire`'s bytes, several times faster to build)."""
    out = []
    client = PbSpan.SPAN_KIND_CLIENT
    for s in spans:
        flags = 0x100 | (0x200 if s.remote_parent else 0) | 0x01
        pb = PbSpan(
            trace_id=s.trace_id.to_bytes(16, "big"),
            span_id=s.span_id.to_bytes(8, "big"),
            parent_span_id=s.parent_id.to_bytes(8, "big") if s.parent_id is not None else b"",
            trace_state=s.tracestate or "",
            name=s.name,
            kind=client,
            flags=flags,
            start_time_unix_nano=s.start_ns,
            end_time_unix_nano=s.end_ns,
            attributes=_attributes(s.attributes),
        )
        if s.error:
            pb.status.code = PbStatus.STATUS_CODE_ERROR
            if s.status_message:
                pb.status.message = s.status_message
        for name, ts, attrs in s.events:
            pb.events.append(
                PbSpan.Event(time_unix_nano=ts, name=name, attributes=_attributes(attrs))
            )
        out.append(pb)
    scope = ScopeSpans(scope=_scope(), schema_url=SCHEMA_URL, spans=out)
    resource_spans = ResourceSpans(
        resource=PbResource(attributes=_attributes(dict(res.attributes))),
        scope_spans=[scope],
        schema_url=res.schema_url or "",
    )
    return ExportTraceServiceRequest(resource_spans=[resource_spans])


class Sender:
    """Sends span data and its histograms through one exporter pair. `send` returns how many
    spans went out (stopping at the first chunk the collector did not take); `close` flushes the
    metrics of everything that went out."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.resource = resource()
        self.spans = span_exporter(target)
        self._metrics = metric_exporter(target)
        self._histograms = Histograms()
        self._envelope: tuple[bytes, bytes] | None = None
        self.failure: str | None = None
        self.metrics_ok = True

    def send(self, spans: Sequence[SpanData], chunk: int = CHUNK) -> int:
        sent = 0
        for start in range(0, len(spans), chunk):
            part = spans[start : start + chunk]
            try:
                result = self._export(part)
            except Exception as exc:  # an exporter bug or a network error it did not catch
                result, self.failure = SpanExportResult.FAILURE, str(exc)
            if result is not SpanExportResult.SUCCESS:
                self.failure = self.failure or "the collector did not accept the spans"
                break
            self.measure(part)
            sent += len(part)
        return sent

    def _encode(self, part: Sequence[SpanData]) -> bytes:
        if self._envelope is None:
            resource = PbResource(attributes=_attributes(dict(self.resource.attributes)))
            self._envelope = (resource.SerializeToString(), _scope().SerializeToString())
        res, scope = self._envelope
        return wire.request_bytes(part, res, scope, SCHEMA_URL, self.resource.schema_url or "")

    def _export(self, part: Sequence[SpanData]) -> SpanExportResult:
        # The http/protobuf exporter's transport (endpoint, headers, compression, retries with
        # backoff) takes the encoded body; other exporters get ReadableSpans and encode them.
        client = getattr(self.spans, "_client", None)
        if client is not None and hasattr(client, "export"):
            if getattr(self.spans, "_shutdown", False):
                return SpanExportResult.FAILURE
            body = self._encode(part)
            outcome = client.export(body)
            if getattr(outcome, "success", False):
                return SpanExportResult.SUCCESS
            error = getattr(outcome, "error", None)
            self.failure = str(error) if error else "the collector did not accept the spans"
            return SpanExportResult.FAILURE
        return self.spans.export([readable(s, self.resource) for s in part])

    def measure(self, spans: Iterable[SpanData]) -> None:
        add = self._histograms.add
        for span in spans:
            add(*span.metric_point())

    def flush_metrics(self, timeout_ms: int = 10_000) -> bool:
        """Send the histograms of what went out since the last flush (delta temporality)."""
        data = self._histograms.take(self.resource)
        if data is None:
            return True
        try:
            result = self._metrics.export(data, timeout_millis=timeout_ms)
        except Exception:
            result = None
        ok = result is MetricExportResult.SUCCESS
        self.metrics_ok = self.metrics_ok and ok
        return ok

    def close(self, timeout_ms: int = 10_000) -> None:
        """Flush the histograms, then shut the exporters down."""
        self.flush_metrics(timeout_ms)
        with _quiet():
            self._metrics.shutdown()
            self.spans.shutdown()


class Histograms:
    """The two duration histograms, aggregated here with the conventions' boundaries and handed
    to the OTLP metric exporter as delta points.

    Not the SDK's instruments: each of their measurements cleans attributes, takes locks and
    matches views, a large share of a span's whole export; this is one bisect and a dict lookup.
    Delta temporality fits a batch: each export sends the durations it recorded, once."""

    def __init__(self) -> None:
        self._points: dict[tuple[str, tuple], list] = {}
        self._start = time.time_ns()

    def add(self, name: str, seconds: float, attrs: dict) -> None:
        key = (name, tuple(sorted(attrs.items())))
        point = self._points.get(key)
        if point is None:
            # count, sum, min, max, bucket counts
            point = self._points[key] = [
                0,
                0.0,
                seconds,
                seconds,
                [0] * (len(DURATION_BUCKETS) + 1),
            ]
        point[0] += 1
        point[1] += seconds
        point[2] = min(point[2], seconds)
        point[3] = max(point[3], seconds)
        point[4][bisect_left(DURATION_BUCKETS, seconds)] += 1

    def take(self, res: Resource) -> MetricsData | None:
        if not self._points:
            return None
        now = time.time_ns()
        by_name: dict[str, list[HistogramDataPoint]] = {}
        for (name, attrs), (count, total, low, high, buckets) in self._points.items():
            by_name.setdefault(name, []).append(
                HistogramDataPoint(
                    attributes=dict(attrs),
                    start_time_unix_nano=self._start,
                    time_unix_nano=now,
                    count=count,
                    sum=total,
                    bucket_counts=buckets,
                    explicit_bounds=[float(b) for b in DURATION_BUCKETS],
                    min=low,
                    max=high,
                )
            )
        self._points, self._start = {}, now
        metrics = [
            Metric(
                name=name,
                description=_DESCRIPTIONS[name],
                unit="s",
                data=Histogram(points, AggregationTemporality.DELTA),
            )
            for name, points in by_name.items()
        ]
        scope = ScopeMetrics(scope=_SCOPE, metrics=metrics, schema_url=SCHEMA_URL)
        return MetricsData(
            [ResourceMetrics(resource=res, scope_metrics=[scope], schema_url=res.schema_url)]
        )


_DESCRIPTIONS = {
    OPERATION_METRIC: "Duration of an MCP request, as recorded on the wire.",
    SESSION_METRIC: "Duration of an MCP session, as recorded.",
}


class _quiet:
    """Silence the exporters' own logging while shutting down (a dead collector is reported
    once by us, not as a traceback per retry)."""

    def __enter__(self) -> None:
        self._level = logging.getLogger("opentelemetry").level
        logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)

    def __exit__(self, *_exc: object) -> None:
        logging.getLogger("opentelemetry").setLevel(self._level)
