// Work that outlives a turn: cron jobs and their runs, the task queue, the kanban board, goals.

import { badge, clear, errorBox, field, fmtTime, fmtValue, h, notEnabled, opButton, section, select, sessionTitles, table, toast } from "../ui.js";

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
      ], { empty: "No runs yet.", rowAttrs: (r) => ({ dataset: { run: r.run_id, status: r.status } }) }),
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
    const remove = (job) => async () => {
      if (!window.confirm(`Delete the job ${job.job_id} and its runs?`)) return;
      await ctx.api.call("cron_scheduler", "delete_job", { job_id: job.job_id });
      toast(`deleted ${job.job_id}`);
      if (selected === job.job_id) {
        selected = "";
        clear(runsBox, h("p", { class: "empty" }, "Pick a job to see its runs."));
      }
      await loadJobs();
    };
    clear(
      jobsBox,
      table(reply.jobs || [], [
        ["job_id", "job", (j) => h("a", { href: "#", onclick: (e) => (e.preventDefault(), runs(j.job_id)) }, j.job_id)],
        ["schedule", "schedule"],
        ["tz", "tz"],
        ["action", "action", (j) => badge(j.action === "notify" ? "reminder" : "agent run", "action")],
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
            opButton(ctx, "cron_scheduler", "create_job", "Edit", async () => edit(j), { class: "small" }),
            opButton(ctx, "cron_scheduler", "delete_job", "Delete", remove(j), { class: "small bad" }),
          ],
        ],
      ], { empty: "No cron jobs.", rowAttrs: (j) => ({ dataset: { job: j.job_id, status: j.status, action: j.action || "run" } }) }),
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

  // Create, or with "Edit" redefine (create_job with replace), a job.
  const form = cronForm(ctx, async (jobId) => {
    await loadJobs();
    await runs(jobId);
  });
  function edit(job) {
    form.fill(job);
  }

  async function refresh() {
    await loadJobs();
    await loadQueue();
    if (selected) await runs(selected);
  }
  await refresh();
  root.append(
    ctx.catalog.has("cron_scheduler") ? section("New cron job", form.el) : "",
    section("Cron jobs", jobsBox, runsBox),
    section("Task queue", queueBox),
  );
  return refresh;
}

const SCHEDULE_EXAMPLES = [
  ["0 9 * * 1", "every Monday at 09:00"],
  ["0 8 * * 1-5", "weekdays at 08:00"],
  ["*/15 * * * *", "every 15 minutes"],
  ["every 1h", "every hour"],
  ["every 30m", "every 30 minutes"],
  ["2030-01-01T09:00", "once, at that time"],
];

function timeZones() {
  try {
    return Intl.supportedValuesOf("timeZone");
  } catch {
    return ["UTC"];
  }
}

const ACTIONS = [
  ["notify", "Reminder: send me the text", "The reminder, e.g. Water the plants",
    "Each run puts this text in your notifications as it is: no model call."],
  ["run", "Agent run: send me the agent's answer", "What the agent does each time, e.g. Summarize my open tasks",
    "Each run asks the agent with this text; its answer goes to your notifications."],
];

function cronForm(ctx, done) {
  const jobId = h("input", { name: "job_id", placeholder: "water-plants", title: "1-100 letters, digits, '_', '.', '-'" });
  const prompt = h("textarea", { name: "prompt", rows: 2 });
  // What a run does: "notify" delivers the text itself (a reminder, no model call), "run" asks the agent and
  // delivers its answer; both reach the owner's notifications.
  const action = select("action", ACTIONS.map(([v, label]) => [v, label]), "notify");
  const actionHint = h("small", { id: "action-hint", class: "muted action-hint" });
  function describeAction() {
    const [, , placeholder, hint] = ACTIONS.find(([v]) => v === action.value) || ACTIONS[0];
    prompt.placeholder = placeholder;
    actionHint.textContent = hint;
  }
  action.addEventListener("change", describeAction);
  describeAction();
  const schedule = h("input", { name: "schedule", placeholder: "0 9 * * 1", list: "schedule-examples", "aria-describedby": "schedule-hint" });
  const hint = h("small", { id: "schedule-hint", class: "muted hint" },
    "A 5-field cron expression (minute hour day month weekday), an interval (every 30m, every 2h, every 1d) or a one-shot time (2030-01-01T09:00). Examples: ",
    SCHEDULE_EXAMPLES.slice(0, 3).map(([v, label]) => `${v} (${label})`).join(", "), ".");
  const examples = h("datalist", { id: "schedule-examples" }, SCHEDULE_EXAMPLES.map(([v, label]) => h("option", { value: v }, label)));
  const tz = h("input", { name: "tz", value: "UTC", list: "time-zones", placeholder: "UTC" });
  const zones = h("datalist", { id: "time-zones" }, timeZones().map((z) => h("option", { value: z })));
  const local = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const replace = h("input", { name: "replace", type: "checkbox" });
  const errors = h("div", { class: "form-errors", "aria-live": "polite" });
  const el = h(
    "form",
    { class: "form cron-form", onsubmit: (e) => e.preventDefault() },
    h("div", { class: "fields" },
      field("Job id", jobId),
      field("Time zone", h("span", {}, tz, zones, local && local !== "UTC"
        ? h("button", { type: "button", class: "btn small", onclick: () => (tz.value = local) }, `use ${local}`) : null)),
      field("Schedule", h("span", {}, schedule, examples)),
      field("Action", action),
    ),
    hint,
    actionHint,
    field("Text", prompt),
    h("div", { class: "toolbar" },
      h("label", { class: "check" }, replace, " replace the job with this id (edit)"),
      opButton(ctx, "cron_scheduler", "create_job", "Save job", async () => {
        const reply = await ctx.api.call("cron_scheduler", "create_job", {
          job_id: jobId.value.trim(),
          prompt: prompt.value,
          action: action.value,
          schedule: schedule.value.trim(),
          tz: tz.value.trim() || "UTC",
          replace: replace.checked,
        });
        toast(`saved ${reply.job_id}: ${reply.schedule}`);
        el.reset();
        tz.value = "UTC";
        describeAction();
        await done(reply.job_id);
      }, { class: "primary", type: "submit", errors }),
    ),
    errors,
  );
  return {
    el,
    fill(job) {
      jobId.value = job.job_id;
      prompt.value = job.prompt || "";
      action.value = job.action || "run";
      describeAction();
      schedule.value = job.schedule_input || job.schedule || "";
      tz.value = job.tz || "UTC";
      replace.checked = true;
      el.scrollIntoView({ block: "nearest" });
      prompt.focus();
    },
  };
}

const AGENT = "agent"; // the assignee the kanban worker runs (kanban_worker assignee_prefix)
const COLUMNS = ["todo", "ready", "in_progress", "blocked", "done", "cancelled"];

async function renderKanban(root, ctx) {
  if (!ctx.catalog.has("kanban")) return root.append(notEnabled("kanban"));
  const board = h("div", { class: "board" });
  const statsBox = h("div", { class: "stats" });

  async function load() {
    const reply = await ctx.api.call("kanban", "list", { limit: 500 });
    const tasks = reply.tasks || [];
    const byId = new Map(tasks.map((t) => [t.task_id, t]));
    clear(
      board,
      COLUMNS.map((status) =>
        h(
          "div",
          { class: "column", dataset: { column: status } },
          h("h3", {}, status.replace("_", " "), " ", badge(String(tasks.filter((t) => t.status === status).length))),
          tasks.filter((t) => t.status === status).map((t) => card(t, byId)),
        ),
      ),
    );
    if (ctx.catalog.has("kanban", "stats")) {
      const stats = await ctx.api.call("kanban", "stats", {});
      clear(statsBox, h("div", { class: "stat" }, h("b", {}, String(stats.total ?? tasks.length)), h("span", {}, "tasks")),
        h("div", { class: "stat" }, h("b", {}, String(stats.claimed ?? 0)), h("span", {}, "claimed")));
    }
  }

  // Only moves the board allows: not the card's own column, not "in progress" (that means claimed: Start claims
  // a ready card), not "ready" while a dependency is open.
  function legalMoves(task, byId) {
    const depsOpen = (task.depends_on || []).some((id) => byId.get(id)?.status !== "done");
    return COLUMNS.filter((c) => c !== task.status && c !== "in_progress" && !(c === "ready" && depsOpen));
  }

  function card(task, byId) {
    const moves = legalMoves(task, byId);
    const move = select("move", moves.map((c) => [c, `→ ${c.replace("_", " ")}`]));
    const toAgent = task.assignee !== AGENT
      ? opButton(ctx, "kanban", "assign", "Assign to agent", async () => {
          await ctx.api.call("kanban", "assign", { task_id: task.task_id, assignee: AGENT });
          toast(`${task.title}: assigned to the agent`);
          await load();
        }, { class: "small", title: "the kanban worker runs cards assigned to 'agent'" })
      : null;
    const start = task.status === "ready"
      ? opButton(ctx, "kanban", "start", "Start", async () => {
          await ctx.api.call("kanban", "start", { task_id: task.task_id, worker: ctx.me.principal });
          await load();
        }, { class: "small" })
      : null;
    return h(
      "div",
      { class: "card", dataset: { task: task.task_id, status: task.status, assignee: task.assignee || "" } },
      h("b", {}, task.title),
      task.assignee ? h("div", { class: "muted" }, `@${task.assignee}`) : null,
      task.claim ? h("div", { class: "muted" }, `claimed by ${task.claim.worker}`) : null,
      task.blocked_reason ? h("div", { class: "muted" }, `blocked: ${task.blocked_reason}`) : null,
      task.summary ? h("div", { class: "muted" }, task.summary) : null,
      h("div", { class: "toolbar" }, start, toAgent,
        moves.length ? move : null,
        moves.length
          ? opButton(ctx, "kanban", "move", "Move", async () => {
              await ctx.api.call("kanban", "move", { task_id: task.task_id, status: move.value });
              await load();
            }, { class: "small" })
          : null),
    );
  }

  const title = h("input", { name: "title", placeholder: "New task title" });
  const forAgent = h("input", { name: "for_agent", type: "checkbox" });
  const add = h("form", { class: "toolbar", onsubmit: async (e) => {
    e.preventDefault();
    if (!title.value.trim()) return;
    try {
      await ctx.api.call("kanban", "create", { title: title.value, assignee: forAgent.checked ? AGENT : "" });
      title.value = "";
      await load();
    } catch (err) {
      toast(err.message, true);
    }
  } }, title, h("label", { class: "check" }, forAgent, " for the agent"),
    h("button", { class: "btn", disabled: !ctx.catalog.can("kanban", "create") }, "Add task"));
  await load();
  root.append(section("Board", statsBox, add, board));
  return load;
}

async function renderGoals(root, ctx) {
  if (!ctx.catalog.has("goals")) return root.append(notEnabled("goals"));
  const status = select("status", [["", "any status"], ["active"], ["completed"], ["exhausted"], ["cleared"]], "active");
  const box = h("div");
  const titles = sessionTitles(ctx);
  async function load() {
    try {
      const reply = await ctx.api.call("goals", "list_goals", { status: status.value });
      await titles.load((reply.goals || []).map((g) => g.session_id));
      clear(box, table(reply.goals || [], [
        ["text", "goal"],
        ["status", "status", (g) => badge(g.status)],
        ["session_id", "session", (g) => titles.link(g.session_id)],
        ["turns_used", "turns", (g) => `${g.turns_used ?? 0} / ${g.max_turns ?? "?"}`],
        ["created_at", "set", (g) => fmtTime(g.created_at)],
        ["completed_at", "completed", (g) => fmtTime(g.completed_at)],
        ["reason", "reason"],
        ["actions", "", (g) => g.status === "active"
          ? [opButton(ctx, "goals", "complete_goal", "Complete", async () => {
              await ctx.api.call("goals", "complete_goal", { goal_id: g.goal_id, session_id: g.session_id, reason: "marked done in the dashboard" });
              toast(`completed: ${g.text}`);
              await load();
            }, { class: "small good" }),
            opButton(ctx, "goals", "clear_goal", "Clear", async () => {
              await ctx.api.call("goals", "clear_goal", { goal_id: g.goal_id, session_id: g.session_id });
              toast(`cleared: ${g.text}`);
              await load();
            }, { class: "small bad" })]
          : null],
      ], { empty: "No goals.", rowAttrs: (g) => ({ dataset: { goal: g.goal_id, status: g.status } }) }));
    } catch (err) {
      clear(box, errorBox(err));
    }
  }
  status.addEventListener("change", load);
  await load();
  root.append(await goalForm(ctx, load), section("Goals", h("div", { class: "toolbar" }, status), box));
  return load;
}

// Set a goal in a session: pick one of the caller's own sessions (an admin's list would be everyone's), or
// type an id.
async function goalForm(ctx, done) {
  const session = h("input", { name: "session_id", list: "goal-sessions", placeholder: "session id" });
  const sessions = h("datalist", { id: "goal-sessions" });
  if (ctx.catalog.can("session_manager", "list_sessions")) {
    try {
      const reply = await ctx.api.call("session_manager", "list_sessions", { limit: 200, owner: ctx.me.principal });
      const rows = reply.sessions || [];
      clear(sessions, rows.map((s) => h("option", { value: s.session_id }, s.title || s.channel || "")));
      if (rows.length) session.value = rows[0].session_id;
    } catch {
      // No list: the id is typed.
    }
  }
  const text = h("input", { name: "text", placeholder: "e.g. Ship the release notes by Friday", size: 40 });
  const turns = h("input", { name: "max_turns", type: "number", min: 0, max: 1000, value: 0, title: "0: the default" });
  const errors = h("div", { class: "form-errors", "aria-live": "polite" });
  const form = h(
    "form",
    { class: "form goal-form", onsubmit: (e) => e.preventDefault() },
    h("div", { class: "fields" },
      field("Session", h("span", {}, session, sessions)),
      field("Goal", text),
      field("Max turns (0: default)", turns),
    ),
    opButton(ctx, "goals", "set_goal", "Set goal", async () => {
      const reply = await ctx.api.call("goals", "set_goal", {
        session_id: session.value.trim(),
        text: text.value,
        max_turns: Number(turns.value) || 0,
      });
      toast(`goal set: ${reply.goal.text}`);
      text.value = "";
      await done();
    }, { class: "primary", type: "submit", errors }),
    errors,
  );
  return section("Set a goal", form);
}
