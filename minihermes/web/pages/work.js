// Work that outlives a turn: cron jobs and their runs, the task queue, the kanban board, goals.

import { badge, clear, errorBox, fmtTime, fmtValue, h, notEnabled, opButton, section, select, table, toast } from "../ui.js";

export const cronPage = { title: "Cron & tasks", actors: ["cron_scheduler", "task_queue"], render: renderCron, poll: 10000 };
export const kanbanPage = { title: "Kanban", actors: ["kanban"], render: renderKanban };
export const goalsPage = { title: "Goals", actors: ["goals"], render: renderGoals };

async function renderCron(root, ctx) {
  const jobsBox = h("div");
  const runsBox = h("div", {}, h("p", { class: "empty" }, "Pick a job to see its runs."));
  const queueBox = h("div");
  let selected = "";

  async function runs(jobId) {
    selected = jobId;
    const reply = await ctx.api.call("cron_scheduler", "job_runs", { job_id: jobId, limit: 50 });
    clear(
      runsBox,
      h("h3", {}, `Runs of ${jobId}`),
      table(reply.runs || [], [
        ["run_id", "run"],
        ["status", "status", (r) => badge(r.status)],
        ["scheduled_at", "scheduled", (r) => fmtTime(r.scheduled_at ?? r.scheduled_for)],
        ["finished_at", "finished", (r) => fmtTime(r.finished_at)],
        ["attempts", "attempts"],
        ["result", "result", (r) => fmtValue(r.result ?? r.response ?? "").slice(0, 300)],
        ["error", "error", (r) => fmtValue(r.error)],
      ], { empty: "No runs yet." }),
    );
  }

  async function loadJobs() {
    if (!ctx.catalog.has("cron_scheduler")) return clear(jobsBox, notEnabled("cron_scheduler"));
    const reply = await ctx.api.call("cron_scheduler", "list_jobs", {});
    const act = (op, job) => async () => {
      await ctx.api.call("cron_scheduler", op, { job_id: job.job_id });
      toast(`${op} ${job.job_id}`);
      await loadJobs();
      await runs(job.job_id);
    };
    clear(
      jobsBox,
      table(reply.jobs || [], [
        ["job_id", "job", (j) => h("a", { href: "#", onclick: (e) => (e.preventDefault(), runs(j.job_id)) }, j.job_id)],
        ["schedule", "schedule"],
        ["tz", "tz"],
        ["status", "status", (j) => badge(j.status)],
        ["next_run_at", "next run", (j) => fmtTime(j.next_run_at)],
        ["last_fired_at", "last fired", (j) => fmtTime(j.last_fired_at)],
        ["prompt", "prompt", (j) => String(j.prompt || "").slice(0, 80)],
        [
          "actions",
          "",
          (j) => [
            j.status === "paused"
              ? opButton(ctx, "cron_scheduler", "resume_job", "Resume", act("resume_job", j), { class: "small" })
              : opButton(ctx, "cron_scheduler", "pause_job", "Pause", act("pause_job", j), { class: "small" }),
            opButton(ctx, "cron_scheduler", "run_now", "Run now", act("run_now", j), { class: "small" }),
          ],
        ],
      ], { empty: "No cron jobs." }),
    );
  }

  async function loadQueue() {
    if (!ctx.catalog.has("task_queue")) return clear(queueBox, notEnabled("task_queue"));
    const stats = await ctx.api.call("task_queue", "get_stats", {});
    const types = Object.keys(stats.by_type || {});
    const parts = [
      h("div", { class: "stats" },
        ["depth", "in_flight", "enqueued", "completed", "failed", "dead_lettered"].map((k) =>
          h("div", { class: "stat", dataset: { stat: k } }, h("b", {}, String(stats[k] ?? 0)), h("span", {}, k.replace("_", " "))),
        ),
      ),
    ];
    if (ctx.catalog.can("task_queue", "dead_letters")) {
      const letters = [];
      for (const type of types.length ? types : ["generic"]) {
        const reply = await ctx.api.call("task_queue", "dead_letters", { task_type: type, limit: 50 });
        letters.push(...(reply.dead_letters || []).map((d) => ({ task_type: type, ...d })));
      }
      parts.push(
        h("h3", {}, "Dead letters"),
        table(letters, [
          ["msg_id", "message"],
          ["task_type", "type"],
          ["deliveries", "deliveries"],
          ["reason", "reason", (d) => fmtValue(d.reason ?? d.error ?? "")],
          ["payload", "payload", (d) => fmtValue(d.payload).slice(0, 200)],
        ], { empty: "No dead letters." }),
      );
    }
    clear(queueBox, ...parts);
  }

  async function refresh() {
    await loadJobs();
    await loadQueue();
    if (selected) await runs(selected);
  }
  await refresh();
  root.append(section("Cron jobs", jobsBox, runsBox), section("Task queue", queueBox));
  return refresh;
}

const COLUMNS = ["todo", "ready", "in_progress", "blocked", "done", "cancelled"];

async function renderKanban(root, ctx) {
  if (!ctx.catalog.has("kanban")) return root.append(notEnabled("kanban"));
  const board = h("div", { class: "board" });
  const statsBox = h("div", { class: "stats" });

  async function load() {
    const reply = await ctx.api.call("kanban", "list", { limit: 500 });
    const tasks = reply.tasks || [];
    clear(
      board,
      COLUMNS.map((status) =>
        h(
          "div",
          { class: "column", dataset: { column: status } },
          h("h3", {}, status.replace("_", " "), " ", badge(String(tasks.filter((t) => t.status === status).length))),
          tasks.filter((t) => t.status === status).map((t) => card(t)),
        ),
      ),
    );
    if (ctx.catalog.has("kanban", "stats")) {
      const stats = await ctx.api.call("kanban", "stats", {});
      clear(statsBox, h("div", { class: "stat" }, h("b", {}, String(stats.total ?? tasks.length)), h("span", {}, "tasks")),
        h("div", { class: "stat" }, h("b", {}, String(stats.claimed ?? 0)), h("span", {}, "claimed")));
    }
  }

  function card(task) {
    const move = select("move", COLUMNS.filter((c) => c !== task.status).map((c) => [c, `→ ${c.replace("_", " ")}`]));
    return h(
      "div",
      { class: "card", dataset: { task: task.task_id } },
      h("b", {}, task.title),
      task.assignee ? h("div", { class: "muted" }, `@${task.assignee}`) : null,
      task.blocked_reason ? h("div", { class: "muted" }, `blocked: ${task.blocked_reason}`) : null,
      task.summary ? h("div", { class: "muted" }, task.summary) : null,
      h("div", { class: "toolbar" }, move,
        opButton(ctx, "kanban", "move", "Move", async () => {
          await ctx.api.call("kanban", "move", { task_id: task.task_id, status: move.value });
          await load();
        }, { class: "small" })),
    );
  }

  const title = h("input", { name: "title", placeholder: "New task title" });
  const add = h("form", { class: "toolbar", onsubmit: async (e) => {
    e.preventDefault();
    if (!title.value.trim()) return;
    try {
      await ctx.api.call("kanban", "create", { title: title.value });
      title.value = "";
      await load();
    } catch (err) {
      toast(err.message, true);
    }
  } }, title, h("button", { class: "btn", disabled: !ctx.catalog.can("kanban", "create") }, "Add task"));
  await load();
  root.append(section("Board", statsBox, add, board));
  return load;
}

async function renderGoals(root, ctx) {
  if (!ctx.catalog.has("goals")) return root.append(notEnabled("goals"));
  const status = select("status", [["", "any status"], ["active"], ["completed"], ["exhausted"], ["cleared"]], "active");
  const box = h("div");
  async function load() {
    try {
      const reply = await ctx.api.call("goals", "list_goals", { status: status.value });
      clear(box, table(reply.goals || [], [
        ["text", "goal"],
        ["status", "status", (g) => badge(g.status)],
        ["session_id", "session"],
        ["turns_used", "turns", (g) => `${g.turns_used ?? 0} / ${g.max_turns ?? "?"}`],
        ["created_at", "set", (g) => fmtTime(g.created_at)],
        ["completed_at", "completed", (g) => fmtTime(g.completed_at)],
        ["reason", "reason"],
        ["actions", "", (g) => g.status === "active"
          ? opButton(ctx, "goals", "complete_goal", "Complete", async () => {
              await ctx.api.call("goals", "complete_goal", { goal_id: g.goal_id, reason: "marked done in the dashboard" });
              await load();
            }, { class: "small" })
          : null],
      ], { empty: "No goals." }));
    } catch (err) {
      clear(box, errorBox(err));
    }
  }
  status.addEventListener("change", load);
  await load();
  root.append(section("Goals", h("div", { class: "toolbar" }, status), box));
  return load;
}
