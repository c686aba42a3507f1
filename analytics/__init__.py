"""Analytics: the log as Parquet, DuckDB views, reports, the doctor and `blackbox sql`."""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.analytics.doctor_session import SLOW_S as SLOW_S
    from blackbox.analytics.doctor_session import doctor as doctor
    from blackbox.analytics.doctor_session import render_text as render_text
    from blackbox.analytics.html import render as render
    from blackbox.analytics.reports import GROUPS as GROUPS
    from blackbox.analytics.reports import KINDS as KINDS
    from blackbox.analytics.reports import Filters as Filters
    from blackbox.analytics.reports import Report as Report
    from blackbox.analytics.reports import refreshed_connection as refreshed_connection
    from blackbox.analytics.reports import run_report as run_report
    from blackbox.analytics.sql import QueryCancelled as QueryCancelled
    from blackbox.analytics.sql import start_sql as start_sql
    from blackbox.analytics.tools import ToolFilters as ToolFilters
    from blackbox.analytics.tools import run_tools as run_tools
    from blackbox.analytics.tools import shorten as shorten

_FACE: dict[str, tuple[str, str | None]] = {
    "Filters": ("blackbox.analytics.reports", "Filters"),
    "GROUPS": ("blackbox.analytics.reports", "GROUPS"),
    "KINDS": ("blackbox.analytics.reports", "KINDS"),
    "QueryCancelled": ("blackbox.analytics.sql", "QueryCancelled"),
    "Report": ("blackbox.analytics.reports", "Report"),
    "SLOW_S": ("blackbox.analytics.doctor_session", "SLOW_S"),
    "ToolFilters": ("blackbox.analytics.tools", "ToolFilters"),
    "doctor": ("blackbox.analytics.doctor_session", "doctor"),
    "refreshed_connection": ("blackbox.analytics.reports", "refreshed_connection"),
    "render": ("blackbox.analytics.html", "render"),
    "render_text": ("blackbox.analytics.doctor_session", "render_text"),
    "run_report": ("blackbox.analytics.reports", "run_report"),
    "run_tools": ("blackbox.analytics.tools", "run_tools"),
    "shorten": ("blackbox.analytics.tools", "shorten"),
    "start_sql": ("blackbox.analytics.sql", "start_sql"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---
