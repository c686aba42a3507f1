"""A session's short handle: the one way every command and page names a session in few characters.

Session ids are UUIDv7, whose first characters are the start time: sessions started in the same
second share them, so a prefix says when, not which. A handle is the shortest tail (six characters
or more) of an id's last group, the random part, that no other stored id ends with or starts
with; when two ids share a tail it grows until they differ. The store's `resolve` takes it like a
prefix, so whatever `sessions`, `show`, `tail`, a suite's table or JUnit, `minimize`, `replay` or
the web UI printed can be typed back into any command that takes a session.

Only the ids asked about are given a handle: the store returns the few ids that share six
characters with one's tail (one pass over the ids in the database, no index serves "ends with"),
and the handles are counted among those.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from blackbox.recorder.store import sessions
from sqlalchemy import func, or_, select

HANDLE_MIN = 6
# Ids bound in one statement (PostgreSQL takes at most 65,535 parameters, SQLite 32,766); above
# this many, the handles are counted among every id, read once.
_IDS_PER_QUERY = 1000


def _engine(store: Any) -> Any:
    engine = getattr(store, "engine", None)
    if engine is None:
        raise TypeError(f"{type(store).__name__} is not an SQL store")
    return engine


def session_handle(store: Any, session_id: str) -> str:
    """The short handle of one session (see the module docstring)."""
    return short_handles(store, [session_id])[session_id]


def all_session_ids(store: Any) -> list[str]:
    with _engine(store).connect() as conn:
        return [row[0] for row in conn.execute(select(sessions.c.session_id))]


def short_handles(store: Any, session_ids: Sequence[str] | None = None) -> dict[str, str]:
    """The short handle of each of `session_ids`, or of every session id in the store, unique
    among every id the store holds (an id it does not hold yet gets one too)."""
    if session_ids is None or len(session_ids) > _IDS_PER_QUERY:
        everyone = all_session_ids(store)
        return handles_for(everyone if session_ids is None else session_ids, everyone)
    return handles_for(session_ids, _rivals(store, session_ids))


def _rivals(store: Any, session_ids: Sequence[str]) -> list[str]:
    """The ids that could stand in the way of a handle of `session_ids`: those ending with one's
    last `HANDLE_MIN` characters or starting with `HANDLE_MIN` characters of one's last group.
    Any id that ends or starts with a longer tail is one of them, so the handles among these
    are the handles among all ids. The store filters its ids itself, so that a page's handles
    do not cost a read of every id into Python."""
    groups = [i.rsplit("-", 1)[-1] for i in session_ids]
    groups = [g for g in groups if len(g) >= HANDLE_MIN]
    if not groups:
        return []
    tails = sorted({g[-HANDLE_MIN:] for g in groups})
    starts = sorted({g[j : j + HANDLE_MIN] for g in groups for j in range(len(g) - HANDLE_MIN + 1)})
    sid = sessions.c.session_id
    with _engine(store).connect() as conn:
        if conn.dialect.name == "postgresql":
            last, first = func.right(sid, HANDLE_MIN), func.left(sid, HANDLE_MIN)
        else:
            last, first = func.substr(sid, -HANDLE_MIN), func.substr(sid, 1, HANDLE_MIN)
        query = select(sid).where(or_(last.in_(tails), first.in_(starts)))
        return [row[0] for row in conn.execute(query)]


def handles_for(ids: Iterable[str], others: Iterable[str] = ()) -> dict[str, str]:
    """The shortest tail of each of `ids` (at least `HANDLE_MIN` characters, within the last
    group) that no other id of `ids` or `others` ends with or starts with; ids not shaped like
    UUIDs keep their full text."""
    ids = list(dict.fromkeys(ids))
    among = list(dict.fromkeys([*ids, *others]))
    handles: dict[str, str] = {}
    pending = [i for i in ids if len(i.rsplit("-", 1)[-1]) >= HANDLE_MIN]
    for i in ids:
        handles[i] = i
    longest = max((len(i.rsplit("-", 1)[-1]) for i in pending), default=0)
    for size in range(HANDLE_MIN, longest + 1):
        if not pending:
            break
        tails = Counter(i[-size:] for i in among)
        heads = Counter(i[:size] for i in among)
        left = []
        for i in pending:
            tail = i[-size:]
            own_head = 1 if i[:size] == tail else 0
            if tails[tail] == 1 and heads[tail] == own_head and "-" not in tail:
                handles[i] = tail
            else:
                left.append(i)
        pending = left
    return handles
