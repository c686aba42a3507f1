"""Alembic migrations of the store. `blackbox.recorder.store` runs them; `blackbox db upgrade` too.

`REVISIONS` lists every revision in order, so that opening a store can check its schema without
importing Alembic (a test keeps this list equal to the versions directory).
"""

REVISIONS = ("0001", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011")
HEAD = REVISIONS[-1]
