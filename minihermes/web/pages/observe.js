// Watching: the audit log (by type and time), the health of every service group, charts of key metrics.

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
  async function load() {
    try {
      const reply = await ctx.api.call("audit_event", "query_events", {
        event_type: type.value.trim(),
        since: epoch(since),
        limit: 500,
      });
      const end = epoch(until);
      // Newest first; `until` is applied here (the op filters from `since` on).
      const events = (reply.events || []).filter((e) => !end || e.ts <= end).reverse();
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
        ["detail", "detail"],
        ["data", "data", (e) => (e.data && Object.keys(e.data).length ? fmtValue(e.data).slice(0, 300) : "")],
      ], { empty: "No events match.", rowAttrs: (e) => ({ dataset: { eventType: e.event_type } }) }));
    } catch (err) {
      clear(box, errorBox(err));
    }
  }
  await load();
  root.append(
    section(
      "Events",
      h("form", { class: "toolbar", onsubmit: (e) => (e.preventDefault(), load()) }, type, types, "from", since, "until", until, h("button", { class: "btn" }, "Filter")),
      box,
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
