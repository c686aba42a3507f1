"""Secrets found by the name that introduces them, wherever that name is in a text.

A frame's JSON is redacted by key (`redact.Redactor._walk`), but tool results are mostly text,
and text carries the same secrets in other clothes: a JSON object quoted in prose ("here is the
config: {"api_key": "..."}"), a Python dict's repr, an escaped JSON string inside a log line,
`.env` and shell lines (`DB_PASSWORD=...`, `--token abc`), HTTP headers pasted from curl
(`Authorization: ...`, `Cookie: ...`), credentials in a URL's query (`?access_token=`,
`X-Amz-Signature=`) and prose ("the password is hunter2"). Each rule here finds the name with an
RE2 pattern (one automaton pass, whatever the text), judges it with the key rules, then reads the
value after it: a quoted string to its closing quote, a bare word, or, for a JSON object or array
under a secret name, the whole value, parsed with the JSON decoder and replaced by one marker.

Linear in the text: a value is read only after a bounded look at its first 64 bytes has decided
it is a secret, and what is read is replaced, so no byte is read twice; a JSON value that does
not parse is replaced up to where the parser stopped (it is under a secret's name).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable

from blackbox.recorder.privacy.engine import (
    Context,
    Hit,
    Match,
    Regex,
    Rule,
    Run,
    compile_builtin,
)
from blackbox.recorder.privacy.rules import (
    PATH_KEYS,
    SECRET_PARAM_PARTS,
    SECRET_PARAM_SUFFIXES,
    SECRET_PARAMS,
    fold_key,
    is_code,
    is_placeholder,
    is_plain_word,
    is_prose,
    is_schema,
    is_secret_param,
    key_variants,
    marker_hit,
    not_prose_pattern,
)

PEEK = 64  # how far a value is looked at before it is judged
_SCHEMES = frozenset({"bearer", "basic", "token", "digest"})

# Value bodies, each matched from a given position (DFA only: these have no groups).
_DQ_BODY = compile_builtin(r'(?:[^"\\\r\n]|\\.)*')  # a JSON string's body, escapes included
_SQ_BODY = Run(r"[^'\r\n]")
_ESC_BODY = compile_builtin(r'(?:[^"\\\r\n]|\\[^"\r\n])*')  # a string quoted as \"...\"
_JSON_BARE = Run(r"[^\s\"'&,;}\]]")  # a number, or a YAML-like bare value
_BARE = Run(r"[^\s\"'&,;]")  # `name=value` and `name: value`, as before
_PARAM = Run(r"[^&#\s\"'<>\\]")  # a query parameter's value
_LINE = Run(r"[^\r\n\"']")  # a header's value: to the end of the line or quote


def _judged(name: bytes, ctx: Context) -> str | None:
    """The folded name when it names a secret, else None."""
    text = name.decode("utf-8", "replace").strip().lstrip("-$")
    if not text or not ctx.is_secret_key(text):
        return None
    return fold_key(text)


def _is_path(folded: str, value: bytes) -> bool:
    return folded in PATH_KEYS and value[:1] in (b"/", b"~")


def _render(ctx: Context, value: str) -> str:
    """A string value's replacement: the marker, after an Authorization scheme kept readable."""
    scheme, sep, rest = value.partition(" ")
    if sep and rest and scheme.lower() in _SCHEMES:
        return f"{scheme} {ctx.marker(rest)}"
    return ctx.marker(value)


def _read(
    regex: Regex | Run, buf: bytes, start: int, refuse: Callable[[bytes], bool]
) -> tuple[bytes, int] | None:
    """The run `regex` matches at `start`: (its bytes, its end); None when `refuse` says its
    first PEEK bytes (all of it, if shorter) are no secret. Only an accepted value is read past
    PEEK, and it is then replaced, so no byte is read twice."""
    end = regex.match_end(buf, start, start + PEEK)
    if refuse(buf[start:end]):
        return None
    if end == start + PEEK:
        end = regex.match_end(buf, start)
    return buf[start:end], end


class _TextView:
    """The text of a buffer as str, for the JSON decoder, and its byte <-> str positions.
    Positions are asked for in increasing order within one rule's pass, so mapping them costs
    one decode of the buffer in all."""

    def __init__(self, buf: bytes, kind: str) -> None:
        self.buf = buf
        self.kind = kind
        self.text = buf.decode("utf-8", "surrogateescape")
        self.ascii = buf.isascii()
        self._at = (0, 0)  # (byte, char) of the last position asked for
        self.parsed_until = 0  # a value inside a JSON value already parsed is not parsed again
        self.failures_left = 4 * len(self.text) + 4096  # see `_structured`

    def char_at(self, pos: int) -> int:
        if self.ascii:
            return pos
        byte, char = self._at if pos >= self._at[0] else (0, 0)
        char += len(self.buf[byte:pos].decode("utf-8", "surrogateescape"))
        self._at = (pos, char)
        return char

    def byte_len(self, start: int, end: int) -> int:
        if self.ascii:
            return end - start
        return len(self.text[start:end].encode("utf-8", "surrogateescape"))


_views = threading.local()
_DECODER = json.JSONDecoder()
# What may follow `{` and `[` (after white space) in JSON.
_OBJECT_STARTS = frozenset(b'"}')
_VALUE_STARTS = frozenset(b'"-0123456789{[]tfn')


def _view(buf: bytes, kind: str) -> _TextView:
    """The view of the buffer one rule's pass is reading (one at a time per thread)."""
    view: _TextView | None = getattr(_views, "view", None)
    if view is None or view.buf is not buf or view.kind != kind:
        view = _views.view = _TextView(buf, kind)
    return view


def _structured(buf: bytes, start: int, ctx: Context, kind: str) -> Hit | None:
    """A JSON object or array under a secret's name: the whole value goes, as in a frame."""
    view = _view(buf, kind)
    if start < view.parsed_until or view.failures_left <= 0:
        return None  # inside a value already parsed (a schema), or out of budget: pairs are read
    after = _skip(buf, start + 1, start + 1 + PEEK, _WHITE)
    if after >= len(buf) or buf[after] not in (
        _OBJECT_STARTS if buf[start] == 0x7B else _VALUE_STARTS
    ):
        return None  # no JSON value starts so (an escaped object, a brace in prose)
    char = view.char_at(start)
    try:
        value, char_end = _DECODER.raw_decode(view.text, char)
    except json.JSONDecodeError as exc:
        # The decoder's error counts the lines from the start of the text: a failure costs its
        # position, so failures draw on a budget of a few passes over the text.
        view.failures_left -= exc.pos
        end = start + view.byte_len(char, exc.pos)
        view.parsed_until = end
        if end - start <= 1:
            return None
        return marker_hit(start, end, buf[start:end], ctx)  # cut off: what there is goes
    except RecursionError:
        view.parsed_until = len(buf)
        return marker_hit(start, len(buf), buf[start:], ctx)
    end = start + view.byte_len(char, char_end)
    view.parsed_until = end
    if is_schema(value):
        return None
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return start, end, ctx.marker(canonical).encode()


def _quoted(buf: bytes, start: int, ctx: Context, folded: str, kind: str) -> Hit | None:
    """The value at `start` after a secret's name: a quoted string (its body goes, the quotes
    stay), a JSON object or array (it goes whole), or a bare word (a number, YAML)."""

    def refuse(value: bytes) -> bool:
        return is_placeholder(value) or _is_path(folded, value)

    if buf.startswith(b'\\"', start):
        start += 2
        found = _read(_ESC_BODY, buf, start, refuse)
    elif buf.startswith(b'"', start):
        start += 1
        found = _read(_DQ_BODY, buf, start, refuse)
    elif buf.startswith(b"'", start):
        start += 1
        found = _read(_SQ_BODY, buf, start, refuse)
    elif buf[start : start + 1] in (b"{", b"["):
        return _structured(buf, start, ctx, kind)
    else:
        found = _read(_JSON_BARE, buf, start, lambda v: is_prose(v) or _is_path(folded, v))
    if found is None:
        return None
    raw, end = found
    value = raw.decode("utf-8", "surrogateescape")
    if b"\\" in raw and buf[start - 1 : start] == b'"':
        try:
            decoded = json.loads(b'"' + raw + b'"')
        except ValueError:
            decoded = None
        if isinstance(decoded, str):
            value = decoded  # fingerprinted as the value itself, as in a frame's own JSON
    return start, end, _render(ctx, value).encode("utf-8", "surrogateescape")


_LETTERS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_WHITE = b" \t\r\n\f\v"


def _skip(buf: bytes, pos: int, end: int, chars: bytes) -> int:
    """The first position from `pos` (up to `end`) holding none of `chars`."""
    seg = buf[pos:end]
    return pos + len(seg) - len(seg.lstrip(chars))


# Single characters looked for within a match (Python's `re` finds one in a single C call).
_SEPARATOR = re.compile(rb":=|[:=]")
_QUOTE = re.compile(rb"[\"'\\]")


def _after_separator(buf: bytes, pos: int, end: int) -> int:
    """Where the value starts: after the first `:`, `=` or `:=` from `pos`, and white space."""
    sep = _SEPARATOR.search(buf, pos, end)
    assert sep is not None  # the match's pattern holds one
    return _skip(buf, sep.end(), end, _WHITE)


def _quoted_name(buf: bytes, start: int, end: int) -> tuple[bytes, int]:
    """The name in `"name":`, `'name' =`, `\\"name\\":` at `start`, and where it ends."""
    first = start + (2 if buf[start] == 0x5C else 1)  # after `\"` or `"`
    close = _QUOTE.search(buf, first, end)
    assert close is not None  # the match's pattern holds one
    return buf[first : close.start()], close.start()


def _pick_pair(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`"api_key": "..."` (JSON or a dict's repr quoted in text, or escaped in a log line)."""
    start, end = m.span()
    name, name_end = _quoted_name(buf, start, end)
    folded = _judged(name, ctx)
    if folded is None:
        return None
    return _quoted(buf, _after_separator(buf, name_end + 1, end), ctx, folded, "pair")


def _pick_name_value(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`{"name": "DB_PASSWORD", "value": "..."}`: environment lists (Kubernetes, ECS, ...)."""
    start, end = m.span()
    colon = buf.index(b":", start, end)
    quote = min(i for i in (buf.find(b'"', colon, end), buf.find(b"'", colon, end)) if i >= 0)
    name, name_end = _quoted_name(buf, quote, end)
    folded = _judged(name, ctx)
    if folded is None:
        return None
    value_key = name_end + buf[name_end:end].lower().find(b"value")  # then its separator
    return _quoted(buf, _after_separator(buf, value_key, end), ctx, folded, "name_value")


def _bare(buf: bytes, start: int, ctx: Context, folded: str) -> Hit | None:
    """A bare value (`password=hunter2`): three characters or more, not prose, not a path."""

    def refuse(value: bytes) -> bool:
        return len(value) < 3 or is_prose(value) or is_code(value) or _is_path(folded, value)

    found = _read(_BARE, buf, start, refuse)
    return None if found is None else marker_hit(start, found[1], found[0], ctx)


def _pick_assignment(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`DB_PASSWORD=...`, `password: ...`, `--api-key=...`, `secret := ...`."""
    start, end = m.span()
    sep = _SEPARATOR.search(buf, start, end)
    assert sep is not None  # the match's pattern holds one
    if start > 0 and buf[start - 1] == 0x3A and sep.group() == b":":
        return None  # a segment of a colon-separated name (`arn:...:secret:prod/db`)
    folded = _judged(buf[start : sep.start()], ctx)
    if folded is None:
        return None
    value = _skip(buf, sep.end(), end, _WHITE)
    if buf[value : value + 1] in (b'"', b"'"):
        return _quoted(buf, value, ctx, folded, "assignment")
    return _bare(buf, value, ctx, folded)


def _pick_flag(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`--password hunter2`, `-api-key 'x'`: a command line's flag and its next word."""
    start, end = m.span()
    dash = buf.index(b"-", start, end)
    name_end = min(i for i in (buf.find(b" ", dash, end), buf.find(b"\t", dash, end)) if i >= 0)
    folded = _judged(buf[dash:name_end], ctx)
    if folded is None:
        return None
    value = _skip(buf, name_end, end, b" \t")
    if buf[value : value + 1] in (b'"', b"'"):
        return _quoted(buf, value, ctx, folded, "flag")
    return _bare(buf, value, ctx, folded)


def _pick_param(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`?access_token=...`, `&X-Amz-Signature=...`: a credential in a URL's query."""
    start, end = m.span()
    eq = buf.index(b"=", start, end)
    if not is_secret_param(buf[start + 1 : eq].decode("latin-1")):
        return None

    def refuse(value: bytes) -> bool:
        return not value or value[:2] in (b"{{", b"${") or value[:1] == b"<"

    found = _read(_PARAM, buf, eq + 1, refuse)
    return None if found is None else marker_hit(eq + 1, found[1], found[0], ctx)


def _pick_authorization(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`Authorization: <scheme> <credentials>` in text: the credentials, to the end of the line
    (or of the quoted header), the scheme kept readable; not prose ("Authorization: required")."""
    start, end = m.span()
    pos = _after_separator(buf, start, end)
    pos += 1 if buf[pos : pos + 1] in (b'"', b"'") else 0
    word_end = _skip(buf, pos, pos + PEEK, _LETTERS + b"0123456789._-")
    after = _skip(buf, word_end, word_end + PEEK, b" \t")
    if word_end > pos and after > word_end and buf[after : after + 1] not in b"\r\n\"'":
        pos = after  # `Bearer abc`: the scheme stays

    def refuse(value: bytes) -> bool:
        token = value.split()[0] if value.split() else b""
        return not token or is_plain_word(token) or is_prose(token)

    found = _read(_LINE, buf, pos, refuse)
    if found is None:
        return None
    secret = found[0].rstrip()
    return marker_hit(pos, pos + len(secret), secret, ctx)


def _pick_cookie(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`Cookie: a=b; c=d`, `Set-Cookie: ...`, `cookie=abc123`: to the end of the line or quote."""
    start, end = m.span()
    pos = _after_separator(buf, start, end)
    pos += 1 if buf[pos : pos + 1] in (b'"', b"'") else 0
    line_end = _LINE.match_end(buf, pos)
    secret = buf[pos:line_end].rstrip()
    return marker_hit(pos, pos + len(secret), secret, ctx)


def _pick_phrase(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """ "my password is hunter2.", "the passphrase was: 'x y'": the quoted words, or the first
    word (trailing punctuation is the sentence's); not "the password is incorrect"."""
    start, end = m.span()
    pos = _skip(buf, start, end, _LETTERS)  # password
    pos = _skip(buf, _skip(buf, pos, end, _WHITE), end, _LETTERS)  # is
    pos = _skip(buf, _skip(buf, pos, end, _WHITE), end, b":")
    pos = _skip(buf, pos, end, _WHITE)
    quote = buf[pos : pos + 1]
    if quote in (b'"', b"'"):
        body = _DQ_BODY if quote == b'"' else _SQ_BODY
        close = body.match_end(buf, pos + 1, pos + 1 + 4 * PEEK)
        if close > pos + 1 and buf[close : close + 1] == quote:
            return marker_hit(pos + 1, close, buf[pos + 1 : close], ctx)
        pos += 1

    def refuse(value: bytes) -> bool:
        return is_prose(value.rstrip(b".!?)]}"))

    found = _read(_BARE, buf, pos, refuse)
    if found is None:
        return None
    secret = found[0].rstrip(b".!?)]}")
    return marker_hit(pos, pos + len(secret), secret, ctx)


_PARAM_PARTS = (
    *("token", "secret", "passw", "apikey", "api_key", "api-key", "signature", "credential"),
    *("session", "verifier", "sig", "key", "code", "auth", "pass", "pwd", "jwt", "sid"),
)


def _secret_param_pattern() -> str:
    """A query parameter's name that `is_secret_param` accepts, as a pattern: a name a picker
    would refuse (`AccountKey=;AccountKey=;...`) then costs no call."""

    def spelled(words: Iterable[str]) -> str:
        return "|".join(re.escape(w).replace("_", "[-_]") for w in sorted(words))

    char = r"[A-Za-z0-9_.\-\[\]]"
    return (
        f"(?:(?:{spelled(SECRET_PARAMS)})|{char}{{0,40}}(?:{spelled(SECRET_PARAM_PARTS)})"
        f"{char}{{0,40}}|{char}{{0,40}}(?:{spelled(SECRET_PARAM_SUFFIXES)}))"
    )


_SECRET_PARAM = _secret_param_pattern()
_Spec = tuple[str, str, Callable[[bytes, Match, Context], Hit | None], tuple[str, ...]]
# What may start a value: each pattern below ends with one, so a name with nothing after it
# ("password: " at the end of a line, `token=&`) or before a placeholder (`$`, `<`, `%`, `*`:
# `is_placeholder`) is no match at all, and costs no look.
_QUOTED_START = (
    r"(?:\\\"[^\"\\\r\n$<%*]|\"(?:[^\"\\\r\n$<%*]|\\.)|'[^'\r\n$<%*]"
    r"|\{\s*[\"}]|\[\s*[-\"0-9{\[\]tfn]"  # a JSON object or array (what `_structured` parses)
    r"|[^\s\"'&,;{}\[\]\\$<%*][^\s\"'&,;{}\[\]\\]{2})"
)
# A bare value runs to white space, a quote, `&`, `,`, `;` or the end, and does not end with a
# colon (`Cookie: Authorization:` names, it holds no value).
_BARE_START = (
    r"(?:[\"'][^\"'\r\n$<%*]|"
    + not_prose_pattern(r"\s\"'&,;", first_not="$<%*", last_not=":", min_len=3)
    + ")"
)

# Built-in, whatever the key names: credentials in URLs and headers, and prose.
URL_AND_HEADERS: tuple[_Spec, ...] = (
    (
        "url_query",
        r"(?i)[?&#;]" + _SECRET_PARAM + r"=[^&#\s\"'<>\\]",
        _pick_param,
        _PARAM_PARTS,
    ),
    (
        # The credentials must hold something other than lower-case letters: not prose.
        "authorization_header",
        r"(?i)\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?:[A-Za-z][A-Za-z0-9._-]*[ \t]+)?(?-i:[^\s\"',;A-Za-z$<%*]|[A-Za-z]+[^\s\"',;a-z])",
        _pick_authorization,
        ("authorization",),
    ),
    (
        "cookie_header",
        # `name=value` pairs, or one value that is not a plain word ("Cookie: none").
        r"(?i)\b(?:set-)?cookie[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?:[^\s\"';=]{1,64}=|(?-i:[^\s\"',;A-Za-z$<%*]|[A-Za-z]+[^\s\"',;a-z]))",
        _pick_cookie,
        ("cookie",),
    ),
)


def _pick_quoted_tail(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`IDENTIFIED BY 'x'`, `password 'x'`: what is between the closing pair of quotes."""
    start, end = m.span()
    quote = buf[end - 1 : end]
    opening = buf.rindex(quote, start, end - 1)
    return marker_hit(opening + 1, end - 1, buf[opening + 1 : end - 1], ctx)


def _pick_quoted_after_name(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`PASSWORD 'x'` (SQL), `invalid client_secret "x"`: a secret's name, then a quoted value."""
    start, end = m.span()
    name_end = _skip(buf, start, end, _LETTERS + b"0123456789_.-")
    if _judged(buf[start:name_end], ctx) is None:
        return None
    value = buf[name_end:end].lstrip()[1:-1]
    if is_placeholder(value):
        return None
    return marker_hit(end - 1 - len(value), end - 1, value, ctx)


def _pick_netrc(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """A `.netrc` line (`machine h login u password x`): the word after `password`."""
    start, end = m.span()
    line = buf[start:end].rstrip()
    value = line.split()[-1]
    if is_prose(value) or is_plain_word(value):
        return None
    return marker_hit(start + len(line) - len(value), start + len(line), value, ctx)


_ROW_SEP = re.compile(rb"\|")


def _pick_table(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """A Markdown table whose header names a secret (`| user | password |`): that column's cells,
    in every row down to the table's end (or the next table's header rule)."""
    start = m.start()
    header_end = buf.index(b"\n", start, m.end())
    header = buf[start:header_end]
    names = [c.strip() for c in _ROW_SEP.split(header.strip().strip(b"|"))]
    columns = {i for i, name in enumerate(names) if name and _judged(name, ctx) is not None}
    if not columns:
        return None
    pieces: list[bytes] = []
    body = buf.index(b"\n", header_end + 1) + 1  # after the rule under the header
    pos = region_end = body
    changed = False
    while pos < len(buf):
        line_end = buf.find(b"\n", pos)
        line_end = len(buf) if line_end < 0 else line_end
        line = buf[pos:line_end]
        row = line.strip()
        if not row.startswith(b"|") or not row.strip(b"|:- \t\r"):
            break  # not a row, or the rule under the next table's header
        cells = _ROW_SEP.split(line)
        offset = 1 if line.lstrip().startswith(b"|") else 0
        for i in columns:
            if i + offset < len(cells):
                value = cells[i + offset].strip()
                if value and not is_placeholder(value):
                    cell = cells[i + offset]
                    cells[i + offset] = cell.replace(value, ctx.marker(value).encode(), 1)
                    changed = True
        pieces.append(b"|".join(cells))
        region_end = line_end
        pos = line_end + 1
    if not changed:
        return None
    return body, region_end, b"\n".join(pieces)


QUOTED_TAILS: tuple[_Spec, ...] = (
    (
        "sql_password",
        r"(?i)\bidentified(?:\s+with\s+\w+)?\s+by\s+'[^'\r\n]+'",
        _pick_quoted_tail,
        ("identified",),
    ),
    (
        "netrc_password",
        r"(?im)^[ \t]*(?:(?:machine|login|account|default)[ \t]+\S*[ \t]+)*"
        r"(?:password|passwd)[ \t]+"
        + not_prose_pattern(r"\s\"'", min_len=3, end=False)
        + r"[ \t]*\r?$",
        _pick_netrc,
        ("password", "passwd"),
    ),
)
PHRASE: _Spec = (
    "password_phrase",
    r"(?i)\b(?:password|passwd|passphrase|passcode|pwd)\s+(?:is|was)\b\s*:?\s*"
    r"(?:[\"'][^\"'\r\n$<%*]|" + not_prose_pattern(r"\s\"'&,;", first_not="$<%*:") + ")",
    _pick_phrase,
    ("passw", "passphrase", "passcode", "pwd"),
)


def _name_pattern(
    variants: list[str], char: str, separators: str, alone: list[str] | None = None
) -> str:
    """A pattern of the names the key rules call secret (a superset: the picker judges): a key
    at the name's end, after a separator or a camelCase hump or alone (`db_password`,
    `dbPassword`, `X-API-KEY`, not `apassword`), or any name with "token" in it. `alone`: the
    keys that may stand alone as a name (default: all). Its repeats are unbounded, not counted:
    counting would multiply the automaton's states by the count."""
    plain = [v for v in variants if "token" not in v]
    single = [v for v in (variants if alone is None else alone) if "token" not in v]
    keys = "|".join(re.escape(v) for v in plain)
    humps = "|".join(f"(?-i:{v[0].upper()}){re.escape(v[1:])}" for v in plain if v[0].isalpha())
    inner = [f"token{char}*"]
    if plain:
        inner += [f"[{separators}](?:{keys})", f"(?-i:[a-z0-9])(?:{humps})"]
    alternatives = [f"{char}*(?:{'|'.join(inner)})"]
    if single:
        alternatives.append(rf"\b(?:{'|'.join(re.escape(v) for v in single)})")
    return "(?:" + "|".join(alternatives) + ")"


def keyed_rules(names: set[str]) -> tuple[Rule, ...]:
    """The rules that find a value by its secret name in text, for these (folded) key names."""
    if not names:
        return ()
    variants = key_variants(names)
    triggers = tuple(v.encode() for v in variants)
    gate = compile_builtin("|".join(re.escape(v) for v in variants))
    quoted = _name_pattern(variants, r"[^\"'\\\r\n]", r"_.\- ")
    # `Authorization: ...` and `Cookie: ...` lines are the header rules' (which keep the scheme
    # and read the whole line); `X-Authorization`, `session_cookie` stay here.
    headers = {"authorization", "proxy_authorization", "cookie", "set_cookie"}
    alone = key_variants(names - headers)
    bare = _name_pattern(variants, r"[A-Za-z0-9_.-]", r"_.\-", alone)
    specs: tuple[tuple[str, str, Callable[[bytes, Match, Context], Hit | None]], ...] = (
        (
            "embedded_json",
            r"(?i)\\?[\"']" + quoted + r"\\?[\"']\s*[:=]\s*" + _QUOTED_START,
            _pick_pair,
        ),
        (
            "name_value",
            r"(?i)[\"'](?:name|key)[\"']\s*:\s*[\"']"
            + quoted
            + r"[\"']\s*,\s*[\"']value[\"']\s*:\s*"
            + _QUOTED_START,
            _pick_name_value,
        ),
        (
            "assignment",
            r"(?i)" + bare + r"[ \t]*(?::=|[:=])[ \t]*" + _BARE_START,
            _pick_assignment,
        ),
        (
            "cli_flag",
            r"(?i)(?:^|[\s\"'=(])--?" + bare + r"[ \t]+(?:[\"'][^\"'\r\n]|[^\s\"'-][^\s\"']{2})",
            _pick_flag,
        ),
        (
            "quoted_after_name",
            r"(?i)\b" + bare + r"[ \t]+(?:'[^'\r\n$<%*][^'\r\n]*'|\"[^\"\r\n$<%*][^\"\r\n]*\")",
            _pick_quoted_after_name,
        ),
        (
            "markdown_table",
            # A header naming a secret, its rule, and a first row with something in it.
            r"(?im)^[ \t]*\|[^\r\n]*" + quoted + r"[^\r\n]*\r?\n[ \t]*\|[ \t:|-]*-[ \t:|-]*\r?\n"
            r"[ \t]*\|[^\r\n]*[^\s|:-]",
            _pick_table,
        ),
    )
    return tuple(Rule(n, compile_builtin(p), pick, triggers, gate) for n, p, pick in specs)


def make_rules(specs: tuple[_Spec, ...]) -> tuple[Rule, ...]:
    return tuple(
        Rule(n, compile_builtin(p), pick, tuple(t.encode() for t in triggers))
        for n, p, pick, triggers in specs
    )
