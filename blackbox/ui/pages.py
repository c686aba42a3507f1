"""The HTML of the web UI's pages: small server-rendered shells the page's script fills in.

Why it exists: every view has a URL of its own and must work offline, without a build step, so
each page is a few lines of HTML naming its view (`data-view`) and what it shows; the one script
(`static/app.js`) reads those and talks to the JSON API. The SQL console is rendered here whole,
so a result is a plain link (`/sql?q=...`).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

NAV = [("/", "Overview"), ("/sessions", "Sessions"), ("/sql", "SQL")]


def page(title: str, view: str, body: str, token: str, data: dict[str, str] | None = None) -> str:
    attrs = " ".join(f'data-{k}="{escape(v)}"' for k, v in (data or {}).items())
    nav = "".join(f'<a href="{href}">{name}</a>' for href, name in NAV)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="bb-token" content="{escape(token)}">
<title>{escape(title)} · blackbox</title>
<link rel="stylesheet" href="/static/style.css">
<script src="/static/app.js" defer></script>
</head><body data-view="{view}" {attrs}>
<header><span class="brand">mcp-blackbox</span><nav>{nav}</nav>
<span id="live" class="live" title="live updates">●</span></header>
<main>{body}</main></body></html>"""


def overview(token: str) -> str:
    body = """<h1>Overview</h1>
<section class="cards" id="totals"></section>
<section class="row">
  <div class="card"><h2>Trust</h2><div id="verify">checking the hash chains…</div>
  <div id="checkpoint"></div></div>
</section>
<section class="charts">
  <figure><figcaption>Sessions per hour</figcaption><svg id="chart-sessions" class="chart"
    viewBox="0 0 600 200" role="img"></svg></figure>
  <figure><figcaption>Calls and error rate per hour</figcaption><svg id="chart-calls"
    class="chart" viewBox="0 0 600 200" role="img"></svg></figure>
  <figure class="wide"><figcaption>Latency per tool (ms): p50, p95, p99</figcaption>
    <svg id="chart-latency" class="chart" viewBox="0 0 1200 260" role="img"></svg></figure>
</section>"""
    return page("Overview", "overview", body, token)


def sessions(token: str, q: str, outcome: str, every: bool = False) -> str:
    options = "".join(
        f'<option value="{v}"{" selected" if v == outcome else ""}>{label}</option>'
        for v, label in [
            ("", "any outcome"),
            ("ok", "ok"),
            ("crashed", "crashed"),
            ("server_exited", "server exited"),
            ("interrupted", "interrupted"),
            ("recovered", "recovered"),
            ("open", "recording"),
        ]
    )
    body = f"""<h1>Sessions</h1>
<form id="filter" class="filter" method="get" action="/sessions">
  <input type="search" name="q" value="{escape(q)}" placeholder="search name, command, id">
  <select name="outcome">{options}</select>
  <label title="sessions without traffic: a proxy's tool watch, a server never spoken to"><input
  type="checkbox" name="all" value="1"{" checked" if every else ""}> background too</label>
  <button type="submit">Filter</button>
</form>
<table class="grid" id="sessions"><thead><tr><th>name</th><th>transport</th><th>era</th>
<th>client</th><th>server</th><th>started</th><th>duration</th><th>calls</th><th>errors</th>
<th>faults</th><th>outcome</th></tr></thead><tbody></tbody></table>
<button id="more" hidden>Older sessions</button>"""
    data = {"q": q, "outcome": outcome, "all": "1" if every else ""}
    return page("Sessions", "sessions", body, token, data)


def session(token: str, session_id: str, title: str, handle: str | None = None) -> str:
    shown = f"handle <code>{escape(handle)}</code> · " if handle else ""
    body = f"""<h1>{escape(title)}</h1>
<p class="sub">{shown}<code>{escape(session_id)}</code> ·
<a href="/sessions/{escape(session_id)}/replay">replay…</a> · <span id="count"></span></p>
<p class="sub" id="session-counts"></p>
<div class="split"><div class="timeline-wrap" id="scroller">
<table class="grid timeline" id="timeline"><thead><tr><th>seq</th><th>t (ms)</th><th></th>
<th>what</th><th class="bar">waterfall</th><th>size</th><th>excerpt</th></tr></thead>
<tbody></tbody></table><div id="sentinel">loading…</div></div>
<aside id="detail" class="detail"><p class="hint">Click a row to see its JSON and its exact
bytes.</p></aside></div>"""
    return page(title, "session", body, token, {"session": session_id})


def replay(token: str, session_id: str, command: str, handle: str | None = None) -> str:
    shown = escape(handle or session_id)
    body = f"""<h1>Replay</h1>
<p class="sub">of <a href="/sessions/{escape(session_id)}"><code>{shown}</code></a>
</p>
<form id="replay-form" class="filter">
  <label>against <input name="against" size="60" placeholder="{escape(command)}"></label>
  <button type="submit">Start replay</button>
</form>
<dialog id="replay-confirm" aria-labelledby="replay-confirm-title">
  <h2 id="replay-confirm-title">Send calls that may change something?</h2>
  <p>The replay runs against a live server. These recorded calls may change something there
  (the server did not mark their tools read-only):</p>
  <ul id="risky-tools"></ul>
  <p>Cancel replays the session without them; they are reported as skipped.</p>
  <div class="buttons"><button type="button" id="replay-cancel" autofocus>Cancel: skip
  them</button> <button type="button" id="replay-send" class="danger">Send them too</button></div>
</dialog>
<div id="replay-result"></div>"""
    return page("Replay", "replay", body, token, {"session": session_id})


def sql(
    token: str,
    q: str,
    columns: Sequence[str],
    rows: Sequence[Sequence],
    error: str | None,
    capped: bool,
) -> str:
    parts = [
        "<h1>SQL</h1>",
        '<form class="sql" method="get" action="/sql">',
        f'<textarea name="q" rows="5" spellcheck="false">{escape(q)}</textarea>',
        '<button type="submit">Run</button>',
        '<span class="hint">Read-only DuckDB over the analytics views: frames, messages, '
        "sessions, calls, faults, decisions.</span></form>",
    ]
    if error:
        parts.append(f'<p class="error" id="sql-error">{escape(error)}</p>')
    elif q:
        head = "".join(f"<th>{escape(str(c))}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(_cell(v))}</td>" for v in row) + "</tr>" for row in rows
        )
        note = f"{len(rows)} row(s)" + (" (first rows only)" if capped else "")
        parts.append(f'<p class="sub" id="sql-count">{note}</p>')
        parts.append(
            f'<table class="grid" id="sql-result"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
        )
    return page("SQL", "sql", "\n".join(parts), token)


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return value[:64].hex() + ("…" if len(value) > 64 else "")
    text = str(value)
    return text if len(text) <= 300 else text[:299] + "…"
