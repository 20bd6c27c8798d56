// Memories by kind, scope and tier, a page at a time; episodes (one per finished turn) only when asked for;
// full-text search (possessives and stems match: "sister" finds "sister's name"); delete.

import { badge, clear, errorBox, fmtTime, fmtValue, h, notEnabled, opButton, section, select, table, toast } from "../ui.js";

export const page = { title: "Memory", actors: ["memory"], render };

const PAGE = 25;
const SHOWN_CHARS = 300; // a long value (a deep-tier document) is cut in the table; the whole is its tooltip

async function render(root, ctx) {
  if (!ctx.catalog.has("memory")) return root.append(notEnabled("memory"));
  const kind = select("kind", [["", "any kind"], ["semantic"], ["episodic"], ["declarative"]]);
  const scope = select("scope", [["", "any scope"], ["global"], ["agent"], ["session"]]);
  const tier = select("tier", [["", "any tier"], ["core"], ["reachable"], ["deep"]]);
  const episodes = h("input", { type: "checkbox", name: "include_episodes" });
  const query = h("input", { name: "query", type: "search", placeholder: "Search memories…" });
  const box = h("div");
  const info = h("span", { class: "muted pager-info", "aria-live": "polite" });
  const prev = h("button", { type: "button", class: "btn small", dataset: { page: "prev" } }, "← Previous");
  const next = h("button", { type: "button", class: "btn small", dataset: { page: "next" } }, "Next →");
  const pager = h("div", { class: "toolbar pager" }, prev, next, info);
  let offset = 0;

  function value(m) {
    const text = fmtValue(m.value);
    if (text.length <= SHOWN_CHARS) return text;
    return h("span", { title: text }, `${text.slice(0, SHOWN_CHARS)}…`);
  }

  function show(rows) {
    clear(
      box,
      table(
        rows,
        [
          ["key", "key"],
          ["value", "value", value],
          ["kind", "kind", (m) => badge(m.kind || "semantic")],
          ["scope", "scope", (m) => badge(m.scope)],
          ["tier", "tier", (m) => badge(m.tier)],
          ["user_id", "user"],
          ["updated_at", "updated", (m) => fmtTime(m.updated_at)],
          ["expires_at", "expires", (m) => (m.expires_at == null ? "never" : fmtTime(m.expires_at))],
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
        {
          empty: query.value.trim() ? "No memory matches." : "No memories.",
          rowAttrs: (m) => ({ dataset: { key: m.key, kind: m.kind || "semantic" } }),
        },
      ),
    );
  }

  async function load() {
    const args = {
      scope: scope.value,
      tier: tier.value,
      kind: kind.value,
      include_episodes: episodes.checked,
      limit: PAGE,
      offset,
    };
    try {
      const reply = query.value.trim()
        ? await ctx.api.call("memory", "search_memories", { query: query.value, ...args })
        : await ctx.api.call("memory", "list_memories", args);
      const rows = reply.memories || [];
      if (!rows.length && offset > 0) {
        offset = Math.max(0, offset - PAGE); // the last page emptied (a delete): show the one before
        return load();
      }
      show(rows);
      const total = reply.total ?? rows.length;
      info.textContent = rows.length ? `${offset + 1}-${offset + rows.length} of ${total}` : "";
      prev.disabled = offset === 0;
      next.disabled = reply.next_offset === null || reply.next_offset === undefined;
      pager.hidden = prev.disabled && next.disabled;
    } catch (err) {
      clear(box, errorBox(err));
    }
  }

  function again() {
    offset = 0;
    return load();
  }

  for (const input of [kind, scope, tier, episodes]) input.addEventListener("change", again);
  prev.addEventListener("click", () => {
    offset = Math.max(0, offset - PAGE);
    return load();
  });
  next.addEventListener("click", () => {
    offset += PAGE;
    return load();
  });
  await load();
  root.append(
    section(
      "Memories",
      h(
        "form",
        { class: "toolbar", onsubmit: (e) => (e.preventDefault(), again()) },
        kind,
        scope,
        tier,
        h("label", { class: "check", title: "one episode is stored per finished turn" }, episodes, " show episodes"),
        query,
        h("button", { class: "btn" }, "Search"),
      ),
      box,
      pager,
    ),
  );
  return load;
}
