// Steering: approvals waiting for a person (and why review was needed), guardrail policies and mode, providers,
// models and circuits (register, test the connection, switch), and the tenant's API keys (admins).

import { badge, clear, errorBox, field, fmtTime, formError, h, notEnabled, opButton, pre, section, select, sessionTitles, table, toast } from "../ui.js";

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
  const titles = sessionTitles(ctx);
  // Approve / Deny only for who may decide: the guardrails say so per caller (`you_may_decide`), from the
  // same check approve and deny make (never one's own request while another admin could decide it).
  const decideButtons = (a, decide) => {
    const buttons = [
      opButton(ctx, "guardrails", "approve", "Approve", decide("approve", a), { class: "small good" }),
      opButton(ctx, "guardrails", "deny", "Deny", decide("deny", a), { class: "small bad" }),
    ];
    if (a.you_may_decide === false) {
      for (const b of buttons) {
        b.disabled = true;
        b.title = a.requested_by === ctx.me.principal
          ? "your own request: another admin decides it"
          : "an admin decides this call";
      }
    }
    return buttons;
  };
  async function load() {
    const reply = await ctx.api.call("guardrails", "list_approvals", { status: status.value, limit: 100 });
    await titles.load((reply.approvals || []).map((a) => a.session_id));
    const decide = (op, a) => async () => {
      const result = await ctx.api.call("guardrails", op, { approval_id: a.approval_id, note: "from the dashboard" });
      toast(`${result.decision}: ${a.tool}${result.turn?.status ? ` (turn ${result.turn.status})` : ""}`);
      await load();
    };
    clear(box, table(reply.approvals || [], [
      ["tool", "tool", (a) => h("b", {}, a.tool)],
      ["reason", "why review", (a) => h("span", { class: "why", dataset: { reason: a.reason || "" } },
        a.reason_message || a.reason || "(not recorded)")],
      ["input", "input", (a) => pre(a.input)],
      ["session_id", "session", (a) => titles.link(a.session_id)],
      ["requested_by", "requested by"],
      ["status", "status", (a) => badge(a.status)],
      ["created_at", "requested", (a) => fmtTime(a.created_at)],
      ["actions", "", (a) => a.status === "pending"
        ? decideButtons(a, decide)
        : a.decided_by ? `by ${a.decided_by}` : ""],
    ], { empty: "Nothing waits for a decision.", rowAttrs: (a) => ({ dataset: { approval: a.approval_id, tool: a.tool, mayDecide: String(a.you_may_decide !== false) } }) }));
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
    const tool = h("input", { name: "tool_name", placeholder: "tool name", list: "tool-names", autocomplete: "off" });
    const tools = h("datalist", { id: "tool-names" }, (await toolNames(ctx)).map(([name, text]) => h("option", { value: name }, text)));
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
      h("form", { class: "toolbar", onsubmit: (e) => e.preventDefault() }, tool, tools, decision,
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

// Provider kinds this build knows (the gateway answers an unknown one with the list); registered ones are added.
const KNOWN_KINDS = ["openai", "anthropic", "ollama"];
// Phantom tokens registered from this page (names, not secrets): offered to the provider form until a provider
// uses them (list_providers shows those).
const registeredTokens = new Set();

function options(selectEl, values, keep = true) {
  const previous = selectEl.value;
  clear(selectEl, values.map(([v, text]) => h("option", { value: v }, text ?? v)));
  if (keep && values.some(([v]) => v === previous)) selectEl.value = previous;
}

// [name, "name: description"] of every tool the caller may see (tool_executor.list_tools), for pickers.
// A local Ollama to switch to while the offline model answers (llm_gateway.detect_local, within the node's
// egress rules): a banner with its models and a button that registers the one picked and switches the tenant
// to it. Only for those who may do both; never switched without the click. Shown on the Chat and Providers
// pages; `switched` runs after a switch (the page's own refresh).
export function localModelOffer(ctx, switched = async () => {}) {
  const box = h("div", { class: "notice local-offer", role: "status", hidden: true });
  const may = ["detect_local", "register_provider", "switch_provider"].every((op) => ctx.catalog.can("llm_gateway", op));
  if (!may) return box;
  (async () => {
    let found;
    try {
      found = await ctx.api.call("llm_gateway", "detect_local", {});
    } catch {
      box.dataset.detected = "error";
      return; // not answered: nothing to offer
    }
    const offer = found.ollama;
    box.dataset.detected = offer?.models?.length ? "ollama" : "none";
    if (!offer || !offer.models?.length) return;
    const pick = select("model", offer.models.map((m) => [m, m]), offer.registration.model);
    const errors = h("div", { class: "form-errors", "aria-live": "polite" });
    const take = opButton(ctx, "llm_gateway", "switch_provider", "Switch to it", async () => {
      const registration = { ...offer.registration, model: pick.value };
      await ctx.api.call("llm_gateway", "register_provider", registration);
      const reply = await ctx.api.call("llm_gateway", "switch_provider", { provider: registration.name });
      toast(`now ${reply.provider} (${reply.model})`);
      box.hidden = true;
      clear(box);
      window.dispatchEvent(new Event("minihermes:provider-switched")); // the offline-model notes
      await switched();
    }, { class: "primary small", errors });
    clear(box,
      h("b", {}, "A local Ollama is running"),
      ` at ${offer.url} with models ${offer.models.join(", ")}: switch to it? `,
      pick, " ", take, errors);
    box.dataset.url = offer.url;
    box.hidden = false;
  })();
  return box;
}

export async function toolNames(ctx) {
  if (!ctx.catalog.can("tool_executor", "list_tools")) return [];
  try {
    const reply = await ctx.api.call("tool_executor", "list_tools", {});
    return (reply.tools || []).map((t) => [t.name, t.description ? `${t.name}: ${String(t.description).slice(0, 80)}` : t.name]);
  } catch {
    return [];
  }
}

async function renderProviders(root, ctx) {
  if (!ctx.catalog.has("llm_gateway")) return root.append(notEnabled("llm_gateway"));
  const box = h("div");
  const active = h("span");
  const choice = h("select", { name: "provider" });
  const model = h("input", { name: "model", placeholder: "model (blank: the provider's)" });
  const switchErrors = h("div", { class: "form-errors", "aria-live": "polite" });
  const switchForm = h("form", { class: "toolbar switch-form", onsubmit: (e) => e.preventDefault() },
    "Active ", active, choice, model,
    opButton(ctx, "llm_gateway", "switch_provider", "Switch", async () => {
      const reply = await ctx.api.call("llm_gateway", "switch_provider", { provider: choice.value, model: model.value.trim() });
      toast(`now ${reply.provider} (${reply.model})`);
      window.dispatchEvent(new Event("minihermes:provider-switched")); // the shell's offline-model note
      await load();
    }, { type: "submit", errors: switchErrors }));

  // Register a credential: the key goes to the server's vault and is never shown again (not even here).
  const token = h("input", { name: "phantom_token", placeholder: "e.g. openai-key", autocomplete: "off" });
  const key = h("input", { name: "api_key", type: "password", placeholder: "API key", autocomplete: "new-password" });
  const credErrors = h("div", { class: "form-errors", "aria-live": "polite" });
  const credForm = h("form", { class: "form credential-form", onsubmit: (e) => e.preventDefault() },
    h("div", { class: "fields" }, field("Phantom token (a name)", token), field("API key", key)),
    opButton(ctx, "llm_gateway", "register_credential", "Register credential", async () => {
      try {
        const reply = await ctx.api.call("llm_gateway", "register_credential", { phantom_token: token.value.trim(), api_key: key.value });
        registeredTokens.add(reply.phantom_token);
        toast(`credential ${reply.phantom_token} ${reply.replaced ? "replaced" : "registered"}`);
        token.value = "";
        await load();
      } finally {
        key.value = ""; // never kept in the page, whatever the answer
      }
    }, { class: "primary", type: "submit", errors: credErrors }),
    h("small", { class: "muted hint" }, "Providers name the credential by its phantom token; the key itself is stored encrypted and never shown."),
    credErrors);

  // Register (or replace) a provider.
  const name = h("input", { name: "name", placeholder: "e.g. openai" });
  const kind = h("select", { name: "kind" });
  const pmodel = h("input", { name: "model", placeholder: "e.g. gpt-4o-mini" });
  const baseUrl = h("input", { name: "base_url", type: "url", placeholder: "blank: the kind's default URL", size: 32 });
  const cred = h("select", { name: "credential" });
  const provErrors = h("div", { class: "form-errors", "aria-live": "polite" });
  const testResult = h("div", { class: "test-result", "aria-live": "polite" });
  let lastRegistered = "";
  const provForm = h("form", { class: "form provider-form", onsubmit: (e) => e.preventDefault() },
    h("div", { class: "fields" },
      field("Name", name), field("Kind", kind), field("Model", pmodel), field("Base URL", baseUrl), field("Credential", cred)),
    opButton(ctx, "llm_gateway", "register_provider", "Register provider", async () => {
      const reply = await ctx.api.call("llm_gateway", "register_provider", {
        name: name.value.trim(),
        kind: kind.value,
        model: pmodel.value.trim(),
        base_url: baseUrl.value.trim(),
        credential: cred.value,
      });
      toast(`provider ${reply.provider} ${reply.replaced ? "replaced" : "registered"}`);
      lastRegistered = reply.provider;
      name.value = "";
      pmodel.value = "";
      baseUrl.value = "";
      await load();
      choice.value = reply.provider;
    }, { class: "primary", type: "submit", errors: provErrors }),
    opButton(ctx, "llm_gateway", "test_provider", "Test connection", async () => {
      await testConnection(name.value.trim() || lastRegistered || choice.value);
    }, { type: "button", errors: provErrors }),
    h("small", { class: "muted hint" }, "Test connection sends one tiny request to the provider named above (or the one just registered)."),
    testResult,
    provErrors);

  // One tiny real request (llm_gateway.test_provider): ok and its latency, or what failed and how to fix it.
  async function testConnection(provider) {
    clear(testResult, h("span", { class: "muted" }, `testing ${provider}…`));
    try {
      const r = await ctx.api.call("llm_gateway", "test_provider", { provider });
      const text = r.ok
        ? `${provider}: connected · ${r.latency_ms} ms · model ${r.model || "?"}`
        : `${provider}: ${r.error.kind}: ${r.error.message}${r.error.hint ? ` (${r.error.hint})` : ""}`;
      clear(testResult, h("div", { class: r.ok ? "notice" : "error", role: "status", dataset: { ok: String(r.ok), provider, kind: r.error?.kind || "" } }, text));
    } catch (err) {
      clear(testResult);
      throw err;
    }
  }

  async function load() {
    try {
      const reply = await ctx.api.call("llm_gateway", "list_providers", {});
      const stats = ctx.catalog.can("llm_gateway", "get_stats") ? await ctx.api.call("llm_gateway", "get_stats", {}) : {};
      const circuits = stats.circuits || {};
      const providers = reply.providers || [];
      clear(active, badge(reply.active?.provider || "?"), " ", reply.active?.model || "");
      const first = !choice.options.length;
      options(choice, providers.map((p) => [p.name]));
      if (first) choice.value = reply.active?.provider || "";
      options(kind, [...new Set([...KNOWN_KINDS, ...providers.map((p) => p.kind)])].map((k) => [k]));
      const tokens = new Set([...registeredTokens, ...providers.map((p) => p.credential).filter(Boolean)]);
      options(cred, [["", "(none)"], ...[...tokens].sort().map((t) => [t])]);
      clear(
        box,
        table(providers, [
          ["name", "provider", (p) => [h("b", {}, p.name), p.active ? badge("active") : null]],
          ["kind", "kind"],
          ["model", "model"],
          ["base_url", "base URL"],
          ["circuit", "circuit", (p) => badge(p.circuit)],
          ["failures", "failures", (p) => String(circuits[p.name]?.consecutive_failures ?? 0)],
          ["error_rate", "error rate", (p) => String(circuits[p.name]?.error_rate ?? 0)],
          ["last_error", "last error", (p) => circuits[p.name]?.last_error || ""],
          ["credential", "credential", (p) => p.credential || ""],
          ["test", "", (p) => p.kind === "simulated" ? "" : opButton(ctx, "llm_gateway", "test_provider", "Test", () => testConnection(p.name), { class: "small" })],
        ], { rowAttrs: (p) => ({ dataset: { provider: p.name } }) }),
        stats.usage ? h("div", {}, h("h3", {}, "Usage (tenant)"), pre(stats.usage)) : null,
        reply.failover?.length ? h("p", {}, `Failover: ${reply.failover.join(" → ")}`) : null,
      );
    } catch (err) {
      clear(box, errorBox(err));
    }
  }
  await load();
  root.append(localModelOffer(ctx, load), section("Providers and circuits", switchForm, switchErrors, box));
  if (ctx.catalog.can("llm_gateway", "register_provider") || ctx.catalog.can("llm_gateway", "register_credential")) {
    root.append(h("div", { class: "split" }, section("Register a credential", credForm), section("Register a provider", provForm)));
  }
  let loadKeys = async () => {};
  if ((ctx.me.roles || []).includes("admin")) {
    const keys = apiKeysSection(ctx);
    root.append(keys.section);
    loadKeys = keys.load;
    await loadKeys();
  }
  return async () => {
    await load();
    await loadKeys();
  };
}

// API keys of the caller's tenant (admins; docs/http-api.md): create (the key is shown once, with a copy
// button, until the page is left; never fetched again), list (never a secret) and revoke.
function apiKeysSection(ctx) {
  const box = h("div");
  const shown = h("div", { class: "key-once", "aria-live": "polite" });
  const name = h("input", { name: "name", placeholder: "e.g. ci-bot", autocomplete: "off" });
  const roles = select("roles", [["user"], ["viewer"], ["admin"]], "user");
  const expires = select("expires_in", [["", "never (until revoked)"], ["86400", "1 day"], ["2592000", "30 days"], ["31536000", "1 year"]], "");
  const errors = h("div", { class: "form-errors", "aria-live": "polite" });
  const button = (label, onclick, attrs = {}) => {
    const b = h("button", { class: `btn ${attrs.class || ""}`, type: attrs.type || "button", dataset: attrs.dataset || {} }, label);
    b.addEventListener("click", async (event) => {
      event.preventDefault();
      b.disabled = true;
      formError(errors, null);
      try {
        await onclick();
      } catch (err) {
        formError(errors, err, b.closest("form"));
      } finally {
        b.disabled = false;
      }
    });
    return b;
  };
  const form = h("form", { class: "form api-key-form", onsubmit: (e) => e.preventDefault() },
    h("div", { class: "fields" }, field("Name", name), field("Role", roles), field("Expires", expires)),
    button("Create API key", async () => {
      const body = { name: name.value.trim(), roles: [roles.value] };
      if (expires.value) body.expires_in = Number(expires.value);
      const made = await ctx.api.apiKeys.create(body);
      const copy = h("button", { class: "btn small", type: "button" }, "Copy");
      copy.addEventListener("click", async () => {
        try {
          await navigator.clipboard.writeText(made.key);
          toast("key copied");
        } catch {
          toast("copy failed: select the key and copy it", true);
        }
      });
      clear(shown, h("div", { class: "notice", dataset: { keyId: made.key_id } },
        h("p", {}, `Key for ${made.principal} (${made.roles.join(", ")}): shown once, copy it now.`),
        h("code", { class: "secret" }, made.key), " ", copy));
      name.value = "";
      await load();
    }, { class: "primary", type: "submit", dataset: { action: "create-api-key" } }),
    h("small", { class: "muted hint" }, "The key acts in this tenant with the chosen role; the server keeps only its hash, and accepts keys when started with --api-keys."),
    errors);

  async function load() {
    try {
      const reply = await ctx.api.apiKeys.list();
      clear(box, table(reply.keys || [], [
        ["name", "name", (k) => h("b", {}, k.name)],
        ["key_id", "key id"],
        ["principal", "acts as"],
        ["roles", "roles", (k) => k.roles.join(", ")],
        ["created_at", "created", (k) => fmtTime(k.created_at)],
        ["expires_at", "expires", (k) => (k.expires_at ? fmtTime(k.expires_at) : "never")],
        ["state", "state", (k) => badge(k.revoked_at ? "revoked" : k.expires_at && k.expires_at * 1000 < Date.now() ? "expired" : "active")],
        ["revoke", "", (k) => k.revoked_at ? "" : button("Revoke", async () => {
          if (!confirm(`Revoke the key ${k.name} (${k.key_id})? Requests with it are refused at once.`)) return;
          await ctx.api.apiKeys.revoke(k.key_id);
          toast(`key ${k.key_id} revoked`);
          await load();
        }, { class: "small bad", dataset: { action: "revoke-api-key" } })],
      ], { empty: "No API keys yet.", rowAttrs: (k) => ({ dataset: { keyId: k.key_id, state: k.revoked_at ? "revoked" : "active" } }) }));
    } catch (err) {
      clear(box, errorBox(err));
    }
  }
  return { section: section("API keys", form, shown, box), load };
}
