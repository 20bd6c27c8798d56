// Watching: the audit log (by type and time, a page at a time, newest first), the health of every service
// group, charts of key metrics.

import { badge, clear, errorBox, fmtTime, fmtValue, h, lineChart, notEnabled, section, table } from "../ui.js";

export const auditPage = { title: "Audit log", actors: ["audit_event"], render: renderAudit, poll: 5000 };
export const healthPage = { title: "Health", actors: ["health_monitor"], render: renderHealth, poll: 5000 };
export const metricsPage = { title: "Metrics", actors: [], render: renderMetrics, poll: 10000 };

function epoch(input) {
  return input.value ? new Date(input.value).getTime() / 1000 : 0;
}

async function renderAudit(root, ctx) {
  if (!ctx.catalog.has("audit_event")) return root.append(notEnabled("audit_event"));
  const type = h("input", { name: "event_type", placeholder: "event type (pick or type)", list: "event-types", autocomplete: "off" });
  const seen = new Set(); // every type met in the tenant's trail while the page is open
  const types = h("datalist", { id: "event-types" });
  const since = h("input", { name: "since", type: "datetime-local", title: "from" });
  const until = h("input", { name: "until", type: "datetime-local", title: "until" });
  const box = h("div");
  // Pages, newest first, by a seq cursor: `cursor` is the page's before_seq (0: the newest), `back` the
  // cursors of the newer pages, so Newer returns exactly where Older came from.
  const PAGE = 100;
  let cursor = 0;
  let back = [];
  const pageInfo = h("span", { class: "muted page-info" });
  const newer = h("button", { class: "btn small", type: "button", dataset: { page: "newer" }, disabled: true,
    onclick: () => ((cursor = back.pop() || 0), load()) }, "Newer");
  const older = h("button", { class: "btn small", type: "button", dataset: { page: "older" }, disabled: true,
    onclick: () => { if (older.dataset.before) (back.push(cursor), (cursor = Number(older.dataset.before)), load()); } }, "Older");
  async function load() {
    try {
      const reply = await ctx.api.call("audit_event", "query_events", {
        event_type: type.value.trim(),
        since: epoch(since),
        until: epoch(until),
        limit: PAGE,
        before_seq: cursor,
      });
      const events = (reply.events || []).slice().reverse(); // newest first
      older.disabled = !reply.more;
      older.dataset.before = reply.more && reply.events.length ? String(reply.events[0].seq) : "";
      newer.disabled = !back.length;
      pageInfo.textContent = events.length
        ? `page ${back.length + 1} · events #${events[events.length - 1].seq}–#${events[0].seq}${reply.more ? " · older ones on the next page" : ""}`
        : "";
      for (const e of events) seen.add(e.event_type);
      if (type.value.trim()) {
        // Filtered: the picker still offers every type of the recent trail.
        const recent = await ctx.api.call("audit_event", "query_events", { limit: 500 });
        for (const e of recent.events || []) seen.add(e.event_type);
      }
      clear(types, [...seen].sort().map((t) => h("option", { value: t })));
      clear(box, table(events, [
        ["seq", "#"],
        ["ts", "time", (e) => fmtTime(e.ts)],
        ["event_type", "type", (e) => badge(e.event_type, "event")],
        ["principal", "by"],
        ["session_id", "session"],
        // Another person's event, shown to a viewer without what they wrote (the server redacted it).
        ["detail", "detail", (e) => (e.redacted ? h("em", { class: "muted redacted" }, "(redacted)") : e.detail || "")],
        ["data", "data", (e) => (e.data && Object.keys(e.data).length ? fmtValue(e.data).slice(0, 300) : "")],
      ], { empty: "No events match.", rowAttrs: (e) => ({ dataset: { eventType: e.event_type, seq: e.seq, redacted: String(e.redacted === true) } }) }));
    } catch (err) {
      clear(box, errorBox(err));
    }
  }
  await load();
  root.append(
    section(
      "Events",
      h("form", { class: "toolbar", onsubmit: (e) => (e.preventDefault(), (cursor = 0), (back = []), load()) }, type, types, "from", since, "until", until, h("button", { class: "btn" }, "Filter")),
      box,
      h("div", { class: "toolbar pager" }, newer, older, pageInfo),
    ),
  );
  return load;
}

async function renderHealth(root, ctx) {
  if (!ctx.catalog.has("health_monitor")) return root.append(notEnabled("health_monitor"));
  const box = h("div");
  async function load() {
    const reply = await ctx.api.call("health_monitor", "get_health", {});
    const groups = Object.entries(reply.group_health || {}).map(([name, g]) => ({ name, ...g }));
    clear(
      box,
      h("p", {}, "Overall ", badge(reply.status, reply.status === "ok" ? "ok" : "bad")),
      table(groups, [
        ["name", "service"],
        ["status", "status", (g) => badge(g.status, g.status === "ok" ? "ok" : "bad")],
        ["kind", "kind"],
        ["behavior", "behavior"],
        ["instances", "instances"],
        ["restarts", "restarts"],
        ["crashes", "crashes"],
        ["reason", "reason"],
      ], { rowAttrs: (g) => ({ dataset: { service: g.name, status: g.status } }) }),
    );
  }
  await load();
  root.append(section("Service groups", box));
  return load;
}

// Key metrics: [label, metric name, drawn as a rate?]
const CHARTS = [
  ["Chats", "agent_chats_total", true],
  ["Tool calls", "agent_tool_calls_total", true],
  ["LLM calls", "llm_calls_total", true],
  ["LLM tokens", "llm_tokens_total", true],
  ["Failovers", "llm_failovers_total", true],
  ["Audit events", "audit_events_total", true],
  ["HTTP requests", "http_requests_total", true],
  ["Actor restarts", "actor_restarts_total", true],
  ["Open circuits", "llm_circuit_open", false],
];

async function renderMetrics(root, ctx) {
  const charts = h("div", { class: "charts" });
  const totals = h("div");
  async function load() {
    const reply = await ctx.api.metrics();
    const series = reply.series || {};
    clear(charts, CHARTS.map(([label, name, rate]) => lineChart(label, series[name] || [], { rate })));
    const sums = new Map();
    for (const row of reply.counters || []) sums.set(row.name, (sums.get(row.name) || 0) + row.value);
    clear(totals, table([...sums].map(([name, value]) => ({ name, value })), [["name", "counter"], ["value", "total"]]));
  }
  await load();
  root.append(
    section("Key metrics (per sample)", h("p", { class: "muted" }, "Sampled by the server; Prometheus can scrape /metrics."), charts),
    section("Counters", totals),
  );
  return load;
}
