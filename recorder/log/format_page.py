"""docs/log-format.md, rendered from the schema in `blackbox.recorder.log.events`.

Why it exists apart: the schema module is read by every producer and reader, and the prose of the
written schema is for auditors; `python -m blackbox.recorder.log.events > docs/log-format.md` writes
it, and a test checks that the committed page is what the code says.
"""

from __future__ import annotations

from collections.abc import Iterator

from blackbox.recorder.log.events import DOCUMENTS, UPGRADES, fields_of


def _markdown() -> Iterator[str]:
    yield "# The log format"
    yield ""
    yield (
        "<!-- Generated from recorder/log/events.py by"
        " `python -m blackbox.recorder.log.events`; do not edit. -->"
    )
    yield ""
    yield (
        "Every record of the log has a global position, a session id, a per-session gapless `seq`,"
        " the wall clock time (UTC, ns), a monotonic offset within the session (ns), a kind, a"
        " direction (`c2s`, `s2c`, or `-` for session events), `raw` bytes, `raw_size` (the size"
        " on the wire when `raw` holds only a prefix), fields derived from `raw`, and its link in"
        " the session's hash chain."
    )
    yield ""
    yield (
        "A `frame` record's `raw` is exactly the bytes of one JSON-RPC message as it crossed the"
        " wire, unparsed and unchanged. Every other kind's `raw` is a compact UTF-8 JSON object,"
        " the kind's document, described below. Every document written by this version carries"
        ' its schema version as `"v"`; a document without `"v"` is version 0 (written before'
        " the schema) and is read through the upgrade steps in `recorder/log/events.py`. Keys"
        " beyond a kind's fields are kept as the producer wrote them (evidence, settings)."
    )
    yield ""
    yield (
        "Field marks: **required** — a document without it does not decode; *optional* — left out"
        " when it has no value."
    )
    yield from _guarantee()
    for cls in DOCUMENTS.values():
        yield ""
        yield f"## `{cls.KIND}` (version {cls.VERSION})"
        yield ""
        yield " ".join(line.strip() for line in (cls.__doc__ or "").strip().splitlines())
        yield ""
        yield "| field | type | | meaning |"
        yield "|---|---|---|---|"
        for spec in fields_of(cls.KIND):
            mark = "**required**" if spec.required else "*optional*" if spec.optional else ""
            yield f"| `{spec.name}` | {spec.annotation} | {mark} | {spec.doc} |"
        upgrades = sorted(UPGRADES.get(cls.KIND, {}))
        if upgrades:
            yield ""
            yield "Upgrade steps from versions: " + ", ".join(str(n) for n in upgrades) + "."


def _guarantee() -> Iterator[str]:
    yield ""
    yield "## The raw bytes are the record"
    yield ""
    yield (
        "Every line a tap forwards is stored, byte for byte, on SQLite and PostgreSQL alike,"
        " whatever it holds: lone surrogate escapes, `\\u0000` in strings, numbers beyond a"
        " double, duplicate keys, invalid UTF-8, any depth of nesting, a byte order mark, CRLF"
        " endings, lines that are not JSON. The chain hash and the Merkle leaf are computed over"
        " what the producer wrote (session, kind, direction, times, `raw` and its wire size), never"
        " over a derived value, so nothing"
        " a database does to a derived value changes what is proved."
    )
    yield ""
    yield (
        "The derived fields are best effort: `msg_type`, `method`, `rpc_id`, `rpc_id_type`,"
        " `tool`, `is_error`, `error_code`, `era` and `degraded`, recomputed from `raw` by"
        " `blackbox verify` and `blackbox verify-export`. A value no database can hold is fitted"
        " before it is stored: NUL and lone surrogates in text become U+FFFD, an error code"
        " outside signed 64 bits and an era longer than 16 characters are NULL. `degraded` then"
        " names each fitted value as `column:why`, comma-separated: `method:surrogate`,"
        " `rpc_id:nul`, `tool:nul+surrogate`, `error_code:out_of_range`, `era:too_long`. It is NULL"
        " when nothing was fitted, and in records written before the column existed."
    )
    yield ""
    yield (
        "When a store refuses a record anyway, the shipper stores the rest of its batch and puts"
        " a `fault` record with `fault` `store_refused` at the refused record's `seq` (so the"
        " session's chain has no gap), holding the refused bytes as `raw_base64` and the store's"
        " reason; `blackbox ship` names it on a `degraded:` line. A record not even that fault"
        " can hold is written to a private file under the journal folder's `refused/`, which"
        " `blackbox where` and `blackbox doctor` report."
    )


def schema_markdown() -> str:
    """docs/log-format.md as this module states it."""
    return "\n".join(_markdown()) + "\n"
