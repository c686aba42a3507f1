"""Alembic migrations of the store. `recorder.store` runs them; `blackbox db upgrade` too."""
