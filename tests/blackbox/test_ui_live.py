"""The live pages of `blackbox ui` in headless Chromium: an open session's page keeps up with what
is recorded (also when the live feed announces a record before the store has it, and past the
first page of records), stderr lines show as one block, a record's JSON is one click away, and
the overview's axis labels are readable and apart.

Sessions are written as a tap writes them: each record to a journal of this store first (what the
live feed reads), then to the store when the test "ships" it. One browser for the module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from blackbox.recorder.capture import StoreMark
from blackbox.recorder.capture.journal import Journal
from blackbox.recorder.log.model import NewEvent
from blackbox.recorder.store import EventStore, open_store
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from blackbox.ui.server import Served, serve_in_thread
from tests.fixtures.analytics_kit import Session

pytestmark = pytest.mark.timeout(120)
CHROMIUM = "/usr/bin/chromium"
HOUR_NS = 3600 * 1_000_000_000
# What the issue asks of an open session's page: a record on screen within a second.
LIVE_MS = 1000


class Tap:
    """Writes a session's records as a tap does: into a journal at once, into the store when
    shipped (the shipper's batch, which may come late)."""

    def __init__(self, journal: Journal, store: EventStore, session: Session) -> None:
        self.journal, self.store, self.session = journal, store, session
        self.written = 0

    def write(self) -> list[NewEvent]:
        """Journal what the session gained since the last call; returns those records."""
        fresh = self.session.events[self.written :]
        for ev in fresh:
            seq = self.journal.append(
                ev.session_id, ev.kind, ev.direction, ev.raw, ev.wall_ns, ev.mono_ns
            )
            assert seq == ev.seq
        self.written += len(fresh)
        return fresh

    def ship(self, records: list[NewEvent]) -> None:
        self.store.append(records)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, EventStore, Path]]:
    tmp = tmp_path_factory.mktemp("uilive")
    url = f"sqlite:///{tmp / 'store.db'}"
    store = open_store(url)
    ui = serve_in_thread(store, tmp / "journal", tmp / "analytics")
    yield ui, store, tmp
    ui.stop()
    store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def context(browser: Browser) -> Iterator[BrowserContext]:
    """One browser context for the module: a context costs Chromium about 0.2 s of CPU, a page
    in it less than half that. Each UI has its own port, so its own cookie in it."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    yield ctx
    ctx.close()


def open_page(context: BrowserContext, ui: Served, path: str, width: int = 1400) -> Page:
    page = context.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{ui.url.split('/?')[0]}{path}?token={ui.token}", wait_until="load")
    return page


def row(page: Page, seq: int) -> Any:
    return page.locator(f'#timeline tbody tr[data-seq="{seq}"]')


def test_open_session_page_shows_each_new_record_within_a_second(
    context: BrowserContext, served: tuple[Served, EventStore, Path]
) -> None:
    ui, store, tmp = served
    journal = Journal.create(tmp / "journal", store=StoreMark.for_url(store.url))
    s = Session("growing", start_ns=time.time_ns())
    s.handshake()
    tap = Tap(journal, store, s)
    tap.ship(tap.write())
    page = open_page(context, ui, f"/sessions/{s.sid}")
    try:
        expect(row(page, s.seq)).to_have_count(1, timeout=10_000)
        expect(page.locator("#live.on")).to_have_count(1, timeout=10_000)
        page.evaluate("window.notReloaded = true")

        # The live feed reads the journal: it announces each call before the store has it (a
        # shipper a second late). The page shows the call within a second of the store's commit.
        for i in range(2):
            s.call("echo", 10 + i, 1, {"i": i})
            fresh = tap.write()
            time.sleep(1.0)
            tap.ship(fresh)
            expect(row(page, s.seq)).to_have_count(1, timeout=LIVE_MS)

        # More than a page of records in one burst, then one more: each on screen within a
        # second, past the first page the page loaded.
        for i in range(125):
            s.call("echo", 100 + i, 1, {"burst": i})
        tap.ship(tap.write())
        expect(row(page, s.seq)).to_have_count(1, timeout=LIVE_MS)
        s.call("echo", 400, 1, {"after": "burst"})
        tap.ship(tap.write())
        expect(row(page, s.seq)).to_have_count(1, timeout=LIVE_MS)

        assert page.locator("#timeline tbody tr").count() == s.seq  # every record, in order
        assert page.evaluate("window.notReloaded") is True
        expect(page.locator("#count")).to_have_text(f"records 1–{s.seq} of {s.seq}")
    finally:
        page.close()
        journal.close()


def test_stderr_lines_are_one_row_and_a_record_is_one_click_from_its_json(
    context: BrowserContext, served: tuple[Served, EventStore, Path]
) -> None:
    ui, store, _tmp = served
    s = Session("noisy", start_ns=time.time_ns())
    s.handshake()
    traceback = ["Traceback (most recent call last):", '  File "srv.py", line 3', "KeyError: 'x'"]
    for i, line in enumerate(traceback):
        s.event("stderr", {"line": line}, 5 + i)
    request, _ = s.call("echo", 10, 2, {"message": "hello"})
    s.event("stderr", {"line": "done"}, 20)
    s.save(store)
    page = open_page(context, ui, f"/sessions/{s.sid}")
    try:
        rows = page.locator("#timeline tbody tr")
        expect(rows.filter(has_text="stderr")).to_have_count(2, timeout=10_000)
        group = rows.filter(has_text="stderr · 3 lines")
        expect(group).to_have_count(1)
        group.click()
        expect(page.locator("#detail-stderr")).to_have_text("\n".join(traceback))

        row(page, request).click()
        pretty = page.locator("#detail-json")
        expect(pretty).to_contain_text('"method": "tools/call"')
        text = pretty.inner_text()
        assert '\n  "params": {\n    "name": "echo",' in text  # indented, one key a line
    finally:
        page.close()


LABELS_JS = """() => [...document.querySelectorAll("svg.chart")].map((svg) => ({
  id: svg.id,
  labels: [...svg.querySelectorAll("text")].map((t) => {
    const r = t.getBoundingClientRect();
    const px = parseFloat(getComputedStyle(t).fontSize) * svg.getScreenCTM().a;
    return { text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom, px };
  }),
}))"""


def test_overview_axis_labels_are_readable_and_apart(
    context: BrowserContext, tmp_path: Path
) -> None:
    """Sessions in two hours (where first and last hour labels used to be drawn over each
    other), on a window where the two hourly charts share a row (where their text shrank)."""
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    now = time.time_ns()
    for name, hours_ago, calls in (("a", 2, 3), ("b", 2, 1), ("c", 1, 2)):
        s = Session(name, start_ns=now - hours_ago * HOUR_NS)
        s.handshake()
        for i in range(calls):
            s.call("get_current_time", 10 + i, 3 + i, outcome="tool_error" if i == 1 else "ok")
        s.end(50)
        s.save(store)
    ui = serve_in_thread(store, None, tmp_path / "analytics")
    page = open_page(context, ui, "/", width=900)
    try:
        expect(page.locator("body.drawn")).to_have_count(1, timeout=30_000)
        page.locator("section.charts").screenshot(path=str(tmp_path / "overview-charts.png"))
        assert (tmp_path / "overview-charts.png").stat().st_size > 1000
        charts = page.evaluate(LABELS_JS)
        assert {c["id"] for c in charts} == {"chart-sessions", "chart-calls", "chart-latency"}
        for chart in charts:
            labels = chart["labels"]
            assert len(labels) >= 4, chart
            for label in labels:
                assert label["px"] >= 10, (chart["id"], label)  # on screen, not scaled down
            for i, a in enumerate(labels):
                for b in labels[i + 1 :]:
                    apart = (
                        a["right"] <= b["left"]
                        or b["right"] <= a["left"]
                        or a["bottom"] <= b["top"]
                        or b["bottom"] <= a["top"]
                    )
                    assert apart, (chart["id"], a, b)
            if chart["id"] != "chart-latency":  # both hours named
                assert len([t for t in labels if ":" in t["text"]]) == 2, chart
    finally:
        page.close()
        ui.stop()
        store.close()
