"""Batch export: what the store holds and no collector has been sent yet goes out as OTLP.

Why it exists: `blackbox otel export` is how a fleet's recordings reach the team's Collector on a
schedule, and how whatever the live follower could not deliver (a collector down) still gets
there. It scans the log from the watermark's position, reads the earlier records of a session
that straddles it (so a response pairs with its request), builds spans (`spans.py`), drops those
already sent (per session, by seq), sends the rest in log order and advances the watermark only
over what the collector accepted. Running it twice sends nothing twice; `resend_all` ignores the
watermark.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from blackbox.recorder.otel.sdk import Sender, Target
from blackbox.recorder.otel.spans import OK_OUTCOMES, Options, SessionSpans, SpanData
from blackbox.recorder.otel.watermark import Watermark
from blackbox.recorder.store import EventStore

# StoredEvent field order, as read_log_rows gives it.
_POS, _SID, _SEQ, _WALL, _KIND, _DIR, _RAW, _DERIVED = 0, 1, 2, 3, 5, 6, 7, 9
SEND_EVERY = 5000


@dataclass
class ExportReport:
    """What an export did. `failure` is the collector's complaint when it stopped early."""

    spans: int = 0
    sessions: int = 0
    skipped: int = 0
    failure: str | None = None
    seconds: float = 0.0
    metrics_ok: bool = True
    sent_by_session: dict[str, int] = field(default_factory=dict)


def build_spans(
    store: EventStore,
    after_position: int = 0,
    session_id: str | None = None,
    options: Options | None = None,
    end_position: int | None = None,
) -> Iterator[SpanData]:
    """Spans completed by records past `after_position` (up to `end_position`), in log order;
    one session's only when `session_id` is given."""
    builders: dict[str, SessionSpans] = {}
    ended: set[str] = set()
    if session_id is not None:
        only = SessionSpans(session_id, options)
        for ev in store.read_session(session_id):
            only.add(ev.position, ev.seq, ev.wall_ns, ev.kind, ev.direction, ev.raw)
            if only.done:
                yield from only.take()
        return
    end = store.max_position() if end_position is None else end_position
    for batch in store.read_log_rows(after_position):
        for row in batch:
            if row[_POS] > end:
                return
            sid = row[_SID]
            builder = builders.get(sid)
            if builder is None:
                if sid in ended:
                    continue  # its seal, after session_ended
                builder = builders[sid] = SessionSpans(sid, options)
                if row[_SEQ] > 1:
                    # The session began before the scan: its earlier records pair the answers.
                    for ev in store.read_session(sid):
                        if ev.seq >= row[_SEQ]:
                            break
                        builder.add(ev.position, ev.seq, ev.wall_ns, ev.kind, ev.direction, ev.raw)
                    builder.take()
            builder.add(row[_POS], row[_SEQ], row[_WALL], row[_KIND], row[_DIR], row[_RAW],
                        row[_DERIVED:])  # fmt: skip
            if builder.done:
                yield from builder.take()
            if builder.ended:
                ended.add(sid)
                del builders[sid]  # its records are done; memory stays flat over a long log


def with_counts(store: EventStore, spans: Iterable[SpanData]) -> Iterator[SpanData]:
    """`spans`, each session span carrying the session's counts and outcome as every surface
    shows them (`query.count_sessions`, `query.derived_outcome`), and failed when that outcome is
    a failure: the span builder sees one record at a time and would count on its own."""
    from blackbox.recorder.query import count_sessions, derived_outcome

    for span in spans:
        if span.is_session:
            info = store.session(span.session_id)
            counts = count_sessions(store, [span.session_id])[span.session_id]
            for name, value in counts.as_dict().items():
                span.attributes[f"mcp_blackbox.{name}"] = value
            outcome = derived_outcome(info, counts)
            span.attributes["mcp_blackbox.outcome"] = outcome
            # The span fails as the session did: a session that ended `ok` with error replies
            # is `errors`, the same outcome (and the same failure) as on every other surface.
            span.error = outcome not in OK_OUTCOMES
            if span.error:
                span.attributes["error.type"] = outcome
            else:
                span.attributes.pop("error.type", None)
                span.status_message = None
        yield span


def export(
    store: EventStore,
    watermark: Watermark,
    target: Target,
    since_ns: int | None = None,
    session_id: str | None = None,
    resend_all: bool = False,
    options: Options | None = None,
    progress: Callable[[int], None] | None = None,
    sender: Sender | None = None,
) -> ExportReport:
    """Send what has not been sent yet (everything with `resend_all`); see the module doc."""
    began = time.perf_counter()
    report = ExportReport()
    sent_before = {} if resend_all else watermark.sent()
    end = store.max_position()
    start = 0 if resend_all or session_id is not None else watermark.position()
    own = sender is None
    sender = sender or Sender(target)
    spans = with_counts(store, build_spans(store, start, session_id, options, end))
    sessions: set[str] = set()
    ok = True
    try:
        for chunk in _chunks(_fresh(spans, sent_before, since_ns, report), SEND_EVERY):
            sent = sender.send(chunk)
            for span in chunk[:sent]:
                report.sent_by_session[span.session_id] = max(
                    span.end_seq, report.sent_by_session.get(span.session_id, 0)
                )
                sessions.add(span.session_id)
            report.spans += sent
            if progress is not None:
                progress(report.spans)
            if sent < len(chunk):
                ok = False
                report.failure = sender.failure
                break
    finally:
        if own:
            sender.close()
            report.metrics_ok = sender.metrics_ok
        watermark.advance(
            report.sent_by_session, end if ok and session_id is None and since_ns is None else None
        )
    report.sessions = len(sessions)
    report.seconds = time.perf_counter() - began
    return report


def _fresh(
    spans: Iterable[SpanData], sent: dict[str, int], since_ns: int | None, report: ExportReport
) -> Iterator[SpanData]:
    for span in spans:
        if span.end_seq <= sent.get(span.session_id, 0):
            report.skipped += 1
            continue
        if since_ns is not None and span.end_ns < since_ns:
            continue
        yield span


def _chunks(spans: Iterable[SpanData], size: int) -> Iterator[list[SpanData]]:
    chunk: list[SpanData] = []
    for span in spans:
        chunk.append(span)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
