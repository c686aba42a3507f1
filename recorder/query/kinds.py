"""Counting records of one kind in given sessions, for listings that flag sessions (such as
`blackbox sessions`' `tools_changed`): one query over the sessions' own records through the
(session_id, seq) index, never a scan of the whole log by kind."""

from __future__ import annotations

from collections.abc import Sequence

from blackbox.recorder.store import events, layout
from sqlalchemy import func, select


def kind_counts(store: object, session_ids: Sequence[str], kind: str) -> dict[str, int]:
    """How many records of `kind` each of these sessions holds (sessions without any are
    absent); {} for a store without SQL access or on any error (a listing never fails for
    want of a flag)."""
    engine = getattr(store, "engine", None)
    if engine is None or not session_ids:
        return {}
    # By the sessions' 16 bytes: the (sid, seq) index of the log's table (`layout.view_sql`).
    keys = {layout.sid_bytes(sid): sid for sid in session_ids}
    query = (
        select(events.c.sid, func.count())
        .where(events.c.sid.in_(list(keys)))
        .where(events.c.kind == kind)
        .group_by(events.c.sid)
    )
    try:
        with engine.connect() as conn:
            return {keys[bytes(key)]: int(n) for key, n in conn.execute(query)}
    except Exception:
        return {}
