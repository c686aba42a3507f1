"""The web UI's JSON API and its live stream: each route a function over the context of the app
that took the request (`blackbox.ui.context`). The reads are `blackbox.ui.data`'s and the query
context's; a replay and its side-by-side diff are `blackbox.replay.side_by_side`'s; the live feed
is `blackbox.recorder.query.live_feed` (store and running taps' journals) as server-sent events.
`blackbox.ui.app` lists them under their URLs.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from blackbox.recorder import BlackboxError
from blackbox.recorder.query import Follower, Record
from blackbox.ui import data
from blackbox.ui.context import Context, context

LIVE_POLL_S = 0.2


async def api_sessions(request: Request) -> Response:
    params = request.query_params
    query = data.SessionQuery(
        q=params.get("q") or None,
        outcome=params.get("outcome") or None,
        before=data.parse_cursor(params.get("before")),
        limit=min(int(params.get("limit", data.PAGE)), 500),
        background=params.get("all") == "1",
    )
    ctx = context(request)
    page = await run_in_threadpool(data.session_page, ctx.store, query)
    return JSONResponse(await run_in_threadpool(_redacted, ctx, page))


async def api_counts(request: Request) -> Response:
    ids = [i for i in request.query_params.get("ids", "").split(",") if i][: data.PAGE * 5]
    sealed = set(request.query_params.get("sealed", "").split(","))
    counts = await run_in_threadpool(context(request).counts, ids, sealed)
    return JSONResponse(counts)


async def api_records(request: Request) -> Response:
    sid = request.path_params["sid"]
    after = int(request.query_params.get("after_seq", 0))
    limit = min(int(request.query_params.get("limit", data.TIMELINE_PAGE)), 1000)
    ctx = context(request)
    redact = ctx.redactor.redact_frame if ctx.redactor is not None else None
    page = await run_in_threadpool(data.timeline_page, ctx.store, sid, after, limit, redact)
    return JSONResponse(page)


async def api_record(request: Request) -> Response:
    sid, seq = request.path_params["sid"], int(request.path_params["seq"])
    ctx = context(request)
    detail = await run_in_threadpool(data.record_detail, ctx.store, sid, seq, ctx.redactor)
    if detail is None:
        return JSONResponse({"error": "no such record"}, 404)
    return JSONResponse(detail)


async def api_overview(request: Request) -> Response:
    try:
        doc = await run_in_threadpool(_overview, context(request))
    except BlackboxError as exc:
        return JSONResponse({"error": str(exc)}, 500)
    return JSONResponse(doc)


async def api_verify(request: Request) -> Response:
    ctx = context(request)
    doc = await run_in_threadpool(ctx.verify)
    doc["checkpoint"] = await run_in_threadpool(data.newest_checkpoint, ctx.store)
    return JSONResponse(doc, headers={"cache-control": "no-store"})


async def api_replay_risks(request: Request) -> Response:
    """The calls a replay would send that may change something: the page names their tools in
    its confirmation dialog before it starts the replay."""
    from blackbox.replay import calls_at_risk

    try:
        risky = await run_in_threadpool(
            calls_at_risk, context(request).store, request.path_params["sid"]
        )
    except BlackboxError as exc:
        return JSONResponse({"error": str(exc)}, 400)
    return JSONResponse({"calls": risky, "tools": sorted({c["tool"] for c in risky})})


async def api_replay(request: Request) -> Response:
    """Start a replay. The body's `allow_tools` names the tools whose possibly-writing calls the
    person confirmed; any other such call is skipped here, whatever the page did or did not ask
    (a request is not trusted to have shown the dialog)."""
    from blackbox.replay import replay_side_by_side

    try:
        body = await request.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    against = body.get("against")
    against = (against.strip() or None) if isinstance(against, str) else None
    named = body.get("allow_tools")
    allow = [t for t in named if isinstance(t, str)] if isinstance(named, list) else []
    try:
        doc = await run_in_threadpool(
            replay_side_by_side, context(request).store, request.path_params["sid"], against, allow
        )
    except BlackboxError as exc:
        return JSONResponse({"error": str(exc)}, 400)
    return JSONResponse(await run_in_threadpool(_redacted, context(request), doc))


async def api_live(request: Request) -> Response:
    from sse_starlette.sse import EventSourceResponse

    ctx = context(request)
    session = request.query_params.get("session") or None
    follower = await run_in_threadpool(Follower, ctx.store, ctx.journal_dir, session)
    return EventSourceResponse(_live(request, follower, ctx.stopping), ping=10)


async def _live(
    request: Request, follower: Follower, stopping: threading.Event
) -> AsyncIterator[dict[str, str]]:
    try:
        while not stopping.is_set() and not await request.is_disconnected():
            batch = await run_in_threadpool(follower.poll)
            if batch:
                # A burst is summarised by its last records: the page asks for what it shows.
                yield {"event": "records", "data": json.dumps([_summary(r) for r in batch[-200:]])}
            else:
                await asyncio.sleep(LIVE_POLL_S)
    finally:
        follower.close()


def _redacted(ctx: Context, doc: Any) -> Any:
    """A JSON document as the page may show it: every string in it through the redactor (the
    session list's commands and names, a replay's recorded and live answers)."""
    return doc if ctx.redactor is None else ctx.redactor.redact_value(doc)


def _summary(rec: Record) -> dict[str, Any]:
    return {
        "session": rec.session_id,
        "seq": rec.seq,
        "kind": rec.kind,
        "method": rec.method,
        "type": rec.msg_type,
        "wall_ns": rec.wall_ns,
    }


def _overview(ctx: Context) -> dict[str, Any]:
    from blackbox.analytics import refreshed_connection

    con, _ = refreshed_connection(ctx.store, ctx.analytics_dir)
    try:
        return data.overview(con)
    finally:
        con.close()
