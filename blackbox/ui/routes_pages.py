"""The web UI's pages: each route a function that answers with the HTML of `blackbox.ui.pages`
(shells the page's script fills from the JSON API, `blackbox.ui.routes_api`; the SQL console is
rendered here whole). `blackbox.ui.app` lists them under their URLs.
"""

from __future__ import annotations

from html import escape

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from blackbox.recorder import BlackboxError
from blackbox.recorder.log import SessionInfo
from blackbox.ui import pages
from blackbox.ui.context import Context, context

# The SQL console shows this many rows; a query may be stopped after this long.
SQL_ROWS = 1000
SQL_TIMEOUT_S = 30.0


async def overview_page(request: Request) -> Response:
    return HTMLResponse(pages.overview(context(request).token))


async def sessions_page(request: Request) -> Response:
    q = request.query_params.get("q", "")
    outcome = request.query_params.get("outcome", "")
    return HTMLResponse(pages.sessions(context(request).token, q, outcome))


async def _session_of(request: Request) -> tuple[str, SessionInfo] | Response:
    """The session the path names, or the 404 page saying why (the reference escaped: it comes
    from the URL, and a link can put markup there)."""
    store = context(request).store
    try:
        sid = await run_in_threadpool(store.resolve, request.path_params["sid"])
        return sid, await run_in_threadpool(store.session, sid)
    except BlackboxError as exc:
        return HTMLResponse(f"<p>{escape(str(exc))}</p>", status_code=404)


async def session_page(request: Request) -> Response:
    found = await _session_of(request)
    if isinstance(found, Response):
        return found
    sid, info = found
    return HTMLResponse(pages.session(context(request).token, sid, info.name or sid[:8]))


async def replay_page(request: Request) -> Response:
    found = await _session_of(request)
    if isinstance(found, Response):
        return found
    sid, info = found
    return HTMLResponse(pages.replay(context(request).token, sid, info.command or ""))


async def sql_page(request: Request) -> Response:
    ctx = context(request)
    q = request.query_params.get("q", "").strip()
    columns: list[str] = []
    rows: list[tuple] = []
    error = None
    capped = False
    if q:
        try:
            columns, rows, capped = await run_in_threadpool(_run_sql, ctx, q)
        except BlackboxError as exc:
            error = str(exc)
    status = 400 if error else 200
    return HTMLResponse(pages.sql(ctx.token, q, columns, rows, error, capped), status)


def _run_sql(ctx: Context, q: str) -> tuple[list[str], list[tuple], bool]:
    from blackbox.analytics import start_sql

    rows: list[tuple] = []
    with start_sql(ctx.store, ctx.analytics_dir, q, timeout_s=SQL_TIMEOUT_S) as running:
        for batch in running:
            rows.extend(batch)
            if len(rows) > SQL_ROWS:
                break
        return running.columns, rows[:SQL_ROWS], len(rows) > SQL_ROWS
