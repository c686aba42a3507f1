"""docs/log-format.md ("Derived fields and the sessions projection, as rules") is enough to
re-derive every record's derived fields and every `sessions` row: an implementation written from
that section alone (tests/fixtures/independent_derivation.py, the standard library and nothing of
this project) must give what the code gives, and what the stores hold, on

- every record and session of the stores earlier versions wrote (tests/fixtures/stores/*/ and
  tests/fixtures/store-v0.sqlite), read with sqlite3 from a copy;
- the hostile frames of tests/recorder/test_hostile_frames.py and the frame shapes of
  tests/recorder/test_derived_fast_path.py (read from their source: tests never import each
  other), edge cases of the page's own, and random frames;
- sessions built from `blackbox.recorder.store.synthetic` (both eras, with errors), hostile and
  odd sessions, appended to SQLite and PostgreSQL and read back.

Every disagreement is a failure line naming the record (or session) and the field.
"""

from __future__ import annotations

import ast
import itertools
import json
import random
import shutil
import sqlite3
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from blackbox.recorder.log import (
    DERIVED,
    NewEvent,
    classify,
    derived_columns,
    events,
    new_session_id,
)
from blackbox.recorder.log import jsonrpc as code_jsonrpc
from blackbox.recorder.store import open_store
from blackbox.recorder.store.projection import CHECKED_COLUMNS, derive, replayed
from blackbox.recorder.store.synthetic import session_events

from tests.fixtures import independent_derivation as ind
from tests.fixtures.environment import ROOT

PAGE = (ROOT / "docs" / "log-format.md").read_text(encoding="utf-8")
TABLES = ind.document_tables(PAGE)
STORES = [
    *sorted(ROOT.glob("tests/fixtures/stores/*/store.sqlite")),
    ROOT / "tests" / "fixtures" / "store-v0.sqlite",
]
T0 = 1_795_000_000_000_000_000
PV = code_jsonrpc.META_PROTOCOL_VERSION
CALLERS = ("last_seq", "last_wall_ns", "head_hash")  # `replayed` leaves these to its caller


def short(raw: bytes) -> str:
    return repr(raw if len(raw) <= 120 else raw[:100] + b"..." + raw[-12:])


def differences(what: str, fields: Iterable[str], ours: tuple, theirs: tuple) -> list[str]:
    return [
        f"{what}: {field}: the code says {a!r}, the page says {b!r}"
        for field, a, b in zip(fields, ours, theirs, strict=True)
        if a != b or type(a) is not type(b)
    ]


# == The corpus of frames =======================================================================


def definitions(path: Path, namespace: dict) -> dict:
    """The module-level constants (and the helpers that make them) of a test module, run from its
    source into `namespace`: tests never import each other (tests/test_architecture.py), and this
    keeps the comparison on the very frames those tests use. A statement that needs what the
    module imports for its tests, not for its data, is skipped."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign) or (
            isinstance(node, ast.FunctionDef) and not node.decorator_list
        ):
            try:
                exec(compile(ast.Module([node], []), str(path), "exec"), namespace)
            except Exception:
                continue
    return namespace


def hostile_frames() -> list[bytes]:
    """tests/recorder/test_hostile_frames.py's frames, as written and as the tap cuts them, and
    its server's answers."""
    found = definitions(ROOT / "tests" / "recorder" / "test_hostile_frames.py", {"json": json})
    storm, client = found["STORM"], found["CLIENT"]
    lines = [frame for frame, _request in storm]
    lines += [frame for frame, _request, _fate in client]
    lines += [found["LAST_CALL"], found["INIT"], found["INITIALIZED"], found["LIST"]]
    server = definitions(ROOT / "tests" / "recorder" / "servers" / "hostile_server.py", {})
    answers = [
        {"jsonrpc": "2.0", "id": 2, "result": {"tools": server["TOOLS"]}},
        {"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25"}},
        {"jsonrpc": "2.0", "id": 6, "error": {"code": -32601, "message": "method not found"}},
    ]
    lines += [json.dumps(answer).encode() for answer in answers]
    assert len(storm) > 20 and len(client) > 10
    return lines + [line.rstrip(b"\n") for line in lines if line.endswith(b"\n")]


def fast_path_shapes() -> list[bytes]:
    """tests/recorder/test_derived_fast_path.py's frame shapes."""
    namespace = {
        "json": json,
        "itertools": itertools,
        "random": random,
        **{name: getattr(code_jsonrpc, name) for name in dir(code_jsonrpc) if name.isupper()},
    }
    found = definitions(ROOT / "tests" / "recorder" / "test_derived_fast_path.py", namespace)
    assert len(found["SHAPES"]) > 1000
    return found["SHAPES"]


def deep(levels: int, inner: bytes = b"") -> bytes:
    return b"[" * levels + inner + b"]" * levels


BIG = str(2**64).encode()
NUMBERS = (
    b"NaN Infinity -Infinity 1e2 1E2 1e16 1e15 0.0001 0.00001 -0.0 -0 0.0 5e-324 0.1 -1.5e-7"
    b" 1.7976931348623157e308 1e308 123456789012345678 2.5e+20 1e-400 1e400"
).split()
EDGES: list[bytes] = [
    # Readings: which numbers stay integers, which the frame is read again for.
    b'{"id":1,"error":{"code":18446744073709551616}}',
    b'{"id":1,"error":{"code":18446744073709551615}}',
    b'{"id":1,"error":{"code":9223372036854775808}}',
    b'{"id":1,"error":{"code":-9223372036854775808}}',
    b'{"id":1,"error":{"code":-9223372036854775809}}',
    b'{"id":1.5,"error":{"code":18446744073709551616}}',
    b'{"id":1,"error":{"code":1e400}}',
    b'{"id":1,"error":{"code":true}}',
    b'{"id":1,"error":{"code":-32600.0}}',
    b'{"id":[' + BIG + b'],"result":{}}',
    b'{"id":[' + BIG + rb'],"result":{},"x":"\ud800"}',
    b'{"id":' + BIG + b',"result":' + deep(399) + b"}",
    b'{"id":' + BIG + b',"result":' + deep(400) + b"}",
    b'{"id":' + BIG + b',"result":' + deep(1023) + b"}",
    b'{"id":' + BIG + b',"result":' + deep(1024) + b"}",
    b'{"id":' + deep(400) + b',"result":{}}',
    b'{"id":' + deep(401) + b',"result":{}}',
    b'{"id":1,"method":"m","params":' + deep(1023) + b"}",
    b'{"id":1,"method":"m","params":' + deep(1024) + b"}",
    b'{"id":1,"method":"m","params":' + deep(399) + rb',"x":"\udc00"}',
    b'{"id":1,"method":"m","params":' + deep(400) + rb',"x":"\udc00"}',
    b'{"id":' + b"9" * 4300 + b',"result":{}}',
    b'{"id":' + b"9" * 4301 + b',"result":{}}',
    b'{"id":-' + b"9" * 4300 + b',"result":{}}',
    b'{"id":' + b"9" * 308 + b',"result":{}}',
    b'{"id":' + b"9" * 309 + b',"result":{}}',
    # Number texts.
    *(b'{"id":%s,"result":{}}' % number for number in NUMBERS),
    # Id texts: sorted keys, escapes, nested doubles.
    b'{"id":{"b":1,"a":[1.0,null,true,"\x7f\\u0000\\u001f\\"\\\\/\\b\\f\\n\\r\\t"]},"result":{}}',
    b'{"id":["\xc3\xa9\xe2\x80\xa8\xf0\x9f\x98\x80",{"\xc3\xa9":1,"z":2,"a":{}}],"result":{}}',
    rb'{"id":["\ud800","\udfff\ud800"],"result":{}}',
    rb'{"id":{"\ud83d\ude00":1,"\uffff":2},"result":{}}',
    b'{"id":[],"result":{}}',
    b'{"id":{},"result":{}}',
    b'{"id":true,"result":{}}',
    b'{"id":null,"method":"a"}',
    # Shapes.
    b'{"method":"x","id":1,"result":{"protocolVersion":"2025"}}',
    b'{"method":"x","id":1,"params":{},"result":{"protocolVersion":"2025"}}',
    b'{"method":"initialize","id":1,"params":{"_meta":{"' + PV.encode() + b'":null},'
    b'"protocolVersion":"P"}}',
    b'{"method":"initialize","id":1,"params":{"_meta":{"' + PV.encode() + b'":""},'
    b'"protocolVersion":"P"}}',
    b'{"method":"initialize","id":1,"params":{"_meta":[],"protocolVersion":"0123456789abcdefg"}}',
    b'{"method":"initialized","params":{"protocolVersion":"P"}}',
    b'{"id":1,"params":{"_meta":{"' + PV.encode() + b'":"M"}},"result":{"protocolVersion":"R"}}',
    b'{"id":1,"params":{},"result":{"protocolVersion":"R"}}',
    b'{"id":1,"params":5,"result":{"protocolVersion":"R"}}',
    b'{"id":1,"params":{"_meta":{"' + PV.encode() + b'":"M"}},"result":[]}',
    b'{"method":5,"id":1,"result":{}}',
    b'{"method":null,"id":1,"error":null}',
    b'{"method":"m","id":1,"error":{"code":1}}',
    b'{"id":1,"error":{"code":1},"result":{}}',
    b'{"id":1}',
    b'{"method":"a","method":5,"id":1,"result":{}}',
    b'{"id":1,"method":"tools/call","params":{"name":"a","name":"b"}}',
    b'{"id":1,"method":"Tools/call","params":{"name":"a"}}',
    rb'{"id":1,"method":"tools/call\u0000","params":{"name":"a"}}',
    rb'{"id":"\u0000\ud800","method":"tools/call","params":{"name":"\u0000\udfff"}}',
    b'{"id":1,"result":{"isError":true,"protocolVersion":"0123456789abcdef"}}',
    rb'{"id":1,"result":{"protocolVersion":"0123456789abcde\ud800"}}',
    rb'{"id":1,"result":{"protocolVersion":"0123456789abcdef\ud800"}}',
    b'{"id":1,"result":{"protocolVersion":"0123456789abcde\\u0000"}}',
    b'{"id":1,"result":{"protocolVersion":""}}',
    # Not JSON, or not a message.
    b"",
    b" \t\r\n",
    b"\x0b\x0c",
    b"\xef\xbb\xbf{}",
    b"\xef\xbb\xbf" + b'{"id":1,"result":{}}',
    b'{"id":1,"result":{}}\x00',
    b'{"id":1,"result":{}} \r\n',
    b'\r\n{"id":1,"result":{}}',
    b'{"id":"\xed\xa0\x80","result":{}}',
    b'{"id":"\xc0\xaf","result":{}}',
    b'{"id":"\xf4\x90\x80\x80","result":{}}',
    b"[]",
    b"[[]]",
    b"[1,2]",
    b'"s"',
    b"null",
    b"true",
    b"1",
    b"NaN",
    b"{}",
    b"[{}]",
    b'[{"method":"a"}]',
    # Batches: method and era of which item, the notes kept once.
    b'[1,{"method":"a"}]',
    b'[[{"method":"a"}]]',
    b'[{"id":1,"result":{"protocolVersion":"12345678901234567"}},{"method":"\\ud800","params":'
    b'{"_meta":{"' + PV.encode() + b'":"\\u0000"}}},{"id":3,"result":{"protocolVersion":"R"}}]',
    b'[{"method":"\\ud800","id":"\\ud800","params":{"_meta":{"' + PV.encode() + b'":"\\u0000"}}},'
    b'{"id":3,"result":{"protocolVersion":"\\u0000"}},{"id":4,"error":{"code":' + BIG + b"}}]",
    b'[{"id":1,"error":{}},{"method":"tools/call","id":2,"params":{"name":"\\u0000"}}]',
    b'[{"id":1.5,"result":{}},{"jsonrpc":"2.0"}]',
]

EVENT_DOCUMENTS: list[bytes] = [
    b'{"v":1,"method":"POST","path":"/mcp"}',
    b'{"method":"a\\u0000b","tool":"\\ud800","era":"0123456789abcdefg"}',
    b'{"method":5,"tool":["x"],"era":null}',
    b'{"era":""}',
    b'{"era":"0123456789abcde\\u0000"}',
    b'{"v":1,"decision":"allow","source":"policy","tool":"echo"}',
    b"not json",
    b"[1]",
    b'{"method":"m","method":"last"}',
    b'{"era":"\\ud800\\ud800"}',
]


def random_frames(count: int) -> list[bytes]:
    rng = random.Random(41)
    ids = [0, -1, 2**63, 2**64, -(2**63) - 1, 10**30, "", "a\x00", "\ud800", None, True, 1.5,
           -0.0, 1e300, [2**64, 1.0], {"k": "\x7f\u00e9"}]  # fmt: skip
    methods = ["tools/call", "initialize", "ping", "", "a\x00", "\udfff", 5, None]
    params = [
        {"name": "t"}, {"name": "\x00"}, {"name": 1}, {"protocolVersion": "2025-06-18"},
        {"_meta": {PV: "2026-07-28"}}, {"_meta": {PV: "x" * 17}}, {"_meta": {PV: "\ud800"}},
        {"_meta": {PV: None}, "protocolVersion": "P"}, [], "p", None,
    ]  # fmt: skip
    results = [{}, {"isError": True}, {"isError": 1}, {"protocolVersion": "\x00"},
               {"protocolVersion": "2025-11-25"}, [], None, 0]  # fmt: skip
    errors = [{"code": -32601}, {"code": 2**63}, {"code": 2**64}, {"code": 1.0}, {}, None]
    pools = {"id": ids, "method": methods, "params": params, "result": results, "error": errors}
    out = []
    for _ in range(count):
        message = {k: rng.choice(pool) for k, pool in pools.items() if rng.random() < 0.5}
        if rng.random() < 0.1:
            message = [message, {k: rng.choice(p) for k, p in pools.items() if rng.random() < 0.5}]
        text = json.dumps(message, ensure_ascii=rng.random() < 0.5)
        out.append(text.encode("utf-8", "surrogatepass"))
    return out


def corpus() -> list[bytes]:
    return list(
        dict.fromkeys(
            [*hostile_frames(), *fast_path_shapes(), *EDGES, *EVENT_DOCUMENTS,
             *random_frames(3000)]
        )
    )  # fmt: skip


CORPUS = corpus()


# == The tests ==================================================================================


def test_the_implementation_imports_nothing_of_the_project() -> None:
    tree = ast.parse((ROOT / "tests" / "fixtures" / "independent_derivation.py").read_text())
    names = {
        alias.name if isinstance(node, ast.Import) else node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert {name.split(".")[0] for name in names} <= set(sys.stdlib_module_names) | {"__future__"}


def test_the_page_states_the_documents_the_projection_reads() -> None:
    assert ind.FIELDS == DERIVED
    for kind in ind.PROJECTED:
        version, fields = TABLES[kind]
        assert version == 1 and fields, kind
    assert "## Derived fields and the sessions projection, as rules" in PAGE


def test_every_frame_of_the_corpus_derives_the_same() -> None:
    wrong: list[str] = []
    kinds, degraded = set(), set()
    for raw in CORPUS:
        frame = ind.frame_fields(raw)
        kinds.add(frame.msg_type)
        degraded.add(frame.degraded)
        theirs = frame.fields()
        ours = classify(raw)[: len(DERIVED)]
        wrong += differences(f"frame {short(raw)}", DERIVED, ours, theirs)
        if derived_columns(raw) != ours:  # the append's own path, held to the same
            wrong.append(f"frame {short(raw)}: derived_columns differs from classify")
        theirs = ind.derived("stderr", raw)
        wrong += differences(f"document {short(raw)}", DERIVED, derive("stderr", raw), theirs)
    assert not wrong, f"{len(wrong)} disagreements:\n" + "\n".join(wrong[:60])
    assert kinds == {"request", "notification", "response", "error", "batch", "invalid"}
    assert len(degraded) > 10


def _document_variants() -> list[tuple[str, bytes]]:
    """Documents of the three projected kinds: each field of each table given each kind of JSON
    value or left out, under each `v`."""
    values = [None, "s", "", 1, 1.5, True, [], ["a", 1, None, True, [2]], {}, {"é": 2**64}]
    base = {
        "session_started": {"name": "n", "transport": "stdio", "command": ["srv", "--x"]},
        "era_detected": {"era": "2025-11-25", "client_info": {"name": "c"}, "server_info": None},
        "session_ended": {"reason": "client_closed", "outcome": "ok"},
    }
    absent = object()
    out = []
    for kind in ind.PROJECTED:
        _version, fields = TABLES[kind]
        for v in (absent, 0, 1, 2, -1, True, 1.0, None):
            head = {} if v is absent else {"v": v}
            out.append((kind, json.dumps({**head, **base[kind]}).encode()))
            for field in fields:
                for value in [absent, *values]:
                    doc = {**head, **base[kind]}
                    doc.pop(field.name, None)
                    if value is not absent:
                        doc[field.name] = value
                    out.append((kind, json.dumps(doc).encode()))
    return out


def test_documents_decode_and_project_the_same() -> None:
    wrong: list[str] = []
    variants = _document_variants()
    for kind, raw in variants:
        code_doc, _problem = events.decode(kind, raw)
        page_doc = ind.decode(kind, raw, TABLES)
        if (code_doc is None) != (page_doc is None):
            wrong.append(f"{kind} {short(raw)}: decodes per the code: {code_doc is not None}")
            continue
        ours = replayed("s", [(1, T0, kind, raw)], 0, None)
        record = ind.Record(1, T0, kind, raw, b"")
        theirs = ind.projection([record], TABLES)
        for column, value in ours.items():
            if column not in CALLERS and theirs[column] != value:
                wrong.append(f"{kind} {short(raw)}: sessions.{column}: the code says {value!r}, "
                             f"the page says {theirs[column]!r}")  # fmt: skip
    assert not wrong, "\n".join(wrong[:60])
    assert len(variants) > 500


def store_name(path: Path) -> str:
    return path.stem if path.parent.name == "fixtures" else path.parent.name


@pytest.mark.parametrize("path", STORES, ids=store_name)
def test_the_stores_earlier_versions_wrote(path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "store.sqlite"
    shutil.copyfile(path, copy)
    con = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        # Record format v2 (schema-0009 on) keeps the rows compactly; `event_log` shows them as
        # the records they are, as the page says a verifier reads them.
        views = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='view'")}
        source = "event_log" if "event_log" in views else "events"
        have = {row[1] for row in con.execute(f"PRAGMA table_info({source})")}
        stored_fields = [f if f in have else "NULL" for f in DERIVED]
        rows = con.execute(
            f"SELECT session_id, seq, wall_ns, kind, raw, hash, {', '.join(stored_fields)} "
            f"FROM {source} ORDER BY session_id, seq"
        ).fetchall()
        con.row_factory = sqlite3.Row
        session_rows = {
            row["session_id"]: dict(row) for row in con.execute("SELECT * FROM sessions")
        }
    finally:
        con.close()
    wrong: list[str] = []
    by_session: dict[str, list[ind.Record]] = {}
    for sid, seq, wall_ns, kind, raw, digest, *stored in rows:
        raw = bytes(raw)
        what = f"{store_name(path)} session {sid} seq {seq} ({kind})"
        theirs = ind.derived(kind, raw)
        wrong += differences(what, DERIVED, derive(kind, raw), theirs)
        if kind == "frame" and classify(raw)[: len(DERIVED)] != derive(kind, raw):
            wrong.append(f"{what}: classify and derived_columns differ")
        wrong += [
            f"{what}: {field}: stored {have_value!r}, the page says {want!r}"
            for field, have_value, want in zip(DERIVED, stored, theirs, strict=True)
            if not ind.agrees(field, have_value, want)
        ]
        by_session.setdefault(sid, []).append(ind.Record(seq, wall_ns, kind, raw, bytes(digest)))
    assert rows and by_session.keys() == session_rows.keys()
    for sid, records in by_session.items():
        what = f"{store_name(path)} session {sid}"
        wrong += _session_differences(what, records, session_rows[sid])
        accepted, expected = ind.started_ns_accepted(records)
        if session_rows[sid]["started_ns"] not in accepted:
            wrong.append(f"{what}: sessions.started_ns: stored {session_rows[sid]['started_ns']}, "
                         f"the page says {expected}")  # fmt: skip
    assert not wrong, "\n".join(wrong[:60])


def _session_differences(what: str, records: list[ind.Record], row: dict) -> list[str]:
    """The stored row and our projection function, each against the page's projection."""
    theirs = ind.projection(records, TABLES)
    others = [(r.seq, r.wall_ns, r.kind, r.raw) for r in records if r.kind != "frame"]
    frames = [r for r in records if r.kind == "frame"]
    first_era = next((e for r in frames if (e := derive("frame", r.raw)[7]) is not None), None)
    ours = replayed("s", others, len(frames), first_era)
    wrong = []
    for column in CHECKED_COLUMNS:
        if column == "started_ns":
            continue
        stored = row[column]
        if isinstance(stored, memoryview):
            stored = bytes(stored)
        if stored != theirs[column]:
            wrong.append(f"{what}: sessions.{column}: stored {stored!r}, "
                         f"the page says {theirs[column]!r}")  # fmt: skip
        if column not in CALLERS and ours[column] != theirs[column]:
            wrong.append(f"{what}: sessions.{column}: the projection function says "
                         f"{ours[column]!r}, the page says {theirs[column]!r}")  # fmt: skip
    return wrong


# == Sessions appended now, to SQLite and PostgreSQL ============================================

Item = tuple[str, str, bytes]  # kind, direction, raw


def _j(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _synthetic(era: str, **shape: object) -> list[Item]:
    evs = session_events("x", 0, era=era, **shape)  # type: ignore[arg-type]
    return [(str(ev.kind), str(ev.direction), ev.raw) for ev in evs]


def _errors(era: str) -> list[Item]:
    """Calls that fail: a tool error, an unknown method, a code beyond 64 bits."""
    meta = {"_meta": {PV: era}} if era == code_jsonrpc.MODERN_ERA else {}
    call = {"name": "fail", "arguments": {}, **meta}
    return [
        ("frame", "c2s", _j({"jsonrpc": "2.0", "id": 90, "method": "tools/call", "params": call})),
        ("frame", "s2c", _j({"jsonrpc": "2.0", "id": 90, "result": {"isError": True,
                                                                    "content": []}})),
        ("frame", "c2s", _j({"jsonrpc": "2.0", "id": "n", "method": "nope", "params": meta})),
        ("frame", "s2c", _j({"jsonrpc": "2.0", "id": "n", "error": {"code": -32601,
                                                                   "message": "no"}})),
        ("frame", "s2c", _j({"jsonrpc": "2.0", "id": None, "error": {"code": -32700}})),
        ("frame", "s2c", b'{"jsonrpc":"2.0","id":91,"error":{"code":9223372036854775808}}'),
        ("frame", "s2c", b'{"jsonrpc":"2.0","id":92,"error":{"code":18446744073709551616}}'),
    ]  # fmt: skip


def _with(items: list[Item], extra: list[Item]) -> list[Item]:
    """`extra` before the session's last record (its session_ended)."""
    return [*items[:-1], *extra, items[-1]]


def _doc(kind: str, doc: object) -> Item:
    return (kind, "-", doc if isinstance(doc, bytes) else _j(doc))


STARTED = {"v": 1, "name": "odd", "transport": "stdio", "command": ["srv"]}


def _sessions() -> list[tuple[list[Item], int | None]]:
    """(records, how many the first append stores: None for all)."""
    hostile = [
        ("frame", "c2s" if i % 2 else "s2c", raw)
        for i, raw in enumerate([*hostile_frames(), *EDGES, *fast_path_shapes()[::7]])
    ]
    odd_documents = [
        _doc("session_started", b'{"name":"odd","transport":"stdio","command":["python",1,1.5,'
             b'true,null,["a",{"k":"v"}]],"pid":1}'),  # version 0, odd argv
        ("frame", "c2s", _j({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"protocolVersion": "2025-06-18"}})),
        _doc("era_detected", b'{"era":"2025-06-18","client_info":{"name":"\\u00e9\\u2028'
             b'\\ud83d\\ude00\\u007f","n":18446744073709551616,"f":1e16,"z":-0.0,"b":[true,null]},'
             b'"server_info":null}'),
        _doc("era_detected", {"v": 1, "era": "2025-06-18-and-much-more", "client_info": None,
                              "server_info": {"name": "srv", "version": 2.5}}),
        _doc("session_started", {**STARTED, "name": "not-this", "pid": "x"}),  # does not decode
        _doc("session_started", {**STARTED, "name": "renamed", "transport": None,
                                 "command": "srv --flag", "replay_of": "0" * 8}),
        _doc("era_detected", {"v": 2, "era": "2026-07-28"}),  # a newer version: not read
        _doc("decision", {"decision": "allow", "source": "policy", "tool": "t\u0000"}),
        _doc("http_exchange", {"v": 1, "method": "POST", "path": "/mcp", "era": "x" * 17}),
        _doc("session_ended", {"reason": "server_exited", "exit_code": 1}),  # outcome: reason
    ]  # fmt: skip
    late_start = [
        ("frame", "c2s", _j({"jsonrpc": "2.0", "method": "notifications/x"})),
        ("frame", "c2s", _j({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        _doc("session_started", STARTED),
        _doc("session_ended", {"v": 1, "reason": "client_closed", "outcome": "ok"}),
    ]
    second_start = [
        ("frame", "c2s", _j({"jsonrpc": "2.0", "method": "notifications/x"})),
        _doc("session_started", STARTED),
        _doc("session_started", {**STARTED, "name": "again"}),
    ]
    bad_end = [
        _doc("session_started", STARTED),
        ("frame", "c2s", _j({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        _doc("session_ended", {"v": 1, "reason": 5, "outcome": "ok"}),  # does not decode
    ]
    batch_era = [
        _doc("session_started", STARTED),
        _doc("era_detected", {"v": 1, "era": "", "client_info": None, "server_info": None}),
        ("frame", "c2s", b'[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b",'
         b'"params":{"_meta":{"' + PV.encode() + b'":"2026-07-28"}}}]'),
        ("frame", "c2s", _j({"jsonrpc": "2.0", "method": "c", "params": {"_meta": {PV: "9"}}})),
    ]  # fmt: skip
    fallback = [  # a client in auto mode offers 2026-07-28, then falls back: the last verdict
        _doc("session_started", STARTED),
        ("frame", "c2s", _j({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                             "params": {"_meta": {PV: "2026-07-28"}}})),
        _doc("era_detected", {"v": 1, "era": "2026-07-28", "client_info": {"name": "c"},
                              "server_info": None, "via": "server/discover"}),
        ("frame", "c2s", _j({"jsonrpc": "2.0", "id": 2, "method": "initialize",
                             "params": {"protocolVersion": "2025-11-25"}})),
        _doc("era_detected", {"v": 1, "era": "2025-11-25", "client_info": {"name": "c2"},
                              "server_info": {"name": "s"}, "via": "initialize"}),
        _doc("era_detected", {"v": 1, "era": "0123456789abcdef\u0000"}),
    ]  # fmt: skip
    started_hostile = _doc("session_started", {**STARTED, "name": "hostile"})
    ended = _doc("session_ended", {"v": 1, "reason": "client_closed", "outcome": "ok"})
    return [
        (_with(_synthetic("2025-11-25", calls=2), _errors("2025-11-25")), None),
        (_with(_synthetic("2026-07-28", calls=2), _errors("2026-07-28")), None),
        (_synthetic("2025-06-18", ended=False, secrets=True), None),
        ([started_hostile, *hostile, ended], None),
        (odd_documents, None),
        (late_start, 2),
        (second_start, None),
        (bad_end, None),
        (batch_era, None),
        (fallback, None),
    ]


def test_sessions_appended_now(store_url: str) -> None:
    store = open_store(store_url)
    wrong: list[str] = []
    try:
        appended = []
        for n, (items, first) in enumerate(_sessions()):
            start = T0 + n * 10**12
            sid = new_session_id(start)
            evs = [
                NewEvent(sid, seq, start + seq * 1_000_000, seq * 1000, kind, direction, raw)
                for seq, (kind, direction, raw) in enumerate(items, start=1)
            ]
            store.append(evs[:first])
            if first is not None:
                store.append(evs[first:])
            appended.append((sid, first or len(evs)))
        with store.transaction() as conn:
            result = conn.exec_driver_sql("SELECT * FROM sessions")
            rows = {row.session_id: dict(row._mapping) for row in result}
        compared = 0
        for sid, first in appended:
            stored = list(store.read_session(sid))
            records = [ind.Record(e.seq, e.wall_ns, e.kind, e.raw, e.hash) for e in stored]
            for ev in stored:
                what = f"session {sid} seq {ev.seq} ({ev.kind})"
                theirs = ind.derived(ev.kind, ev.raw)
                wrong += differences(what, DERIVED, derive(ev.kind, ev.raw), theirs)
                have = tuple(getattr(ev, field) for field in DERIVED)
                wrong += [
                    f"{what}: {field}: stored {a!r}, the page says {b!r}"
                    for field, a, b in zip(DERIVED, have, theirs, strict=True)
                    if a != b
                ]
                compared += 1
            wrong += _session_differences(f"session {sid}", records, rows[sid])
            started = ind.started_ns(records, first, TABLES)
            if rows[sid]["started_ns"] != started:
                wrong.append(f"session {sid}: sessions.started_ns: stored "
                             f"{rows[sid]['started_ns']}, the page says {started}")  # fmt: skip
        assert not wrong, f"{len(wrong)} disagreements:\n" + "\n".join(wrong[:60])
        assert compared > 1000
        assert store.verify() == []
    finally:
        store.close()
