"""Drift as it happens: the shipper side watches list answers and records what a server offered
and when a definition changed.

Why it exists: a rug pull (a reviewed tool's description or schema changed under the same name) is
only visible against what the same server offered before. `ToolWatch` sees every journalled record
once, off the relay's path (the stdio tap's observer in its store worker, the HTTP proxy's shipper
process), pairs `tools/list`, `prompts/list`, `resources/templates/list` and `server/discover`
requests with their answers, and compares each answer against the last definitions recorded for
that server — a server is its recorded name plus its command line or URL — read once from the
store, then followed in memory (so a change after `notifications/tools/list_changed` within a
session is caught too). It writes:

- `tools_listed` when a session's answer differs from its previous one (always the first): the
  items with their definition hashes and suspicious-definition findings — what the inventory reads;
- `tool_changed` for each item changed, added or removed: old and new hashes, a readable diff,
  findings. Each change is recorded once per watcher: the known definitions move on with it.

It parses only frames that can matter (a byte search first) and never raises into its caller.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from blackbox.recorder.gate import tool_names, tooldefs
from blackbox.recorder.log import Direction, Kind, NewEvent, events, id_fields, parse
from blackbox.recorder.store import EventStore

Emit = Callable[[str, events.Document], None]
# How many of a server's newest sessions are searched for its last listing.
BASELINE_SESSIONS = 50
_REQUEST_NEEDLES = (b'/list"', b'"server/discover"')
# Plain str constants for the per-record tests: `Kind.FRAME` is an attribute lookup through the
# enum's class on every use (about 0.15 µs on Python 3.11), and this runs for every frame shipped.
_FRAME, _STARTED, _ENDED = str(Kind.FRAME), str(Kind.SESSION_STARTED), str(Kind.SESSION_ENDED)
_C2S, _S2C = str(Direction.CLIENT_TO_SERVER), str(Direction.SERVER_TO_CLIENT)
LIST_CHANGED = "notifications/tools/list_changed"
# A listed name a host may confuse with another (tool_names): a finding on the item, and a
# `tool_changed` record of this change kind for each of its definitions.
AMBIGUOUS = "ambiguous"
WATCH_PREFIX = "tool watch: "
ANSWER_CACHE = 256  # distinct list answers remembered (per watcher process)


@dataclass
class Known:
    """One item's last recorded definition: hash, definition (None when unknown), session."""

    hash: str
    definition: dict[str, Any] | None
    session: str | None


@dataclass
class _Server:
    known: dict[tuple[str, str], Known] = field(default_factory=dict)
    kinds: set[str] = field(default_factory=set)  # the kinds a baseline exists for
    last: dict[str, tuple[tuple[str, str, str], ...]] = field(default_factory=dict)  # by method


def server_key(doc: events.Document | None) -> tuple[str | None, str | None] | None:
    """(name, command) of a `session_started` document: the command joined by spaces as the
    sessions projection keeps it, or the URL."""
    if not isinstance(doc, events.SessionStarted):
        return None
    command = doc.command
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    return (doc.name, command)


class ToolWatch:
    """Follows list answers of any number of sessions and records drift (see the module doc).

    `emit(session_id, document)` records a document: in the session itself (stdio), or, with
    `own_session` given, in that session with `observed_session` naming where it was seen.
    `open_store` gives a store to read the baselines from (None: no baseline, every first listing
    is only a snapshot)."""

    def __init__(
        self,
        emit: Emit,
        open_store: Callable[[], EventStore] | None = None,
        rules: Sequence[tooldefs.Rule] | None = None,
        own_session: str | None = None,
    ) -> None:
        self.emit = emit
        self.open_store = open_store
        if rules is None:
            try:
                rules = tooldefs.load_rules()
            except tooldefs.RuleError:
                rules = tooldefs.DEFAULT_RULES
        self.rules = tuple(rules)
        self.own_session = own_session
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[str | None, str | None]] = {}
        self._servers: dict[tuple[str | None, str | None], _Server] = {}
        self._pending: dict[tuple[str, str | None, str | None], tuple[str, int, bool]] = {}
        self._last_listing: dict[tuple[str, str], tuple[tuple[str, str, str], ...]] = {}
        self._list_changed: set[str] = set()
        self._findings: dict[tuple[str, str, str], list[dict[str, str]]] = {}
        self._store: EventStore | None = None
        self._answers: dict[tuple[str, bytes], tuple[Any, Any, Any]] = {}

    def __call__(self, batch: Sequence[NewEvent]) -> None:
        with self._lock:
            for ev in batch:
                try:
                    self._record(ev)
                except Exception:  # a watcher never breaks shipping
                    continue

    def close(self) -> None:
        if self._store is not None:
            with contextlib.suppress(Exception):
                self._store.close()
            self._store = None

    # -- records -------------------------------------------------------------------------------

    def _record(self, ev: NewEvent) -> None:
        kind = ev.kind
        if kind != _FRAME:
            if kind == _STARTED:
                doc, _ = events.decode(Kind.SESSION_STARTED, ev.raw)
                key = server_key(doc)
                if key is not None and ev.session_id != self.own_session:
                    self._sessions[ev.session_id] = key
            elif kind == _ENDED:  # a long-lived proxy's watcher forgets ended sessions
                self._forget(ev.session_id)
            return
        if ev.raw_size is not None or ev.session_id not in self._sessions:
            return
        raw = ev.raw
        if ev.direction == _C2S:
            if _REQUEST_NEEDLES[0] not in raw and _REQUEST_NEEDLES[1] not in raw:
                return
        elif ev.direction == _S2C:
            if b"list_changed" in raw:
                self._list_changed.add(ev.session_id)
            if not self._pending or b'"result"' not in raw:
                return
        else:
            return
        value, problem = parse(raw)
        if problem is not None:
            return
        for msg in value if isinstance(value, list) else [value]:
            if isinstance(msg, dict):
                self._message(ev, msg)

    def _forget(self, sid: str) -> None:
        self._sessions.pop(sid, None)
        self._list_changed.discard(sid)
        for key in [k for k in self._last_listing if k[0] == sid]:
            del self._last_listing[key]
        for pending in [k for k in self._pending if k[0] == sid]:
            del self._pending[pending]

    def _message(self, ev: NewEvent, msg: dict[str, Any]) -> None:
        method = msg.get("method")
        if ev.direction == Direction.CLIENT_TO_SERVER:
            if isinstance(method, str) and method in tooldefs.LISTS and "id" in msg:
                raw_params = msg.get("params")
                params = raw_params if isinstance(raw_params, dict) else {}
                paged = params.get("cursor") is not None
                rpc_id, id_type = id_fields(msg["id"])
                self._pending[(ev.session_id, rpc_id, id_type)] = (method, ev.seq, paged)
            return
        if method == LIST_CHANGED:
            self._list_changed.add(ev.session_id)
            return
        if "id" not in msg or method is not None:
            return
        rpc_id, id_type = id_fields(msg["id"])
        request = self._pending.pop((ev.session_id, rpc_id, id_type), None)
        result = msg.get("result")
        if request is None or not isinstance(result, dict):
            return
        list_method, _req_seq, paged = request
        complete = not paged and result.get("nextCursor") is None
        self._answered(ev, list_method, result, complete)

    # -- an answer -----------------------------------------------------------------------------

    def _answered(self, ev: NewEvent, method: str, result: dict[str, Any], complete: bool) -> None:
        kinds = tooldefs.listed_kinds(method, result)
        if not kinds:
            return
        sid = ev.session_id
        key = self._sessions[sid]
        server = self._server(key)
        listed, defs, found = self._hashed(ev.raw, method, result)
        after_notice = sid in self._list_changed
        self._list_changed.discard(sid)
        snapshot = tuple(listed)
        # The common case: the same answer as this server's last one, nothing to compare.
        same = complete and server.last.get(method) == snapshot
        changes = [] if same else self._compare(server, kinds, listed, defs, complete)
        if self._last_listing.get((sid, method)) != snapshot:
            self._last_listing[(sid, method)] = snapshot
            self._emit(
                sid,
                events.ToolsListed(
                    server=key[0],
                    command=key[1],
                    method=method,
                    items=[{"kind": k, "name": n, "hash": h} for k, n, h in listed],
                    complete=complete,
                    seq=ev.seq,
                    findings=found,
                    extra={"kinds": list(kinds)},
                ),
            )
        if not same:
            changes += [
                (kind, name, AMBIGUOUS, server.known.get((kind, name)), h)
                for kind, name, h in dict.fromkeys(
                    (k, n, h)
                    for k, n, h in listed
                    if any(f["rule"] == AMBIGUOUS for f in found.get(n, []))
                )
            ]
        for kind, name, change, old, new_hash in changes:
            extra: dict[str, Any] = {}
            if after_notice:
                extra["after_list_changed"] = True
            self._emit(
                sid,
                events.ToolChanged(
                    server=key[0],
                    command=key[1],
                    tool=name,
                    item_kind=kind,
                    change=change,
                    method=method,
                    old_hash=old.hash if old is not None else None,
                    new_hash=new_hash,
                    diff=_diff(old, defs.get((kind, name)), change),
                    findings=found.get(name, []) if new_hash is not None else [],
                    seq=ev.seq,
                    previous_session=old.session if old is not None else None,
                    extra=extra,
                ),
            )
        if same:
            return
        if complete:
            server.last[method] = snapshot
        else:  # a page says nothing of what the whole list is now
            server.last.pop(method, None)
        # The known definitions move on: each change is recorded once.
        for kind, name, h in listed:
            server.known[(kind, name)] = Known(h, defs[(kind, name)], sid)
        if complete:
            names = {(k, n) for k, n, _h in listed}
            for item_key in [k for k in server.known if k[0] in kinds and k not in names]:
                del server.known[item_key]
        server.kinds.update(kinds)

    def _hashed(
        self, raw: bytes, method: str, result: dict[str, Any]
    ) -> tuple[
        list[tuple[str, str, str]],
        dict[tuple[str, str], dict[str, Any]],
        dict[str, list[dict[str, str]]],
    ]:
        """(kind, name, hash) of each listed item, definitions, findings by name. Remembered by
        the answer's bytes from `"result"` on: most sessions of a server get the same answer,
        and hashing its definitions is most of the watcher's cost."""
        at = raw.find(b'"result"')
        cache_key = (method, hashlib.sha1(raw[at:]).digest()) if at >= 0 else None
        cached = self._answers.get(cache_key) if cache_key is not None else None
        if cached is not None:
            return cached
        items = tooldefs.listed_items(method, result)
        listed_tools = [name for kind, name, _ in items if kind == "tool"]
        listed: list[tuple[str, str, str]] = []
        defs: dict[tuple[str, str], dict[str, Any]] = {}
        found: dict[str, list[dict[str, str]]] = {}
        for kind, name, item in items:
            h = tooldefs.definition_hash(kind, item)
            listed.append((kind, name, h))
            defs[(kind, name)] = tooldefs.definition(kind, item)
            key = (kind, name, h)
            if key not in self._findings:
                self._findings[key] = tooldefs.findings(kind, name, item, self.rules, listed_tools)
            if self._findings[key]:
                found[name] = self._findings[key]
        for (_kind, name), names in tool_names.ambiguous((k, n) for k, n, _ in items).items():
            found[name] = [
                *found.get(name, []),
                {
                    "rule": AMBIGUOUS,
                    "message": f"a host may not tell it from another: {tool_names.describe(names)}",
                    "excerpt": ascii(name),
                },
            ]
        if cache_key is not None:
            if len(self._answers) >= ANSWER_CACHE:
                self._answers.clear()
            self._answers[cache_key] = (listed, defs, found)
        return listed, defs, found

    def _compare(
        self,
        server: _Server,
        kinds: tuple[str, ...],
        listed: list[tuple[str, str, str]],
        defs: dict[tuple[str, str], dict[str, Any]],
        complete: bool,
    ) -> list[tuple[str, str, str, Known | None, str | None]]:
        changes: list[tuple[str, str, str, Known | None, str | None]] = []
        for kind, name, h in listed:
            if kind not in server.kinds:
                continue  # no baseline for this kind: a first listing is not a change
            old = server.known.get((kind, name))
            if old is None:
                changes.append((kind, name, "added", None, h))
            elif old.hash != h:
                changes.append((kind, name, "changed", old, h))
        if complete:
            names = {(k, n) for k, n, _h in listed}
            for (kind, name), old in sorted(server.known.items()):
                if kind in kinds and (kind, name) not in names:
                    changes.append((kind, name, "removed", old, None))
        return changes

    def _emit(self, sid: str, doc: events.Document) -> None:
        if self.own_session is not None:
            doc = _with_observed(doc, sid)
            sid = self.own_session
        self.emit(sid, doc)

    # -- the baseline --------------------------------------------------------------------------

    def _server(self, key: tuple[str | None, str | None]) -> _Server:
        server = self._servers.get(key)
        if server is None:
            server = self._servers[key] = _Server()
            with contextlib.suppress(Exception):  # no store, no baseline: snapshots only
                self._load_baseline(key, server)
        return server

    def _load_baseline(self, key: tuple[str | None, str | None], server: _Server) -> None:
        if self.open_store is None or key[0] is None:
            return
        if self._store is None:
            self._store = self.open_store()
        store = self._store
        mine = set(self._sessions) | {self.own_session}
        for kind, name, h, d, session in last_listing(store, key, exclude=mine):
            server.known[(kind, name)] = Known(h, d, session)
            server.kinds.add(kind)


def last_listing(
    store: EventStore,
    key: tuple[str | None, str | None],
    exclude: AbstractSet[str | None] = frozenset(),
    limit: int = BASELINE_SESSIONS,
) -> list[tuple[str, str, str, dict[str, Any] | None, str]]:
    """The last recorded definition of each item kind a server (name, command) listed: (kind,
    name, hash, definition or None, session), from the newest of its sessions that has one.
    Reads the server's sessions by name (an indexed lookup), newest first."""
    name, command = key
    if name is None:
        return []
    wanted: dict[str, tuple[str, events.ToolsListed]] = {}  # kind -> (session, snapshot)
    for info in server_sessions(store, name, limit):
        if info.session_id in exclude or info.command != command:
            continue
        latest: dict[str, events.ToolsListed] = {}
        for ev in store.read_session(info.session_id):
            if ev.kind == events.ToolsListed.KIND:
                doc = events.decode_as(events.ToolsListed, ev.raw)
                if doc is not None:
                    for kind in _kinds_of(doc):
                        latest[kind] = doc
        for kind, doc in latest.items():
            if kind not in wanted:
                wanted[kind] = (doc.observed_session or info.session_id, doc)
        if len(wanted) == 3:
            break
    out = []
    frames: dict[tuple[str, int], dict[tuple[str, str], dict[str, Any]]] = {}
    for kind, (session, doc) in wanted.items():
        if doc.seq is not None and (session, doc.seq) not in frames:
            frames[(session, doc.seq)] = _definitions_at(store, session, doc.seq, doc.method)
        defs = frames.get((session, doc.seq or -1), {})
        for item in doc.items:
            if isinstance(item, dict) and item.get("kind") == kind:
                out.append(
                    (
                        kind,
                        str(item["name"]),
                        str(item["hash"]),
                        defs.get((kind, item["name"])),
                        session,
                    )
                )
    return out


def watch_name(server: str) -> str:
    """The name of the HTTP proxy's watcher sessions for `server`."""
    return WATCH_PREFIX + server


def server_sessions(store: EventStore, name: str, limit: int | None = None) -> list[Any]:
    """A server's sessions and its watcher sessions (by name: indexed lookups), newest first.
    The watcher's are looked up apart: a busy proxy's own sessions would push them past
    `limit`."""
    found = store.list_sessions(limit=limit, name=name)
    found += store.list_sessions(limit=limit, name=watch_name(name))
    found.sort(key=lambda s: (s.started_ns or 0, s.session_id), reverse=True)
    return found


def _kinds_of(doc: events.ToolsListed) -> list[str]:
    kinds = doc.extra.get("kinds")
    if isinstance(kinds, list):
        return [k for k in kinds if isinstance(k, str)]
    return [k for k, _key in tooldefs.LISTS.get(doc.method, ())]


def _definitions_at(
    store: EventStore, session: str, seq: int, method: str
) -> dict[tuple[str, str], dict[str, Any]]:
    """The definitions in the answer frame at (session, seq), by (kind, name)."""
    for ev in store.read_session(session, after_seq=seq - 1):
        if ev.seq != seq or ev.kind != Kind.FRAME:
            return {}
        value, problem = parse(ev.raw)
        if problem is not None:
            return {}
        for msg in value if isinstance(value, list) else [value]:
            if isinstance(msg, dict) and isinstance(msg.get("result"), dict):
                return {
                    (k, n): tooldefs.definition(k, item)
                    for k, n, item in tooldefs.listed_items(method, msg["result"])
                }
        return {}
    return {}


def _diff(old: Known | None, new: dict[str, Any] | None, change: str) -> list[str]:
    if change == AMBIGUOUS:
        return ["(listed under a name a host cannot tell from another's: see the findings)"]
    if change == "added":
        return tooldefs.diff(None, new)
    if change == "removed":
        return (
            tooldefs.diff(old.definition if old else None, None)
            if old and old.definition is not None
            else ["(disappeared)"]
        )
    if old is None or old.definition is None:
        return ["(the previous definition's frame is not available; hashes differ)"]
    return tooldefs.diff(old.definition, new)


def _with_observed(doc: events.Document, sid: str) -> events.Document:
    values = events.as_dict(doc)
    values["observed_session"] = sid
    return events.from_dict(doc.KIND, values)


class OwnSession:
    """The session the HTTP proxy's watcher records in: started at its first record, ended by
    `close`, written straight to the store (the proxy's journal belongs to the proxy)."""

    def __init__(self, open_store: Callable[[], EventStore]) -> None:
        from blackbox.recorder.log import new_session_id

        self.session_id = new_session_id()
        self.open_store = open_store
        self._seq = 0
        self._t0 = time.monotonic_ns()
        self._store: EventStore | None = None
        self._waiting: list[NewEvent] = []
        self._lock = threading.Lock()

    def emit(self, sid: str, doc: events.Document) -> None:
        with self._lock:
            if self._seq == 0:
                # Named after the server it watches: its baselines are found by that name.
                server = getattr(doc, "server", None)
                started = events.started_here(
                    name=watch_name(server) if server is not None else None,
                    transport=None,
                    command=getattr(doc, "command", None),
                    extra={"role": "tool_watch"},
                )
                self._add(started)
            self._add(doc)
            self._flush()

    def _add(self, doc: events.Document) -> None:
        self._seq += 1
        self._waiting.append(
            NewEvent(
                self.session_id,
                self._seq,
                time.time_ns(),
                time.monotonic_ns() - self._t0,
                doc.KIND,
                str(Direction.NONE),
                events.encode(doc),
            )
        )

    def _flush(self) -> None:
        try:
            if self._store is None:
                self._store = self.open_store()
            self._store.append(self._waiting)
            self._waiting = []
        except Exception:  # kept in memory, tried again with the next record
            self._store = None

    def close(self) -> None:
        with self._lock:
            if self._seq:
                self._add(events.SessionEnded(reason="completed", outcome="ok"))
                self._flush()
            if self._store is not None:
                with contextlib.suppress(Exception):
                    self._store.close()
