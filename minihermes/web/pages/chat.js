// Chat with a session: the answer streams in (text deltas), tool calls appear as they start and end, and a
// call waiting for a person's approval can be decided here by whoever the guardrails say may decide it (an
// admin who is not the requester, the requester where the policy lets them, or the only admin there is). A
// reload shows the waiting call again (the session's pending approvals), and a message to a paused session
// links to the call it waits on.
//
// The picker lists the signed-in person's own sessions. Another person's session (an admin opening it from
// the Sessions page) is read-only here: its history and waiting calls are shown, the composer is off and
// says whose session it is; posting goes to a session of one's own. A message the server refuses stays in
// the log marked "Not sent", with the reason, and back in the box. The header line names the model that
// answers (the gateway's active provider and model), read again after each turn and after a switch. While
// the offline model answers, an admin is offered a local Ollama that answers (`localModelOffer`).
//
// While a turn runs (and while one waits for approval), a Stop button stops it (`agent.cancel_turn`): a running
// tool's process is killed, the turn ends "cancelled", and the session takes the next message.

import { streamChat } from "../api.js";
import { badge, clear, errorBox, fmtValue, h, notEnabled, opButton, pre, select, toast } from "../ui.js";
import { localModelOffer } from "./govern.js";

export const page = { title: "Chat", actors: ["agent", "session_manager"], render };

async function render(root, ctx) {
  if (!ctx.catalog.has("agent")) return root.append(notEnabled("agent"));
  const me = ctx.me.principal;
  const mayChat = ctx.catalog.can("agent", "chat");
  const log = h("div", { class: "chat-log", "aria-live": "polite" });
  const picker = h("div", { class: "toolbar" });
  const model = h("div", { class: "model-now muted", dataset: { provider: "", model: "" }, hidden: true });
  const readOnly = h("div", { class: "notice read-only", role: "status", hidden: true });
  const input = h("textarea", { name: "message", rows: 2, placeholder: "Message the agent…" });
  const send = h("button", { class: "btn primary", type: "submit" }, "Send");
  const stop = opButton(ctx, "agent", "cancel_turn", "Stop", () => stopTurn(), { class: "bad stop", type: "button" });
  stop.dataset.action = "stop-turn";
  stop.hidden = true;
  let sessionId = new URLSearchParams(location.hash.split("?")[1] || "").get("session") || "";
  let owner = ""; // whose session this is when it is not the caller's ("": the caller's own, or a new one)
  let mine = []; // the caller's own active sessions, the most recently active first

  const label = (s) => `${s.title ? s.title.slice(0, 40) : s.session_id.slice(0, 17)} · ${s.channel}`;
  const ownerOf = (s) => (s.user_id === "anonymous" ? s.created_by : s.user_id);

  // The session's record, or null when the session manager has none (a new id: it becomes the caller's).
  async function sessionRecord(id) {
    if (!ctx.catalog.can("session_manager", "get_session")) return null;
    try {
      return await ctx.api.call("session_manager", "get_session", { session_id: id });
    } catch (err) {
      if (err.status === 404) return null;
      throw err;
    }
  }

  async function loadSessions() {
    mine = [];
    if (ctx.catalog.can("session_manager", "list_sessions")) {
      // Filtered to the caller: an admin's list would otherwise be everyone's.
      const reply = await ctx.api.call("session_manager", "list_sessions", { state: "active", limit: 50, owner: me });
      mine = reply.sessions || [];
    }
    if (!sessionId && mine.length) sessionId = mine[0].session_id;
    owner = "";
    const choice = select("session", mine.map((s) => [s.session_id, label(s)]), sessionId);
    if (sessionId && !mine.some((s) => s.session_id === sessionId)) {
      const record = await sessionRecord(sessionId);
      if (record && ownerOf(record) !== me) owner = ownerOf(record);
      const text = record ? `${label(record)}${owner ? ` · ${owner}'s (read-only)` : ""}` : sessionId;
      choice.prepend(h("option", { value: sessionId, selected: true, dataset: { owner } }, text));
    }
    choice.addEventListener("change", () => open(choice.value));
    const create = opButton(ctx, "session_manager", "create_session", "New session", async () => {
      const made = await ctx.api.call("session_manager", "create_session", { channel: "web", user_id: me });
      await open(made.session_id);
    });
    clear(picker, h("span", {}, "Session "), mine.length || sessionId ? choice : h("em", {}, "none yet"), create);
    composer();
  }

  // Show another session (kept in the address, so a reload stays on it; no re-render of the page).
  async function open(id) {
    sessionId = id;
    window.history.replaceState(null, "", `#/chat${id ? `?session=${encodeURIComponent(id)}` : ""}`);
    await loadSessions();
    await loadHistory();
  }

  // Send only where the server takes a message: the caller's own session, with a role that may chat.
  function composer() {
    const foreign = Boolean(owner);
    input.disabled = foreign || !mayChat;
    send.disabled = foreign || !mayChat;
    send.title = foreign ? `${owner}'s session: read-only` : mayChat ? "agent.chat" : "your role cannot call agent.chat";
    readOnly.hidden = !foreign;
    if (!foreign) return clear(readOnly);
    const own = mine[0];
    clear(
      readOnly,
      h("b", {}, `This is ${owner}'s session. `),
      "You can read it and decide its waiting calls, but not post in it: your messages go to a session of your own. ",
      h("button", { class: "btn small", type: "button", dataset: { action: "own-session" }, onclick: async () => {
        if (own) return open(own.session_id);
        const made = await ctx.api.call("session_manager", "create_session", { channel: "web", user_id: me });
        await open(made.session_id);
      } }, own ? "Back to your session" : "Start a session of your own"),
    );
  }

  // Which model answers: the gateway's active provider and its model.
  async function showModel() {
    if (!model.isConnected && model.dataset.shown) return window.removeEventListener("minihermes:provider-switched", showModel);
    if (!ctx.catalog.can("llm_gateway", "list_providers")) return;
    let reply;
    try {
      reply = await ctx.api.call("llm_gateway", "list_providers", {});
    } catch {
      return; // not readable, or the server is away (the banner says so)
    }
    const active = reply.active || {};
    const entry = (reply.providers || []).find((p) => p.name === active.provider) || {};
    const name = active.provider || "";
    const used = active.model || entry.model || "";
    model.dataset.provider = name;
    model.dataset.model = used;
    model.dataset.shown = "true";
    model.hidden = !name;
    clear(model, "Answering: ", h("b", {}, used && used !== name ? `${name} · ${used}` : name),
      entry.kind === "simulated" ? " (the offline model)" : "");
  }
  window.addEventListener("minihermes:provider-switched", showModel);

  async function loadHistory() {
    clear(log);
    stop.hidden = true;
    if (!sessionId) return log.append(h("p", { class: "empty" }, "Create a session to start chatting."));
    const history = await ctx.api.call("agent", "get_history", { session_id: sessionId });
    for (const message of history.messages || []) renderMessage(message);
    const waiting = await pendingApprovals();
    for (const approval of waiting) {
      markWaiting(approval);
      pausedBox(fromApproval(approval));
    }
    // A turn that runs (or waits) as the page opens can be stopped from here too.
    if (waiting.length) stop.hidden = false;
    else if (ctx.catalog.can("agent", "get_stats")) {
      const stats = await ctx.api.call("agent", "get_stats", { session_id: sessionId }).catch(() => ({}));
      stop.hidden = !stats.turn_in_progress;
    }
    log.scrollTop = log.scrollHeight;
  }

  // Stop the session's running or paused turn; a streaming turn then ends with its "cancelled" reply.
  async function stopTurn() {
    const id = sessionId;
    // Whether this page streams the turn when asked: its stream then shows how it ended (the final event
    // usually arrives before the stop's reply, and reloading the history then would wipe it).
    const wasStreaming = streaming;
    stop.textContent = "Stopping…";
    try {
      const reply = await ctx.api.call("agent", "cancel_turn", { session_id: id });
      if (!wasStreaming && id === sessionId) await loadHistory(); // a paused turn: show how it ended
      if (!reply.cancelled) toast("No turn was running.");
    } finally {
      stop.textContent = "Stop";
      if (!streaming) stop.hidden = true;
    }
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

  // An approval record in the shape of the agent's "paused" reply; `you_may_decide` is the server's word on
  // what approve and deny will do for this caller.
  function fromApproval(a) {
    return {
      approval_id: a.approval_id,
      pending_tool: { name: a.tool, input: a.input },
      requester_may_decide: a.requester_may_decide === true,
      you_may_decide: a.you_may_decide,
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
    // Deciding is the guardrails' call, and they say who may: a record read from them carries it for this
    // caller; a streamed pause is the caller's own turn, which they decide only where the requester may.
    const mayDecide = typeof reply.you_may_decide === "boolean" ? reply.you_may_decide : reply.requester_may_decide === true;
    const buttons = [
      opButton(ctx, "guardrails", "approve", "Approve", decide("approve"), { class: "good" }),
      opButton(ctx, "guardrails", "deny", "Deny", decide("deny"), { class: "bad" }),
    ];
    if (!mayDecide) {
      for (const b of buttons) {
        b.disabled = true;
        b.title = "another person decides this call (an admin who did not request it)";
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

  // The server refused the message (nothing of it is in the session): the bubble says so and why, and the
  // text goes back in the box to send again.
  function notSent(el, err, content) {
    const why = err.status === 409 && err.details?.approval_id
      ? "this session has a call waiting for approval"
      : err.message || String(err);
    el.classList.add("not-sent");
    el.dataset.sent = "false";
    el.title = `Not sent: ${why}`;
    el.append(h("div", { class: "not-sent-reason" }, `Not sent: ${why}`));
    input.value = content;
  }

  let streaming = false; // a turn of this page streams now

  async function submit(event) {
    event.preventDefault();
    const content = input.value.trim();
    if (!content || owner || !mayChat) return; // never into another person's session
    if (!sessionId) {
      const made = await ctx.api.call("session_manager", "create_session", { channel: "web", user_id: me });
      sessionId = made.session_id;
      window.history.replaceState(null, "", `#/chat?session=${encodeURIComponent(sessionId)}`);
      await loadSessions();
      clear(log);
    }
    input.value = "";
    send.disabled = true;
    streaming = true;
    stop.hidden = false;
    const sent = bubble("user", content);
    let current = null;
    let started = false; // the server took the message: it is in the session's history
    try {
      const reply = await streamChat(sessionId, content, (name, data) => {
        if (name === "turn_started") started = true;
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
      else if (reply && (!current || reply.status === "cancelled")) bubble("assistant", reply.response);
      sent.dataset.sent = "true";
      const last = log.querySelector(".msg.assistant:last-of-type");
      if (last) last.dataset.final = "true";
      log.append(h("div", { class: "turn-end", dataset: { status: reply?.status || "" } }, reply?.status || ""));
      showModel(); // the model that answered (a switch elsewhere shows here after the next answer)
    } catch (err) {
      if (started) {
        sent.dataset.sent = "true"; // taken, then the turn failed: the message is in the history
        log.append(errorBox(err));
      } else {
        notSent(sent, err, content);
        if (err.status === 409 && err.details?.approval_id) await waitingNotice(err, content);
      }
    } finally {
      streaming = false;
      stop.hidden = !log.querySelector(".paused"); // a paused turn can still be stopped
      composer();
      log.scrollTop = log.scrollHeight;
    }
  }

  await loadSessions();
  await loadHistory();
  showModel();
  root.append(
    localModelOffer(ctx),
    h("div", { class: "chat-head" }, picker, model),
    readOnly,
    log,
    h("form", { class: "composer", onsubmit: submit }, input, send, stop),
  );
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      event.target.form.requestSubmit();
    }
  });
}
