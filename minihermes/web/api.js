// The dashboard's only door to the server: the HTTP API (docs/http-api.md), with the caller's credential.
// Every page goes through `call(actor, op, args)`; chat streams through `streamChat`, the caller's new
// notifications through `openNotifications`.

const CREDENTIAL = "minihermes.credential";

export class ApiError extends Error {
  constructor(status, body, text) {
    const err = (body && body.error) || {};
    super(err.message || text || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || "http_error";
    this.details = err;
  }
}

export const credential = {
  get() {
    return sessionStorage.getItem(CREDENTIAL) || "";
  },
  set(value) {
    sessionStorage.setItem(CREDENTIAL, value.trim());
  },
  clear() {
    sessionStorage.removeItem(CREDENTIAL);
  },
};

// The server could not be reached (down, restarting, network gone): not an HTTP answer at all. Pages show it
// like any error; the shell shows a banner until a request gets through again (`connection` events).
export class UnreachableError extends Error {
  constructor() {
    super(`The server at ${location.host} is not answering: is \`minihermes serve\` running? Retrying when you act or the page refreshes.`);
    this.status = 0;
    this.code = "server_unreachable";
    this.details = {};
  }
}

export const connection = new EventTarget();
let reachable = true;
function reached(ok) {
  if (ok === reachable) return;
  reachable = ok;
  connection.dispatchEvent(new CustomEvent("change", { detail: { ok } }));
}

// `probe`: a side request (the store's health) that reports its own result and never moves the banner.
async function send(path, init, { probe = false } = {}) {
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    if (init.signal?.aborted) throw err;
    if (!probe) reached(false);
    throw new UnreachableError();
  }
  if (!probe) reached(true);
  return response;
}

function headers(extra = {}) {
  const out = { accept: "application/json", ...extra };
  const token = credential.get();
  if (token) out.authorization = `Bearer ${token}`;
  return out;
}

async function request(method, path, body, contentType = "application/json", options = {}) {
  const init = { method, headers: headers(body === undefined ? {} : { "content-type": contentType }) };
  if (body !== undefined) init.body = contentType === "application/json" ? JSON.stringify(body) : body;
  const response = await send(path, init, options);
  const { text, data } = await readBody(response);
  if (!response.ok) throw new ApiError(response.status, data, text);
  return data;
}

// A response's text and its JSON (null when it is empty or not JSON): what an ApiError carries.
async function readBody(response) {
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  return { text, data };
}

// A file the server sends (GET, with the caller's credential like every request): `{blob, filename, headers}`;
// a refusal is an ApiError as anywhere else.
async function download(path) {
  const response = await send(path, { method: "GET", headers: headers({ accept: "*/*" }) });
  if (!response.ok) {
    const { text, data } = await readBody(response);
    throw new ApiError(response.status, data, text);
  }
  const disposition = response.headers.get("content-disposition") || "";
  const filename = /filename="?([^";]+)"?/.exec(disposition)?.[1] || "download";
  return { blob: await response.blob(), filename, headers: response.headers };
}

export const api = {
  whoami: () => request("GET", "/api/v1/whoami"),
  // The process and its store: {status: "ok"} or {status: "degraded", reason, store} (GET /healthz).
  // A side probe: it never moves the "cannot reach the server" banner, which the API's own requests drive
  // (a /healthz that answers while the API does not must not hide it).
  health: () => request("GET", "/healthz", undefined, undefined, { probe: true }),
  actors: () => request("GET", "/api/v1/actors"),
  metrics: () => request("GET", "/api/v1/metrics"),
  call: (actor, op, args = {}) =>
    request("POST", `/api/v1/actors/${encodeURIComponent(actor)}/${encodeURIComponent(op)}`, args),
  chat: (sessionId, content) =>
    request("POST", `/api/v1/sessions/${encodeURIComponent(sessionId)}/messages`, { content }),
  // An archive of skill folders, as the body (the JSON op route caps bodies at 1 MiB).
  importSkills: (file, approve) =>
    request("POST", `/api/v1/skills/import${approve ? "?approve=true" : ""}`, file, "application/octet-stream"),
  // Every skill (of one status) as a zip of skill folders (admins; GET /api/v1/skills/export).
  exportSkills: (status = "") =>
    download(`/api/v1/skills/export${status ? `?status=${encodeURIComponent(status)}` : ""}`),
  // The caller's own inbox (GET /api/v1/notifications, POST /api/v1/notifications/read).
  notifications: {
    list: ({ unreadOnly = false, limit = 50 } = {}) =>
      request("GET", `/api/v1/notifications?unread_only=${unreadOnly ? "true" : "false"}&limit=${limit}`),
    markRead: (ids) => request("POST", "/api/v1/notifications/read", { ids }),
  },
  // Admins: the tenant's API keys (the key itself only in create's reply).
  apiKeys: {
    list: () => request("GET", "/api/v1/api-keys"),
    create: (body) => request("POST", "/api/v1/api-keys", body),
    revoke: (keyId) => request("DELETE", `/api/v1/api-keys/${encodeURIComponent(keyId)}`),
  },
};

// What this node runs and what the caller may call, from discovery (GET /api/v1/actors).
export class Catalog {
  constructor(listing) {
    this.actors = new Map();
    for (const actor of listing.actors || []) {
      this.actors.set(actor.name, new Map(actor.ops.map((op) => [op.op, op])));
    }
  }
  has(actor, op) {
    const ops = this.actors.get(actor);
    return Boolean(ops && (op === undefined || ops.has(op)));
  }
  can(actor, op) {
    const found = this.actors.get(actor)?.get(op);
    return Boolean(found && found.allowed);
  }
}

// POST a message with stream: true and hand each Server-Sent Event to `onEvent(name, data)`.
// Resolves with the final reply; rejects with ApiError (refused before streaming, or an `error` event).
export async function streamChat(sessionId, content, onEvent, signal) {
  const response = await send(`/api/v1/sessions/${encodeURIComponent(sessionId)}/messages`, {
    method: "POST",
    headers: headers({ "content-type": "application/json", accept: "text/event-stream" }),
    body: JSON.stringify({ content, stream: true }),
    signal,
  });
  const type = response.headers.get("content-type") || "";
  if (!response.ok || !type.startsWith("text/event-stream")) {
    const { text, data } = await readBody(response);
    if (!response.ok) throw new ApiError(response.status, data, text);
    return data;
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let final = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const event = parseFrame(frame);
      if (!event) continue;
      if (event.name === "error") throw new ApiError(event.data.error?.status || 500, event.data, "");
      if (event.name === "final") final = event.data.reply;
      onEvent(event.name, event.data);
    }
  }
  return final;
}

// The caller's new notifications, live, as a browser EventSource (a stream to the browser and its tools, not a
// request still loading). An EventSource sends no credential header, so a single-use ticket asked for with the
// credential opens it. `onEvent(name, data)` for `notification` and `dropped`; `onOpen()` once subscribed;
// `onClose()` when it fails or the server ends it (it is closed then: the caller opens a new one). Returns it.
export async function openNotifications(onEvent, onOpen, onClose) {
  const { ticket } = await request("POST", "/api/v1/notifications/stream/ticket");
  const source = new EventSource(`/api/v1/notifications/stream?ticket=${encodeURIComponent(ticket)}`);
  source.addEventListener("open", () => onOpen());
  for (const name of ["notification", "dropped"]) {
    source.addEventListener(name, (event) => {
      let data = null;
      try {
        data = JSON.parse(event.data);
      } catch {
        return;
      }
      onEvent(name, data);
    });
  }
  source.addEventListener("error", () => {
    source.close(); // its own retry would present the used ticket again
    onClose();
  });
  return source;
}

function parseFrame(frame) {
  let name = "message";
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue; // keep-alive comment
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  try {
    return { name, data: JSON.parse(data.join("\n")) };
  } catch {
    return null;
  }
}
