"""Reading a session event's document in a test: through the schema, as a plain dict.

Every test that looks inside a record's document goes through `blackbox.recorder.log.events`, so a
document a producer writes outside the schema fails the test that reads it."""

from __future__ import annotations

import json

from blackbox.recorder.log import events
from blackbox.recorder.log.model import NewEvent, StoredEvent


def document(ev: NewEvent | StoredEvent) -> dict:
    """The document as written (its schema version checked and left out)."""
    decoded, problem = events.decode(ev.kind, ev.raw)
    assert problem is None, (ev.kind, problem, ev.raw[:200])
    value = json.loads(ev.raw)
    assert value.pop("v") == decoded.VERSION  # type: ignore[union-attr]
    return value
