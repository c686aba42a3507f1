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

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING  # noqa: E402

from blackbox.recorder import lazy_face as _lazy_face  # noqa: E402

if _TYPE_CHECKING:
    from blackbox.recorder.otel.batch import export as export
    from blackbox.recorder.otel.live import LiveHandle as LiveHandle
    from blackbox.recorder.otel.live import start as start
    from blackbox.recorder.otel.sdk import Target as Target
    from blackbox.recorder.otel.spans import Options as Options
    from blackbox.recorder.otel.watermark import Watermark as Watermark

_FACE: dict[str, tuple[str, str | None]] = {
    "LiveHandle": ("blackbox.recorder.otel.live", "LiveHandle"),
    "Options": ("blackbox.recorder.otel.spans", "Options"),
    "Target": ("blackbox.recorder.otel.sdk", "Target"),
    "Watermark": ("blackbox.recorder.otel.watermark", "Watermark"),
    "export": ("blackbox.recorder.otel.batch", "export"),
    "start": ("blackbox.recorder.otel.live", "start"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---
