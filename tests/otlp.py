"""A real OTLP/HTTP receiver for tests: POST /v1/traces and /v1/metrics with protobuf bodies
(gzip or not), decoded with `opentelemetry-proto`, kept in memory for the assertions. No
Collector binary is reachable here, and a receiver inside the test checks what actually went over
the wire rather than what an exporter was handed. `BlackHole` is a collector that accepts the
connection and never answers: the worst a dead collector can do to a sender."""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Receiver:
    """Start with `with Receiver() as r:`; `r.url` is the base endpoint."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver.lock:
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path == "/v1/traces":
                    request: Any = ExportTraceServiceRequest.FromString(body)
                    answer = ExportTraceServiceResponse().SerializeToString()
                    with receiver.lock:
                        receiver.traces.append(request)
                elif self.path == "/v1/metrics":
                    request = ExportMetricsServiceRequest.FromString(body)
                    answer = ExportMetricsServiceResponse().SerializeToString()
                    with receiver.lock:
                        receiver.metrics.append(request)
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[tuple[Any, Any, Any]]:
        """(resource, scope, span) of every span received, in arrival order."""
        with self.lock:
            requests = list(self.traces)
        return [
            (rs.resource, ss.scope, span)
            for req in requests
            for rs in req.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]

    def metric_points(self) -> Iterator[tuple[str, str, Any]]:
        """(metric name, unit, histogram data point) of every histogram point received."""
        with self.lock:
            requests = list(self.metrics)
        for req in requests:
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        for point in metric.histogram.data_points:
                            yield metric.name, metric.unit, point


def attrs(item: Any) -> dict[str, Any]:
    """A span's (or point's, or event's) attributes as a plain dict."""
    out: dict[str, Any] = {}
    for kv in item.attributes:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


class BlackHole:
    """A collector that takes connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)

    def __enter__(self) -> BlackHole:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop = True
        self.thread.join(2)
        for conn in self.held:
            conn.close()
        self.sock.close()


class GrpcReceiver(Receiver):
    """The same receiver over OTLP/gRPC (TraceService and MetricsService on one port)."""

    def __init__(self) -> None:
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as mg
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tg

        self.traces = []
        self.metrics = []
        self.headers = []
        self.lock = threading.Lock()
        receiver = self

        class Traces(tg.TraceServiceServicer):
            def Export(self, request, context):  # type: ignore[no-untyped-def]
                with receiver.lock:
                    receiver.traces.append(request)
                return ExportTraceServiceResponse()

        class Metrics(mg.MetricsServiceServicer):
            def Export(self, request, context):  # type: ignore[no-untyped-def]
                with receiver.lock:
                    receiver.metrics.append(request)
                return ExportMetricsServiceResponse()

        self.grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        tg.add_TraceServiceServicer_to_server(Traces(), self.grpc_server)
        mg.add_MetricsServiceServicer_to_server(Metrics(), self.grpc_server)
        port = self.grpc_server.add_insecure_port("127.0.0.1:0")
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> GrpcReceiver:
        self.grpc_server.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.grpc_server.stop(0)
