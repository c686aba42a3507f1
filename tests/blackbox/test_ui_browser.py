"""`blackbox ui` in a real browser: headless Chromium (Debian's package) driven by Playwright,
against sessions the SDK client recorded through `blackbox record` around the SDK's example
server. Kept few and fast; each waits for content, never for "networkidle" (the pages hold an
EventSource open). With BLACKBOX_UI_SCREENSHOTS=DIR the pages are saved there as PNGs (how the
screenshots of docs/ui.md are made)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from blackbox.recorder.store import open_store
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from blackbox.ui.server import serve_in_thread
from tests.fixtures import peers
from tests.fixtures.polling import eventually
from tests.fixtures.taps import record, wait_sessions

pytestmark = pytest.mark.timeout(240)
CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 15_000


def aside(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` on a thread of its own: Playwright's sync API keeps an event loop on this one,
    where the SDK client's `anyio.run` would refuse to start."""
    failure: list[BaseException] = []
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(fn(*args))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(120)
    assert not failure and result, failure
    return result[0]


def record_aside(*args: Any) -> None:
    """`record` on a thread of its own (`aside`)."""
    aside(record, *args)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, Path]]:
    tmp = tmp_path_factory.mktemp("uibrowser")
    url = f"sqlite:///{tmp / 'store.db'}"
    record_aside(tmp / "home", url, "first")
    wait_sessions(url, 1)
    store = open_store(url, create=False)
    ui = serve_in_thread(store, tmp / "home" / "journal", tmp / "analytics")
    yield ui, url, tmp
    ui.stop()
    store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--host-resolver-rules=MAP evil.example 127.0.0.1"],
        )
        yield b
        b.close()


@pytest.fixture(scope="module")
def context(browser: Browser) -> Iterator[BrowserContext]:
    """One browser context for the tests against `served`: a context costs Chromium about
    0.2 s of CPU, a page in it less than half that. They share its cookie, which each test's
    first visit sets again anyway; the test that needs none opens a context of its own."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext, served) -> Iterator[Page]:  # type: ignore[no-untyped-def]
    pg = context.new_page()
    yield pg
    pg.close()


def base(served) -> str:  # type: ignore[no-untyped-def]
    return served[0].url.split("/?")[0]


def visit(page: Page, served, path: str) -> None:  # type: ignore[no-untyped-def]
    """The first visit carries the token (as the printed URL does); later ones the cookie."""
    sep = "&" if "?" in path else "?"
    page.goto(f"{base(served)}{path}{sep}token={served[0].token}", wait_until="load")


def shot(page: Page, name: str) -> None:
    folder = os.environ.get("BLACKBOX_UI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"ui-{name}.png"))


def test_list_shows_sessions_and_a_new_one_appears_live(page: Page, served) -> None:  # type: ignore[no-untyped-def]
    _ui, url, tmp = served
    visit(page, served, "/sessions")
    assert "token=" not in page.url  # traded for a cookie
    rows = page.locator("#sessions tbody tr")
    expect(rows.filter(has_text="first")).to_have_count(1, timeout=WAIT_MS)
    first = rows.filter(has_text="first")
    expect(first.locator("td.errors")).to_have_text("1", timeout=WAIT_MS)  # the `fail` call
    expect(first.locator("td.calls")).to_have_text("6")  # initialize, tools/list, 4 calls
    expect(page.locator("#live.on")).to_have_count(1, timeout=WAIT_MS)
    record_aside(tmp / "home", url, "appeared-live", [("echo", {"message": "live"})])
    expect(rows.filter(has_text="appeared-live")).to_have_count(1, timeout=WAIT_MS)
    live = rows.filter(has_text="appeared-live")
    expect(live.locator("td.calls")).to_have_text("3", timeout=WAIT_MS)
    shot(page, "sessions")


async def _slow_client(params: Any, gate: threading.Event) -> None:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    with anyio.fail_after(60):
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.call_tool("echo", {"message": "early"})
            while not gate.is_set():
                await anyio.sleep(0.05)
            await session.call_tool("echo", {"message": "late-frame"})


def test_open_session_grows_live_and_a_click_shows_json(page: Page, served) -> None:  # type: ignore[no-untyped-def]
    import anyio

    _ui, url, tmp = served
    params = peers.params(
        peers.record_command(peers.EXAMPLE_SERVER, "growing"), peers.tap_env(tmp / "home", url)
    )
    gate = threading.Event()
    client = threading.Thread(target=anyio.run, args=(_slow_client, params, gate))
    client.start()
    try:
        store = open_store(url, create=False)
        sid = eventually(
            lambda: next(
                (s.session_id for s in store.list_sessions() if s.name == "growing"), None
            ),
            timeout=30,
        )
        store.close()
        visit(page, served, f"/sessions/{sid}")
        timeline = page.locator("#timeline tbody tr")
        expect(timeline.filter(has_text="early").first).to_be_visible(timeout=WAIT_MS)
        gate.set()
        started = time.monotonic()
        expect(timeline.filter(has_text="late-frame").first).to_be_visible(timeout=WAIT_MS)
        assert time.monotonic() - started < 5
    finally:
        gate.set()
        client.join(60)
    row = timeline.filter(has_text="tools/call").filter(has_text="late-frame").first
    row.click()
    expect(page.locator("#detail-json")).to_contain_text('"late-frame"', timeout=WAIT_MS)
    expect(page.locator("#detail-json")).to_contain_text('"jsonrpc": "2.0"')
    expect(page.locator("#detail-raw")).to_contain_text('"method":"tools/call"')
    shot(page, "session")


def test_replay_from_the_page_shows_the_divergences_side_by_side(page: Page, served) -> None:  # type: ignore[no-untyped-def]
    """The one write, from the browser itself (token header, own Origin): the `first` session
    replayed against mcp-server-time, which knows none of its tools."""
    _ui, url, _tmp = served
    store = open_store(url, create=False)
    sid = next(s.session_id for s in store.list_sessions() if s.name == "first")
    store.close()
    visit(page, served, f"/sessions/{sid}/replay")
    # Relative to the working directory where it can be (the screenshot shows it).
    python = (
        os.path.relpath(sys.executable)
        if Path.cwd() in Path(sys.executable).parents
        else sys.executable
    )
    page.fill("input[name=against]", f"{python} -m mcp_server_time --local-timezone UTC")
    page.click("#replay-form button")
    expect(page.locator("#verdict")).to_contain_text("diverged", timeout=60_000)
    expect(page.locator(".diff pre.old").first).to_contain_text('"jsonrpc"')
    expect(page.locator(".diff pre.new").first).to_contain_text('"mcp-time"')  # its answer
    expect(page.locator(".diff pre.old").first).to_contain_text('"blackbox-example"')
    shot(page, "replay")


def test_replay_asks_before_a_writing_tool_and_cancel_skips_it(
    browser: Browser, tmp_path: Path
) -> None:
    """A session that wrote a note (tests/replay/servers/notes.py: `write_note` is destructive,
    `read_note` read-only): starting its replay opens a dialog naming `write_note`, and Cancel
    replays the session without sending it (the note, changed since, stays as it is)."""
    from tests.fixtures.replay_kit import SERVERS, record_session

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("first")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    server = [sys.executable, str(SERVERS / "notes.py"), str(notes)]
    calls = [("read_note", {"name": "a.txt"}), ("write_note", {"name": "a.txt", "text": "again"})]
    sid = aside(record_session, store, url, tmp_path / "home", server, calls, "legacy", "notes")
    (notes / "a.txt").write_text("changed since")
    ui = serve_in_thread(store, None, tmp_path / "analytics")
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        pg = context.new_page()
        pg.goto(f"{ui.url.split('/?')[0]}/sessions/{sid}/replay?token={ui.token}")
        pg.click("#replay-form button")
        dialog = pg.locator("#replay-confirm")
        expect(dialog).to_be_visible(timeout=WAIT_MS)
        expect(dialog.locator("#risky-tools li")).to_have_count(1)
        expect(dialog.locator("#risky-tools")).to_contain_text("write_note")
        expect(dialog.locator("#risky-tools")).to_contain_text("destructive")
        shot(pg, "replay-confirm")
        pg.click("#replay-cancel")
        expect(dialog).to_be_hidden()
        expect(pg.locator("#verdict")).to_be_visible(timeout=60_000)
        expect(pg.locator("#skipped")).to_contain_text("write_note")
        assert (notes / "a.txt").read_text() == "changed since"
    finally:
        context.close()
        ui.stop()
        store.close()


def test_sql_page_shows_a_result_and_refuses_delete(page: Page, served) -> None:  # type: ignore[no-untyped-def]
    visit(page, served, "/sql?q=SELECT+tool%2C+count(*)+AS+n+FROM+calls+GROUP+BY+1+ORDER+BY+1")
    expect(page.locator("#sql-result")).to_contain_text("echo", timeout=WAIT_MS)
    shot(page, "sql")
    page.fill("textarea[name=q]", "DELETE FROM calls")
    page.click("form.sql button")
    expect(page.locator("#sql-error")).to_contain_text("refused", timeout=WAIT_MS)
    expect(page.locator("#sql-result")).to_have_count(0)


def test_overview_draws_its_charts(page: Page, served) -> None:  # type: ignore[no-untyped-def]
    visit(page, served, "/")
    expect(page.locator("body.drawn")).to_have_count(1, timeout=30_000)
    for chart in ("#chart-sessions", "#chart-calls", "#chart-latency"):
        assert page.locator(f"{chart} rect").count() > 0, chart
    expect(page.locator("#chart-latency")).to_contain_text("echo")
    expect(page.locator("#verify")).to_contain_text("intact", timeout=30_000)
    shot(page, "overview")


def test_no_token_and_a_foreign_host_are_refused(browser: Browser, served) -> None:  # type: ignore[no-untyped-def]
    ui = served[0]
    # A context of its own: the shared one holds the cookie other tests' visits traded for.
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        answer = page.goto(f"{base(served)}/sessions")
        assert answer is not None and answer.status == 403
        assert "Sessions" not in page.content()
        # DNS rebinding: a name the attacker controls resolving to loopback, token and all.
        answer = page.goto(f"http://evil.example:{ui.port}/sessions?token={ui.token}")
        assert answer is not None and answer.status == 421
    finally:
        context.close()


def test_a_long_session_opens_a_page_at_a_time(page: Page, served) -> None:  # type: ignore[no-untyped-def]
    """3,000 records: the page shows the first 200, `?from=end` the last ones, never all."""
    from tests.fixtures.analytics_kit import Session

    _ui, url, _tmp = served
    s = Session("long")
    s.handshake()
    for i in range(1500):
        s.call("echo", 10 + i, 1, {"i": i})
    store = open_store(url, create=False)
    sid = s.save(store)
    last = store.head(sid)[0]
    store.close()
    visit(page, served, f"/sessions/{sid}")
    rows = page.locator("#timeline tbody tr")
    expect(page.locator("body.loaded")).to_have_count(1, timeout=WAIT_MS)
    assert rows.count() == 200
    expect(page.locator("#count")).to_have_text(f"records 1–200 of {last}")
    page.goto(f"{base(served)}/sessions/{sid}?from=end", wait_until="load")
    expect(page.locator(f'#timeline tbody tr[data-seq="{last}"]')).to_have_count(1, timeout=WAIT_MS)
    assert page.locator('#timeline tbody tr[data-seq="1"]').count() == 0
