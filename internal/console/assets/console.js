// The replication console: reads /console/api/overview every few seconds and draws the topology and
// the link table with plain DOM and SVG (no framework, no build step; docs/console.md).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const TOKEN_KEY = "meridian-console-token";

// api fetches one of the console's documents, with the token the user gave (kept for this browser
// tab only) when authentication is on. A 401 or 403 shows the login form.
async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const resp = await fetch(path, { cache: "no-store", headers: token ? { "Authorization": "Bearer " + token } : {} });
  if (resp.status === 401 || resp.status === 403) {
    showLogin(resp.status === 403 ? "this token's role may not read the console (it needs a superuser)" : "");
    throw new Error("authentication needed");
  }
  if (!resp.ok) throw new Error((await resp.text()).trim() || "HTTP " + resp.status);
  hideLogin();
  return resp.json();
}

function showLogin(why) {
  document.getElementById("login").hidden = false;
  document.getElementById("login-why").textContent = why;
}

function hideLogin() {
  document.getElementById("login").hidden = true;
}

function login(event) {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("login-token").value.trim());
  document.getElementById("login-token").value = "";
  refresh();
}
const POLL_MS = 2000;
const STATE_RANK = { "ok": 0, "behind": 1, "not-draining": 2, "stalled": 3, "error": 4, "disconnected": 4 };

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function duration(seconds) {
  if (seconds < 60) return Math.round(seconds) + " s";
  if (seconds < 3600) return Math.round(seconds / 60) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

// worstState folds the outbound links to one remote into the colour of its edge.
function worstState(links) {
  let worst = "ok";
  for (const l of links) if ((STATE_RANK[l.state] || 0) > STATE_RANK[worst]) worst = l.state;
  return worst;
}

function drawTopology(ov) {
  const svg = document.getElementById("topology");
  svg.replaceChildren();
  const names = ov.clusters.map(c => c.name);
  if (!names.includes(ov.cluster)) names.unshift(ov.cluster);
  for (const l of ov.links) if (!names.includes(l.remote)) names.push(l.remote);
  const cx = 320, cy = 180, r = names.length > 1 ? 130 : 0;
  const pos = {};
  const others = names.filter(n => n !== ov.cluster);
  pos[ov.cluster] = { x: others.length ? 170 : cx, y: cy };
  others.forEach((n, i) => {
    const a = others.length === 1 ? 0 : -Math.PI / 2 + (i * Math.PI) / Math.max(1, others.length - 1);
    pos[n] = { x: 170 + 300 * Math.cos(a) * (others.length === 1 ? 1 : 0.9), y: cy + r * Math.sin(a) };
  });
  const edges = el("svg:g");
  const byRemote = {};
  for (const l of ov.links) {
    const k = (l.outbound ? "out:" : "in:") + l.remote;
    (byRemote[k] = byRemote[k] || []).push(l);
  }
  for (const [k, links] of Object.entries(byRemote)) {
    const outbound = k.startsWith("out:");
    const remote = k.slice(k.indexOf(":") + 1);
    const from = outbound ? pos[ov.cluster] : pos[remote], to = outbound ? pos[remote] : pos[ov.cluster];
    if (!from || !to) continue;
    const off = outbound ? -8 : 8; // outbound above, inbound below: both directions stay visible
    const state = outbound ? worstState(links) : "inbound";
    edges.appendChild(el("svg:line", { x1: from.x, y1: from.y + off, x2: to.x, y2: to.y + off,
      class: "edge " + state, "data-remote": remote, "data-direction": outbound ? "out" : "in" }));
    const backlog = links.reduce((s, l) => s + (l.backlog || 0), 0);
    const rate = links.reduce((s, l) => s + (outbound ? l.rateOut : l.rateIn), 0);
    const label = outbound ? `→ ${links.length} topics, backlog ${backlog}, ${rate.toFixed(0)} msg/s`
      : `← ${links.length} topics, ${rate.toFixed(0)} msg/s`;
    edges.appendChild(el("svg:text", { x: (from.x + to.x) / 2, y: (from.y + to.y) / 2 + off * 2.2, class: "label" }, label));
  }
  svg.appendChild(edges);
  for (const n of names) {
    const g = el("svg:g", { class: "cluster" + (n === ov.cluster ? " local" : ""), "data-cluster": n });
    g.appendChild(el("svg:circle", { cx: pos[n].x, cy: pos[n].y, r: 34 }));
    g.appendChild(el("svg:text", { x: pos[n].x, y: pos[n].y }, n));
    svg.appendChild(g);
  }
}

// sparkline charts one field of a link's history (backlog, rateOut or delaySeconds).
function sparkline(history, field) {
  field = field || "backlog";
  const svg = el("svg:svg", { class: "spark " + field, viewBox: "0 0 160 28", preserveAspectRatio: "none" });
  if (!history || history.length < 2) return svg;
  const t0 = history[0].at, t1 = history[history.length - 1].at;
  const top = Math.max(1, ...history.map(s => s[field]));
  const pts = history.map(s => {
    const x = t1 > t0 ? ((s.at - t0) / (t1 - t0)) * 158 + 1 : 1;
    const y = 27 - (s[field] / top) * 25;
    return x.toFixed(1) + "," + y.toFixed(1);
  });
  svg.appendChild(el("svg:polyline", { points: pts.join(" ") }));
  svg.setAttribute("data-max", String(top));
  return svg;
}

function drawLinks(ov) {
  const body = document.querySelector("#links tbody");
  body.replaceChildren();
  document.getElementById("nolinks").hidden = ov.links.length > 0;
  for (const l of ov.links) {
    const tr = el("tr", { "data-topic": l.topic, "data-remote": l.remote, "data-state": l.state });
    tr.appendChild(el("td", {}, l.topic));
    tr.appendChild(el("td", {}, l.remote));
    tr.appendChild(el("td", {}, l.outbound ? "to" : "from"));
    const st = el("td");
    st.appendChild(el("span", { class: "badge " + l.state }, l.state));
    tr.appendChild(st);
    tr.appendChild(el("td", { class: "num backlog" }, l.outbound ? String(l.backlog) : "–"));
    tr.appendChild(el("td", { class: "num" }, (l.outbound ? l.rateOut : l.rateIn).toFixed(1) + "/s"));
    tr.appendChild(el("td", { class: "num" }, l.outbound ? duration(l.delaySeconds) : "–"));
    const eta = !l.outbound ? "–" : l.backlog === 0 ? "caught up" : l.etaSeconds != null ? "~" + duration(l.etaSeconds) : "not draining";
    tr.appendChild(el("td", {}, eta));
    for (const field of ["backlog", "rateOut", "delaySeconds"]) {
      const spark = el("td");
      if (l.outbound) spark.appendChild(sparkline(l.history, field));
      tr.appendChild(spark);
    }
    const why = l.stalled ? `stalled since ${new Date(l.stalledSince).toLocaleTimeString()}: ${l.stalledReason}` : (l.lastError || "");
    tr.appendChild(el("td", { class: "error-text" }, why));
    body.appendChild(tr);
  }
}

function drawSubscriptions(ov) {
  const body = document.querySelector("#subscriptions tbody");
  body.replaceChildren();
  const subs = ov.subscriptions || [];
  document.getElementById("nosubs").hidden = subs.length > 0;
  for (const s of subs) {
    const tr = el("tr", { "data-topic": s.topic, "data-subscription": s.subscription, "data-remote": s.remote });
    tr.appendChild(el("td", {}, s.topic));
    tr.appendChild(el("td", {}, s.subscription));
    tr.appendChild(el("td", {}, s.remote));
    tr.appendChild(el("td", {}, s.outbound ? "to" : "from"));
    tr.appendChild(el("td", { class: "num lag" }, s.lagMs + " ms"));
    tr.appendChild(el("td", { class: "num" }, String(s.pendingStates || 0)));
    tr.appendChild(el("td", {}, (s.waitingFor || []).join(", ")));
    body.appendChild(tr);
  }
}

// fillFailoverChoices offers the namespaces of the links and the other clusters as choices.
function fillFailoverChoices(ov) {
  const list = document.getElementById("fo-namespaces");
  const namespaces = new Set(ov.links.map(l => l.topic.replace(/^[a-z-]+:\/\//, "").split("/").slice(0, 2).join("/")));
  list.replaceChildren(...[...namespaces].sort().map(n => el("option", { value: n })));
  const select = document.getElementById("fo-target");
  const chosen = select.value;
  const others = ov.clusters.map(c => c.name).filter(n => n !== ov.cluster).sort();
  select.replaceChildren(...others.map(n => el("option", { value: n }, n)));
  if (others.includes(chosen)) select.value = chosen;
}

async function runFailoverCheck(event) {
  event.preventDefault();
  const ns = document.getElementById("fo-namespace").value.trim();
  const to = document.getElementById("fo-target").value;
  const verdict = document.getElementById("fo-verdict");
  const table = document.getElementById("fo-result");
  verdict.textContent = "checking…";
  table.hidden = true;
  try {
    const report = await api("api/failover-check?" + new URLSearchParams({ namespace: ns, to: to }));
    const body = table.querySelector("tbody");
    body.replaceChildren();
    for (const c of report.checks) {
      const tr = el("tr", { "data-check": c.check, "data-status": c.status });
      tr.appendChild(el("td", {}, c.check));
      const st = el("td");
      st.appendChild(el("span", { class: "badge check-" + c.status }, c.status));
      tr.appendChild(st);
      tr.appendChild(el("td", { class: "detail" }, c.detail));
      body.appendChild(tr);
    }
    table.hidden = false;
    verdict.textContent = `${report.namespace} -> ${report.to}: ${report.verdict}`;
    verdict.dataset.verdict = report.verdict;
  } catch (err) {
    verdict.textContent = "the check could not run: " + err.message;
    verdict.dataset.verdict = "error";
  }
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const ov = await api("api/overview");
    drawTopology(ov);
    drawLinks(ov);
    drawSubscriptions(ov);
    fillFailoverChoices(ov);
    status.textContent = `cluster ${ov.cluster} · ${ov.links.length} links · updated ${new Date(ov.sampledAt).toLocaleTimeString()}`;
    document.body.dataset.loaded = "true";
  } catch (err) {
    status.textContent = "cannot read the overview: " + err.message;
  }
}

document.getElementById("failover").addEventListener("submit", runFailoverCheck);
document.getElementById("login").addEventListener("submit", login);
refresh();
setInterval(refresh, POLL_MS);
