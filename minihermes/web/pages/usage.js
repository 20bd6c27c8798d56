// LLM spend (issue 30): per day or month, per model, and the caps over it (llm_gateway.get_usage). A person
// sees their own usage; an admin the tenant's, or any user's, cron job's or kanban worker's. A banner says when
// a cap's soft threshold (50/80/100% by default) has been crossed in the current period.

import { clear, errorBox, fmtTime, h, notEnabled, section, table } from "../ui.js";

export const page = { title: "Usage", actors: ["llm_gateway"], render };

const SCOPES = ["tenant", "user", "session", "cron_job", "kanban_worker"];
const PERIODS = ["day", "month", "total"];

function usd(value) {
  const n = Number(value || 0);
  return n === 0 ? "$0" : n >= 0.01 ? `$${n.toFixed(2)}` : `$${n.toFixed(4)}`;
}

function tokens(row) {
  return Number(row.input_tokens || 0) + Number(row.output_tokens || 0);
}

// The bar's length through the CSSOM (the dashboard's CSP allows no inline style attribute).
function fill(percent) {
  const el = h("span", { class: "usage-fill" });
  el.style.width = `${percent.toFixed(1)}%`;
  return el;
}

// One horizontal bar per period (oldest first), in USD, or in tokens when nothing is priced.
function barChart(rows, title) {
  const series = [...rows].reverse();
  const money = series.some((r) => Number(r.cost_usd) > 0);
  const value = (r) => (money ? Number(r.cost_usd || 0) : tokens(r));
  const max = Math.max(...series.map(value), money ? 1e-9 : 1);
  return h(
    "figure",
    { class: "usage-chart", role: "img", "aria-label": title, dataset: { unit: money ? "usd" : "tokens" } },
    h("figcaption", {}, `${title} (${money ? "USD" : "tokens"})`),
    ...series.map((r) =>
      h(
        "div",
        { class: "usage-bar", dataset: { label: r.label } },
        h("span", { class: "usage-label" }, r.label),
        h("span", { class: "usage-track" }, fill((100 * value(r)) / max)),
        h("span", { class: "usage-value" }, money ? usd(r.cost_usd) : `${tokens(r)} tokens`),
      ),
    ),
  );
}

function capText(cap) {
  const limits = [cap.max_usd != null ? usd(cap.max_usd) : "", cap.max_tokens != null ? `${cap.max_tokens} tokens` : ""].filter(Boolean);
  const word = { day: "daily", month: "monthly", total: "total" }[cap.period] || cap.period;
  return `${word} cap of ${limits.join(" and ")} (${cap.time_zone})`;
}

function banner(reply) {
  const crossed = (reply.caps || []).filter((c) => (c.alerts_sent || []).length);
  if (!crossed.length) return null;
  const who = reply.scope === "tenant" ? "The tenant" : `The ${reply.scope.replace("_", " ")} ${reply.key}`;
  const lines = crossed.map((c) => {
    const top = Math.max(...c.alerts_sent);
    const when = c.resets_at ? `; it resets at ${fmtTime(c.resets_at)}` : "";
    return `${who} has used ${Number(c.percent).toFixed(0)}% of the ${capText(c)} (past the ${top}% alert)${when}.`;
  });
  const spent = crossed.some((c) => c.percent >= 100);
  return h("div", { id: "usage-banner", class: `usage-banner ${spent ? "spent" : "warn"}`, role: "alert" }, ...lines.map((l) => h("div", {}, l)));
}

async function render(root, ctx) {
  if (!ctx.catalog.has("llm_gateway", "get_usage")) return root.append(notEnabled("llm_gateway"));
  const admin = ctx.catalog.can("llm_gateway", "set_budget");
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const state = {
    scope: admin ? params.get("scope") || "tenant" : "user",
    key: admin ? params.get("key") || "" : "",
    period: PERIODS.includes(params.get("period")) ? params.get("period") : "day",
  };
  const box = h("div", { id: "usage" });

  const form = h("form", { class: "inline", id: "usage-form" });
  const period = h("select", { name: "period" }, ...PERIODS.map((p) => h("option", { value: p, selected: p === state.period }, p)));
  form.append(h("label", {}, "per ", period));
  let scope = null;
  let key = null;
  if (admin) {
    scope = h("select", { name: "scope" }, ...SCOPES.map((s) => h("option", { value: s, selected: s === state.scope }, s)));
    key = h("input", { name: "key", placeholder: "user, session, job…", value: state.key });
    form.append(h("label", {}, "scope ", scope), h("label", {}, "key ", key));
  }
  form.append(h("button", { type: "submit", class: "btn" }, "Show"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    state.period = period.value;
    if (admin) {
      state.scope = scope.value;
      state.key = key.value.trim();
    }
    load();
  });

  async function load() {
    try {
      const args = { period: state.period, limit: state.period === "month" ? 12 : 31 };
      if (admin) Object.assign(args, { scope: state.scope, key: state.key });
      const reply = await ctx.api.call("llm_gateway", "get_usage", args);
      const current = reply.current || {};
      const models = Object.entries(current.models || {}).map(([model, row]) => ({ model, ...row }));
      const who = reply.scope === "tenant" ? "the tenant" : `${reply.scope.replace("_", " ")} ${reply.key}`;
      clear(
        box,
        banner(reply),
        h(
          "p",
          { class: "usage-current", id: "usage-current" },
          `${{ day: "Today", month: "This month", total: "In total" }[state.period]}${state.period === "total" ? "" : ` (${current.label}, UTC)`}, ${who} spent `,
          h("b", { id: "usage-spend" }, usd(current.cost_usd)),
          ` on ${current.calls || 0} calls (${tokens(current)} tokens)`,
          current.unknown_cost_calls ? `, plus ${current.unknown_cost_calls} calls of unknown price` : "",
          ".",
        ),
        (reply.history || []).length ? barChart(reply.history, `Spend per ${state.period}`) : null,
        h("h3", {}, "Per model"),
        table(models, [
          ["model", "model"],
          ["calls", "calls"],
          ["input_tokens", "input tokens"],
          ["output_tokens", "output tokens"],
          ["cost_usd", "cost", (m) => usd(m.cost_usd) + (m.unknown_cost_calls ? ` + ${m.unknown_cost_calls} unpriced` : "")],
        ], { empty: "No model calls in this period.", rowAttrs: (m) => ({ dataset: { model: m.model } }) }),
        h("h3", {}, "Caps"),
        table(reply.caps || [], [
          ["period", "cap", (c) => capText(c)],
          ["percent", "used", (c) => `${Number(c.percent).toFixed(1)}% (${usd(c.used_usd)}, ${c.used_tokens} tokens)`],
          ["alerts_sent", "alerts sent", (c) => (c.alerts_sent || []).map((a) => `${a}%`).join(", ")],
          ["resets_at", "resets", (c) => (c.resets_at ? fmtTime(c.resets_at) : "never")],
        ], { empty: "No caps. Admins set them with `minihermes usage --set-usd` or llm_gateway.set_budget." }),
      );
    } catch (err) {
      clear(box, errorBox(err));
    }
  }

  await load();
  root.append(section(admin ? "LLM spend" : "Your LLM spend", form, box));
  return load;
}

// The shell calls this once it has signed in: a banner above every page while a cap over the signed-in person
// (an admin: over the tenant) is past one of its alert thresholds in the current period.
export async function watch(ctx) {
  if (!ctx.catalog.can("llm_gateway", "get_usage")) return;
  let reply;
  try {
    reply = await ctx.api.call("llm_gateway", "get_usage", { period: "day", limit: 1 });
  } catch (err) {
    console.warn("usage banner:", err); // the Usage page itself shows the error
    return;
  }
  document.getElementById("usage-alert")?.remove();
  const el = banner(reply);
  if (!el) return;
  el.id = "usage-alert";
  el.append(h("a", { href: "#/usage" }, "Usage"));
  document.getElementById("page")?.before(el);
}
