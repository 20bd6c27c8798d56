// Memories by scope and tier; full-text search; delete.

import { badge, clear, errorBox, fmtTime, fmtValue, h, notEnabled, opButton, section, select, table, toast } from "../ui.js";

export const page = { title: "Memory", actors: ["memory"], render };

async function render(root, ctx) {
  if (!ctx.catalog.has("memory")) return root.append(notEnabled("memory"));
  const scope = select("scope", [["", "any scope"], ["global"], ["agent"], ["session"]]);
  const tier = select("tier", [["", "any tier"], ["core"], ["reachable"], ["deep"]]);
  const query = h("input", { name: "query", type: "search", placeholder: "Search memories…" });
  const box = h("div");

  function render(rows) {
    clear(
      box,
      table(
        rows,
        [
          ["key", "key"],
          ["value", "value", (m) => fmtValue(m.value)],
          ["scope", "scope", (m) => badge(m.scope)],
          ["tier", "tier", (m) => badge(m.tier)],
          ["kind", "kind"],
          ["user_id", "user"],
          ["updated_at", "updated", (m) => fmtTime(m.updated_at)],
          [
            "delete",
            "",
            (m) =>
              opButton(ctx, "memory", "delete_memory", "Delete", async () => {
                const args = { key: m.key, scope: m.scope };
                if (m.agent_id) args.agent_id = m.agent_id;
                if (m.session_id) args.session_id = m.session_id;
                if (m.private) args.user_id = m.user_id; // a private memory is its owner's (an admin names them)
                await ctx.api.call("memory", "delete_memory", args);
                toast(`Deleted ${m.key}`);
                await load();
              }, { class: "small bad" }),
          ],
        ],
        { empty: "No memories.", rowAttrs: (m) => ({ dataset: { key: m.key } }) },
      ),
    );
  }

  async function load() {
    try {
      const filters = { scope: scope.value, tier: tier.value };
      const reply = query.value.trim()
        ? await ctx.api.call("memory", "search_memories", { query: query.value, limit: 50, ...filters })
        : await ctx.api.call("memory", "list_memories", filters);
      render(reply.memories || reply.results || []);
    } catch (err) {
      clear(box, errorBox(err));
    }
  }

  scope.addEventListener("change", load);
  tier.addEventListener("change", load);
  await load();
  root.append(
    section(
      "Memories",
      h("form", { class: "toolbar", onsubmit: (e) => (e.preventDefault(), load()) }, scope, tier, query, h("button", { class: "btn" }, "Search")),
      box,
    ),
  );
  return load;
}
