"""OpenTelemetry export: recorded MCP calls become spans and metrics under the MCP conventions.

Why it exists: teams watch latency in the traces and metrics they already run (a Collector feeding
Jaeger, Tempo, Grafana); the recorder sees every call of any host and server with exact timing, so
it can produce the conventions' spans without instrumenting either side.

Conventions followed, pinned: the OpenTelemetry GenAI semantic conventions, page
`docs/gen-ai/mcp.md` of `open-telemetry/semantic-conventions-genai` at commit 0393513c908b,
status Development. `CONVENTIONS` names it on every exported scope.

- `spans.py`   the pure part: a session's records -> span and metric data (no SDK import);
- `sdk.py`     that data -> the official SDK's ReadableSpan and histograms -> OTLP exporters;
- `watermark.py` what was sent already, so no span is sent twice;
- `export.py`  batch export from the store; `live.py` the follower that sends as calls complete.
"""

CONVENTIONS = "semantic-conventions-genai@0393513 docs/gen-ai/mcp.md (Development)"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.0"
