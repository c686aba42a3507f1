"""What the SQLite and PostgreSQL event stores share: `SqlEventStore`, the class both subclass.

It is composed of one mixin per job, each in a module beside this one over the shared base
(`sql_base.SqlStoreBase`: the engine, the backend's hooks, driver errors converted to
`blackbox.recorder.errors` in one place, so callers see one clear message whatever the backend):

- `sql_append`: the append path (chaining, gap and seal checks, the insert);
- `sql_reads`: session rows, the listing, resolving a reference, streaming records;
- `sql_verify`: the chain, derived columns and projection checked against the records.

Holds and retention stay here: they are short, and removing sessions writes its record through
the append path and checks the holds in the same transaction. A backend
(`blackbox.recorder.store.sqlite`, `blackbox.recorder.store.postgres`) subclasses `SqlEventStore`
with its engine, its bulk insert and its way of checking a long chain; `open_store` picks the
class.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from blackbox.recorder import AppendRefused
from blackbox.recorder.log import events as record_docs
from blackbox.recorder.store import removals
from blackbox.recorder.store.schema import holds
from blackbox.recorder.store.sql_append import AppendMixin
from blackbox.recorder.store.sql_reads import ReadMixin
from blackbox.recorder.store.sql_verify import VerifyMixin
from sqlalchemy import delete, insert, select


class SqlEventStore(AppendMixin, ReadMixin, VerifyMixin):
    """The event store over one SQLAlchemy engine; a backend supplies what is marked abstract
    (in `sql_base.SqlStoreBase`)."""

    # -- holds and retention -----------------------------------------------------------------

    def add_hold(self, session_id: str, reason: str) -> None:
        with self._translated(), self.engine.connect() as conn:
            self._begin_write(conn)
            conn.execute(delete(holds).where(holds.c.session_id == session_id))
            conn.execute(
                insert(holds).values(
                    session_id=session_id, reason=reason, created_ns=time.time_ns()
                )
            )
            conn.commit()

    def remove_hold(self, session_id: str) -> bool:
        with self._translated(), self.engine.connect() as conn:
            self._begin_write(conn)
            removed = conn.execute(delete(holds).where(holds.c.session_id == session_id)).rowcount
            conn.commit()
        return bool(removed)

    def list_holds(self) -> list[tuple[str, str, int]]:
        with self._translated(), self.engine.connect() as conn:
            return [
                (row.session_id, row.reason, row.created_ns)
                for row in conn.execute(select(holds).order_by(holds.c.created_ns))
            ]

    def remove_sessions(
        self,
        session_ids: Sequence[str],
        applied: record_docs.RetentionApplied | None = None,
        record_session: str | None = None,
        authorise: removals.Authorise | None = None,
    ) -> int:
        ids = list(dict.fromkeys(session_ids))
        if not ids:
            return 0
        with self._translated(), self.engine.connect() as conn:
            self._begin_write(conn)
            self._lock_log(conn)
            held = conn.execute(select(holds.c.session_id).where(holds.c.session_id.in_(ids))).all()
            if held:
                raise AppendRefused(f"session {held[0].session_id} is on legal hold")
            removed = removals.record_and_remove(
                conn,
                lambda evs: self._append_in(conn, evs),
                ids,
                applied,
                record_session,
                authorise,
            )
            conn.commit()
        return removed

    def removals(self) -> list[removals.Removal]:
        with self._translated(), self.engine.connect() as conn:
            return removals.listed(conn)
