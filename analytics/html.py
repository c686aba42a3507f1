"""`blackbox report --html`: one self-contained page (inline CSS and SVG, no script, no CDN) that
opens offline in any browser: the report's tables and three charts — latency distribution per
tool, error rate over time, decisions by tool."""

from __future__ import annotations

import html
import math
from datetime import UTC, datetime

from blackbox.analytics.reports import Report

W = 720
PALETTE = {
    "allow": "#2e7d32",
    "approved": "#66bb6a",
    "deny": "#c62828",
    "denied": "#ef5350",
    "ask": "#f9a825",
}
OTHER = ["#5c6bc0", "#8d6e63", "#26a69a", "#ab47bc", "#78909c"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222;
max-width:960px}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.85rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
svg.chart{display:block;margin:.5rem 0 1rem;background:#fafafa;border:1px solid #eee}
svg text{font-size:11px;fill:#333}.muted{color:#777;font-size:.85rem}
.scroll{overflow-x:auto}
"""

# Text is sized from its length (11 px system-ui measured 5.4 px a character in Chromium; 6.2
# leaves room for wider fonts), so a label column is as wide as its longest name: a long tool
# name is never cut by the SVG's edge. The plot gives up width to it, down to MIN_PLOT_W, so
# the chart fits the page's 960 px.
CHAR_W = 6.2
PLOT_W = 540
MIN_PLOT_W = 360
PAGE_W = 920


def _text_w(text: str) -> float:
    return CHAR_W * len(text)


def _label_w(names: list[str]) -> int:
    return int(max(150.0, max((_text_w(n) for n in names), default=0) + 16))


def _step(slot_w: float, label_w: float) -> int:
    """Every how many slots an axis label fits without running into the next one."""
    return max(1, math.ceil((label_w + 8) / max(slot_w, 0.1)))


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _ms_label(bucket: int) -> str:
    value = 2.0**bucket
    if value >= 1000:
        return f"{value / 1000:g}s"
    if value >= 1:
        return f"{value:g}ms"
    return f"{value * 1000:g}µs"


def latency_chart(hist: dict[str, dict[int, int]], total_tools: int | None = None) -> str:
    """Small multiples: one histogram row per tool over shared log2 latency buckets; when only
    the busiest tools are drawn, a line says how many of how many."""
    if not hist:
        return _empty("latency", "no answered tool calls")
    buckets = sorted({b for counts in hist.values() for b in counts})
    lo, hi = buckets[0], buckets[-1]
    span = list(range(lo, hi + 1))
    label_w, top = _label_w(list(hist)), 10
    row_h = 46 if len(hist) <= 10 else 26
    plot_w = max(MIN_PLOT_W, min(PLOT_W, PAGE_W - label_w - 20))
    width = label_w + plot_w + 20
    bar_w = plot_w / len(span)
    height = top + row_h * len(hist) + 24
    parts = []
    if total_tools is not None and total_tools > len(hist):
        parts.append(
            f'<p class="muted" id="latency-cut">the {len(hist)} busiest of {total_tools} tools '
            "are drawn; the table below has every tool</p>"
        )
    parts.append(
        f'<div class="scroll"><svg class="chart" id="chart-latency" data-chart="latency" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="latency distribution per tool">'
    )
    for row, (tool, counts) in enumerate(hist.items()):
        y0 = top + row * row_h
        peak = max(counts.values())
        parts.append(
            f'<text x="{label_w - 8}" y="{y0 + row_h / 2}" text-anchor="end">{_e(tool)}</text>'
        )
        for i, bucket in enumerate(span):
            n = counts.get(bucket, 0)
            if not n:
                continue
            h = max(1.0, (row_h - 8) * n / peak)
            x = label_w + i * bar_w
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{y0 + row_h - 4 - h:.1f}" '
                f'width="{max(bar_w - 1, 1):.1f}" height="{h:.1f}" fill="#5c6bc0">'
                f"<title>{_e(tool)}: {n} calls in [{_ms_label(bucket)}, "
                f"{_ms_label(bucket + 1)})</title></rect>"
            )
    axis_y = top + row_h * len(hist) + 14
    widest = max(_text_w(_ms_label(b)) for b in span)
    for i in range(0, len(span), _step(bar_w, widest)):
        parts.append(
            f'<text class="axis" x="{label_w + i * bar_w:.1f}" y="{axis_y}">'
            f"{_ms_label(span[i])}</text>"
        )
    parts.append("</svg></div>")
    return "".join(parts)


def error_rate_chart(daily: list[dict]) -> str:
    """One bar per day: the share of calls that did not end `ok`."""
    if not daily:
        return _empty("errors", "no calls")
    height, left, bottom, top = 220, 50, 30, 12
    plot_w, plot_h = W - left - 20, height - top - bottom
    peak = max(max(row["error_rate"] or 0 for row in daily), 0.01)
    bar_w = plot_w / len(daily)
    parts = [
        f'<svg class="chart" id="chart-errors" data-chart="errors" width="{W}" height="{height}" '
        f'viewBox="0 0 {W} {height}" role="img" aria-label="error rate over time">',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{W - 20}" y2="{top + plot_h}" stroke="#999"/>',
        f'<text x="4" y="{top + 8}">{peak:.0%}</text>',
        f'<text x="4" y="{top + plot_h}">0%</text>',
    ]
    step = _step(bar_w, max(_text_w(str(row["day"])) for row in daily))
    for i, row in enumerate(daily):
        rate = row["error_rate"] or 0
        h = plot_h * rate / peak
        x = left + i * bar_w
        parts.append(
            f'<rect class="bar" x="{x + 1:.1f}" y="{top + plot_h - h:.1f}" '
            f'width="{max(bar_w - 2, 1):.1f}" height="{h:.1f}" fill="#c62828">'
            f"<title>{_e(row['day'])}: {rate:.1%} of {row['calls']} calls failed</title></rect>"
        )
        if i % step == 0:
            # The last labels end at the chart's edge rather than run past it.
            tx = min(x + 1, W - 4 - _text_w(str(row["day"])))
            parts.append(
                f'<text class="axis" x="{tx:.1f}" y="{height - 10}">{_e(row["day"])}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def decisions_chart(decisions: dict[str, dict[str, int]]) -> str:
    """One stacked horizontal bar per tool, a segment per verdict."""
    if not decisions:
        return _empty("decisions", "no permission decisions recorded")
    verdicts = sorted({v for counts in decisions.values() for v in counts})
    colours = {v: PALETTE.get(v, OTHER[i % len(OTHER)]) for i, v in enumerate(verdicts)}
    label_w, row_h, top = _label_w(list(decisions)), 22, 28
    plot_w = max(MIN_PLOT_W, min(PLOT_W, PAGE_W - label_w - 60))
    width = label_w + plot_w + 60
    peak = max(sum(c.values()) for c in decisions.values())
    height = top + row_h * len(decisions) + 10
    parts = [
        f'<div class="scroll"><svg class="chart" id="chart-decisions" data-chart="decisions" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="decisions by tool">'
    ]
    x_legend = float(label_w)
    for verdict in verdicts:
        parts.append(
            f'<rect x="{x_legend:.1f}" y="6" width="10" height="10" fill="{colours[verdict]}"/>'
            f'<text class="legend" x="{x_legend + 14:.1f}" y="15">{_e(verdict)}</text>'
        )
        x_legend += 14 + _text_w(verdict) + 16
    for row, (tool, counts) in enumerate(decisions.items()):
        y = top + row * row_h
        parts.append(f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end">{_e(tool)}</text>')
        x = float(label_w)
        for verdict in verdicts:
            n = counts.get(verdict, 0)
            if not n:
                continue
            w = plot_w * n / peak
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 6}" '
                f'fill="{colours[verdict]}"><title>{_e(tool)}: {n} {_e(verdict)}</title></rect>'
            )
            x += w
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 14}">{sum(counts.values())}</text>')
    parts.append("</svg></div>")
    return "".join(parts)


def _empty(name: str, text: str) -> str:
    return (
        f'<svg class="chart" id="chart-{name}" data-chart="{name}" data-empty="1" width="{W}" '
        f'height="40" viewBox="0 0 {W} 40"><text x="10" y="25">{_e(text)}</text></svg>'
    )


def _table(columns: list[str], rows: list[dict]) -> str:
    if not rows:
        return '<p class="muted">(no rows)</p>'
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            value = row.get(c)
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            text = f"{value:.4g}" if isinstance(value, float) else value
            cells.append(f'<td class="n">{_e(text)}</td>' if numeric else f"<td>{_e(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render(report: Report, store_label: str = "") -> str:
    """The page for a report computed with `with_charts=True`."""
    charts = report.charts or {}
    f = report.filters
    scope = [
        f"{label} {value}"
        for label, value in (
            ("since", _iso(f.since_ns)),
            ("until", _iso(f.until_ns)),
            ("session", f.session),
            ("server", f.server),
        )
        if value
    ]
    sections = "".join(
        f"<h2>{_e(s.title)}</h2>{_table(s.columns, s.rows)}" for s in report.sections
    )
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>mcp-blackbox {_e(report.kind)} report</title><style>{CSS}</style></head><body>"
        f"<h1>mcp-blackbox — {_e(report.kind)} report by {_e(report.by)}</h1>"
        f'<p class="muted">{_e(store_label)} · generated {generated}'
        f"{' · ' + _e(', '.join(scope)) if scope else ''}</p>"
        "<h2>Latency distribution per tool</h2>"
        + latency_chart(charts.get("latency_hist", {}), charts.get("latency_tools"))
        + "<h2>Error rate over time</h2>"
        + error_rate_chart(charts.get("error_rate", []))
        + "<h2>Decisions by tool</h2>"
        + decisions_chart(charts.get("decisions", {}))
        + sections
        + "</body></html>\n"
    )


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat(timespec="seconds")
