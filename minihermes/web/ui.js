// DOM helpers. Data is only ever set as text (textContent), never parsed as HTML: an agent's answer, a tool
// result or a memory can hold anything, and the page holds the caller's credential.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function fmtTime(ts) {
  if (ts === null || ts === undefined || ts === "" || !Number(ts)) return "";
  return new Date(Number(ts) * 1000).toLocaleString();
}

export function fmtValue(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function pre(value) {
  return h("pre", { class: "code" }, typeof value === "string" ? value : JSON.stringify(value, null, 2));
}

export function errorBox(err) {
  return h("div", { class: "error", role: "alert" }, `${err.code || "error"}: ${err.message || err}`);
}

export function notEnabled(actor) {
  return h("div", { class: "notice", dataset: { disabled: actor } }, `${actor} is not enabled on this node.`);
}

// A button for an op: disabled (with the reason) when the caller's roles do not allow it. A failure is a toast,
// or, with `errors` (an element beside a form), shown there and the offending field marked (`formError`).
export function opButton(ctx, actor, op, label, onclick, attrs = {}) {
  const { errors, ...rest } = attrs;
  attrs = rest;
  const allowed = ctx.catalog.can(actor, op);
  return h(
    "button",
    {
      ...attrs,
      class: `btn ${attrs.class || ""}`,
      disabled: !allowed,
      title: allowed ? `${actor}.${op}` : `your role cannot call ${actor}.${op}`,
      dataset: { op: `${actor}.${op}` },
      onclick: async (event) => {
        const button = event.currentTarget;
        button.disabled = true;
        if (errors) formError(errors, null);
        try {
          await onclick(event);
        } catch (err) {
          if (errors) formError(errors, err, button.closest("form"));
          else toast(`${actor}.${op}: ${err.message}`, true);
        } finally {
          button.disabled = !allowed;
        }
      },
    },
    label,
  );
}

// Show a server's refusal beside the form that caused it (or clear it with err = null); the input named by the
// error's `field` is marked invalid and focused.
export function formError(box, err, form = null) {
  for (const el of (form || document).querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  if (!err) return clear(box);
  const input = form && err.details?.field ? form.querySelector(`[name="${CSS.escape(err.details.field)}"]`) : null;
  if (input) {
    input.setAttribute("aria-invalid", "true");
    input.focus();
  }
  return clear(box, h("div", { class: "error", role: "alert", dataset: { field: err.details?.field || "" } },
    err.details?.field ? `${err.details.field}: ` : "", err.message || String(err)));
}

export function toast(message, isError = false) {
  let box = document.getElementById("toasts");
  if (!box) {
    box = h("div", { id: "toasts", "aria-live": "polite" });
    document.body.append(box);
  }
  const item = h("div", { class: `toast ${isError ? "bad" : ""}`, role: isError ? "alert" : "status" }, message);
  box.append(item);
  setTimeout(() => item.remove(), 6000);
}

// A table of objects: columns are [key, label, render?]; missing columns are skipped when no row has them.
export function table(rows, columns, { empty = "Nothing here yet.", rowAttrs } = {}) {
  if (!rows || !rows.length) return h("p", { class: "empty" }, empty);
  const shown = columns.filter(([key, , render]) => render || rows.some((r) => r[key] !== undefined));
  // Wrapped: a table wider than a phone scrolls by itself, the page does not.
  return h("div", { class: "table-wrap" }, h(
    "table",
    { class: "grid" },
    h("thead", {}, h("tr", {}, shown.map(([, label]) => h("th", {}, label)))),
    h(
      "tbody",
      {},
      rows.map((row) =>
        h(
          "tr",
          rowAttrs ? rowAttrs(row) : {},
          shown.map(([key, , render]) => h("td", {}, render ? render(row) : fmtValue(row[key]))),
        ),
      ),
    ),
  ));
}

export function section(title, ...children) {
  return h("section", { class: "panel" }, h("h2", {}, title), ...children);
}

export function field(label, input) {
  return h("label", { class: "field" }, h("span", {}, label), input);
}

export function select(name, options, value = "") {
  return h(
    "select",
    { name },
    options.map(([v, text]) => h("option", { value: v, selected: v === value }, text ?? (v || "any"))),
  );
}

// Session ids named by their titles (session_manager has them): `await titles.load(ids)` reads the sessions the
// caller may list once, and again only when an id it has not seen turns up (pages that refresh every few
// seconds); `titles.link(id)` is a link to the session's chat showing its title, the id as its tooltip.
export function sessionTitles(ctx) {
  const known = new Map();
  const tried = new Set(); // ids a read did not find (not the caller's, or no record): not read again for them
  let loaded = false;
  return {
    async load(ids = []) {
      if (!ctx.catalog.can("session_manager", "list_sessions")) return;
      if (loaded && ids.every((id) => !id || id === "*" || known.has(id) || tried.has(id))) return;
      loaded = true;
      try {
        const reply = await ctx.api.call("session_manager", "list_sessions", { limit: 1000 });
        for (const s of reply.sessions || []) known.set(s.session_id, s);
      } catch {
        // Not listable: the ids are shown as they are.
      }
      for (const id of ids) if (id && !known.has(id)) tried.add(id);
    },
    title(id) {
      if (id === "*") return "every session";
      const s = known.get(id);
      return (s && s.title) || id;
    },
    link(id) {
      if (!id) return "";
      if (id === "*") return h("span", { dataset: { session: id } }, "every session");
      return h("a", { href: `#/chat?session=${encodeURIComponent(id)}`, title: id, dataset: { session: id } }, this.title(id));
    },
  };
}

export function badge(text, kind = "") {
  return h("span", { class: `badge ${kind || String(text).replace(/[^a-z_]/g, "")}` }, text);
}

// A small SVG line chart of [[time, value], ...]: counters are drawn as their rate per sample.
export function lineChart(title, points, { rate = false } = {}) {
  const NS = "http://www.w3.org/2000/svg";
  const width = 320;
  const height = 110;
  let series = points || [];
  if (rate && series.length > 1) {
    series = series.slice(1).map(([t, v], i) => [t, Math.max(0, v - series[i][1])]);
  }
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", title);
  const last = series.length ? series[series.length - 1][1] : 0;
  if (series.length > 1) {
    const t0 = series[0][0];
    const t1 = series[series.length - 1][0] || t0 + 1;
    const max = Math.max(1, ...series.map(([, v]) => v));
    const xy = series.map(([t, v]) => [
      8 + ((t - t0) / Math.max(1e-9, t1 - t0)) * (width - 16),
      height - 8 - (v / max) * (height - 24),
    ]);
    const path = document.createElementNS(NS, "polyline");
    path.setAttribute("points", xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" "));
    path.setAttribute("class", "line");
    svg.append(path);
    const top = document.createElementNS(NS, "text");
    top.setAttribute("x", "8");
    top.setAttribute("y", "12");
    top.setAttribute("class", "axis");
    top.textContent = `max ${Number(max.toFixed(2))}`;
    svg.append(top);
  } else {
    const note = document.createElementNS(NS, "text");
    note.setAttribute("x", "8");
    note.setAttribute("y", "60");
    note.setAttribute("class", "axis");
    note.textContent = "collecting samples…";
    svg.append(note);
  }
  return h(
    "figure",
    { class: "chart-box", dataset: { metric: title } },
    h("figcaption", {}, title, h("b", {}, ` ${Number(Number(last).toFixed(2))}${rate ? "/sample" : ""}`)),
    svg,
  );
}
