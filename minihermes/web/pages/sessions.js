// Sessions and their transcripts: every door's sessions (titled by their first message, the most recently
// active first), found by title; full-text search over the transcripts the caller may see. An admin opens
// another person's session in the chat read-only.

import { badge, clear, errorBox, fmtTime, h, notEnabled, pre, section, select, table } from "../ui.js";

export const page = { title: "Sessions", actors: ["session_manager", "agent"], render };

async function render(root, ctx) {
  if (!ctx.catalog.has("session_manager")) return root.append(notEnabled("session_manager"));
  const listBox = h("div");
  const transcript = h("div", { class: "transcript" }, h("p", { class: "empty" }, "Pick a session."));
  const results = h("div");
  const state = select("state", [["", "any state"], ["active"], ["ended"]]);
  const titleQuery = h("input", { name: "title", type: "search", placeholder: "Find by title…", "aria-label": "Find sessions by title" });
  let sessions = [];

  async function load() {
    const args = { state: state.value, limit: 200, query: titleQuery.value.trim() };
    const reply = await ctx.api.call("session_manager", "list_sessions", args);
    sessions = reply.sessions || [];
    clear(
      listBox,
      table(
        sessions,
        [
          ["title", "session", (s) => h("a", { href: "#", title: s.session_id, dataset: { session: s.session_id }, onclick: (e) => (e.preventDefault(), show(s.session_id)) }, s.title || s.session_id)],
          ["user_id", "user"],
          ["channel", "channel"],
          ["message_count", "messages", (s) => String(s.message_count ?? 0)],
          ["last_active_at", "last active", (s) => fmtTime(s.last_active_at)],
          ["state", "state", (s) => badge(s.state)],
        ],
        { empty: titleQuery.value.trim() ? "No session title matches." : "No sessions yet." },
      ),
    );
  }

  async function show(sessionId) {
    const found = sessions.find((s) => s.session_id === sessionId);
    const title = found?.title;
    // Another person's session opens read-only in the chat (its history and waiting calls; no composer).
    const owner = found ? (found.user_id === "anonymous" ? found.created_by : found.user_id) : ctx.me.principal;
    const theirs = owner !== ctx.me.principal;
    const link = h("a", { href: `#/chat?session=${encodeURIComponent(sessionId)}`, dataset: { link: "chat", readOnly: String(theirs) } },
      theirs ? `open ${owner}'s session in chat (read-only)` : "open in chat");
    clear(transcript, h("h3", {}, title || sessionId), title ? h("p", { class: "muted" }, sessionId) : null, link);
    if (!ctx.catalog.has("agent", "get_history")) return transcript.append(notEnabled("agent"));
    try {
      const history = await ctx.api.call("agent", "get_history", { session_id: sessionId });
      for (const m of history.messages || []) {
        const body = m.role === "tool" ? pre(m.content) : h("div", {}, m.content || "");
        const calls = (m.tool_calls || []).map((c) => h("div", { class: "call" }, badge("tool"), ` ${c.name} `, pre(c.input)));
        transcript.append(h("div", { class: `turn ${m.role}`, dataset: { role: m.role } }, h("b", {}, m.role === "tool" ? `tool ${m.name}` : m.role), body, calls));
      }
      if (!(history.messages || []).length) transcript.append(h("p", { class: "empty" }, "No messages."));
    } catch (err) {
      transcript.append(errorBox(err));
    }
  }

  const query = h("input", { name: "query", type: "search", placeholder: "Search transcripts…" });
  async function search(event) {
    event.preventDefault();
    if (!query.value.trim()) return;
    if (!ctx.catalog.has("agent", "session_search")) return clear(results, notEnabled("agent.session_search"));
    // session_search is an op of the per-session agent: any session the caller may use addresses it.
    const anchor = sessions[0]?.session_id;
    if (!anchor) return clear(results, h("p", { class: "empty" }, "No session to search yet."));
    try {
      const reply = await ctx.api.call("agent", "session_search", { query: query.value, session_id: anchor, limit: 20 });
      clear(
        results,
        table(
          reply.hits || [],
          [
            ["session_id", "session", (r) => h("a", { href: "#", onclick: (e) => (e.preventDefault(), show(r.session_id)) }, r.session_id)],
            ["role", "role"],
            ["snippet", "snippet"],
            ["at", "at", (r) => fmtTime(r.at)],
          ],
          { empty: "No match." },
        ),
      );
    } catch (err) {
      clear(results, errorBox(err));
    }
  }

  state.addEventListener("change", load);
  let typing;
  titleQuery.addEventListener("input", () => (clearTimeout(typing), (typing = setTimeout(load, 250))));
  await load();
  root.append(
    section("Search", h("form", { class: "toolbar", onsubmit: search }, query, h("button", { class: "btn" }, "Search")), results),
    h("div", { class: "split" }, section("Sessions", h("div", { class: "toolbar" }, titleQuery, state), listBox), section("Transcript", transcript)),
  );
  return load;
}
