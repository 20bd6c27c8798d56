// Steering: approvals waiting for a person, guardrail policies and mode, providers, models and circuits.

import { badge, clear, errorBox, fmtTime, h, notEnabled, opButton, pre, section, select, table, toast } from "../ui.js";

export const approvalsPage = { title: "Approvals", actors: ["guardrails"], render: renderApprovals, poll: 5000 };
export const guardrailsPage = { title: "Guardrails", actors: ["guardrails"], render: renderGuardrails };
export const providersPage = { title: "Providers", actors: ["llm_gateway"], render: renderProviders, poll: 10000 };

async function renderApprovals(root, ctx) {
  if (!ctx.catalog.has("guardrails")) return root.append(notEnabled("guardrails"));
  if (!ctx.catalog.can("guardrails", "list_approvals")) {
    return root.append(h("div", { class: "notice" }, "Approvals are for admins and viewers of this tenant."));
  }
  const status = select("status", [["pending"], ["approved"], ["denied"], ["all"]], "pending");
  const box = h("div");
  async function load() {
    const reply = await ctx.api.call("guardrails", "list_approvals", { status: status.value, limit: 100 });
    const decide = (op, a) => async () => {
      const result = await ctx.api.call("guardrails", op, { approval_id: a.approval_id, note: "from the dashboard" });
      toast(`${result.decision}: ${a.tool}${result.turn?.status ? ` (turn ${result.turn.status})` : ""}`);
      await load();
    };
    clear(box, table(reply.approvals || [], [
      ["tool", "tool", (a) => h("b", {}, a.tool)],
      ["input", "input", (a) => pre(a.input)],
      ["session_id", "session"],
      ["requested_by", "requested by"],
      ["status", "status", (a) => badge(a.status)],
      ["created_at", "requested", (a) => fmtTime(a.created_at)],
      ["actions", "", (a) => a.status === "pending"
        ? [opButton(ctx, "guardrails", "approve", "Approve", decide("approve", a), { class: "small good" }),
           opButton(ctx, "guardrails", "deny", "Deny", decide("deny", a), { class: "small bad" })]
        : a.decided_by ? `by ${a.decided_by}` : ""],
    ], { empty: "Nothing waits for a decision.", rowAttrs: (a) => ({ dataset: { approval: a.approval_id, tool: a.tool } }) }));
  }
  status.addEventListener("change", load);
  await load();
  root.append(section("Approvals", h("div", { class: "toolbar" }, status), box));
  return load;
}

async function renderGuardrails(root, ctx) {
  if (!ctx.catalog.has("guardrails")) return root.append(notEnabled("guardrails"));
  const box = h("div");
  async function load() {
    const state = await ctx.api.call("guardrails", "get_state", {});
    const policies = Object.entries(state.policies || {}).map(([tool, decision]) => ({ tool, decision }));
    const mode = select("mode", [["open"], ["supervised"], ["lockdown"]], state.mode);
    const tool = h("input", { name: "tool_name", placeholder: "tool name" });
    const decision = select("decision", [["allow"], ["review"], ["deny"]], "review");
    clear(
      box,
      h("div", { class: "toolbar" }, "Mode ", badge(state.mode), mode,
        opButton(ctx, "guardrails", "set_mode", "Set mode", async () => {
          await ctx.api.call("guardrails", "set_mode", { mode: mode.value });
          toast(`mode ${mode.value}`);
          await load();
        })),
      h("div", { class: "stats" }, ["allow_count", "review_count", "deny_count", "pending_approvals"].map((k) =>
        h("div", { class: "stat" }, h("b", {}, String(state[k] ?? 0)), h("span", {}, k.replace("_", " "))))),
      h("h3", {}, "Policies"),
      table(policies, [
        ["tool", "tool"],
        ["decision", "decision", (p) => badge(p.decision)],
        ["clear", "", (p) => opButton(ctx, "guardrails", "clear_policy", "Clear", async () => {
          await ctx.api.call("guardrails", "clear_policy", { tool_name: p.tool });
          await load();
        }, { class: "small" })],
      ], { empty: "No per-tool policy: defaults apply (read tools allow, risky tools review).", rowAttrs: (p) => ({ dataset: { policy: p.tool } }) }),
      h("form", { class: "toolbar", onsubmit: (e) => e.preventDefault() }, tool, decision,
        opButton(ctx, "guardrails", "set_policy", "Set policy", async () => {
          if (!tool.value.trim()) return;
          await ctx.api.call("guardrails", "set_policy", { tool_name: tool.value.trim(), decision: decision.value });
          toast(`${tool.value}: ${decision.value}`);
          await load();
        })),
    );
  }
  await load();
  root.append(section("Guardrails", box));
  return load;
}

async function renderProviders(root, ctx) {
  if (!ctx.catalog.has("llm_gateway")) return root.append(notEnabled("llm_gateway"));
  const box = h("div");
  async function load() {
    try {
      const reply = await ctx.api.call("llm_gateway", "list_providers", {});
      const stats = ctx.catalog.can("llm_gateway", "get_stats") ? await ctx.api.call("llm_gateway", "get_stats", {}) : {};
      const circuits = stats.circuits || {};
      const model = h("input", { name: "model", placeholder: "model (blank: the provider's)" });
      const choice = select("provider", (reply.providers || []).map((p) => [p.name]), reply.active?.provider);
      clear(
        box,
        h("div", { class: "toolbar" }, "Active ", badge(reply.active?.provider || "?"), reply.active?.model || "",
          choice, model,
          opButton(ctx, "llm_gateway", "switch_provider", "Switch", async () => {
            await ctx.api.call("llm_gateway", "switch_provider", { provider: choice.value, model: model.value.trim() });
            toast(`now ${choice.value}`);
            await load();
          })),
        table(reply.providers || [], [
          ["name", "provider", (p) => [h("b", {}, p.name), p.active ? badge("active") : null]],
          ["kind", "kind"],
          ["model", "model"],
          ["circuit", "circuit", (p) => badge(p.circuit)],
          ["failures", "failures", (p) => String(circuits[p.name]?.consecutive_failures ?? 0)],
          ["error_rate", "error rate", (p) => String(circuits[p.name]?.error_rate ?? 0)],
          ["last_error", "last error", (p) => circuits[p.name]?.last_error || ""],
          ["credential", "credential", (p) => (p.credential ? "set" : "")],
        ], { rowAttrs: (p) => ({ dataset: { provider: p.name } }) }),
        stats.usage ? h("div", {}, h("h3", {}, "Usage (tenant)"), pre(stats.usage)) : null,
        reply.failover?.length ? h("p", {}, `Failover: ${reply.failover.join(" → ")}`) : null,
      );
    } catch (err) {
      clear(box, errorBox(err));
    }
  }
  await load();
  root.append(section("Providers and circuits", box));
  return load;
}
