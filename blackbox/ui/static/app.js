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

function barChart(svg, points, label, value, opts = {}) {
  svg.replaceChildren();
  const W = 600, H = 200, L = 40, B = 30, T = 10;
  const max = Math.max(1, ...points.map(value));
  const w = Math.min(48, (W - L - 10) / Math.max(points.length, 1));
  svg.append(svgEl("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, class: "axis" }));
  svg.append(svgEl("text", { x: 2, y: T + 10, class: "tick" }, String(Math.round(max))));
  points.forEach((p, i) => {
    const h = ((H - B - T) * value(p)) / max;
    const rect = svgEl("rect", {
      x: L + i * w + 1, y: H - B - h, width: Math.max(w - 2, 1), height: h, class: "bar",
    });
    rect.append(svgEl("title", {}, `${label(p)}: ${value(p)}`));
    svg.append(rect);
  });
  if (opts.rate) {
    const pts = points.map((p, i) => `${L + i * w + w / 2},${H - B - (H - B - T) * opts.rate(p)}`);
    svg.append(svgEl("polyline", { points: pts.join(" "), class: "rate" }));
    pts.forEach((xy) => { const [cx, cy] = xy.split(","); svg.append(svgEl("circle", { cx, cy, r: 3, class: "rate-dot" })); });
    svg.append(svgEl("text", { x: W - 110, y: T + 10, class: "tick rate-label" }, "error rate"));
  }
  if (points.length) {
    svg.append(svgEl("text", { x: L, y: H - 8, class: "tick" }, label(points[0])));
    if (points.length > 1) svg.append(svgEl("text", { x: L + (points.length - 1) * w, y: H - 8, class: "tick", "text-anchor": "end" }, label(points[points.length - 1])));
  }
}

function latencyChart(svg, rows) {
  svg.replaceChildren();
  const W = 1200, L = 170, rowH = 22, T = 10;
  svg.setAttribute("viewBox", `0 0 ${W} ${Math.max(60, T + rows.length * rowH + 30)}`);
  const max = Math.max(1, ...rows.map((r) => r.p99 || 0));
  const x = (v) => L + ((W - L - 20) * Math.log1p(v)) / Math.log1p(max);
  rows.forEach((r, i) => {
    const y = T + i * rowH;
    svg.append(svgEl("text", { x: 2, y: y + 13, class: "label" }, r.tool.slice(0, 24)));
    svg.append(svgEl("rect", { x: L, y: y + 3, width: x(r.p99) - L, height: 12, class: "p99" }));
    svg.append(svgEl("rect", { x: L, y: y + 3, width: x(r.p95) - L, height: 12, class: "p95" }));
    const p50 = svgEl("rect", { x: L, y: y + 3, width: x(r.p50) - L, height: 12, class: "p50" });
    p50.append(svgEl("title", {}, `${r.tool}: p50 ${r.p50.toFixed(1)} p95 ${r.p95.toFixed(1)} p99 ${r.p99.toFixed(1)} ms (${r.calls} calls)`));
    svg.append(p50);
  });
  svg.append(svgEl("text", { x: L, y: T + rows.length * rowH + 20, class: "tick" },
    `0 … ${max.toFixed(1)} ms (log scale)`));
}

async function overview() {
  const doc = await getJSON("/api/overview");
  const totals = $("#totals");
  for (const [k, v] of [["sessions", doc.sessions], ["calls", doc.calls], ["failed calls", doc.failed], ["faults", doc.faults]]) {
    totals.append(el("div", { class: "card stat" }, el("b", { text: String(v) }), el("span", { text: k })));
  }
  barChart($("#chart-sessions"), doc.sessions_per_hour, (p) => p.hour.slice(0, 13), (p) => p.sessions);
  barChart($("#chart-calls"), doc.calls_per_hour, (p) => p.hour.slice(0, 13), (p) => p.calls,
    { rate: (p) => p.error_rate });
  latencyChart($("#chart-latency"), doc.latency);
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
    const p = new URLSearchParams({ q: body.q || "", outcome: body.outcome || "" });
    if (before) p.set("before", before);
    return `/api/sessions?${p}`;
  };
  const row = (s) => el("tr", { "data-id": s.id, onclick: () => { location.href = `/sessions/${s.id}`; } },
    el("td", {}, el("a", { href: `/sessions/${s.id}`, text: s.name || s.id.slice(0, 8) })),
    el("td", { text: s.transport || "" }), el("td", { text: s.era || "" }),
    el("td", { text: s.client || "" }), el("td", { text: (s.server || "").slice(0, 40), title: s.command || "" }),
    el("td", { text: when(s.started_ns) }), el("td", { text: s.duration_s == null ? "" : `${s.duration_s}s` }),
    el("td", { class: "calls" }), el("td", { class: "errors" }), el("td", { class: "faults" }),
    el("td", { text: s.outcome || "" }));
  const fillCounts = async (list) => {
    // The list shows first; counting reads every record of a session, so the counts follow.
    if (!list.length) return;
    const p = new URLSearchParams({ ids: list.map((s) => s.id).join(","), sealed: list.filter((s) => s.sealed).map((s) => s.id).join(",") });
    const counts = await getJSON(`/api/counts?${p}`);
    for (const [id, c] of Object.entries(counts)) {
      const tr = tbody.querySelector(`tr[data-id="${id}"]`);
      if (!tr) continue;
      for (const k of ["calls", "errors", "faults"]) {
        const td = tr.querySelector(`td.${k}`);
        td.textContent = String(c[k]);
        if (k !== "calls" && c[k]) { td.classList.add("error"); tr.classList.add("bad"); }
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
  const add = (r) => {
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
  const more = async () => {
    if (loading || capped) return;
    if (tbody.children.length >= MAX_ROWS) {
      capped = true;
      sentinel.replaceChildren(el("a", { href: `/sessions/${sid}?from=${lastSeq + 1}`, text: `continue from seq ${lastSeq + 1} →` }));
      return;
    }
    loading = true;
    try {
      const page = await getJSON(`/api/sessions/${sid}/records?after_seq=${lastSeq}`);
      page.records.forEach(add);
      if (page.records.length) lastSeq = page.records[page.records.length - 1].seq;
      total = page.last_seq;
      atEnd = lastSeq >= total;
      rescale();
      const firstSeq = tbody.firstChild ? tbody.firstChild.dataset.seq : 0;
      $("#count").textContent = `records ${firstSeq}–${lastSeq} of ${total}`;
      if (!capped) sentinel.textContent = atEnd ? "" : "loading…";
      document.body.classList.add("loaded");
    } finally {
      loading = false;
    }
  };
  const show = async (seq, tr) => {
    tbody.querySelectorAll("tr.selected").forEach((n) => n.classList.remove("selected"));
    tr.classList.add("selected");
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
  // A live event during a fetch must not be lost: try again once that fetch is done.
  const grow = () => {
    if (loading) { setTimeout(grow, 100); return; }
    if (atEnd || tbody.children.length < 200) { atEnd = false; more(); }
  };
  live(`?session=${encodeURIComponent(sid)}`, grow, grow);
}

// ---- replay ---------------------------------------------------------------------------------

async function replay() {
  const sid = document.body.dataset.session;
  const form = $("#replay-form");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = $("#replay-result");
    out.replaceChildren(el("p", { text: "replaying…" }));
    const res = await fetch(`/api/sessions/${sid}/replay`, {
      method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json", "x-blackbox-token": TOKEN },
      body: JSON.stringify({ against: form.against.value }),
    });
    const doc = await res.json();
    if (!res.ok) { out.replaceChildren(el("p", { class: "error", text: doc.error })); return; }
    out.replaceChildren(el("p", { class: doc.verdict === "equivalent" ? "ok" : "error", id: "verdict",
      text: `${doc.verdict}: ${Object.entries(doc.summary).filter(([, v]) => v).map(([k, v]) => `${v} ${k.replaceAll("_", " ")}`).join(", ")}` }));
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
