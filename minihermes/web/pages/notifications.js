// The signed-in person's notifications (reminders that fired, answers of their scheduled runs), newest first.
// Viewing the page marks what it shows as read; those stay marked "new" here until the page is opened again.
// A notification that arrives while the page is open (the shell's live stream) is shown at once.

import { badge, clear, errorBox, fmtTime, h, notEnabled, section, table } from "../ui.js";

export const page = { title: "Notifications", actors: ["notifications"], render };

const LIMIT = 100;
let listening = null; // the latest view's listener: one at a time, however often the page is opened

async function render(root, ctx) {
  if (!ctx.catalog.has("notifications")) return root.append(notEnabled("notifications"));
  const box = h("div");
  const fresh = new Set(); // ids unread when this view showed them
  const canMark = ctx.catalog.can("notifications", "mark_read");

  async function load() {
    try {
      const reply = await ctx.api.notifications.list({ limit: LIMIT });
      const rows = reply.notifications || [];
      for (const n of rows) if (!n.read) fresh.add(n.id);
      clear(
        box,
        h("p", { class: "hint" }, `${reply.count} shown (the newest ${LIMIT} at most).`),
        table(rows, [
          ["created_at", "when", (n) => fmtTime(n.created_at)],
          ["read", "", (n) => (fresh.has(n.id) ? badge("new", "pending") : "")],
          ["text", "notification", (n) => h("span", { class: "notification-text" }, n.text)],
          ["source", "from", (n) => (String(n.source || "").startsWith("cron:") ? h("a", { href: "#/cron" }, n.source) : n.source)],
        ], {
          empty: "No notifications yet. Reminders you set (\"remind me every Monday at 9am to ...\") and the answers of your scheduled jobs arrive here.",
          rowAttrs: (n) => ({ dataset: { notification: n.id, read: fresh.has(n.id) ? "false" : "true" } }),
        }),
      );
      const unread = rows.filter((n) => !n.read).map((n) => n.id);
      if (unread.length && canMark) {
        await ctx.api.notifications.markRead(unread);
        window.dispatchEvent(new CustomEvent("minihermes:notifications-read"));
      }
    } catch (err) {
      clear(box, errorBox(err));
    }
  }

  // Live: the shell's stream says one arrived; this view reloads while it is the one shown.
  if (listening) window.removeEventListener("minihermes:notification", listening);
  listening = () => {
    if (location.hash.replace(/^#\//, "").split("?")[0] === "notifications") load();
  };
  window.addEventListener("minihermes:notification", listening);

  await load();
  root.append(section("Your notifications", box));
  return load;
}
