"""A short one-line text of a record's raw bytes, for evidence and listings.

The doctor quotes it as evidence and `blackbox show` as its excerpt column. It is part of the read
model, so that the doctor need not import the CLI and the CLI need not import the doctor (and with
it pyarrow) to list a timeline.
"""

from __future__ import annotations

EXCERPT = 80


def excerpt(raw: bytes, width: int = EXCERPT) -> str:
    """The first `width` characters of `raw` as text, newlines shown as `\\n`, cut with `…`."""
    text = raw[: width * 4].decode("utf-8", errors="replace").replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"
