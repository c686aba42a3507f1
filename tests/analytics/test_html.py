"""The --html page opened in headless Chromium (Debian's `chromium` package): the three charts
lay out with a size and draw one mark per data point, offline, from a page with no script and no
outside reference."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from blackbox.analytics.html import render
from blackbox.analytics.reports import run_report
from blackbox.recorder.store import open_store

from tests.fixtures.analytics_kit import BASE_NS, Session, fingerprint

CHROMIUM = Path("/usr/bin/chromium")

# A wrapper page measures the report page inside an iframe once it has loaded.
PROBE = """<!DOCTYPE html><html><body>
<iframe id="f" src="report.html" width="1000" height="3000"></iframe><pre id="out">pending</pre>
<script>
document.getElementById('f').addEventListener('load', () => {
  const d = document.getElementById('f').contentDocument;
  const charts = [...d.querySelectorAll('svg.chart')].map(s => {
    const r = s.getBoundingClientRect();
    const marks = [...s.querySelectorAll('.bar')].filter(b => {
      const box = b.getBoundingClientRect(); return box.width > 0 && box.height > 0; });
    return {id: s.id, width: r.width, height: r.height, marks: marks.length};
  });
  document.getElementById('out').textContent = JSON.stringify(charts);
});
</script></body></html>"""


def test_page_renders_its_charts_in_chromium(sqlite_url: str, tmp_path: Path) -> None:
    assert CHROMIUM.exists(), "install Debian's chromium: apt-get install -y chromium"
    store = open_store(sqlite_url)
    for day in range(3):
        s = Session(name="srv", start_ns=BASE_NS + day * 86_400 * 10**9)
        s.handshake(0)
        s.call("fast", 10, 1.5)  # bucket [1, 2) ms
        s.call("fast", 20, 3.0, outcome="tool_error" if day == 1 else "ok")  # [2, 4) ms
        seq, _ = s.call("slow", 30, 700.0, {"q": day})  # [512, 1024) ms
        s.decision(
            31,
            decision="allow",
            tool="slow",
            request_seq=seq,
            args_fingerprint=fingerprint({"q": day}),
        )
        s.end(1000)
        s.save(store)
    report = run_report(store, tmp_path / "an", "errors", with_charts=True)
    (tmp_path / "report.html").write_text(render(report, store.url), encoding="utf-8")
    (tmp_path / "probe.html").write_text(PROBE)
    done = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--virtual-time-budget=5000",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            (tmp_path / "probe.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    match = re.search(r'<pre id="out">(.*?)</pre>', done.stdout, re.S)
    assert match, done.stderr[-2000:]
    charts = {c["id"]: c for c in json.loads(match.group(1))}
    assert set(charts) == {"chart-latency", "chart-errors", "chart-decisions"}
    assert all(c["width"] > 600 and c["height"] > 30 for c in charts.values())
    # latency: fast has two buckets, slow one; errors: one bar per day with failures (day 1;
    # 0 % days draw nothing); decisions: one segment (allow) for one tool.
    assert charts["chart-latency"]["marks"] == 3
    assert charts["chart-errors"]["marks"] == 1
    assert charts["chart-decisions"]["marks"] == 1
