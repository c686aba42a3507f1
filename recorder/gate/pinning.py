"""Tool pinning in the policy gate: a pinned tool is called only under its approved definition.

Why it exists: a rug pull changes a reviewed tool's definition under the same name; the model
then follows the new description. With `pin = true` on a rule (the tools it targets) or a `[pin]`
table for whole servers, the gate compares the definition this session's `tools/list` answered for
a tool (`blackbox.recorder.gate.tooldefs` hash) with the approved one and denies the call when they
differ, with a decision naming both hashes. Approvals are `decision` records (method
`tools/approve`) in small sessions of their own, named `APPROVALS_NAME`, so they are in the audit
log and found by an indexed lookup: `blackbox tools approve SERVER TOOL [HASH]` writes one; with
`trust_on_first_use = true` the tap writes one for the first definition it sees.

The tap only parses `tools/list` requests and their answers (a byte search first) on the gated
path; approvals are read from the store at start, off the relay, and read again before a denial.
A call to a pinned tool that this session never listed is left to the ordinary rules: nothing
was shown to the model that could have changed. In the HTTP proxy one pinner serves every
session: the current definition is the one the upstream's latest `tools/list` answer gave.

    [pin]
    servers = ["weather", "fs*"]     # globs; every tool of these servers is pinned
    trust_on_first_use = true        # approve the first definition seen (default false)
"""

from __future__ import annotations

import threading
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from blackbox.recorder import BlackboxError
from blackbox.recorder.gate import tool_names, tooldefs
from blackbox.recorder.gate.policy_rules import PIN_RULE, TOOLS_CALL, PolicyError, Rule
from blackbox.recorder.gate.tool_watch import server_sessions
from blackbox.recorder.log import (
    Direction,
    Kind,
    NewEvent,
    events,
    id_fields,
    new_session_id,
    parse,
)
from blackbox.recorder.store import EventStore

APPROVALS_NAME = "blackbox tool approvals"
APPROVE_METHOD = "tools/approve"
# How long a pinned call waits for the approvals being read at start.
LOAD_WAIT_SECONDS = 5.0
# A denial reads the approvals again when they are older than this.
REFRESH_SECONDS = 1.0


class ApprovalError(BlackboxError):
    """An approval that cannot be recorded: no such tool recorded, an unknown hash."""


@dataclass(frozen=True)
class PinSettings:
    """Which tools are pinned: every tool of `servers` (globs) and those `rules` with
    `pin = true` target; `tofu` approves the first definition seen."""

    servers: tuple[str, ...]
    rules: tuple[Rule, ...]
    tofu: bool

    def pinned(self, server: str | None, tool: str | None) -> bool:
        if server is not None and any(fnmatchcase(server, g) for g in self.servers):
            return True
        return any(rule.targets(server, TOOLS_CALL, tool) for rule in self.rules)


def pin_settings(text: str, rules: Sequence[Rule], name: str = "<policy>") -> PinSettings | None:
    """The pinning a policy asks for (None when it pins nothing). Raises `PolicyError`."""
    try:
        table = tomllib.loads(text).get("pin", {})
    except tomllib.TOMLDecodeError:
        table = {}
    line = next((i + 1 for i, t in enumerate(text.splitlines()) if t.strip() == "[pin]"), 1)
    if not isinstance(table, dict):
        raise PolicyError(f"{name}:{line}:1: pin must be a table: [pin]")
    unknown = set(table) - {"servers", "trust_on_first_use"}
    if unknown:
        raise PolicyError(
            f"{name}:{line}:1: unknown key {sorted(unknown)[0]!r} in [pin] "
            "(expected: servers, trust_on_first_use)"
        )
    servers = table.get("servers", [])
    servers = [servers] if isinstance(servers, str) else servers
    if not isinstance(servers, list) or not all(isinstance(s, str) and s for s in servers):
        raise PolicyError(f"{name}:{line}:1: [pin] servers must be a list of server globs")
    tofu = table.get("trust_on_first_use", False)
    if not isinstance(tofu, bool):
        raise PolicyError(f"{name}:{line}:1: [pin] trust_on_first_use must be true or false")
    pinned_rules = tuple(r for r in rules if r.pin)
    if not servers and not pinned_rules:
        return None
    return PinSettings(tuple(servers), pinned_rules, tofu)


# -- approvals in the store ----------------------------------------------------------------------


def load_approvals(store: EventStore) -> dict[tuple[str, str], str]:
    """The approved definition hash of each (server, tool): the newest approval wins."""
    approved: dict[tuple[str, str], tuple[int, str]] = {}
    for info in store.list_sessions(name=APPROVALS_NAME):
        for ev in store.read_session(info.session_id):
            if ev.kind != Kind.DECISION:
                continue
            doc = events.decode_as(events.Decision, ev.raw)
            h = doc.extra.get("definition_hash") if doc is not None else None
            if doc is None or doc.method != APPROVE_METHOD or not isinstance(h, str):
                continue
            key = (doc.server or "", doc.tool or "")
            if key not in approved or approved[key][0] < ev.wall_ns:
                approved[key] = (ev.wall_ns, h)
    return {k: h for k, (_t, h) in approved.items()}


def approval_records(
    server: str, tool: str, definition_hash: str, decided_by: str, reason: str | None
) -> list[tuple[str, bytes]]:
    """The (kind, document) records of one approval session: started, decision, ended."""
    started = events.started_here(name=APPROVALS_NAME, transport=None, command=server)
    decision = events.Decision(
        decision="allow",
        final="allow",
        source="user" if decided_by == "user" else "policy",
        decided_by=decided_by,
        rule=PIN_RULE,
        server=server,
        tool=tool,
        method=APPROVE_METHOD,
        reason=reason or f"definition {tooldefs.short(definition_hash)} approved",
        extra={"definition_hash": definition_hash},
    )
    ended = events.SessionEnded(reason="completed", outcome="ok")
    return [(d.KIND, events.encode(d)) for d in (started, decision, ended)]


def recorded_hashes(store: EventStore, server: str, tool: str) -> list[str]:
    """The definition hashes recorded for a server's tool, newest first (distinct)."""
    seen: list[str] = []
    for info in server_sessions(store, server):
        found = []
        for ev in store.read_session(info.session_id):
            if ev.kind == events.ToolsListed.KIND:
                doc = events.decode_as(events.ToolsListed, ev.raw)
                for item in doc.items if doc is not None else []:
                    if isinstance(item, dict) and item.get("name") == tool:
                        found.append(str(item.get("hash")))
        for h in reversed(found):
            if h not in seen:
                seen.append(h)
    return seen


def approve(
    store: EventStore, server: str, tool: str, hash_: str | None = None, reason: str | None = None
) -> str:
    """Record an approval of SERVER's TOOL at `hash_` (a whole hash or a recorded one's prefix;
    None: the definition recorded last). Returns the whole hash approved."""
    recorded = recorded_hashes(store, server, tool)
    if hash_ is None:
        if not recorded:
            raise ApprovalError(f"no definition of {tool!r} recorded for server {server!r}")
        chosen = recorded[0]
    else:
        matches = [h for h in recorded if h.startswith(hash_.lower())]
        if len(matches) == 1:
            chosen = matches[0]
        elif len(hash_) == 64 and all(c in "0123456789abcdef" for c in hash_.lower()):
            chosen = hash_.lower()
        elif matches:
            raise ApprovalError(f"hash prefix {hash_!r} is ambiguous: give more characters")
        else:
            raise ApprovalError(
                f"no recorded definition of {server} {tool} has a hash starting {hash_!r}"
            )
    sid = new_session_id()
    now = time.time_ns()
    store.append(
        [
            NewEvent(sid, seq, now, seq, kind, str(Direction.NONE), raw)
            for seq, (kind, raw) in enumerate(
                approval_records(server, tool, chosen, "user", reason), start=1
            )
        ]
    )
    return chosen


# -- the gate's side -----------------------------------------------------------------------------


class Pinner:
    """One gated session's pinning state: the definitions its `tools/list` answers gave, and the
    approvals (read by `load`, in the background at start). `record(server, tool, hash)` writes
    a trust-on-first-use approval."""

    def __init__(
        self,
        settings: PinSettings,
        load: Callable[[], dict[tuple[str, str], str]] | None,
        record: Callable[[str, str, str], None] | None = None,
        server: str | None = None,
    ) -> None:
        self.settings = settings
        self.server = server
        self._load = load
        self._record = record
        self.current: dict[str, str] = {}
        # Tool names the latest list gave twice, or with lookalikes: their names as listed.
        self.ambiguous: dict[str, list[str]] = {}
        self._last_answer = b""
        self._pending: set[tuple[str, str | None, str | None]] = set()
        self.approved: dict[tuple[str, str], str] = {}
        self._loaded = threading.Event()
        self._loaded_at = 0.0
        self._lock = threading.Lock()
        if load is None:
            self._loaded.set()
        else:
            threading.Thread(target=self.refresh, daemon=True).start()

    def refresh(self) -> None:
        """Read the approvals again (a store that fails keeps the ones read before)."""
        try:
            if self._load is not None:
                fresh = self._load()
                with self._lock:
                    self.approved.update(fresh)
        except Exception:  # an unreadable store: the approvals known so far stand
            pass
        finally:
            self._loaded_at = time.monotonic()
            self._loaded.set()

    # -- frames --------------------------------------------------------------------------------

    def frame(self, session: str, direction: str, raw: bytes) -> None:
        """A frame of one of several sessions (the HTTP proxy's): ids are per session."""
        if direction == Direction.CLIENT_TO_SERVER:
            self.client_frame(raw, session)
        elif direction == Direction.SERVER_TO_CLIENT:
            self.server_frame(raw, session)

    def client_frame(self, raw: bytes, session: str = "") -> None:
        """A client-to-server frame: remember the ids of `tools/list` requests."""
        if b"tools/list" not in raw:
            return
        value, problem = parse(raw)
        for msg in (value if isinstance(value, list) else [value]) if problem is None else []:
            if isinstance(msg, dict) and msg.get("method") == "tools/list" and "id" in msg:
                self._pending.add((session, *id_fields(msg["id"])))

    def server_frame(self, raw: bytes, session: str = "") -> None:
        """A server-to-client frame: the answer to a `tools/list` gives the current
        definitions."""
        if not self._pending or b'"tools"' not in raw:
            return
        value, problem = parse(raw)
        for msg in (value if isinstance(value, list) else [value]) if problem is None else []:
            if not isinstance(msg, dict) or "id" not in msg or "method" in msg:
                continue
            ident = (session, *id_fields(msg["id"]))
            if ident not in self._pending:
                continue
            self._pending.discard(ident)
            if raw != self._last_answer:  # the same bytes again: the same definitions
                self._last_answer = raw
                items = tooldefs.listed_items("tools/list", msg.get("result"))
                for kind, name, item in items:
                    self.current[name] = tooldefs.definition_hash(kind, item)
                groups = tool_names.ambiguous((kind, name) for kind, name, _ in items)
                self.ambiguous = {name: names for (_k, name), names in groups.items()}
            if self.settings.tofu:
                for name in list(self.current):
                    if name not in self.ambiguous:  # nothing to trust: which one is it?
                        self._first_use(name)

    def _first_use(self, tool: str) -> None:
        """Trust on first use: approve a pinned tool's definition as it is first seen."""
        if not self.settings.pinned(self.server, tool):
            return
        self._loaded.wait(LOAD_WAIT_SECONDS)
        key = (self.server or "", tool)
        if key in self.approved:
            return
        self.approved[key] = self.current[tool]
        if self._record is not None:
            self._record(self.server or "", tool, self.current[tool])

    # -- deciding ------------------------------------------------------------------------------

    def check(self, server: str | None, tool: str | None) -> tuple[str, str] | None:
        """None when the call may go on to the ordinary rules; else (rule, reason) of a
        denial that names the change."""
        if tool is None or not self.settings.pinned(server, tool):
            return None
        current = self.current.get(tool)
        if current is None:
            return None
        names = self.ambiguous.get(tool)
        if names is not None:
            # Hosts pick differently among same-named definitions (the first, the last, one
            # key for both): no definition is "the" one the host uses, so none is approved.
            return (
                PIN_RULE,
                f"pinned tool {tool!r} is ambiguous: the server's tools/list names "
                f"{tool_names.describe(names)}; no definition can be judged as the one the host "
                "uses",
            )
        self._loaded.wait(LOAD_WAIT_SECONDS)
        key = (server or "", tool)
        approved = self.approved.get(key)
        if approved != current and time.monotonic() - self._loaded_at > REFRESH_SECONDS:
            self.refresh()  # approved since the last read?
            approved = self.approved.get(key)
        if approved == current:
            return None
        if approved is None:
            return (
                PIN_RULE,
                f"pinned tool {tool!r} has no approved definition (current "
                f"{tooldefs.short(current)}): review it and run "
                f"`blackbox tools approve {server} {tool}`",
            )
        return (
            PIN_RULE,
            f"pinned tool {tool!r} changed: approved definition {tooldefs.short(approved)}, "
            f"current {tooldefs.short(current)}; see `blackbox tools --history {tool}` and "
            f"approve with `blackbox tools approve {server} {tool}`",
        )


def pinner_of(policy: Any) -> Pinner | None:
    """The session's pinner of a tap's policy: a `Policy`, or a `LivePolicy` (its `policy` is
    the version in force; `carry_over` moves the pinner on at each reload)."""
    return getattr(getattr(policy, "policy", policy), "pinner", None)


def attach(
    policy: Any,
    store_factory: Callable[[], EventStore] | None,
    journal: Any,
    server: str | None,
) -> None:
    """Give a tap's policy a `Pinner` when it pins anything: approvals read from the store,
    trust-on-first-use approvals written to the tap's `journal` as sessions of their own."""
    policy = getattr(policy, "policy", policy)  # a live policy: the version in force
    settings = getattr(policy, "pins", None)
    if settings is None:
        return

    def load() -> dict[tuple[str, str], str]:
        assert store_factory is not None
        store = store_factory()
        try:
            return load_approvals(store)
        finally:
            store.close()

    def record(server: str, tool: str, definition_hash: str) -> None:
        sid = new_session_id()
        for kind, raw in approval_records(
            server, tool, definition_hash, "trust_on_first_use", None
        ):
            journal.append(sid, kind, Direction.NONE, raw)

    policy.pinner = Pinner(settings, load if store_factory is not None else None, record, server)


def carry_over(old: Any, new: Any) -> None:
    """A policy reloaded in a running tap (`blackbox.recorder.gate.policy_reload`): the new policy's
    pinning keeps what the session has seen (current definitions, approvals) under the new settings;
    no pinning when it pins nothing. (A tap that started without pinning gains none on reload.)"""
    pinner = getattr(old, "pinner", None)
    settings = getattr(new, "pins", None)
    if pinner is None or settings is None:
        return
    pinner.settings = settings
    new.pinner = pinner
