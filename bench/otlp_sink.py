"""The OTLP/HTTP endpoint the OTel benchmark sends to: it reads and parses every request, like a
collector would, and keeps nothing. Run as a script, it prints its URL and serves until killed.

The benchmarks import nothing from tests/: the test suite's receiver keeps what it decodes for
assertions, this one only has to cost what a collector's intake costs.
"""

from __future__ import annotations

import gzip
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ANSWERS = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
}


class Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path not in ANSWERS:
            self.send_response(404)
            self.end_headers()
            return
        request, response = ANSWERS[self.path]
        request.FromString(body)
        answer = response().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_args: object) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
