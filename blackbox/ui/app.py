"""`blackbox ui`: the local web app (Starlette): its route table, and the app built around it.

Why it exists: the CLI shows a record after the fact; this shows it while it is written, in a
browser, every view at a URL of its own. Pages are shells (`blackbox.ui.pages`, served by
`blackbox.ui.routes_pages`) filled by one small script from the JSON API
(`blackbox.ui.routes_api`); live updates are server-sent events fed by
`blackbox.recorder.query.live_feed` (store and running taps' journals). Each route is a module
function that finds what it reads on the app (`request.app.state.ctx`, a
`blackbox.ui.context.Context`). Everything is read-only over the store except starting a replay,
and everything sits behind `blackbox.ui.security.Guard`.
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from blackbox.ui.context import Context
from blackbox.ui.routes_api import (
    api_counts,
    api_live,
    api_overview,
    api_record,
    api_records,
    api_replay,
    api_replay_risks,
    api_sessions,
    api_verify,
)
from blackbox.ui.routes_pages import (
    overview_page,
    replay_page,
    session_page,
    sessions_page,
    sql_page,
)
from blackbox.ui.security import Guard

__all__ = ["ROUTES", "STATIC", "Context", "create_app", "unguarded_app"]

STATIC = Path(__file__).parent / "static"

# Every page and API route, unguarded (`create_app` puts the guard in front).
ROUTES: list[Route | Mount] = [
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
    Route("/api/sessions/{sid}/replay/risks", api_replay_risks),
    Route("/api/overview", api_overview),
    Route("/api/verify", api_verify),
    Route("/api/live", api_live),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]


def unguarded_app(ctx: Context) -> Starlette:
    """The routes over `ctx`, with no guard in front (the guard's tests use it as their
    control)."""
    app = Starlette(routes=ROUTES)
    app.state.ctx = ctx
    return app


def create_app(ctx: Context, host: str, port: int) -> Guard:
    """The app with the guard in front: what `serve` runs."""
    return Guard(unguarded_app(ctx), ctx.token, host, port)
