// Skills by status; a skill's procedure, files and versions; pin, unpin, archive, recover, roll back; import
// skill folders by uploading an archive (POST /api/v1/skills/import) and download them all as one
// (GET /api/v1/skills/export); self-written tools, deleted here.

import { badge, clear, errorBox, fmtTime, h, notEnabled, opButton, pre, section, select, table, toast } from "../ui.js";

export const page = { title: "Skills", actors: ["skill_store"], render };

const STATUSES = [["", "any status"], ["candidate"], ["active"], ["stale"], ["pinned"], ["archived"]];

async function render(root, ctx) {
  if (!ctx.catalog.has("skill_store")) return root.append(notEnabled("skill_store"));
  const status = select("status", STATUSES);
  const listBox = h("div");
  const detail = h("div", { class: "detail" }, h("p", { class: "empty" }, "Pick a skill."));
  const fileBox = h("div", { class: "skill-file" });
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
        secretWarnings(skill),
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
        skill.trusted === false
          ? h("p", { class: "notice held", dataset: { untrusted: skill.name } },
              "Imported and not approved yet: its instructions and files are outside content until an admin approves it.")
          : null,
        h("h4", {}, `Procedure (v${skill.version})`),
        pre(skill.procedure || ""),
        h("h4", {}, `Files (${(skill.files || []).length})`),
        filesTable(skill),
        clear(fileBox),
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

  // A skill's files (SKILL.md first): each opens below the list, text as text, images shown, others offered.
  function filesTable(skill) {
    const rows = [{ path: "SKILL.md", size: "", sha256: "" }, ...(skill.files || [])];
    const open = (f) =>
      h("a", { href: "#", dataset: { file: f.path }, onclick: (e) => (e.preventDefault(), readFile(skill, f.path)) }, f.path);
    return table(rows, [
      ["path", "path", open],
      ["size", "bytes"],
      ["sha256", "sha256", (f) => (f.sha256 ? f.sha256.slice(0, 12) : "")],
    ]);
  }

  async function readFile(skill, path) {
    try {
      const f = await ctx.api.call("skill_store", "read_skill_file", { skill_id: skill.skill_id, path });
      let body;
      if (f.encoding === "text") body = pre(f.content);
      else if ((f.media_type || "").startsWith("image/")) body = h("img", { src: `data:${f.media_type};base64,${f.content}`, alt: f.path });
      else body = h("p", {}, `Binary file (${f.size} bytes). `);
      const download = h("a", { href: `data:${f.media_type};base64,${f.encoding === "text" ? btoa(unescape(encodeURIComponent(f.content))) : f.content}`, download: f.path.split("/").pop() }, "Download");
      clear(fileBox, h("h4", { dataset: { openFile: f.path } }, f.path, " ", badge(f.media_type), " ", download), body);
    } catch (err) {
      clear(fileBox, errorBox(err));
    }
  }

  // Import: an uploaded .zip / .skill archive or tarball; a user's import is their own candidates, an admin
  // may approve at once.
  function importForm() {
    const input = h("input", { type: "file", name: "archive", accept: ".zip,.skill,.tar,.gz,.tgz,.bz2,.xz" });
    const approve = h("input", { type: "checkbox", name: "approve", disabled: !ctx.catalog.can("skill_store", "approve_skill") });
    const report = h("div", { class: "import-report", "aria-live": "polite" });
    const errors = h("div", { class: "form-errors", "aria-live": "polite" });
    const button = opButton(ctx, "skill_store", "import_skills", "Import", async () => {
      const file = input.files && input.files[0];
      if (!file) throw new Error("choose a .zip, .skill or tarball first");
      const reply = await ctx.api.importSkills(file, approve.checked);
      const refused = reply.refused || [];
      const warnings = reply.warnings || [];
      toast(`Imported ${reply.count} skill(s)${refused.length ? `, ${refused.length} file(s) refused` : ""}`);
      clear(report,
        h("p", { dataset: { imported: String(reply.count) } },
          (reply.imported || []).map((s) => `${s.name} (v${s.version}, ${s.status}${s.unchanged ? ", unchanged" : ""})`).join(", ")),
        refused.length ? table(refused, [["skill", "skill"], ["path", "file"], ["reason", "refused because"]]) : null,
        warnings.length ? h("details", {}, h("summary", {}, `${warnings.length} warning(s)`),
          h("ul", {}, warnings.map((w) => h("li", {}, `${w.skill ? w.skill + ": " : ""}${w.message}`)))) : null,
      );
      await load();
    }, { errors });
    return h("form", { class: "toolbar", dataset: { form: "skill-import" }, onsubmit: (e) => e.preventDefault() },
      input, h("label", {}, approve, " approve (admin)"), button, errors, report);
  }

  // An import that carries something shaped like a secret: where and what kind (never the secret), for the
  // admin who approves it (skill_store.import_skills' secret_warnings).
  function secretWarnings(skill) {
    const found = skill.secret_warnings || [];
    if (!found.length) return null;
    return h("div", { class: "notice held", dataset: { secrets: skill.name } },
      h("b", {}, "Looks like it carries secrets: "),
      "check these before approving (they are kept as written; rotate any that is real).",
      h("ul", {}, found.map((f) => h("li", {}, `${f.path} line ${f.line}: ${f.kind} (v${f.version})`))));
  }

  // A candidate: why it is not live yet (its evaluation, the approval its tools need), approve or reject it.
  function review(skill) {
    const reason = h("input", { name: "reason", placeholder: "why it is rejected (required)", size: 30, maxlength: 500 });
    const errors = h("div", { class: "form-errors", "aria-live": "polite" });
    const form = h("form", { class: "toolbar", onsubmit: (e) => e.preventDefault() },
      opButton(ctx, "skill_store", "approve_skill", "Approve", async () => {
        const reply = await ctx.api.call("skill_store", "approve_skill", { skill_id: skill.skill_id });
        const live = reply.skill_status === "active";
        toast(live ? `${skill.name} is active` : `${skill.name} approved; it goes live when its evaluation passes`);
        await load();
      }, { class: "good", errors }),
      reason,
      opButton(ctx, "skill_store", "reject_skill", "Reject", async () => {
        await ctx.api.call("skill_store", "reject_skill", { skill_id: skill.skill_id, reason: reason.value.trim() });
        toast(`${skill.name} rejected (archived)`);
        await load();
      }, { class: "bad", errors }),
    );
    return h("div", { class: "notice held", dataset: { held: skill.name } },
      h("b", {}, "Not live yet: "), heldBack(skill).join(" "),
      skill.evaluation ? pre(skill.evaluation) : null,
      form, errors);
  }

  // Self-written tools (skill_tools): the caller's own and the tenant's; Delete is the owner's or an admin's.
  const toolsBox = h("div", { dataset: { selfWrittenTools: "" } });
  async function loadTools() {
    const reply = await ctx.api.call("skill_tools", "list_tools", {});
    const remove = (tool) => async () => {
      if (!window.confirm(`Delete the tool ${tool.name}, its versions and its files?`)) return;
      await ctx.api.call("skill_tools", "delete_tool", { name: tool.name });
      toast(`Deleted ${tool.name}`);
      await loadTools();
    };
    clear(
      toolsBox,
      table(
        reply.tools || [],
        [
          ["name", "name"],
          ["owner", "owner"],
          ["promoted", "scope", (t) => badge(t.promoted ? "tenant" : "own")],
          ["version", "version"],
          ["description", "description"],
          ["delete", "", (t) => opButton(ctx, "skill_tools", "delete_tool", "Delete", remove(t), { class: "bad" })],
        ],
        { empty: "No self-written tools.", rowAttrs: (t) => ({ dataset: { tool: t.name } }) },
      ),
    );
  }

  // Download all: the skills of the chosen status as one zip of skill folders (imports back unchanged).
  const downloadAll = opButton(ctx, "skill_store", "export_skills", "Download all", async () => {
    const { blob, filename, headers } = await ctx.api.exportSkills(status.value);
    const url = URL.createObjectURL(blob);
    const link = h("a", { href: url, download: filename, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000); // the browser reads it after this click returns
    toast(`Downloaded ${headers.get("x-skill-count") ?? "the"} skill(s) as ${filename}`);
  });

  status.addEventListener("change", load);
  await load();
  const hasTools = ctx.catalog.has("skill_tools");
  if (hasTools) await loadTools();
  root.append(
    h("div", { class: "split" },
      section("Skills", h("div", { class: "toolbar" }, status, downloadAll), listBox, h("h4", {}, "Import skill folders"), importForm()),
      section("Skill", detail)),
  );
  if (hasTools) root.append(section("Self-written tools", toolsBox));
}

// Why a candidate is held back, in words, from its record (skill_store.record_evaluation / approve_skill).
export function heldBack(skill) {
  const evaluation = skill.evaluation;
  const approved = new Set(skill.approved_tools || []);
  const unapproved = (skill.tools || []).filter((t) => !approved.has(t));
  const reasons = [];
  if (skill.origin === "import" && !skill.approved_by) {
    return ["It was imported: it goes live, and its instructions and files are trusted, when an admin approves it."];
  }
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
