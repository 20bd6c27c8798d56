// Memories and skills held for confirmation (issue 25): written by a turn after it read untrusted content (a
// web page, a file, an MCP or tool result), they are not recalled, matched or put in any prompt until their
// owner or an admin confirms them. Confirm stores the memory (activates the skill); Discard drops the memory
// (archives the skill). What they hold is untrusted: shown as text only (ui.js never parses HTML).

import { badge, clear, errorBox, fmtTime, fmtValue, h, notEnabled, opButton, pre, section, table, toast } from "../ui.js";

export const page = { title: "Quarantine", actors: ["memory", "skill_store"], render };

const LIMIT = 200;
const CHANGED = "minihermes:quarantine-changed";

// Which held kinds this caller may list: [{kind, actor, list, confirm, discard, idField}].
function kinds(ctx) {
  return [
    { kind: "memory", actor: "memory", list: "list_quarantined", confirm: "confirm_memory", discard: "discard_memory", idField: "id" },
    { kind: "skill", actor: "skill_store", list: "list_quarantined", confirm: "confirm_skill", discard: "discard_skill", idField: "skill_id" },
  ].filter((k) => ctx.catalog.has(k.actor, k.list));
}

// How many items wait for the caller (the nav's badge); null when nothing could be counted.
export async function heldCount(ctx) {
  let total = null;
  for (const k of kinds(ctx)) {
    if (!ctx.catalog.can(k.actor, k.list)) continue;
    const reply = await ctx.api.call(k.actor, k.list, k.kind === "memory" ? { limit: 1 } : {});
    total = (total || 0) + Number(reply.total ?? reply.count ?? 0);
  }
  return total;
}

// Where it came from: a memory's `provenance` ("tool:read_file"); a skill's `provenance.source` ("agent") and
// the untrusted results its turn had seen (`untrusted_sources`).
function provenance(value, sources = []) {
  const text = value && typeof value === "object" ? value.source || JSON.stringify(value) : String(value || "unknown");
  return h("span", { class: "provenance" }, badge(text, "review"), sources.length ? ` after ${sources.join(", ")}` : "");
}

// A held skill's procedure, read when asked for (a server whose list has the description only); text, never HTML.
function procedure(ctx, skill) {
  const box = h("div", { class: "procedure" });
  const show = h("button", { type: "button", class: "btn small", dataset: { show: "procedure" } }, "Procedure");
  show.addEventListener("click", async () => {
    show.disabled = true;
    try {
      const reply = await ctx.api.call("skill_store", "get_skill", { skill_id: skill.skill_id });
      clear(box, pre(fmtValue(reply.skill?.procedure)));
      show.remove();
    } catch (err) {
      clear(box, errorBox(err));
      show.disabled = false;
    }
  });
  return h("div", {}, show, box);
}

async function render(root, ctx) {
  const found = kinds(ctx);
  if (!ctx.catalog.has("memory")) return root.append(notEnabled("memory"));
  const memories = h("div", { dataset: { held: "memory" } });
  const skills = h("div", { dataset: { held: "skill" } });

  function decide(k, item, action, label, cls) {
    const op = k[action];
    return opButton(ctx, k.actor, op, label, async () => {
      await ctx.api.call(k.actor, op, { [k.idField]: item[k.idField] });
      toast(`${action === "confirm" ? "Confirmed" : "Discarded"} ${k.kind} ${item.key || item.name || item[k.idField]}`);
      window.dispatchEvent(new CustomEvent(CHANGED));
      await load();
    }, { class: `small ${cls}` });
  }

  function memoryTable(k, rows) {
    return table(
      rows,
      [
        ["quarantined_at", "held since", (m) => fmtTime(m.quarantined_at)],
        ["key", "key", (m) => h("code", {}, m.key)],
        ["value", "value (untrusted)", (m) => pre(fmtValue(m.value))],
        ["kind", "kind", (m) => badge(m.kind || "semantic")],
        ["provenance", "from", (m) => provenance(m.provenance)],
        ["user_id", "user"],
        ["source_session", "session", (m) => m.source_session || ""],
        ["actions", "", (m) => h("span", { class: "actions" }, decide(k, m, "confirm", "Confirm", "primary"), " ", decide(k, m, "discard", "Discard", "bad"))],
      ],
      {
        empty: "No memories are waiting for confirmation.",
        rowAttrs: (m) => ({ dataset: { id: m.id, kind: "memory", key: m.key } }),
      },
    );
  }

  function skillTable(k, rows) {
    return table(
      rows,
      [
        ["quarantined_at", "held since", (s) => fmtTime(s.quarantined_at || s.created_at)],
        ["name", "skill", (s) => h("code", {}, s.name)],
        ["description", "what it does (untrusted)", (s) => h("div", {}, h("p", { class: "description" }, fmtValue(s.description)), s.procedure == null ? procedure(ctx, s) : h("div", { class: "procedure" }, pre(fmtValue(s.procedure))))],
        ["provenance", "from", (s) => provenance(s.provenance, s.untrusted_sources || [])],
        ["owner", "user"],
        ["actions", "", (s) => h("span", { class: "actions" }, decide(k, s, "confirm", "Confirm", "primary"), " ", decide(k, s, "discard", "Discard", "bad"))],
      ],
      {
        empty: "No skills are waiting for confirmation.",
        rowAttrs: (s) => ({ dataset: { id: s.skill_id, kind: "skill", name: s.name } }),
      },
    );
  }

  async function loadKind(k, box) {
    try {
      const reply = await ctx.api.call(k.actor, k.list, k.kind === "memory" ? { limit: LIMIT } : {});
      if (k.kind === "memory") {
        const rows = reply.memories || [];
        const more = (reply.total ?? rows.length) > rows.length ? ` (the newest ${rows.length} of ${reply.total})` : "";
        clear(box, more ? h("p", { class: "hint" }, more) : null, memoryTable(k, rows));
      } else {
        clear(box, skillTable(k, reply.skills || []));
      }
    } catch (err) {
      clear(box, errorBox(err)); // never an empty list on an error: that would say nothing is held
    }
  }

  async function load() {
    await Promise.all(found.map((k) => loadKind(k, k.kind === "memory" ? memories : skills)));
  }

  await load();
  root.append(
    h(
      "p",
      { class: "muted hint" },
      "A turn that read a web page, a file or a tool's result may have been steered by it, so what it wrote then is held here: " +
        "not recalled, matched or put in any prompt until you confirm it. Confirm only what you recognise.",
    ),
    section("Memories held for confirmation", memories),
  );
  if (found.some((k) => k.kind === "skill")) root.append(section("Skills held for confirmation", skills));
  return load;
}

export { CHANGED };
