"""Render rows as table, json, jsonl or csv: every listing command shares this."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

FORMATS = ("table", "json", "jsonl", "csv")


def render(rows: Sequence[dict], fmt: str, columns: Sequence[str] | None = None) -> str:
    """Rows (dicts sharing keys) in the given format, as one string without a trailing newline."""
    cols = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    if fmt == "json":
        return json.dumps([{c: r.get(c) for c in cols} for r in rows], indent=2, default=str)
    if fmt == "jsonl":
        return "\n".join(json.dumps({c: r.get(c) for c in cols}, default=str) for r in rows)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue().rstrip("\n")
    return _table(rows, cols)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _table(rows: Sequence[dict], cols: list[str]) -> str:
    if not rows:
        return "(no rows)"
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
    return "\n".join(lines)
