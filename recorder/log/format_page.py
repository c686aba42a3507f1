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
    yield from _rules()


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
        " when nothing was fitted, and in records written before the column existed. The exact"
        " rules, and those of the `sessions` row, are in [Derived fields and the sessions"
        " projection, as rules](#derived-fields-and-the-sessions-projection-as-rules)."
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


def _rules() -> Iterator[str]:
    """The derivation rules: what `verify` and `verify-export` recompute, stated so that a
    third party can (tests/test_independent_derivation.py holds an implementation written from
    them alone to the code)."""
    yield ""
    yield "## Derived fields and the sessions projection, as rules"
    yield ""
    yield (
        "A record's derived fields and its session's row in `sessions` are functions of the"
        " records alone, and these rules give them exactly. `blackbox verify` recomputes both:"
        " a record whose stored fields differ is a `derived` finding, a `sessions` row that"
        " differs a `projection` finding. `blackbox verify-export` recomputes the derived"
        " fields of every unredacted record of a bundle (`field_modified`) and checks the"
        " bundle's sessions file against its manifest (`sessions_mismatch`)."
        " `tests/test_independent_derivation.py` holds an implementation written from this"
        " section alone (`tests/fixtures/independent_derivation.py`) to the code: on every"
        " record of the stores earlier versions wrote, on the test suite's hostile frames and"
        " on synthetic sessions of both eras."
    )
    yield ""
    yield "### Reading JSON"
    yield ""
    yield (
        "A record's `raw` is read as JSON in one of two ways. Both keep the last value of a key"
        " an object holds twice."
    )
    yield ""
    yield (
        "The **strict reading** accepts a JSON text (RFC 8259) in UTF-8 with JSON whitespace"
        " (space, tab, LF, CR) around it. It refuses bytes that are not UTF-8, a byte order"
        " mark, `NaN`, `Infinity` and `-Infinity`, arrays and objects nested more than 1024"
        " deep, a `\\u` escape of a lone surrogate (a high surrogate `\\ud800`–`\\udbff` not"
        " followed by an escaped low one `\\udc00`–`\\udfff`, or a low one without a high one"
        " before it; an escaped pair is the one character it encodes), and a number whose"
        " nearest double is infinite (`1e400`, an integer of 310 digits). It reads a number"
        " without fraction or exponent in [−2^63, 2^64 − 1] as that integer, and every other"
        " number as the nearest IEEE 754 double: `18446744073709551615` is an integer,"
        " `18446744073709551616` the double 1.8446744073709552e+19, `1.0` a double."
    )
    yield ""
    yield (
        "The **lenient reading** is Python's `json.loads` of the bytes decoded as UTF-8. It"
        " refuses bytes that are empty or only ASCII whitespace (space, tab, LF, VT, FF, CR),"
        " bytes that are not UTF-8 (no encoded surrogate, no overlong form, nothing above"
        " U+10FFFF), arrays and objects nested more than 400 deep (the most brackets open at"
        " once, brackets inside strings not counting), a byte order mark, an integer of more"
        " than 4,300 digits (Python's limit on integer conversion), and any text that is not"
        " JSON but for three extensions: it accepts `NaN`, `Infinity` and `-Infinity` as"
        " doubles, a lone surrogate escape as that lone surrogate, and numbers beyond the"
        " 64-bit and double ranges. It reads a number without fraction or exponent as that"
        " exact integer, and every other number as the nearest double (infinite beyond the"
        " doubles' range)."
    )
    yield ""
    yield (
        "*Read as JSON* means: the strict reading; when it refuses, the lenient one; when both"
        " refuse, the bytes are not JSON."
    )
    yield ""
    yield "### Text written from a value"
    yield ""
    yield (
        "An `id` that is an array or object, and the projection's `client_info` and"
        " `server_info`, are JSON values written as text, as Python's `json.dumps(value,"
        " sort_keys=True)` writes them:"
    )
    yield ""
    yield (
        "- `null`, `true`, `false`; an integer in decimal, with `-` before a negative one; a"
        " double as its number text (below)."
    )
    yield (
        '- A string in double quotes: printable ASCII (U+0020 to U+007E) as it is, but `"` as'
        ' `\\"` and `\\` as `\\\\`; backspace, form feed, LF, CR and tab as `\\b`, `\\f`,'
        " `\\n`, `\\r`, `\\t`; every other character as `\\u` and four lowercase hex digits"
        " (U+007F as `\\u007f`, `é` as `\\u00e9`, a character above U+FFFF as the escapes of"
        " its UTF-16 surrogate pair, a lone surrogate as its own escape)."
    )
    yield "- An array as `[`, its items separated by `, ` (a comma and a space), `]`."
    yield (
        "- An object as `{`, its members sorted by key (code point by code point), each its key"
        " as a string, `: ` (a colon and a space) and its value, separated by `, `, then `}`."
    )
    yield ""
    yield (
        "The **number text** of a double is `NaN`, `Infinity` or `-Infinity` for those."
        " Otherwise take the shortest string of decimal digits d1…dn that reads back as the"
        " same double (of those, the nearest to it) and the position p of its decimal point, so"
        " that the double is ±0.d1…dn × 10^p (zero: d1 = 0, p = 1). When −4 < p ≤ 16 the text"
        " is positional, with at least one digit on either side of the point: `0.0001`, `1.5`,"
        " `100.0`, `1000000000000000.0`, `0.0`. Otherwise it is d1, then `.` and d2…dn when n >"
        " 1, then `e`, the sign of p − 1 (`+` or `-`) and p − 1 in at least two digits:"
        " `1e-05`, `1e+16`, `1.8446744073709552e+19`. A negative double, −0.0 included, starts"
        " with `-`. This is Python's `repr` of a float."
    )
    yield ""
    yield "### A frame's derived fields"
    yield ""
    yield "The input is the frame's `raw` alone: not its direction, not the other frames."
    yield ""
    yield (
        "**Reading the frame.** The frame is read as JSON. When the strict reading gives an"
        " object whose `id` member is a double (a number with a fraction or an exponent, or an"
        " integer outside [−2^63, 2^64 − 1]) and the frame nests at most 400 deep, the frame is"
        " read again with the lenient reading, which is used instead: such an id keeps its"
        " exact digits."
    )
    yield ""
    yield (
        "**msg_type.** Below, an object *has* a member when it holds the key, whatever the"
        " value (null included), except that it has `method` only when `method` is a string."
    )
    yield ""
    yield "| the frame reads as | `msg_type` |"
    yield "|---|---|"
    yield "| an object that has `method` and `id` | `request` |"
    yield "| an object that has `method` and not `id` | `notification` |"
    yield "| an object that has not `method`, has `id` and `error` | `error` |"
    yield "| an object that has not `method`, has `id` and `result` and not `error` | `response` |"
    yield (
        "| a non-empty array, one item at least not `invalid` when classified as a message by"
        " these rules (an item that is not an object is `invalid`; an array item is not a"
        " batch) | `batch` |"
    )
    yield (
        "| anything else: not JSON; an object that has neither `method` nor `id`, or `id` but"
        " neither `error` nor `result`; an empty array; an array of `invalid` items; a string,"
        " number, `true`, `false`, `null` | `invalid` |"
    )
    yield ""
    yield (
        "`jsonrpc` is never looked at. `method` wins over `error` and `result`, and `error`"
        " over `result`."
    )
    yield ""
    yield '**Fields by msg_type** (where the table says "see", the paragraphs below):'
    yield ""
    yield "| field | `request`, `notification` | `response` | `error` | `batch` | `invalid` |"
    yield "|---|---|---|---|---|---|"
    yield "| `method` | `method`, fitted | NULL | NULL | see Batches | NULL |"
    yield (
        "| `rpc_id`, `rpc_id_type` | from `id`; a notification NULL, NULL | from `id` | from"
        " `id` | NULL | NULL |"
    )
    yield "| `tool` | see tool | NULL | NULL | NULL | NULL |"
    yield "| `is_error` | NULL | see is_error | NULL | NULL | NULL |"
    yield "| `error_code` | NULL | NULL | see error_code | NULL | NULL |"
    yield "| `era` | see era | see era | NULL | see Batches | NULL |"
    yield (
        "| `degraded` | notes on `method`, `rpc_id`, `tool`, `era` | notes on `rpc_id`, `era` |"
        " notes on `rpc_id`, `error_code` | see Batches | NULL |"
    )
    yield ""
    yield "**rpc_id and rpc_id_type**, from the `id` member as read:"
    yield ""
    yield "| `id` | `rpc_id` | `rpc_id_type` |"
    yield "|---|---|---|"
    yield "| a string | the string, fitted | `string` |"
    yield "| an integer | its decimal digits, with `-` before a negative one | `number` |"
    yield "| a double | its number text | `number` |"
    yield "| `true` or `false` | `true` or `false` | `boolean` |"
    yield "| `null` | NULL | `null` |"
    yield (
        "| an array or object nested at most 400 deep (the id itself is depth 1) | its text"
        " (Text written from a value) | `other` |"
    )
    yield "| an array or object nested deeper | NULL | `other` |"
    yield ""
    yield (
        'So `0` and `"0"` are different ids, `1.0` is `1.0` and `1e2` is `100.0`.'
        " `18446744073709551616` keeps its digits (the frame is read again), but in an array id"
        " it is `[1.8446744073709552e+19]`, unless the strict reading refused the frame (for a"
        " lone surrogate elsewhere, say): then it is `[18446744073709551616]`. In a frame"
        " nested more than 400 deep, a double id stays the strict reading's double."
    )
    yield ""
    yield (
        "**tool**: when `method` is exactly `tools/call` (as read, before fitting), `params` is"
        " an object and its `name` member a string, that string, fitted; otherwise NULL."
    )
    yield ""
    yield (
        "**is_error**: `true` when `result` is an object whose `isError` member is `true` (the"
        ' boolean: not `1`, not `"true"`); otherwise `false`, whatever `result` is.'
    )
    yield ""
    yield (
        "**error_code**: when `error` is an object whose `code` member is an integer as read"
        " (not a double such as `1.0`, not a boolean) in [−2^63, 2^63 − 1], that integer. An"
        " integer outside that range gives NULL, noted `error_code:out_of_range`. Anything else"
        " (no `code`, a double, a string, `error` not an object) gives NULL and no note. As the"
        " strict reading gives a double for an integer outside [−2^63, 2^64 − 1], such a code"
        " is NULL without a note unless the frame was read leniently (then it is an integer,"
        " and noted); a code in [2^63, 2^64 − 1] is noted either way."
    )
    yield ""
    yield (
        "**era** is the protocol version the message names, a string, fitted by the era rule"
        " (Fitting, below); `P` is the member `io.modelcontextprotocol/protocolVersion`."
    )
    yield ""
    yield (
        "- A request or a notification whose `params` is an object: `params._meta.P` when"
        " `_meta` is an object and `P` a string (the empty string included); otherwise, when"
        " `method` is `initialize`, `params.protocolVersion` when it is a string; otherwise"
        " none."
    )
    yield (
        "- A request or a notification whose `params` is not an object (or absent):"
        " `result.protocolVersion` when `result` is an object and the member a string;"
        " otherwise none."
    )
    yield (
        "- A response: none when `result` is not an object. Otherwise, when `params` is an"
        " object, `params._meta.P` as above (never `params.protocolVersion`); when it is not,"
        " `result.protocolVersion` when it is a string."
    )
    yield "- An error: none."
    yield ""
    yield (
        "In the handshake eras (2025-11-25 and before) this gives the version of the"
        " `initialize` request and of its answer, and NULL on the other frames, which name"
        " none. In the stateless era (2026-07-28) every request and notification names its"
        " version in `params._meta`, so each has an era, while answers (`server/discover`"
        " answers `supportedVersions`, not `protocolVersion`) have none. An era is any string:"
        " it is not checked to be a version."
    )
    yield ""
    yield (
        "**Fitting.** A text field (`method`, `rpc_id`, `tool`, `era`) has every U+0000 and"
        " every lone surrogate (U+D800 to U+DFFF, which only the lenient reading gives, from an"
        " escape) replaced by U+FFFD, one for one. An era that is the empty string is NULL; an"
        " era longer than 16 characters (code points, a lone surrogate counting as one) is"
        " NULL; any other era is fitted as text. An error code is fitted as error_code says."
    )
    yield ""
    yield (
        "**degraded** names each field whose value the fitting changed, as `field:why`, joined"
        " by `,` in the order `method`, `rpc_id`, `tool`, `era`, `error_code`; NULL when none"
        " was. `why` is `nul` (the text held U+0000), `surrogate` (it held a lone surrogate),"
        " `nul+surrogate` (both), `too_long` (an era over 16 characters; what it held is then"
        " not noted) or `out_of_range`. An empty era is not noted."
    )
    yield ""
    yield (
        "**Batches.** Each item of a batch is classified as a message by the rules above; items"
        " are never read again. A batch's `method` is the first item's `method` (NULL when the"
        " first item is not a request or notification); its `era` is the era of the first item,"
        " in order, whose era is not NULL; its `degraded` is, item by item, the first item's"
        " notes on `method` and every item's notes on `era`, each note only the first time it"
        " comes, joined by `,` (NULL when there are none). Its other fields are NULL."
    )
    yield ""
    yield "### A session event's derived fields"
    yield ""
    yield (
        "The input is the `raw` of a record of any kind but `frame`, known or not. It is read"
        " as JSON (the frame's second reading does not apply). When it is not JSON or not an"
        " object, every derived field is NULL. Otherwise `method` is its member `method` when"
        " that is a string, fitted as text, else NULL; `tool` is its member `tool` likewise;"
        " `era` is its member `era` when that is a string, fitted by the era rule, else NULL;"
        " `degraded` notes them in the order `method`, `tool`, `era`, as for a frame;"
        " `msg_type`, `rpc_id`, `rpc_id_type`, `is_error` and `error_code` are NULL. The"
        " members are taken from the bytes as written, not through the upgrade steps: a"
        " version-0 `decision` without `method` has a NULL `method`. The kinds whose fields"
        " bear those names are `decision` (`method`, `tool`), `http_exchange` (`method`: the"
        " HTTP method), `tools_listed` (`method`), `tool_changed` (`method`, `tool`) and"
        " `era_detected` (`era`); a key of those names kept beyond a kind's fields counts as"
        " well."
    )
    yield ""
    yield "### A stored value against the derived one"
    yield ""
    yield (
        "`verify` and `verify-export` find a stored field in agreement with the derived one"
        " when they are equal, and also when the stored `degraded` is NULL (records written"
        " before the column existed), when the stored text, fitted (an era by the era rule,"
        " other text by the text rule), equals the derived one (records written before fitting"
        " may hold NUL, a lone surrogate or a long era), and, in a SQLite store, when"
        " `is_error` holds 0 for false or 1 for true."
    )
    yield ""
    yield "### The `sessions` projection"
    yield ""
    yield (
        "The input is the session's records in `seq` order. Of their documents, only those of"
        " `session_started`, `era_detected` and `session_ended` records count, and only when"
        " they decode. A document decodes when:"
    )
    yield ""
    yield "1. It is read as JSON and is an object."
    yield (
        "2. Its `v` member (0 when absent) is an integer, not a boolean, from 0 to the kind's"
        " version, 1."
    )
    yield (
        "3. A version-0 document is first brought to version 1. `session_started`: `name`,"
        " `transport`, `command` and `replay_of` absent or null become null, `env_names` absent"
        " or null becomes `[]`. `era_detected`: `era`, `client_info` and `server_info` absent"
        " or null become null. `session_ended`: `reason` absent becomes `ended` (a null"
        " `reason` stays null); an `outcome` that is not a non-empty string becomes the"
        " `reason` as written when that is a non-empty string, else `ended`; `exit_code` and"
        " `signal` absent become null."
    )
    yield (
        "4. Every field of the kind's table above that the document holds has the table's type,"
        " and it holds every **required** field. A string is a JSON string; an integer a number"
        " read as an integer (not `true` or `false`, not a double such as `1.0`); a number an"
        " integer or a double (not a boolean); a boolean `true` or `false`; an array any array"
        ' (for "array of strings" too: the items are not checked); an object any object; any'
        ' JSON value anything; "or null" admits null. Keys the table does not list are not'
        " checked."
    )
    yield ""
    yield "| column | rule |"
    yield "|---|---|"
    yield "| `session_id` | The session's id. |"
    yield (
        "| `name`, `transport`, `replay_of` | That field of the last decoding `session_started`"
        " in which it is not null, as written; NULL when there is none. |"
    )
    yield (
        "| `command` | Likewise; an array is its items joined by one space, a string item as it"
        " is and any other as Python's `str()` writes it (`1`, `1.5`, `True`, `None`, `['a',"
        " 1]`), so an empty array gives the empty string. |"
    )
    yield (
        "| `client_info`, `server_info` | That field of the last decoding `era_detected` in"
        ' which it is not null, as its text (Text written from a value), such as `{"name":'
        ' "mcp", "version": "1.0"}`; NULL when there is none. |'
    )
    yield (
        "| `era` | The `era` of the last decoding `era_detected` whose `era`, fitted by the era"
        " rule, is not NULL: the tap's verdict wins (a client in auto mode first offers"
        " 2026-07-28 in `server/discover`, then falls back). When there is none, the `era`"
        " field of the first frame, by `seq`, whose `era` field is not NULL; else NULL. |"
    )
    yield (
        "| `started_ns` | The `wall_ns` of the `session_started` record when its document"
        " decodes and it was stored by the same append as the session's first record (the last"
        " such, should there be several); otherwise the `wall_ns` of the session's first"
        " record. A tap writes `session_started` first, so the two are the same. |"
    )
    yield (
        "| `ended_ns` | The `wall_ns` of the last decoding `session_ended`; NULL when there is"
        " none. |"
    )
    yield (
        "| `outcome` | That document's `outcome` (as step 3 leaves it); NULL when there is none. |"
    )
    yield "| `frames` | How many `frame` records the session holds. |"
    yield "| `last_seq` | The highest `seq`: the seal's, once the session is sealed. |"
    yield "| `last_wall_ns` | The `wall_ns` of the record of `last_seq`. |"
    yield (
        "| `head_hash` | The chain hash of the record of `last_seq`: the session's chain head"
        " (docs/trust.md). |"
    )
    yield (
        "| `sealed_count` | When the record after the session's first `session_ended` is a"
        " `session_sealed`, the `seq` of that `session_ended` (the records the seal counts);"
        " otherwise NULL. |"
    )
    yield ""
    yield (
        "The store writes the seal right after a `session_ended` record, whether its document"
        " decodes or not, and refuses any record after the seal; a session whose"
        " `session_ended` does not decode is sealed with NULL `ended_ns` and `outcome`. The"
        " records do not say which of them one append stored, so `verify` takes a `started_ns`"
        " equal to the first record's `wall_ns` or to that of any `session_started` record;"
        " when it is neither, it names the first `session_started`'s `wall_ns` (the first"
        " record's when there is none) as expected. Every other column must be equal,"
        " `head_hash` byte for byte; a session whose chain is broken is reported as such, and"
        " its row is not compared."
    )
    yield ""
    yield (
        "Where a session is listed (`blackbox sessions`, `SessionInfo`, the export's sessions"
        " file), its `ended_ns` is `last_wall_ns` when `ended_ns` is NULL, and it is sealed"
        " when `sealed_count` is not NULL. The export's sessions file adds `records` (how many"
        " records the session holds), `head` (the chain head, hex) and the session's hold;"
        " `verify-export` reports `sessions_mismatch` when a row's `records`, `last_seq`,"
        " `head` or `sealed_count` differs from the manifest's, and for a session one of them"
        " has and the other has not."
    )


def schema_markdown() -> str:
    """docs/log-format.md as this module states it."""
    return "\n".join(_markdown()) + "\n"
