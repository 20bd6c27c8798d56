// Chat with a session: the answer streams in (text deltas), tool calls appear as they start and end, and a
// call waiting for a person's approval can be decided here by an admin (another person than the requester),
// or by the requester where the guardrail policy lets them. A reload shows the waiting call again (the
// session's pending approvals), and a message to a paused session links to the call it waits on.

import { streamChat } from "../api.js";
import { badge, clear, errorBox, fmtValue, h, notEnabled, opButton, pre, select, toast } from "../ui.js";

export const page = { title: "Chat", actors: ["agent", "session_manager"], render };

async function render(root, ctx) {
  if (!ctx.catalog.has("agent")) return root.append(notEnabled("agent"));
  const log = h("div", { class: "chat-log", "aria-live": "polite" });
  const picker = h("div", { class: "toolbar" });
  const input = h("textarea", { name: "message", rows: 2, placeholder: "Message the agent…" });
  const send = h("button", { class: "btn primary", type: "submit", disabled: !ctx.catalog.can("agent", "chat") }, "Send");
  let sessionId = new URLSearchParams(location.hash.split("?")[1] || "").get("session") || "";

  async function loadSessions() {
    let rows = [];
    if (ctx.catalog.has("session_manager", "list_sessions")) {
      rows = (await ctx.api.call("session_manager", "list_sessions", { state: "active", limit: 50 })).sessions;
    }
    if (!sessionId && rows.length) sessionId = rows[0].session_id;
    const choice = select(
      "session",
      rows.map((s) => [s.session_id, `${s.title ? s.title.slice(0, 40) : s.session_id.slice(0, 17)} · ${s.user_id} · ${s.channel}`]),
      sessionId,
    );
    if (sessionId && !rows.some((s) => s.session_id === sessionId)) {
      choice.prepend(h("option", { value: sessionId, selected: true }, sessionId));
    }
    choice.addEventListener("change", () => {
      sessionId = choice.value;
      loadHistory();
    });
    const create = opButton(ctx, "session_manager", "create_session", "New session", async () => {
      const made = await ctx.api.call("session_manager", "create_session", { channel: "web", user_id: ctx.me.principal });
      sessionId = made.session_id;
      await loadSessions();
      await loadHistory();
    });
    clear(picker, h("span", {}, "Session "), rows.length || sessionId ? choice : h("em", {}, "none yet"), create);
  }

  async function loadHistory() {
    clear(log);
    if (!sessionId) return log.append(h("p", { class: "empty" }, "Create a session to start chatting."));
    const history = await ctx.api.call("agent", "get_history", { session_id: sessionId });
    for (const message of history.messages || []) renderMessage(message);
    for (const approval of await pendingApprovals()) {
      markWaiting(approval);
      pausedBox(fromApproval(approval));
    }
    log.scrollTop = log.scrollHeight;
  }

  // The session's calls waiting for a decision (a user sees the ones they requested).
  async function pendingApprovals() {
    if (!sessionId || !ctx.catalog.can("guardrails", "list_approvals")) return [];
    try {
      const reply = await ctx.api.call("guardrails", "list_approvals", { status: "pending", session_id: sessionId });
      return reply.approvals || [];
    } catch {
      return [];
    }
  }

  // An approval record in the shape of the agent's "paused" reply.
  function fromApproval(a) {
    return {
      approval_id: a.approval_id,
      pending_tool: { name: a.tool, input: a.input },
      requester_may_decide: a.requester_may_decide === true,
      reason: a.reason || "",
      reason_message: a.reason_message || "",
    };
  }

  // The history's card of the call an approval holds says so, instead of "running…".
  function markWaiting(approval) {
    const same = JSON.stringify(approval.input ?? {});
    const cards = [...log.querySelectorAll("details.tool.running")].filter((c) => c.dataset.tool === approval.tool);
    const card = cards.find((c) => c.dataset.input === same) || cards[cards.length - 1];
    if (!card) return;
    card.classList.remove("running");
    card.classList.add("waiting");
    card.dataset.approval = approval.approval_id;
    card.querySelector(".state").textContent = "waiting for approval";
  }

  function renderMessage(message) {
    if (message.role === "user") bubble("user", message.content);
    else if (message.role === "assistant") {
      if (message.content) bubble("assistant", message.content);
      for (const call of message.tool_calls || []) toolCard(call.id, call.name, call.input);
    } else if (message.role === "tool") {
      finishTool(message.tool_call_id, message.is_error, message.content, message.duration_ms);
    }
  }

  function bubble(role, text) {
    const el = h("div", { class: `msg ${role}`, dataset: { role } }, text);
    log.append(el);
    return el;
  }

  function toolCard(id, name, input) {
    const card = h(
      "details",
      { class: "tool running", dataset: { toolId: id, tool: name, input: JSON.stringify(input ?? {}) } },
      h("summary", {}, badge("tool"), ` ${name} `, h("span", { class: "state" }, "running…")),
      h("div", {}, "input"),
      pre(input),
    );
    log.append(card);
    return card;
  }

  function finishTool(id, isError, result, durationMs) {
    const card = [...log.querySelectorAll("details.tool")].find((c) => c.dataset.toolId === id);
    if (!card) return;
    card.classList.remove("running");
    card.classList.add(isError ? "failed" : "done");
    card.querySelector(".state").textContent = `${isError ? "error" : "done"} · ${durationMs ?? "?"} ms`;
    card.append(h("div", {}, "result"), pre(fmtValue(result)));
  }

  function pausedBox(reply) {
    log.querySelector(`.paused[data-approval="${CSS.escape(reply.approval_id)}"]`)?.remove();
    const why = h("p", { class: "why" }, reply.reason_message ? `Why: ${reply.reason_message}` : "");
    const box = h(
      "div",
      { class: "paused", dataset: { approval: reply.approval_id } },
      h("p", {}, `Waiting for approval: ${reply.pending_tool?.name} (${reply.approval_id})`),
      why,
      pre(reply.pending_tool?.input ?? {}),
    );
    if (!reply.reason_message && ctx.catalog.can("guardrails", "get_approval")) {
      // A streamed "paused" reply does not say why: the approval record does.
      ctx.api.call("guardrails", "get_approval", { approval_id: reply.approval_id })
        .then((a) => { if (a.reason_message) why.textContent = `Why: ${a.reason_message}`; })
        .catch(() => {});
    }
    const decide = (op) => async () => {
      const result = await ctx.api.call("guardrails", op, { approval_id: reply.approval_id });
      box.replaceWith(h("p", { class: "decided" }, `${op === "approve" ? "Approved" : "Denied"}.`));
      await loadHistory();
      if (result.turn?.response) toast(`Resumed turn: ${result.turn.status}`);
    };
    // Deciding is the guardrail policy's call: admins, or the requester where the policy lets them.
    const mayDecide = (ctx.me.roles || []).includes("admin") || reply.requester_may_decide === true;
    const buttons = [
      opButton(ctx, "guardrails", "approve", "Approve", decide("approve"), { class: "good" }),
      opButton(ctx, "guardrails", "deny", "Deny", decide("deny"), { class: "bad" }),
    ];
    if (!mayDecide) {
      for (const b of buttons) {
        b.disabled = true;
        b.title = "an admin decides this call (the guardrail policy does not let requesters approve it)";
      }
      box.append(h("p", { class: "muted" }, "An admin decides this call: ",
        h("a", { href: "#/approvals", dataset: { link: "approvals" } }, "Approvals"), "."));
    }
    box.dataset.mayDecide = String(mayDecide);
    box.append(...buttons);
    log.append(box);
    return box;
  }

  // A message to a session whose turn waits for approval is refused (409): say what it waits on, and where.
  async function waitingNotice(err, content) {
    const approvalId = err.details?.approval_id;
    const note = h("div", { class: "notice waiting-notice", role: "alert", dataset: { approval: approvalId } },
      "Not sent: this session has a call waiting for approval. Decide it here or on the ",
      h("a", { href: "#/approvals", dataset: { link: "approvals" } }, "Approvals"),
      " page, then send your message again.");
    log.append(note);
    input.value = content; // kept, to send once the call is decided
    const pending = await pendingApprovals();
    const approval = pending.find((a) => a.approval_id === approvalId) || pending[0];
    if (approval && !log.querySelector(`.paused[data-approval="${CSS.escape(approval.approval_id)}"]`)) {
      pausedBox(fromApproval(approval));
    } else if (approval) {
      log.append(log.querySelector(`.paused[data-approval="${CSS.escape(approval.approval_id)}"]`));
    }
  }

  async function submit(event) {
    event.preventDefault();
    const content = input.value.trim();
    if (!content) return;
    if (!sessionId) {
      const made = await ctx.api.call("session_manager", "create_session", { channel: "web", user_id: ctx.me.principal });
      sessionId = made.session_id;
      await loadSessions();
      clear(log);
    }
    input.value = "";
    send.disabled = true;
    bubble("user", content);
    let current = null;
    try {
      const reply = await streamChat(sessionId, content, (name, data) => {
        if (name === "text_delta") {
          current = current || bubble("assistant", "");
          current.classList.add("streaming");
          current.textContent += data.text;
        } else if (name === "tool_call_start") {
          current?.classList.remove("streaming");
          current = null;
          toolCard(data.id, data.name, data.input);
        } else if (name === "tool_call_end") {
          finishTool(data.id, data.is_error, data.result, data.duration_ms);
        } else if (name === "dropped") {
          log.append(h("p", { class: "empty" }, `(${data.count} live events dropped)`));
        }
        log.scrollTop = log.scrollHeight;
      });
      current?.classList.remove("streaming");
      if (reply && reply.status === "paused") {
        markWaiting({ approval_id: reply.approval_id, tool: reply.pending_tool?.name, input: reply.pending_tool?.input });
        pausedBox(reply);
      }
      else if (reply && !current) bubble("assistant", reply.response);
      const last = log.querySelector(".msg.assistant:last-of-type");
      if (last) last.dataset.final = "true";
      log.append(h("div", { class: "turn-end", dataset: { status: reply?.status || "" } }, reply?.status || ""));
    } catch (err) {
      if (err.status === 409 && err.details?.approval_id) {
        [...log.querySelectorAll(".msg.user")].at(-1)?.classList.add("not-sent");
        await waitingNotice(err, content);
      } else {
        log.append(errorBox(err));
      }
    } finally {
      send.disabled = !ctx.catalog.can("agent", "chat");
      log.scrollTop = log.scrollHeight;
    }
  }

  await loadSessions();
  await loadHistory();
  root.append(
    picker,
    log,
    h("form", { class: "composer", onsubmit: submit }, input, send),
  );
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      event.target.form.requestSubmit();
    }
  });
}
