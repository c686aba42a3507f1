// mcp-blackbox web UI: fills the server-rendered page shells from the JSON API and keeps them
// live through server-sent events. No framework, no build step, no network but this server.
"use strict";

const TOKEN = document.querySelector('meta[name="bb-token"]').content;
const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
};
const SVG = "http://www.w3.org/2000/svg";
const svgEl = (tag, attrs = {}, text) => {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
};

async function getJSON(url) {
  const res = await fetch(url, { credentials: "same-origin" });
  if (!res.ok) throw new Error(`${url}: ${res.status}`);
  return res.json();
}

function when(ns) {
  if (!ns) return "";
  return new Date(ns / 1e6).toISOString().replace("T", " ").slice(0, 19);
}
function size(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1048576) return `${(n / 1024).toFixed(1)} kB`;
  return `${(n / 1048576).toFixed(1)} MB`;
}

// The server starts following when the stream opens: what was stored between the page's first
// fetch and that moment sends no event, so each (re)open also catches up (`onOpen`).
function live(params, onRecords, onOpen) {
  const source = new EventSource(`/api/live${params}`);
  const dot = $("#live");
  source.addEventListener("open", () => { dot.classList.add("on"); if (onOpen) onOpen(); });
  source.addEventListener("error", () => dot.classList.remove("on"));
  source.addEventListener("records", (ev) => onRecords(JSON.parse(ev.data)));
  return source;
}

// ---- overview -------------------------------------------------------------------------------

// Charts are drawn at the size they are shown (one SVG unit is one CSS pixel), so their labels
// keep the stylesheet's font size at any width instead of shrinking with the figure. Axis labels
// are measured once drawn; one that would come within GAP px of the previous is left out.
const GAP = 10;
function chartWidth(svg, fallback) {
  return Math.max(280, Math.round(svg.getBoundingClientRect().width) || fallback);
}

// `items` left to right: {x, text}, or {x, day, time} for an hour, which names its day only when
// the label placed before it is of another day (so a left-out label never hides a day change).
function placeLabels(svg, items, y, left, right) {
  let end = -Infinity, day = null;
  for (const it of items) {
    const text = it.time === undefined ? it.text : it.day === day ? it.time : `${it.day} ${it.time}`;
    const t = svgEl("text", { x: it.x, y, class: "tick x-tick", "text-anchor": "middle" }, text);
    svg.append(t);
    const w = t.getComputedTextLength();
    const x = Math.min(Math.max(it.x, left + w / 2), right - w / 2);
    t.setAttribute("x", x);
    if (x - w / 2 < end + GAP) { t.remove(); continue; }
    end = x + w / 2;
    day = it.day ?? day;
  }
}

// 0, a round middle and a round top: three labels, far apart on any chart this tall.
function niceMax(max) {
  if (max <= 4) return Math.max(1, Math.ceil(max));
  if (max <= 10) return 2 * Math.ceil(max / 2);
  const step = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * step >= max) return m * step;
  return 10 * step;
}

function barChart(svg, points, hour, value, opts = {}) {
  svg.replaceChildren();
  const W = chartWidth(svg, 600), H = 200, L = 44, R = opts.rate ? 44 : 12, T = 24, B = 32;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const max = niceMax(Math.max(0, ...points.map(value)));
  const plotW = W - L - R, plotH = H - T - B;
  const y = (v) => H - B - (plotH * v) / max;
  for (const v of [0, max / 2, max]) {
    if (v !== Math.round(v) && max <= 4) continue; // counts: no half a session
    svg.append(svgEl("line", { x1: L, y1: y(v), x2: W - R, y2: y(v), class: v ? "grid-line" : "axis" }));
    svg.append(svgEl("text", { x: L - 6, y: y(v) + 4, class: "tick y-tick", "text-anchor": "end" }, String(v)));
  }
  // A slot per hour, wide enough for its label when there are few; the bar centred in it.
  const w = Math.min(120, plotW / Math.max(points.length, 1));
  const barW = Math.max(Math.min(w - 2, 40), 1);
  points.forEach((p, i) => {
    const h = (plotH * value(p)) / max;
    const rect = svgEl("rect", {
      x: L + i * w + (w - barW) / 2, y: H - B - h, width: barW, height: h, class: "bar",
    });
    rect.append(svgEl("title", {}, `${hour(p).slice(0, 16)}: ${value(p)}`));
    svg.append(rect);
  });
  // "2026-12-07 03:00:00": "12-07 03:00", or "03:00" after a label of the same day.
  const at = (p, i) => ({ x: L + i * w + w / 2, day: hour(p).slice(5, 10), time: hour(p).slice(11, 16) });
  placeLabels(svg, points.map(at), H - 8, 0, W);
  if (opts.rate) {
    const ry = (r) => H - B - plotH * r;
    for (const r of [0, 0.5, 1]) {
      svg.append(svgEl("text", { x: W - R + 6, y: ry(r) + 4, class: "tick y-tick rate-label" }, `${r * 100}%`));
    }
    const pts = points.map((p, i) => `${L + i * w + w / 2},${ry(opts.rate(p))}`);
    svg.append(svgEl("polyline", { points: pts.join(" "), class: "rate" }));
    pts.forEach((xy) => { const [cx, cy] = xy.split(","); svg.append(svgEl("circle", { cx, cy, r: 3, class: "rate-dot" })); });
    svg.append(svgEl("text", { x: W - R, y: 12, class: "tick legend rate-label", "text-anchor": "end" }, "— error rate"));
  }
}

function latencyChart(svg, rows) {
  svg.replaceChildren();
  const W = chartWidth(svg, 1200), L = Math.min(200, Math.round(W * 0.3)), R = 24, rowH = 22, T = 10;
  const H = Math.max(70, T + rows.length * rowH + 40);
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const max = Math.max(1, ...rows.map((r) => r.p99 || 0));
  const x = (v) => L + ((W - L - R) * Math.log1p(v)) / Math.log1p(max);
  rows.forEach((r, i) => {
    const y = T + i * rowH;
    const name = svgEl("text", { x: L - 8, y: y + 13, class: "label", "text-anchor": "end" }, r.tool);
    svg.append(name);
    // A long tool name is cut to the room left of the bars, whole in its tooltip.
    for (let n = r.tool.length; name.getComputedTextLength() > L - 12 && n > 4; n--) name.textContent = `${r.tool.slice(0, n - 1)}…`;
    name.append(svgEl("title", {}, r.tool));
    svg.append(svgEl("rect", { x: L, y: y + 3, width: x(r.p99) - L, height: 12, class: "p99" }));
    svg.append(svgEl("rect", { x: L, y: y + 3, width: x(r.p95) - L, height: 12, class: "p95" }));
    const p50 = svgEl("rect", { x: L, y: y + 3, width: x(r.p50) - L, height: 12, class: "p50" });
    p50.append(svgEl("title", {}, `${r.tool}: p50 ${r.p50.toFixed(1)} p95 ${r.p95.toFixed(1)} p99 ${r.p99.toFixed(1)} ms (${r.calls} calls)`));
    svg.append(p50);
  });
  const axisY = T + rows.length * rowH + 4;
  svg.append(svgEl("line", { x1: L, y1: axisY, x2: W - R, y2: axisY, class: "axis" }));
  const ticks = [0];
  for (let v = 1; v < max; v *= 10) ticks.push(v);
  ticks.push(max);
  placeLabels(svg, ticks.map((v) => ({ x: x(v), text: `${v === max ? max.toFixed(1) : v} ms` })), axisY + 16, L - 20, W);
  svg.append(svgEl("text", { x: 4, y: axisY + 16, class: "tick" }, "log scale"));
}

async function overview() {
  const doc = await getJSON("/api/overview");
  const totals = $("#totals");
  for (const [k, v] of [["sessions", doc.sessions], ["calls", doc.calls], ["failed calls", doc.failed], ["faults", doc.faults]]) {
    totals.append(el("div", { class: "card stat" }, el("b", { text: String(v) }), el("span", { text: k })));
  }
  const draw = () => {
    barChart($("#chart-sessions"), doc.sessions_per_hour, (p) => p.hour, (p) => p.sessions);
    barChart($("#chart-calls"), doc.calls_per_hour, (p) => p.hour, (p) => p.calls,
      { rate: (p) => p.error_rate });
    latencyChart($("#chart-latency"), doc.latency);
  };
  draw();
  // Drawn at their width: a resized window draws them again (once it has settled).
  let resized = null;
  window.addEventListener("resize", () => { clearTimeout(resized); resized = setTimeout(draw, 150); });
  document.body.classList.add("drawn");
  const v = await getJSON("/api/verify");
  $("#verify").replaceChildren(el("span", {
    class: v.intact ? "ok" : "error",
    text: v.intact ? `intact: ${v.sessions} session(s) verified` : `${v.findings.length} finding(s): ${v.findings.map((f) => `${f.session_id} ${f.problem}`).join("; ")}`,
  }));
  if (v.checkpoint) {
    const dl = el("dl");
    for (const [k, val] of Object.entries(v.checkpoint)) dl.append(el("dt", { text: k }), el("dd", { text: String(val).slice(0, 80) }));
    $("#checkpoint").replaceChildren(el("h3", { text: "newest checkpoint" }), dl);
  }
}

// ---- sessions -------------------------------------------------------------------------------

async function sessions() {
  const body = document.body.dataset;
  const tbody = $("#sessions tbody");
  const more = $("#more");
  let next = null;
  const query = (before) => {
    const p = new URLSearchParams({ q: body.q || "", outcome: body.outcome || "", all: body.all || "" });
    if (before) p.set("before", before);
    return `/api/sessions?${p}`;
  };
  const row = (s) => el("tr", { "data-id": s.id, onclick: () => { location.href = `/sessions/${s.id}`; } },
    el("td", {}, el("a", { href: `/sessions/${s.id}`, text: s.name || s.handle }), " ", el("code", { class: "handle", text: s.handle })),
    el("td", { text: s.transport || "" }), el("td", { text: s.era || "" }),
    el("td", { text: s.client || "" }), el("td", { text: (s.server || "").slice(0, 40), title: s.command || "" }),
    el("td", { text: when(s.started_ns) }), el("td", { text: s.duration_s == null ? "" : `${s.duration_s}s` }),
    el("td", { class: "calls" }), el("td", { class: "errors" }), el("td", { class: "faults" }),
    el("td", { class: "outcome", text: s.outcome || "" }));
  const fillCounts = (list) => {
    // Each row carries its counts and derived outcome, as `blackbox sessions` gives them.
    for (const s of list) {
      const tr = tbody.querySelector(`tr[data-id="${s.id}"]`);
      if (!tr) continue;
      for (const k of ["calls", "errors", "faults"]) {
        const td = tr.querySelector(`td.${k}`);
        td.textContent = String(s[k]);
        if (k !== "calls" && s[k]) { td.classList.add("error"); tr.classList.add("bad"); }
      }
    }
    document.body.classList.add("counted");
  };
  const load = async (before) => {
    const page = await getJSON(query(before));
    if (!before) tbody.replaceChildren();
    page.sessions.forEach((s) => tbody.append(row(s)));
    next = page.next;
    more.hidden = !next;
    document.body.classList.add("loaded");
    fillCounts(page.sessions);
  };
  more.addEventListener("click", () => load(next));
  await load(null);
  let pending = null;
  live("", (records) => {
    if (!records.some((r) => r.kind !== "frame" || r.seq <= 2)) return;
    clearTimeout(pending); // a burst of new or ending sessions: one refresh of the first page
    pending = setTimeout(() => load(null), 150);
  }, () => load(null));
}

// ---- one session ----------------------------------------------------------------------------

async function session() {
  const sid = document.body.dataset.session;
  const tbody = $("#timeline tbody");
  const sentinel = $("#sentinel");
  // A window of at most MAX_ROWS rows: past it the page links on (`?from=SEQ`), so the browser
  // never holds a whole long session and every stretch of it has a URL.
  const MAX_ROWS = 2000;
  const from = new URLSearchParams(location.search).get("from");
  let lastSeq = 0, total = 0, loading = false, atEnd = false, span = 1, t0 = null, capped = false;
  if (from === "end") {
    const head = await getJSON(`/api/sessions/${sid}/records?after_seq=0&limit=1`);
    lastSeq = Math.max(0, head.last_seq - 200);
  } else if (from && /^\d+$/.test(from)) lastSeq = Math.max(0, Number(from) - 1);
  $("#count").after(" · ", el("a", { href: `/sessions/${sid}?from=1`, text: "start" }), " · ",
    el("a", { href: `/sessions/${sid}?from=end`, text: "end" }));
  const bars = [];
  const describe = (r) => {
    if (r.kind !== "frame") return r.kind + (r.method ? ` ${r.method}` : "");
    return [r.method || r.type, r.tool, r.id != null && r.type !== "notification" ? `#${r.id}` : ""].filter(Boolean).join(" ");
  };
  const arrow = { c2s: "→", s2c: "←" };
  const rescale = () => bars.forEach(([bar, r]) => {
    const width = Math.max(span - t0, 1);
    bar.style.marginLeft = `${(100 * (r.t_ms - t0)) / width}%`;
    bar.style.width = r.latency_ms != null ? `${Math.max(0.5, (100 * r.latency_ms) / width)}%` : "2px";
  });
  const select = (tr) => {
    tbody.querySelectorAll("tr.selected").forEach((n) => n.classList.remove("selected"));
    tr.classList.add("selected");
  };
  // Consecutive stderr lines are one row (a traceback is one thing); its detail lists the lines,
  // each a link to its own record.
  const stderrGroup = (r) => {
    const lines = [r];
    const tr = el("tr", { class: "stderr group", "data-seq": String(r.seq), onclick: () => showLines(tr, lines) });
    const cells = [el("td"), el("td", { text: r.t_ms.toFixed(1) }), el("td", { text: "·" }), el("td"),
      el("td", { class: "bar" }), el("td"), el("td", { class: "excerpt" })];
    cells.forEach((c) => tr.append(c));
    tr.addLine = (next) => {
      if (next) lines.push(next);
      const first = lines[0].seq, last = lines[lines.length - 1].seq;
      tr.dataset.lastSeq = String(last);
      cells[0].textContent = first === last ? String(first) : `${first}–${last}`;
      cells[3].textContent = lines.length === 1 ? "stderr" : `stderr · ${lines.length} lines`;
      cells[5].textContent = size(lines.reduce((n, l) => n + l.size, 0));
      cells[6].textContent = lines.map((l) => l.line ?? l.excerpt).join(" ⏎ ");
      if (tr.classList.contains("selected")) showLines(tr, lines);
    };
    tr.addLine(null);
    return tr;
  };
  const showLines = (tr, lines) => {
    select(tr);
    const links = el("p", { class: "hint" }, "the records: ");
    lines.forEach((l, i) => links.append(i ? ", " : "", el("a", { href: "#", text: String(l.seq), onclick: (ev) => { ev.preventDefault(); show(l.seq, tr); } })));
    $("#detail").replaceChildren(
      el("h3", { text: `stderr · ${lines.length} line(s) · seq ${lines[0].seq}–${lines[lines.length - 1].seq}` }),
      el("pre", { class: "raw", id: "detail-stderr", text: lines.map((l) => l.line ?? l.excerpt).join("\n") }), links);
  };
  const add = (r) => {
    if (r.kind === "stderr") {
      const prev = tbody.lastElementChild;
      if (prev && prev.addLine) prev.addLine(r);
      else tbody.append(stderrGroup(r));
      return;
    }
    const bar = el("div", { class: `wbar ${r.error ? "error" : ""} ${r.type || r.kind}` });
    const tr = el("tr", { class: `${r.kind} ${r.error ? "bad" : ""}`, "data-seq": String(r.seq), onclick: () => show(r.seq, tr) },
      el("td", { text: String(r.seq) }), el("td", { text: r.t_ms.toFixed(1) }),
      el("td", { text: arrow[r.direction] || "·" }), el("td", { text: describe(r) }),
      el("td", { class: "bar" }, bar, r.latency_ms != null ? el("span", { class: "lat", text: `${r.latency_ms.toFixed(1)} ms` }) : ""),
      el("td", { text: size(r.size) }), el("td", { class: "excerpt", text: r.excerpt }));
    tbody.append(tr);
    bars.push([bar, r]);
    if (t0 === null) t0 = r.t_ms;
    span = Math.max(span, r.t_ms + (r.latency_ms || 0));
  };
  // The page follows the session once it has shown its last record: from then on every record
  // the live feed announces is fetched (after the last seq shown, page after page), not only
  // while the first page has room.
  let following = false, target = 0;
  const counted = () => {
    const firstSeq = tbody.firstChild ? tbody.firstChild.dataset.seq : 0;
    $("#count").textContent = `records ${firstSeq}–${lastSeq} of ${Math.max(total, target)}`;
  };
  const cap = () => {
    capped = true;
    sentinel.replaceChildren(el("a", { href: `/sessions/${sid}?from=${lastSeq + 1}`, text: `continue from seq ${lastSeq + 1} →` }));
  };
  const fetchPage = async () => {
    const page = await getJSON(`/api/sessions/${sid}/records?after_seq=${lastSeq}`);
    page.records.forEach(add);
    if (page.records.length) lastSeq = page.records[page.records.length - 1].seq;
    total = page.last_seq;
    atEnd = lastSeq >= total;
    following = following || atEnd;
    rescale();
    counted();
    if (!capped) sentinel.textContent = atEnd ? "" : "loading…";
    document.body.classList.add("loaded");
    return page.records.length;
  };
  const more = async () => {
    if (loading || capped) return;
    if (tbody.children.length >= MAX_ROWS) { cap(); return; }
    loading = true;
    try {
      await fetchPage();
    } finally {
      loading = false;
    }
  };
  const show = async (seq, tr) => {
    select(tr);
    const d = await getJSON(`/api/sessions/${sid}/records/${seq}`);
    const panel = $("#detail");
    panel.replaceChildren(
      el("h3", { text: `seq ${d.seq} · ${d.kind} ${d.method || ""} · ${size(d.size)}${d.truncated ? " (cut)" : ""}` }),
      el("h4", { text: "JSON" }), el("pre", { class: "json", id: "detail-json", text: d.pretty ?? "(not JSON)" }),
      el("h4", { text: "raw bytes (as stored)" }), el("pre", { class: "raw", id: "detail-raw", text: d.raw_text }),
      el("p", { class: "hint", text: `base64: ${d.raw_base64.length > 200 ? d.raw_base64.slice(0, 200) + "…" : d.raw_base64}` }),
      el("p", { class: "hint", text: `chain hash ${d.hash}` }));
  };
  new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting) && !atEnd) more();
  }, { root: $("#scroller") }).observe(sentinel);
  await more();
  // The session's counts and outcome as `blackbox sessions` gives them (/api/counts, the read
  // model), asked again as the session grows.
  const showCounts = async () => {
    const c = (await getJSON(`/api/counts?ids=${encodeURIComponent(sid)}`))[sid];
    if (!c) return;
    const names = ["calls", "errors", "is_error", "rpc_errors", "faults", "notifications", "pings"];
    const label = { is_error: "isError", rpc_errors: "JSON-RPC errors" };
    const parts = names.map((k) => el("span", { class: "count", "data-count": k },
      `${label[k] || k} `, el("b", { text: String(c[k]) })));
    parts.push(el("span", { class: "count", "data-count": "outcome" }, "outcome ", el("b", { text: c.outcome })));
    $("#session-counts").replaceChildren(...parts.flatMap((p, i) => (i ? [" · ", p] : [p])));
    document.body.classList.add("counted");
  };
  await showCounts();
  // The live feed reads the running taps' journals, so it announces a record before the
  // shipper has put it in the store, where the page reads: while the page is behind what was
  // announced it asks again, 4 times a second (once a second after the first 10 s, a shipper
  // that has stopped).
  let timer = null, behindSince = null;
  const kick = (ms) => { clearTimeout(timer); timer = setTimeout(catchUp, ms); };
  const catchUp = async () => {
    timer = null;
    if (loading) { kick(100); return; }
    if (!following || capped) { counted(); return; }
    loading = true;
    const shownBefore = lastSeq;
    try {
      for (;;) {
        if (tbody.children.length >= MAX_ROWS) { cap(); break; }
        if (!(await fetchPage()) || lastSeq >= Math.max(target, total)) break;
      }
    } catch {
      // The server is away (the live dot says so); the next announcement or reopen retries.
    } finally {
      loading = false;
    }
    if (lastSeq !== shownBefore) showCounts().catch(() => {});
    if (capped || lastSeq >= target) { behindSince = null; return; }
    behindSince = behindSince ?? Date.now();
    kick(Date.now() - behindSince < 10_000 ? 250 : 1000);
  };
  live(`?session=${encodeURIComponent(sid)}`, (records) => {
    target = Math.max(target, ...records.map((r) => r.seq));
    kick(0);
  }, () => kick(0));
}

// ---- replay ---------------------------------------------------------------------------------

// Calls that may change something on the server are sent only for the tools the person
// confirms in the dialog, which names them; the server skips every other one whatever it is sent.
function confirmWrites(risks) {
  const dialog = $("#replay-confirm");
  const list = $("#risky-tools");
  list.replaceChildren();
  for (const tool of risks.tools) {
    const calls = risks.calls.filter((c) => c.tool === tool);
    list.append(el("li", {}, el("code", { text: tool }),
      ` · ${calls.length} call(s) · ${[...new Set(calls.map((c) => c.reason))].join(", ")}`));
  }
  return new Promise((resolve) => {
    const done = (send) => { dialog.close(); resolve(send ? risks.tools : []); };
    $("#replay-send").onclick = () => done(true);
    $("#replay-cancel").onclick = () => done(false);
    dialog.oncancel = (ev) => { ev.preventDefault(); done(false); }; // Escape: skip them
    dialog.showModal();
  });
}

async function replay() {
  const sid = document.body.dataset.session;
  const form = $("#replay-form");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = $("#replay-result");
    out.replaceChildren();
    let risks;
    try {
      risks = await getJSON(`/api/sessions/${sid}/replay/risks`);
    } catch (err) {
      out.replaceChildren(el("p", { class: "error", text: String(err) }));
      return;
    }
    const allowTools = risks.tools.length ? await confirmWrites(risks) : [];
    out.replaceChildren(el("p", { text: "replaying…" }));
    const res = await fetch(`/api/sessions/${sid}/replay`, {
      method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json", "x-blackbox-token": TOKEN },
      body: JSON.stringify({ against: form.against.value, allow_tools: allowTools }),
    });
    const doc = await res.json();
    if (!res.ok) { out.replaceChildren(el("p", { class: "error", text: doc.error })); return; }
    out.replaceChildren(el("p", { class: doc.verdict === "equivalent" ? "ok" : "error", id: "verdict",
      text: `${doc.verdict}: ${Object.entries(doc.summary).filter(([, v]) => v).map(([k, v]) => `${v} ${k.replaceAll("_", " ")}`).join(", ")}` }));
    if (doc.skipped_tools.length) {
      out.append(el("p", { id: "skipped", text: `not sent (may change something, not confirmed): ${doc.skipped_tools.join(", ")}` }));
    }
    if (doc.replay) out.append(el("p", {}, el("a", { href: `/sessions/${doc.replay}`, text: "the replay's own timeline" })));
    for (const s of doc.sides) {
      const diffs = el("table", { class: "grid" }, el("tr", {}, el("th", { text: "path" }), el("th", { text: "recorded" }), el("th", { text: "replayed" })));
      for (const d of s.differences) diffs.append(el("tr", {}, el("td", { text: d.path }), el("td", { class: "old", text: JSON.stringify(d.recorded) }), el("td", { class: "new", text: JSON.stringify(d.replayed) })));
      out.append(el("section", { class: "diff" },
        el("h3", { text: `step ${s.step} · ${s.label} · ${s.status}${s.note ? ` (${s.note})` : ""}` }), diffs,
        el("div", { class: "sides" }, el("pre", { class: "old", text: s.recorded || "(none)" }), el("pre", { class: "new", text: s.replayed || "(none)" }))));
    }
  });
}

const VIEWS = { overview, sessions, session, replay };
const view = VIEWS[document.body.dataset.view];
if (view) view().catch((err) => { document.body.append(el("p", { class: "error", text: String(err) })); });
