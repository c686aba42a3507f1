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
from blackbox.recorder.query import session_handle
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
    every = request.query_params.get("all") == "1"
    return HTMLResponse(pages.sessions(context(request).token, q, outcome, every))


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
    ctx = context(request)
    handle = await run_in_threadpool(session_handle, ctx.store, sid)
    name = _shown(ctx, info.name)
    title = f"{name} [{handle}]" if name else handle
    return HTMLResponse(pages.session(ctx.token, sid, title, handle))


async def replay_page(request: Request) -> Response:
    found = await _session_of(request)
    if isinstance(found, Response):
        return found
    sid, info = found
    ctx = context(request)
    handle = await run_in_threadpool(session_handle, ctx.store, sid)
    return HTMLResponse(pages.replay(ctx.token, sid, _shown(ctx, info.command) or "", handle))


def _shown(ctx: Context, text: str | None) -> str | None:
    """A recorded text (a session's name, its command line) as a page may show it: redacted
    (a command line can carry a token)."""
    if text is None or ctx.redactor is None:
        return text
    return ctx.redactor.redact_frame(text.encode()).decode("utf-8", "replace")


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
