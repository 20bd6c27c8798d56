// Skills by status; a skill's procedure and versions; pin, unpin, archive, recover, roll back.

import { badge, clear, errorBox, fmtTime, h, notEnabled, opButton, pre, section, select, table, toast } from "../ui.js";

export const page = { title: "Skills", actors: ["skill_store"], render };

const STATUSES = [["", "any status"], ["candidate"], ["active"], ["stale"], ["pinned"], ["archived"]];

async function render(root, ctx) {
  if (!ctx.catalog.has("skill_store")) return root.append(notEnabled("skill_store"));
  const status = select("status", STATUSES);
  const listBox = h("div");
  const detail = h("div", { class: "detail" }, h("p", { class: "empty" }, "Pick a skill."));
  let selected = "";

  async function load() {
    const reply = await ctx.api.call("skill_store", "list_skills", { status: status.value });
    clear(
      listBox,
      table(
        reply.skills || [],
        [
          ["name", "name", (s) => h("a", { href: "#", onclick: (e) => (e.preventDefault(), show(s.skill_id)) }, s.name)],
          ["status", "status", (s) => [badge(s.status), s.pinned ? badge("pinned") : null]],
          ["version", "version"],
          ["scope", "scope"],
          ["owner", "owner"],
          ["uses", "uses"],
          ["updated_at", "updated", (s) => fmtTime(s.updated_at)],
        ],
        { empty: "No skills with this status.", rowAttrs: (s) => ({ dataset: { skill: s.name } }) },
      ),
    );
    if (selected) await show(selected);
  }

  async function act(op, args, message) {
    await ctx.api.call("skill_store", op, { skill_id: selected, ...args });
    toast(message);
    await load();
  }

  async function show(skillId) {
    selected = skillId;
    try {
      const reply = await ctx.api.call("skill_store", "get_skill", { skill_id: skillId });
      const skill = reply.skill;
      const versions = reply.versions || [];
      const rollbackTo = select(
        "version",
        versions.filter((v) => v.version !== skill.version).map((v) => [String(v.version), `v${v.version} · ${v.reason || ""}`]),
      );
      clear(
        detail,
        h("h3", { dataset: { skillDetail: skill.name } }, skill.name, " ", badge(skill.status), skill.pinned ? badge("pinned") : null),
        h("p", {}, skill.description),
        skill.status === "candidate" ? review(skill) : null,
        h("div", { class: "toolbar" },
          skill.pinned
            ? opButton(ctx, "skill_store", "unpin", "Unpin", () => act("unpin", {}, "Unpinned"))
            : opButton(ctx, "skill_store", "pin", "Pin", () => act("pin", {}, "Pinned")),
          skill.status === "archived"
            ? opButton(ctx, "skill_store", "recover", "Recover", () => act("recover", {}, "Recovered"))
            : opButton(ctx, "skill_store", "archive", "Archive", () => act("archive", { reason: "archived from the dashboard" }, "Archived"), { class: "bad" }),
          versions.length > 1 ? rollbackTo : null,
          versions.length > 1
            ? opButton(ctx, "skill_store", "rollback", "Roll back", () => act("rollback", { version: Number(rollbackTo.value) }, "Rolled back"))
            : null,
        ),
        h("h4", {}, `Procedure (v${skill.version})`),
        pre(skill.procedure || ""),
        h("h4", {}, "Versions"),
        table(versions, [
          ["version", "version"],
          ["reason", "reason"],
          ["author", "author"],
          ["created_at", "created", (v) => fmtTime(v.created_at)],
        ]),
      );
    } catch (err) {
      clear(detail, errorBox(err));
    }
  }

  // A candidate: why it is not live yet (its evaluation, the approval its tools need), approve or reject it.
  function review(skill) {
    const reason = h("input", { name: "reason", placeholder: "why it is rejected", size: 30 });
    const errors = h("div", { class: "form-errors", "aria-live": "polite" });
    const form = h("form", { class: "toolbar", onsubmit: (e) => e.preventDefault() },
      opButton(ctx, "skill_store", "approve_skill", "Approve", async () => {
        const reply = await ctx.api.call("skill_store", "approve_skill", { skill_id: skill.skill_id });
        const live = reply.skill_status === "active";
        toast(live ? `${skill.name} is active` : `${skill.name} approved; it goes live when its evaluation passes`);
        await load();
      }, { class: "good", errors }),
      reason,
      opButton(ctx, "skill_store", "set_status", "Reject", async () => {
        await ctx.api.call("skill_store", "set_status", {
          skill_id: skill.skill_id,
          status: "archived",
          reason: reason.value.trim() || "rejected in the dashboard",
        });
        toast(`${skill.name} rejected (archived)`);
        await load();
      }, { class: "bad", errors }),
    );
    return h("div", { class: "notice held", dataset: { held: skill.name } },
      h("b", {}, "Not live yet: "), heldBack(skill).join(" "),
      skill.evaluation ? pre(skill.evaluation) : null,
      form, errors);
  }

  status.addEventListener("change", load);
  await load();
  root.append(h("div", { class: "split" }, section("Skills", h("div", { class: "toolbar" }, status), listBox), section("Skill", detail)));
}

// Why a candidate is held back, in words, from its record (skill_store.record_evaluation / approve_skill).
export function heldBack(skill) {
  const evaluation = skill.evaluation;
  const approved = new Set(skill.approved_tools || []);
  const unapproved = (skill.tools || []).filter((t) => !approved.has(t));
  const reasons = [];
  if (!evaluation) reasons.push("It has not been evaluated yet (a skill goes live when its evaluation passes).");
  else if (!evaluation.passed) reasons.push(`Its evaluation of v${evaluation.version} failed (details below).`);
  else reasons.push(`Its evaluation of v${evaluation.version} passed.`);
  if (skill.needs_approval && unapproved.length) {
    reasons.push(`It uses tools with outside effects (${unapproved.join(", ")}): an admin must approve it.`);
  } else if (skill.approved_by) {
    reasons.push(`Approved by ${skill.approved_by}.`);
  }
  return reasons;
}
