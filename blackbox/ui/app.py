"""`blackbox ui`: the local web app (Starlette), its routes, and how it is served.

Why it exists: the CLI shows a record after the fact; this shows it while it is written, in a
browser, every view at a URL of its own. Pages are shells (`blackbox.ui.pages`) filled by one small
script from the JSON API below; live updates are server-sent events fed by
`blackbox.recorder.query.follow` (store and running taps' journals). Everything is read-only over
the store except starting a replay, and everything sits behind `blackbox.ui.security.Guard`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from blackbox.recorder.errors import BlackboxError
from blackbox.recorder.query.follow import Follower, Record
from blackbox.recorder.store import EventStore
from blackbox.ui import data, pages
from blackbox.ui.security import Guard

STATIC = Path(__file__).parent / "static"
# The SQL console shows this many rows; a query may be stopped after this long.
SQL_ROWS = 1000
SQL_TIMEOUT_S = 30.0
LIVE_POLL_S = 0.2


@dataclass
class Context:
    """What the routes share: the store, where journals and the analytics copy live, the token."""

    store: EventStore
    journal_dir: Path | None
    analytics_dir: Path
    token: str
    _verified: tuple[int, dict[str, Any]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Counts of sealed sessions never change: counted once per process.
    _counts: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    # Set when the server stops: the event streams end on their own instead of being cancelled.
    stopping: threading.Event = field(default_factory=threading.Event)

    def counts(self, ids: list[str], sealed: set[str]) -> dict[str, tuple[int, int, int]]:
        known = {i: self._counts[i] for i in ids if i in self._counts}
        fresh = data.session_counts(self.store, [i for i in ids if i not in known])
        for sid, value in fresh.items():
            if sid in sealed:
                self._counts[sid] = value
        return {**known, **fresh}

    def verify(self) -> dict[str, Any]:
        """The hash chains' verdict, computed again only when the log has grown."""
        top = self.store.max_position()
        with self._lock:
            if self._verified is not None and self._verified[0] == top:
                return self._verified[1]
            findings = self.store.verify()
            result = {
                "intact": not findings,
                "sessions": len(self.store.list_sessions()),
                "findings": [f.as_dict() for f in findings[:20]],
                "position": top,
            }
            self._verified = (top, result)
            return result


def _summary(rec: Record) -> dict[str, Any]:
    return {
        "session": rec.session_id,
        "seq": rec.seq,
        "kind": rec.kind,
        "method": rec.method,
        "type": rec.msg_type,
        "wall_ns": rec.wall_ns,
    }


def routes(ctx: Context) -> list[Route | Mount]:
    """Every page and API route, unguarded (`create_app` puts the guard in front)."""

    async def overview_page(request: Request) -> Response:
        return HTMLResponse(pages.overview(ctx.token))

    async def sessions_page(request: Request) -> Response:
        q = request.query_params.get("q", "")
        outcome = request.query_params.get("outcome", "")
        return HTMLResponse(pages.sessions(ctx.token, q, outcome))

    async def session_page(request: Request) -> Response:
        try:
            sid = await run_in_threadpool(ctx.store.resolve, request.path_params["sid"])
            info = await run_in_threadpool(ctx.store.session, sid)
        except BlackboxError as exc:
            return HTMLResponse(f"<p>{exc}</p>", status_code=404)
        return HTMLResponse(pages.session(ctx.token, sid, info.name or sid[:8]))

    async def replay_page(request: Request) -> Response:
        try:
            sid = await run_in_threadpool(ctx.store.resolve, request.path_params["sid"])
            info = await run_in_threadpool(ctx.store.session, sid)
        except BlackboxError as exc:
            return HTMLResponse(f"<p>{exc}</p>", status_code=404)
        return HTMLResponse(pages.replay(ctx.token, sid, info.command or ""))

    async def sql_page(request: Request) -> Response:
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

    async def api_sessions(request: Request) -> Response:
        params = request.query_params
        query = data.SessionQuery(
            q=params.get("q") or None,
            outcome=params.get("outcome") or None,
            before=data.parse_cursor(params.get("before")),
            limit=min(int(params.get("limit", data.PAGE)), 500),
        )
        return JSONResponse(await run_in_threadpool(data.session_page, ctx.store, query))

    async def api_counts(request: Request) -> Response:
        ids = [i for i in request.query_params.get("ids", "").split(",") if i][: data.PAGE * 5]
        sealed = set(request.query_params.get("sealed", "").split(","))
        counts = await run_in_threadpool(ctx.counts, ids, sealed)
        return JSONResponse(
            {
                sid: dict(zip(("calls", "errors", "faults"), v, strict=True))
                for sid, v in counts.items()
            }
        )

    async def api_records(request: Request) -> Response:
        sid = request.path_params["sid"]
        after = int(request.query_params.get("after_seq", 0))
        limit = min(int(request.query_params.get("limit", data.TIMELINE_PAGE)), 1000)
        page = await run_in_threadpool(data.timeline_page, ctx.store, sid, after, limit)
        return JSONResponse(page)

    async def api_record(request: Request) -> Response:
        sid, seq = request.path_params["sid"], int(request.path_params["seq"])
        detail = await run_in_threadpool(data.record_detail, ctx.store, sid, seq)
        if detail is None:
            return JSONResponse({"error": "no such record"}, 404)
        return JSONResponse(detail)

    async def api_overview(request: Request) -> Response:
        try:
            doc = await run_in_threadpool(_overview, ctx)
        except BlackboxError as exc:
            return JSONResponse({"error": str(exc)}, 500)
        return JSONResponse(doc)

    async def api_verify(request: Request) -> Response:
        doc = await run_in_threadpool(ctx.verify)
        doc["checkpoint"] = await run_in_threadpool(data.newest_checkpoint, ctx.store)
        return JSONResponse(doc, headers={"cache-control": "no-store"})

    async def api_replay(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = {}
        against = (body.get("against") or "").strip() or None if isinstance(body, dict) else None
        try:
            doc = await run_in_threadpool(_replay, ctx, request.path_params["sid"], against)
        except BlackboxError as exc:
            return JSONResponse({"error": str(exc)}, 400)
        return JSONResponse(doc)

    async def api_live(request: Request) -> Response:
        from sse_starlette.sse import EventSourceResponse

        session = request.query_params.get("session") or None
        follower = await run_in_threadpool(Follower, ctx.store, ctx.journal_dir, session)
        return EventSourceResponse(_live(request, follower, ctx.stopping), ping=10)

    return [
        Route("/", overview_page),
        Route("/sessions", sessions_page),
        Route("/sessions/{sid}", session_page),
        Route("/sessions/{sid}/replay", replay_page),
        Route("/sql", sql_page),
        Route("/api/sessions", api_sessions),
        Route("/api/counts", api_counts),
        Route("/api/sessions/{sid}/records", api_records),
        Route("/api/sessions/{sid}/records/{seq:int}", api_record),
        Route("/api/sessions/{sid}/replay", api_replay, methods=["POST"]),
        Route("/api/overview", api_overview),
        Route("/api/verify", api_verify),
        Route("/api/live", api_live),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


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


def _run_sql(ctx: Context, q: str) -> tuple[list[str], list[tuple], bool]:
    from blackbox.analytics.sql import start_sql

    rows: list[tuple] = []
    with start_sql(ctx.store, ctx.analytics_dir, q, timeout_s=SQL_TIMEOUT_S) as running:
        for batch in running:
            rows.extend(batch)
            if len(rows) > SQL_ROWS:
                break
        return running.columns, rows[:SQL_ROWS], len(rows) > SQL_ROWS


def _overview(ctx: Context) -> dict[str, Any]:
    from blackbox.analytics.reports import refreshed_connection

    con, _ = refreshed_connection(ctx.store, ctx.analytics_dir)
    try:
        return data.overview(con)
    finally:
        con.close()


def _replay(ctx: Context, ref: str, against: str | None) -> dict[str, Any]:
    from blackbox.replay.replayer import ReplayOptions, replay_session
    from blackbox.replay.report import as_json

    original = ctx.store.resolve(ref)
    result = replay_session(ctx.store, original, against=against, options=ReplayOptions())
    doc = as_json(result)
    sides = []
    for step in result.steps:
        if step.status == "ok":
            continue
        page = data.timeline_page(ctx.store, original, step.seq - 1, 1)["records"]
        recorded_seq = page[0].get("response_seq") if page else None
        recorded = data.record_detail(ctx.store, original, recorded_seq) if recorded_seq else None
        replayed = None
        if result.replay_id and recorded is not None and recorded["rpc_id"] is not None:
            # The replay sends the recorded ids: its answer is the response with the same id.
            seq = data.answer_seq(
                ctx.store, result.replay_id, recorded["rpc_id"], recorded["direction"]
            )
            replayed = data.record_detail(ctx.store, result.replay_id, seq) if seq else None
        sides.append(
            {
                **step.as_dict(),
                "label": step.label,
                "recorded": recorded and (recorded["pretty"] or recorded["raw_text"]),
                "replayed": replayed and (replayed["pretty"] or replayed["raw_text"]),
            }
        )
    doc["sides"] = sides
    return doc


def create_app(ctx: Context, host: str, port: int) -> Guard:
    """The app with the guard in front: what `serve` runs."""
    app = Starlette(routes=routes(ctx))
    return Guard(app, ctx.token, host, port)
