"""Live permissions: a tap's policy file is re-read when it changes, without a restart.

Why it exists: without it a permission change needs every tap restarted, and nothing records
which rules were in force when a call was decided. `LivePolicy` is a gate (`check(server, raw)`, as
`blackbox.recorder.gate.policy.Policy`) whose policy a background thread swaps when the file's bytes
change (read and hashed at most once per `interval`, off the relay's path: the relay only reads one
attribute). Each version in force is a `policy_loaded` record carrying the file's sha256, its
rules and who loaded it; every decision already names its version (`policy_sha256`). A new file
that does not parse keeps the old policy in force, is recorded as a failed load with its error
and is said on stderr (`on_notice`).

Two ways to record: the stdio tap has one session and gives `watch` a sink, called from the
watcher thread before a new version is used (so a version's `policy_loaded` precedes its
decisions); the HTTP proxy has many sessions and asks `unrecorded(session_id)` on its gated path
for the loads that session has not recorded yet.
"""

from __future__ import annotations

import contextlib
import fnmatch
import getpass
import hashlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blackbox.recorder.gate.pinning import carry_over
from blackbox.recorder.gate.policy import GateVerdict, Policy
from blackbox.recorder.gate.policy_rules import PolicyError, Rule
from blackbox.recorder.log import events
from blackbox.recorder.store import EventStore, records_of_kinds

DEFAULT_INTERVAL_S = 1.0
# A policy file is a few kilobytes; a file this large is refused rather than read every second.
MAX_POLICY_BYTES = 4 * 1024 * 1024
# The proxy remembers how many loads each session recorded; past this many sessions it forgets
# the oldest (a forgotten one that is still open records the history again: harmless).
_MAX_TRACKED = 10_000

Sink = Callable[[events.PolicyLoaded], None]


def _who() -> dict[str, Any]:
    user: str | None
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else None
    return {"user": user, "pid": os.getpid(), "host": socket.gethostname()}


def rule_doc(rule: Rule) -> dict[str, Any]:
    """A rule as a `policy_loaded` record lists it."""
    when = []
    for cond in rule.when:
        value = cond.value
        if not isinstance(value, str | int | float | bool | type(None)):
            value = str(value)
        when.append({"arg": cond.arg, "op": cond.op, "value": value})
    return {
        "id": rule.id,
        "decision": rule.decision,
        "servers": list(rule.servers) if rule.servers is not None else None,
        "tools": list(rule.tools) if rule.tools is not None else None,
        "methods": list(rule.methods),
        "when": when,
        "reason": rule.reason,
        "line": rule.line,
    }


def _read(path: Path) -> bytes:
    with path.open("rb") as fh:
        data = fh.read(MAX_POLICY_BYTES + 1)
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"{path}: the policy file is larger than {MAX_POLICY_BYTES} bytes")
    return data


class LivePolicy:
    """A policy file kept in force as it changes. Raises `PolicyError` when the file does not
    load at start (a tap must not start with no policy at all)."""

    def __init__(
        self,
        path: Path,
        interval: float = DEFAULT_INTERVAL_S,
        on_notice: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.interval = interval
        self.on_notice = on_notice or (lambda _msg: None)
        try:
            data = _read(self.path)
        except OSError as exc:
            raise PolicyError(f"{self.path}: cannot read the policy file: {exc.strerror}") from None
        self.policy = Policy.from_bytes(data, str(self.path))
        self._seen = self.policy.sha256  # the sha256 of the bytes last read, loaded or not
        self._who = _who()
        self.history: list[events.PolicyLoaded] = [self._loaded(self.policy, None, "start")]
        self._lock = threading.Lock()
        self._sinks: list[Sink] = []
        self._recorded: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the gate ------------------------------------------------------------------------------

    @property
    def sha256(self) -> str | None:
        return self.policy.sha256

    def check(self, server: str | None, raw: bytes) -> GateVerdict | None:
        return self.policy.check(server, raw)  # one attribute read: the swap is atomic

    # -- recording -----------------------------------------------------------------------------

    def watch(self, sink: Sink | None = None) -> None:
        """Record every load so far through `sink` (if given), then each later one as it
        happens; starts the watcher thread on the first call."""
        with self._lock:
            if sink is not None:
                for doc in self.history:
                    sink(doc)
                self._sinks.append(sink)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="blackbox-policy-watch", daemon=True
                )
                self._thread.start()

    def unrecorded(self, key: str) -> list[bytes]:
        """The encoded loads the session `key` has not recorded yet (and now counts as
        recorded): the proxy records them just before its next decision."""
        with self._lock:
            done = self._recorded.pop(key, 0)
            self._recorded[key] = len(self.history)
            if len(self._recorded) > _MAX_TRACKED:
                self._recorded.pop(next(iter(self._recorded)))
            return [events.encode(doc) for doc in self.history[done:]]

    def stop(self) -> None:
        """Stop watching (the tap is closing); no sink is called after this returns."""
        self._stop.set()
        with self._lock:
            self._sinks.clear()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval + 1.0)

    # -- the watcher ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):  # a watcher that dies would fail silently
                self.poll()

    def poll(self) -> events.PolicyLoaded | None:
        """Read the file once; when its bytes changed, load them and record the load (also
        a failed one). Returns the load recorded, if any."""
        try:
            data = _read(self.path)
        except (OSError, PolicyError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            sha = "unreadable:" + str(why)
            if sha == self._seen:
                return None
            self._seen = sha
            err = PolicyError(f"{self.path}: cannot read the policy file: {why}")
            return self._record(self._failed(None, err))
        sha = hashlib.sha256(data).hexdigest()
        if sha == self._seen:
            return None
        self._seen = sha
        try:
            policy = Policy.from_bytes(data, str(self.path))
        except PolicyError as exc:
            return self._record(self._failed(sha, exc))
        doc = self._loaded(policy, self.policy.sha256, "changed")
        # Recorded before the swap: a version's decisions come after its `policy_loaded`.
        self._record(doc)
        carry_over(self.policy, policy)  # tool pinning keeps what the session has seen
        self.policy = policy
        self.on_notice(f"policy {self.path} reloaded: version {sha[:12]} in force")
        return doc

    def _record(self, doc: events.PolicyLoaded) -> events.PolicyLoaded:
        with self._lock:
            self.history.append(doc)
            for sink in self._sinks:
                with contextlib.suppress(Exception):
                    sink(doc)
        return doc

    def _loaded(self, policy: Policy, previous: str | None, trigger: str) -> events.PolicyLoaded:
        return events.PolicyLoaded(
            ok=True,
            sha256=policy.sha256,
            path=str(self.path),
            in_force=policy.sha256,
            previous=previous,
            default=policy.default,
            rules=[rule_doc(r) for r in policy.rules],
            trigger=trigger,
            **self._who,
        )

    def _failed(self, sha: str | None, exc: PolicyError) -> events.PolicyLoaded:
        kept = self.policy.sha256
        self.on_notice(
            f"policy {self.path} did not load, keeping version {str(kept)[:12]} in force: {exc}"
        )
        return events.PolicyLoaded(
            ok=False,
            sha256=sha,
            path=str(self.path),
            in_force=kept,
            previous=kept,
            error=str(exc),
            trigger="changed",
            **self._who,
        )


# -- reading the history back --------------------------------------------------------------------


def policy_history(store: EventStore, server: str | None = None) -> list[dict[str, Any]]:
    """The policy versions the taps recorded, oldest first: one row per version and server,
    with when it was first and last recorded, in how many sessions, and by whom; failed loads
    are rows of their own (`ok` false, with the error). `server` is a shell glob over the
    session's name, matched as `fnmatch.fnmatchcase` (and the stores' name globs) match it."""
    names: dict[str, str | None] = {}
    rows: dict[tuple, dict[str, Any]] = {}
    for sid, _kind, wall_ns, raw in records_of_kinds(store, [events.PolicyLoaded.KIND]):
        doc = events.decode_as(events.PolicyLoaded, raw)
        if doc is None:
            continue
        if sid not in names:
            names[sid] = store.session(sid).name
        name = names[sid]
        if server is not None and not fnmatch.fnmatchcase(name or "", server):
            continue
        key = (name, doc.ok, doc.sha256, doc.error)
        row = rows.get(key)
        if row is None:
            row = rows[key] = {
                "server": name,
                "version": doc.sha256,
                "ok": doc.ok,
                "first_ns": wall_ns,
                "last_ns": wall_ns,
                "sessions": set(),
                "rules": len(doc.rules),
                "default": doc.default,
                "path": doc.path,
                "loaded_by": f"{doc.user}@{doc.host} pid {doc.pid}",
                "kept": doc.in_force if not doc.ok else None,
                "error": doc.error,
            }
        row["last_ns"] = max(row["last_ns"], wall_ns)
        row["sessions"].add(sid)
    out = sorted(rows.values(), key=lambda r: (r["first_ns"], str(r["server"])))
    for row in out:
        row["sessions"] = len(row["sessions"])
    return out
