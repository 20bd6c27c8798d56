// Chat with a session: the answer streams in (text deltas), tool calls appear as they start and end, and a
// call waiting for a person's approval can be decided here by an admin (another person than the requester).

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
      rows.map((s) => [s.session_id, `${s.session_id.slice(0, 17)} · ${s.user_id} · ${s.channel}`]),
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
    log.scrollTop = log.scrollHeight;
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
      { class: "tool running", dataset: { toolId: id, tool: name } },
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
    const box = h(
      "div",
      { class: "paused", dataset: { approval: reply.approval_id } },
      h("p", {}, `Waiting for approval: ${reply.pending_tool?.name} (${reply.approval_id})`),
      pre(reply.pending_tool?.input ?? {}),
    );
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
    }
    box.append(...buttons);
    log.append(box);
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
      if (reply && reply.status === "paused") pausedBox(reply);
      else if (reply && !current) bubble("assistant", reply.response);
      const last = log.querySelector(".msg.assistant:last-of-type");
      if (last) last.dataset.final = "true";
      log.append(h("div", { class: "turn-end", dataset: { status: reply?.status || "" } }, reply?.status || ""));
    } catch (err) {
      log.append(errorBox(err));
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
