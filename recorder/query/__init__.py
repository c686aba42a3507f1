"""The read model: how sessions, their records and their timelines are read back.

The sessions listing with its filters (`listing`), the short handle every surface prints and
every command accepts (`handles`), a session's counts and outcome as every surface shows them
(`counts`), paged reads for live views (`browse`), following the log as it grows (`follow`), a
session's timeline (`timeline`) and the short text of a record (`excerpt`).
"""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.recorder.query import handles as handles
    from blackbox.recorder.query import listing as listing
    from blackbox.recorder.query.browse import PAGE as PAGE
    from blackbox.recorder.query.browse import TIMELINE_PAGE as TIMELINE_PAGE
    from blackbox.recorder.query.browse import SessionQuery as SessionQuery
    from blackbox.recorder.query.browse import answer_seq as answer_seq
    from blackbox.recorder.query.browse import newest_checkpoint as newest_checkpoint
    from blackbox.recorder.query.browse import parse_cursor as parse_cursor
    from blackbox.recorder.query.browse import session_counts as session_counts
    from blackbox.recorder.query.browse import session_page as session_page
    from blackbox.recorder.query.browse import timeline_page as timeline_page
    from blackbox.recorder.query.counts import COUNT_NAMES as COUNT_NAMES
    from blackbox.recorder.query.counts import SessionCounts as SessionCounts
    from blackbox.recorder.query.counts import count_sessions as count_sessions
    from blackbox.recorder.query.counts import derived_outcome as derived_outcome
    from blackbox.recorder.query.excerpts import excerpt as excerpt
    from blackbox.recorder.query.handles import handles_for as handles_for
    from blackbox.recorder.query.handles import session_handle as session_handle
    from blackbox.recorder.query.handles import short_handles as short_handles
    from blackbox.recorder.query.kinds import kind_counts as kind_counts
    from blackbox.recorder.query.live_feed import Follower as Follower
    from blackbox.recorder.query.live_feed import Record as Record
    from blackbox.recorder.query.live_feed import backlog as backlog
    from blackbox.recorder.query.live_feed import follow as follow
    from blackbox.recorder.query.timeline import COLUMNS as COLUMNS
    from blackbox.recorder.query.timeline import timeline_rows as timeline_rows

_FACE: dict[str, tuple[str, str | None]] = {
    "COLUMNS": ("blackbox.recorder.query.timeline", "COLUMNS"),
    "Follower": ("blackbox.recorder.query.live_feed", "Follower"),
    "PAGE": ("blackbox.recorder.query.browse", "PAGE"),
    "Record": ("blackbox.recorder.query.live_feed", "Record"),
    "SessionQuery": ("blackbox.recorder.query.browse", "SessionQuery"),
    "TIMELINE_PAGE": ("blackbox.recorder.query.browse", "TIMELINE_PAGE"),
    "answer_seq": ("blackbox.recorder.query.browse", "answer_seq"),
    "backlog": ("blackbox.recorder.query.live_feed", "backlog"),
    "COUNT_NAMES": ("blackbox.recorder.query.counts", "COUNT_NAMES"),
    "SessionCounts": ("blackbox.recorder.query.counts", "SessionCounts"),
    "count_sessions": ("blackbox.recorder.query.counts", "count_sessions"),
    "derived_outcome": ("blackbox.recorder.query.counts", "derived_outcome"),
    "excerpt": ("blackbox.recorder.query.excerpts", "excerpt"),
    "follow": ("blackbox.recorder.query.live_feed", "follow"),
    "handles": ("blackbox.recorder.query.handles", None),
    "handles_for": ("blackbox.recorder.query.handles", "handles_for"),
    "kind_counts": ("blackbox.recorder.query.kinds", "kind_counts"),
    "listing": ("blackbox.recorder.query.listing", None),
    "newest_checkpoint": ("blackbox.recorder.query.browse", "newest_checkpoint"),
    "parse_cursor": ("blackbox.recorder.query.browse", "parse_cursor"),
    "session_counts": ("blackbox.recorder.query.browse", "session_counts"),
    "session_handle": ("blackbox.recorder.query.handles", "session_handle"),
    "session_page": ("blackbox.recorder.query.browse", "session_page"),
    "short_handles": ("blackbox.recorder.query.handles", "short_handles"),
    "timeline_page": ("blackbox.recorder.query.browse", "timeline_page"),
    "timeline_rows": ("blackbox.recorder.query.timeline", "timeline_rows"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---
