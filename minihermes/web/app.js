// The dashboard shell: login, navigation and a hash router (#/chat, #/skills, ...). Each page module
// exports { title, actors, render(root, ctx) }; ctx = { me, catalog, api, refresh }.

import { api, ApiError, Catalog, connection, credential, openNotifications, UnreachableError } from "./api.js";
import { clear, errorBox, h, toast } from "./ui.js";
import * as chat from "./pages/chat.js";
import * as notifications from "./pages/notifications.js";
import * as sessions from "./pages/sessions.js";
import * as skills from "./pages/skills.js";
import * as memory from "./pages/memory.js";
import * as quarantine from "./pages/quarantine.js";
import * as work from "./pages/work.js";
import * as govern from "./pages/govern.js";
import * as observe from "./pages/observe.js";
import * as usage from "./pages/usage.js";

const PAGES = [
  ["chat", chat.page],
  ["notifications", notifications.page],
  ["sessions", sessions.page],
  ["skills", skills.page],
  ["memory", memory.page],
  ["quarantine", quarantine.page],
  ["cron", work.cronPage],
  ["kanban", work.kanbanPage],
  ["goals", work.goalsPage],
  ["approvals", govern.approvalsPage],
  ["guardrails", govern.guardrailsPage],
  ["providers", govern.providersPage],
  ["audit", observe.auditPage],
  ["health", observe.healthPage],
  ["metrics", observe.metricsPage],
  ["usage", usage.page],
];

const root = document.getElementById("app");
let ctx = null;
let timer = null;
let generation = 0; // the latest navigation; a slower, older page render must not overwrite it

async function start() {
  try {
    const me = await api.whoami();
    const catalog = new Catalog(await api.actors());
    ctx = { me, catalog, api };
    layout();
    route();
    watchNotifications();
    usage.watch(ctx);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return login(credential.get() ? err : null);
    if (err instanceof UnreachableError) return clear(root, h("main", { class: "login" }, h("p", { class: "empty" }, "Waiting for the server…")));
    clear(root, h("main", { class: "login" }, errorBox(err)));
  }
}

// A banner while the server cannot be reached, instead of each page's "Failed to fetch".
function banner() {
  let el = document.getElementById("offline");
  if (!el) {
    el = h("div", { id: "offline", class: "offline", role: "alert", hidden: true },
      h("b", {}, "Cannot reach the MiniHermes server. "),
      h("span", {}, `Nothing at ${location.host} is answering: is \`minihermes serve\` running? `),
      h("button", { class: "btn small", onclick: () => (ctx ? route() : start()) }, "Retry"));
    document.body.prepend(el);
  }
  return el;
}

connection.addEventListener("change", (event) => {
  banner().hidden = event.detail.ok;
});

// A banner while the server's store is degraded (a damaged page, an I/O error, a full disk), with the reason
// /healthz gives: lists that could not be read are not shown as empty ones.
async function showStore() {
  let health;
  try {
    health = await api.health();
  } catch {
    return; // the server is away: the other banner says so
  }
  let el = document.getElementById("store-degraded");
  if (!el) {
    el = h("div", { id: "store-degraded", class: "offline", role: "alert", hidden: true });
    document.body.prepend(el);
  }
  el.hidden = health?.status !== "degraded";
  if (!el.hidden) {
    clear(el, h("b", {}, "Storage degraded: "), h("span", { class: "reason" }, health.reason || "unknown"),
      h("span", {}, " — what is shown may be incomplete. Run `minihermes doctor`; docs/operations.md says how to recover."));
  }
}

function login(error) {
  const input = h("textarea", {
    name: "credential",
    rows: 4,
    placeholder: "mh_… API key, or a JWT",
    autocomplete: "off",
    spellcheck: "false",
  });
  const form = h(
    "form",
    {
      class: "login-form",
      onsubmit: async (event) => {
        event.preventDefault();
        if (!input.value.trim()) return;
        credential.set(input.value);
        await start();
      },
    },
    h("h1", {}, "MiniHermes"),
    h("p", {}, "Sign in with an API key (minihermes keys create) or a JWT from your identity provider."),
    input,
    error ? errorBox(error) : null,
    h("button", { class: "btn primary", type: "submit" }, "Sign in"),
  );
  clear(root, h("main", { class: "login" }, form));
  input.focus();
}

function layout() {
  const { me } = ctx;
  const nav = h(
    "nav",
    { class: "side" },
    h("div", { class: "brand" }, h("img", { src: "/static/icon.svg", alt: "" }), "MiniHermes"),
    PAGES.map(([name, page]) =>
      h("a", { href: `#/${name}`, dataset: { page: name } }, page.title, missing(page) ? " ·" : "",
        name === "notifications" ? h("span", { id: "unread", class: "badge unread", hidden: true }) : null,
        name === "quarantine" ? h("span", { id: "held", class: "badge unread", hidden: true }) : null),
    ),
  );
  const who = h(
    "div",
    { class: "who" },
    h("span", { class: "tenant", title: "tenant" }, me.tenant),
    h("span", { class: "principal" }, me.principal),
    h("span", { class: "roles" }, me.roles.join(", ")),
    me.authenticated
      ? h(
          "button",
          {
            class: "btn small",
            onclick: () => {
              stopWatching();
              credential.clear();
              location.hash = "";
              start();
            },
          },
          "Sign out",
        )
      : h("span", { class: "badge" }, "local owner (no auth)"),
  );
  const model = h("div", { id: "model", class: "model-note", hidden: true });
  clear(root, nav, h("div", { class: "main" }, h("header", { class: "top" }, h("h1", { id: "title" }), who), model, h("main", { id: "page" })));
}

// Which model answers: when it is the offline one, say so and where a real one is connected (it understands
// simple requests only and says "I cannot" for the rest: docs/offline-model.md).
async function showModel() {
  const el = document.getElementById("model");
  if (!el || !ctx.catalog.has("llm_gateway")) return;
  let reply;
  try {
    reply = await ctx.api.call("llm_gateway", "list_providers", {});
  } catch {
    return; // not allowed to read it, or the server is away (the banner says so)
  }
  const active = reply.active || {};
  const entry = (reply.providers || []).find((p) => p.name === active.provider) || {};
  const offline = (entry.kind || active.provider) === "simulated";
  el.dataset.provider = active.provider || "";
  el.hidden = !offline;
  if (!offline) return clear(el);
  const admin = ctx.me.roles.includes("admin");
  clear(
    el,
    h("b", {}, "Offline model active. "),
    h("span", {}, "It does simple requests (arithmetic, memory, files, reminders, goals) and says when it cannot; "),
    admin
      ? h("a", { href: "#/providers", dataset: { link: "providers" } }, "connect a real model")
      : h("span", {}, "ask an admin to connect a real model"),
    h("span", {}, " (docs/offline-model.md, docs/providers.md)."),
  );
}

// The signed-in person's notifications, live: the unread count beside "Notifications" in the nav, a toast
// when one arrives (the page, if open, shows it at once). Reopened after the server went away.
let watcher = null;

function stopWatching() {
  if (!watcher) return;
  watcher.stopped = true;
  clearTimeout(watcher.timer);
  if (watcher.source) watcher.source.close();
  watcher = null;
}

function watchNotifications() {
  stopWatching();
  if (!ctx.catalog.has("notifications")) return;
  const w = (watcher = { stopped: false, source: null, timer: null });
  const onEvent = (name, data) => {
    if (name === "notification") {
      toast(`Notification: ${data.text}`);
      window.dispatchEvent(new CustomEvent("minihermes:notification", { detail: data }));
    }
    showUnread();
  };
  const again = () => {
    if (!w.stopped) w.timer = setTimeout(connect, 3000);
  };
  async function connect() {
    if (w.stopped) return;
    try {
      w.source = await openNotifications(onEvent, showUnread, again);
      if (w.stopped) w.source.close();
    } catch (err) {
      if (err instanceof ApiError && [401, 403, 404].includes(err.status)) return; // signed out, or no inbox
      again();
    }
  }
  connect();
}

async function showUnread() {
  const el = document.getElementById("unread");
  if (!el || !ctx || !ctx.catalog.has("notifications")) return;
  try {
    const reply = await api.notifications.list({ unreadOnly: true, limit: 1 });
    el.textContent = String(reply.unread);
    el.title = `${reply.unread} unread`;
    el.dataset.count = String(reply.unread);
    el.hidden = !reply.unread;
  } catch {
    // not answered (the banner says when the server is away): the count stays as it was
  }
}

window.addEventListener("minihermes:notifications-read", () => ctx && showUnread());

// How many memories and skills wait for the caller's confirmation, beside "Quarantine" in the nav.
async function showHeld() {
  const el = document.getElementById("held");
  if (!el || !ctx) return;
  try {
    const count = await quarantine.heldCount(ctx);
    el.textContent = String(count || 0);
    el.title = `${count || 0} held for confirmation`;
    el.dataset.count = String(count || 0);
    el.hidden = !count;
  } catch {
    // not answered: the count stays as it was (the page itself shows the error)
  }
}

window.addEventListener(quarantine.CHANGED, () => ctx && showHeld());

function missing(page) {
  return page.actors.some((actor) => !ctx.catalog.has(actor));
}

async function route() {
  if (!ctx) return;
  const mine = ++generation;
  if (timer) clearInterval(timer);
  timer = null;
  const name = (location.hash.replace(/^#\//, "").split("?")[0] || "chat").toLowerCase();
  const found = PAGES.find(([n]) => n === name) || PAGES[0];
  const [pageName, page] = found;
  for (const link of document.querySelectorAll("nav.side a")) {
    link.classList.toggle("active", link.dataset.page === pageName);
  }
  document.getElementById("title").textContent = page.title;
  const target = document.getElementById("page");
  target.dataset.page = pageName;
  clear(target, h("p", { class: "empty" }, "Loading…"));
  const view = h("div", { class: "view" });
  try {
    const refresh = await page.render(view, ctx);
    if (mine !== generation) return;
    clear(target, view);
    showModel();
    showUnread();
    showHeld();
    showStore();
    if (typeof refresh === "function" && page.poll) {
      timer = setInterval(() => refresh().catch(() => {}), page.poll);
    }
  } catch (err) {
    if (mine === generation) clear(target, errorBox(err));
    showStore(); // a page that failed to load: say when the store is why
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("minihermes:provider-switched", () => ctx && showModel());
start();
