"""What the web UI's routes share, and how a route finds it: `Context`, kept on the Starlette
app's state (`request.app.state.ctx`) by `blackbox.ui.app`.

Why it exists: the routes are plain module functions (`routes_pages`, `routes_api`); what they
read (the store, the directories, the token) and what they remember between requests (counts of
sealed sessions, the chains' last verdict) lives here, one per served app.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request

from blackbox.recorder.store import EventStore
from blackbox.ui import data


@dataclass
class Context:
    """What the routes share: the store, where journals and the analytics copy live, the token,
    the redactor."""

    store: EventStore
    journal_dir: Path | None
    analytics_dir: Path
    token: str
    # Every payload a page or the API shows passes through it (None: `ui --no-redact`).
    redactor: data.Redaction | None = None
    _verified: tuple[int, dict[str, Any]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Counts of sealed sessions never change: counted once per process.
    _counts: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Set when the server stops: the event streams end on their own instead of being cancelled.
    stopping: threading.Event = field(default_factory=threading.Event)

    def counts(self, ids: list[str], sealed: set[str]) -> dict[str, dict[str, Any]]:
        """Each session's counts and outcome (`query.session_counts`), the sealed ones cached."""
        known = {i: self._counts[i] for i in ids if i in self._counts}
        fresh = data.session_counts(self.store, [i for i in ids if i not in known])
        for sid, value in fresh.items():
            if sid in sealed:
                self._counts[sid] = value
        return {**known, **fresh}

    def verify(self) -> dict[str, Any]:
        """The hash chains' verdict, computed again only when the log has grown."""
        top = self.store.max_position()
        with self._lock:
            if self._verified is not None and self._verified[0] == top:
                return self._verified[1]
            findings = self.store.verify()
            result = {
                "intact": not findings,
                "sessions": len(self.store.list_sessions()),
                "findings": [f.as_dict() for f in findings[:20]],
                "position": top,
            }
            self._verified = (top, result)
            return result


def context(request: Request) -> Context:
    """The context of the app that took `request`."""
    ctx: Context = request.app.state.ctx
    return ctx
