// Trove's dashboard: polls /api/overview and /api/history every few seconds and draws the page,
// charts included (plain SVG), with nothing loaded from elsewhere.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg"; // the SVG namespace name, not a location
const COLORS = ["#2f6fde", "#1f9d55", "#d08700", "#d33a2c", "#7b4fd6", "#0f9fb3", "#c2418d", "#6b7385", "#8a6d1f", "#3d8f3d"];
const POLL_MS = 2000;

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "style") e.style.cssText = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}

function bytes(n) {
  if (n == null || !isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
}
function rate(n) { return bytes(n) + "/s"; }
function num(n, digits) {
  if (n == null || !isFinite(n)) return "–";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return n.toFixed(digits == null ? 0 : digits);
}
function ms(s) { return s == null ? "–" : (s * 1000 < 1 ? (s * 1e6).toFixed(0) + " µs" : (s * 1000).toFixed(s * 1000 < 10 ? 2 : 1) + " ms"); }
function clock(t) { const d = new Date(t); return d.toISOString().substring(11, 19); }
function served(map) {
  const keys = Object.keys(map || {});
  const s = keys.filter(k => k !== "client");
  return (s.length ? s : keys).reduce((a, k) => a + map[k], 0);
}
function label(p) { return p.role + " " + p.id; }

// A line chart of `series` ([{name, points: [[t_ms, value]]}]) into `host`.
function lineChart(host, series, format) {
  const W = 560, H = 190, L = 72, R = 8, T = 8, B = 20;
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const all = series.flatMap(s => s.points);
  if (!all.length) {
    host.replaceChildren(el("div", { class: "empty" }, "nothing in the last ten minutes"));
    return;
  }
  const now = Date.now();
  const t0 = all.length ? Math.min(...all.map(p => p[0])) : now - 600000;
  const t1 = all.length ? Math.max(...all.map(p => p[0])) : now;
  let vmax = Math.max(0, ...all.map(p => p[1]));
  if (vmax <= 0) vmax = 1;
  vmax *= 1.1;
  const x = t => L + (W - L - R) * (t1 === t0 ? 1 : (t - t0) / (t1 - t0));
  const y = v => T + (H - T - B) * (1 - v / vmax);
  const line = (x1, y1, x2, y2, stroke) => {
    const l = document.createElementNS(SVG_NS, "line");
    for (const [k, v] of Object.entries({ x1, y1, x2, y2, stroke, "stroke-width": 1 })) l.setAttribute(k, v);
    svg.append(l);
  };
  const text = (x0, y0, s, anchor) => {
    const t = document.createElementNS(SVG_NS, "text");
    t.setAttribute("x", x0); t.setAttribute("y", y0); t.setAttribute("text-anchor", anchor || "end");
    t.textContent = s;
    svg.append(t);
  };
  for (let i = 0; i <= 4; i++) {
    const v = vmax * i / 4;
    line(L, y(v), W - R, y(v), "#e2e5ea");
    text(L - 4, y(v) + 3, format(v));
  }
  text(L, H - 5, clock(t0), "start");
  text(W - R, H - 5, clock(t1), "end");
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const path = document.createElementNS(SVG_NS, "polyline");
    path.setAttribute("points", s.points.map(p => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" "));
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", COLORS[i % COLORS.length]);
    path.setAttribute("stroke-width", "1.8");
    svg.append(path);
  });
  const legend = el("div", { class: "legend" });
  series.forEach((s, i) => legend.append(el("span", { style: `--c:${COLORS[i % COLORS.length]}` }, s.name)));
  host.replaceChildren(svg, legend);
}

function drawHistory(h) {
  const points = h.points || [];
  const byProto = {}, opsByProto = {}, byProc = {}, latency = {};
  const add = (map, key, t, v) => { (map[key] = map[key] || new Map()).set(t, ((map[key].get(t)) || 0) + v); };
  for (const pt of points) {
    for (const [addr, p] of Object.entries(pt.processes)) {
      for (const [proto, v] of Object.entries(p.read || {})) add(byProto, proto + " read", pt.t_ms, v);
      for (const [proto, v] of Object.entries(p.write || {})) add(byProto, proto + " write", pt.t_ms, v);
      for (const [proto, v] of Object.entries(p.ops || {})) add(opsByProto, proto, pt.t_ms, v);
      const moved = served(p.read) + served(p.write);
      if (p.role !== "meta") add(byProc, label(p), pt.t_ms, moved);
      if (p.p99_ms != null) add(latency, label(p), pt.t_ms, p.p99_ms / 1000);
    }
  }
  const toSeries = (map, keepEmpty) => Object.entries(map)
    .map(([name, m]) => ({ name, points: [...m.entries()].sort((a, b) => a[0] - b[0]) }))
    .filter(s => keepEmpty || s.points.some(p => p[1] > 0))
    .sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true }));
  lineChart($("chart-throughput"), toSeries(byProto), rate);
  lineChart($("chart-ops"), toSeries(opsByProto), v => num(v));
  lineChart($("chart-nodes"), toSeries(byProc).slice(0, 10), rate);
  lineChart($("chart-latency"), toSeries(latency).slice(0, 10), v => ms(v));
}

function drawOverview(o) {
  const s = o.status;
  $("cluster").textContent = s ? `${s.nodes.length} storage nodes · map v${s.map_version} · ${s.default_ec.k}+${s.default_ec.m} · ${s.engine}` : (o.status_error || "no status");
  const health = $("health");
  health.className = "badge " + o.health.state;
  health.textContent = o.health.state;
  $("updated").textContent = "updated " + clock(o.updated_ms || o.generated_ms) + " UTC";
  $("reasons").replaceChildren(...o.health.reasons.map(r => el("div", { class: o.health.state }, r)));

  if (s) {
    const up = s.nodes.filter(n => n.state === "Up").length;
    const down = s.nodes.filter(n => n.state === "Down").length;
    $("card-nodes").textContent = `${up} / ${s.nodes.length} up`;
    $("card-nodes-sub").textContent = down ? `${down} down` : "all serving";
  }
  const cap = o.capacity;
  const used = cap.total ? 100 * (cap.total - cap.free) / cap.total : 0;
  $("card-capacity").textContent = cap.total ? used.toFixed(1) + "%" : "–";
  const bar = $("card-capacity-bar");
  bar.style.width = used.toFixed(1) + "%";
  bar.className = used >= 95 ? "bad" : used >= 85 ? "warn" : "";
  $("card-capacity-sub").textContent = `${bytes(cap.total - cap.free)} of ${bytes(cap.total)} raw` + (cap.pending_delete ? ` · ${bytes(cap.pending_delete)} pending deletion` : "");
  $("card-read").textContent = rate(o.totals.read_bytes);
  $("card-write").textContent = rate(o.totals.write_bytes);
  const ops = o.totals.ops || {};
  $("card-ops").textContent = num(Object.values(ops).reduce((a, v) => a + v, 0)) + "/s";
  $("card-ops-sub").textContent = Object.entries(ops).filter(([, v]) => v > 0).map(([k, v]) => `${k} ${num(v)}`).join(" · ") || "idle";
  const ch = o.chunks || {};
  $("card-chunks").textContent = num(ch.all);
  const bad = ["degraded", "unavailable", "misplaced", "narrow"].filter(k => ch[k] > 0).map(k => `${num(ch[k])} ${k}`);
  $("card-chunks-sub").textContent = bad.length ? bad.join(" · ") : (ch.degraded === 0 ? "none degraded" : "");

  // Storage nodes, with the rates of their processes.
  const rates = {};
  for (const p of o.processes) if (p.role === "storage") rates[p.id] = p;
  const tbody = document.querySelector("#nodes tbody");
  tbody.replaceChildren(...(s ? s.nodes : []).map(n => {
    const total = n.drives.reduce((a, d) => a + d.bytes_total, 0), free = n.drives.reduce((a, d) => a + d.bytes_free, 0);
    const shards = n.drives.reduce((a, d) => a + d.shards, 0);
    const errors = n.drives.filter(d => d.error).map(d => d.error);
    const u = total ? 100 * (total - free) / total : 0;
    const p = rates[String(n.id)], r = p && p.rates;
    const state = n.state.toLowerCase();
    return el("tr", { "data-node": n.id, "data-state": state },
      el("td", {}, n.id),
      el("td", {}, n.addr),
      el("td", {}, el("span", { class: "pill state-" + state }, state)),
      el("td", {}, n.drives.length + (errors.length ? " (" + errors.join("; ") + ")" : "")),
      el("td", {}, el("span", { class: "bar" }, el("div", { style: `width:${u.toFixed(1)}%`, class: u >= 95 ? "bad" : u >= 85 ? "warn" : "" })), `${u.toFixed(0)}% of ${bytes(total)}`),
      el("td", { class: "num" }, num(shards)),
      el("td", { class: "num" }, (n.heartbeat_age_ms / 1000).toFixed(1) + " s"),
      el("td", { class: "num" }, r ? num(served(r.ops)) : "–"),
      el("td", { class: "num" }, r ? rate(served(r.read_bytes)) : "–"),
      el("td", { class: "num" }, r ? rate(served(r.write_bytes)) : "–"),
      el("td", { class: "num" }, r ? r.cpu_percent.toFixed(0) + "%" : "–"));
  }));

  // Jobs.
  const jobs = o.jobs || [];
  $("jobs").replaceChildren(...(jobs.length ? jobs.map(j => {
    const seen = j.chunks_seen || 0, left = j.chunks_left || 0;
    const done = seen ? 100 * (seen - left) / seen : 100;
    const what = left > 0 ? `${num(left)} of ${num(seen)} chunks left to move or repair` : `all ${num(seen)} chunks in place`;
    return el("div", { class: "job", "data-job": j.job },
      el("div", {}, el("b", {}, j.job), " · ", j.running ? "pass running" : "idle", " · ", what),
      el("div", { class: "bar" }, el("div", { style: `width:${done.toFixed(1)}%`, class: left > 0 ? "warn" : "" })),
      el("div", { class: "muted" }, `${num(j.passes)} passes · ${num(j.chunks_moved)} chunks moved · ${bytes(j.bytes_written)} written · ${num(j.shards_repaired)} shards repaired · last pass ${j.last_pass_s.toFixed(1)} s`));
  }) : [el("div", { class: "muted" }, "no job has run yet")]));

  // Events, newest first.
  $("events").replaceChildren(...(o.events.length ? o.events.map(e => el("li", { "data-kind": e.kind },
    el("span", { class: "time" }, new Date(e.time_ms).toISOString().substring(5, 19).replace("T", " ")),
    el("span", { class: "sev-" + e.severity.toLowerCase() }, e.kind),
    el("span", {}, e.message))) : [el("li", { class: "muted" }, "no events yet")]));

  // Processes.
  const pbody = document.querySelector("#processes tbody");
  pbody.replaceChildren(...o.processes.map(p => {
    const r = p.rates;
    return el("tr", { "data-role": p.role },
      el("td", {}, p.role),
      el("td", {}, p.id),
      el("td", {}, p.host),
      el("td", { class: p.reachable ? "" : "unreachable" }, p.metrics + (p.reachable ? "" : " (unreachable)")),
      el("td", { class: "num" }, r ? r.cpu_percent.toFixed(0) + "%" : "–"),
      el("td", { class: "num" }, r ? bytes(r.memory_bytes) : "–"),
      el("td", { class: "num" }, r ? num(served(r.ops)) : "–"),
      el("td", { class: "num" }, r ? rate(r.net_in_bytes) : "–"),
      el("td", { class: "num" }, r ? rate(r.net_out_bytes) : "–"),
      el("td", { class: "num" }, r ? ms(r.latency_p50_s) : "–"),
      el("td", { class: "num" }, r ? ms(r.latency_p99_s) : "–"));
  }));
}

async function poll() {
  try {
    const [o, h] = await Promise.all([
      fetch("api/overview", { cache: "no-store" }).then(r => r.json()),
      fetch("api/history", { cache: "no-store" }).then(r => r.json()),
    ]);
    drawOverview(o);
    drawHistory(h);
    document.body.dataset.loaded = "yes";
  } catch (e) {
    $("health").className = "badge critical";
    $("health").textContent = "unreachable";
    $("cluster").textContent = String(e);
  }
}

poll();
setInterval(poll, POLL_MS);
