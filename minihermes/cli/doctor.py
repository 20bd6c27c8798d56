"""``minihermes doctor``: is this machine ready to run MiniHermes, and is the configured setup healthy?

Checks, each ``ok``, ``warn``, ``fail`` or ``skip``; the exit code is 1 when a *required* one fails:

- server (with ``--url``, or when a MiniHermes server answers on the port): through its HTTP API only, it
  answers ``/healthz``, is ready (``/readyz``), accepts the credential (``/api/v1/whoami``), and its services
  are healthy (``health_monitor.get_health``);
- storage (required): the node's store backend checks itself (``Store.doctor()``): for SQLite, the data dir
  exists or can be made and is writable, SQLite is recent enough (and whether it has the WAL-reset bug), has
  FTS5 and runs in WAL mode there, whether the file is encrypted (cipher, the key's source, SQLite's version;
  a wrong or missing key fails), free disk, the WAL's size, ``PRAGMA quick_check`` (``integrity_check`` with
  ``--full``; a damaged page is named with its table) and each quarantined row or actor state; for
  PostgreSQL, the server, pgvector, unaccent and the database's locale; for both, the stored schema version is
  one this version can open. With a server (``--url``, or one on the port) and no data dir or config named,
  the server's storage is reported instead, as its ``/readyz`` says it, and ``./data`` is neither read nor
  made;
- sandbox: the isolation level of the terminal tool's sandbox (namespaces, seccomp, landlock, or rlimits
  only); ``minimal`` is a warning, not a failure (tools still run, less isolated). Not with ``--url`` (the
  server's machine may be another one);
- port (not with ``--url``): the HTTP port is free, or a MiniHermes server answers on it (in use by anything
  else fails);
- providers: the LLM gateway's configured providers (from the running server on that port or ``--url``, or
  else the data dir): the simulated one is always fine; a real one is probed with a short timeout (any HTTP
  answer means reachable; no credential is sent). The active provider is required, the others warn. While
  the offline model answers and a local Ollama does (``llm_gateway.detect_local``, as the node's egress rules
  allow), the check offers it with the exact commands that switch to it: doctor never switches by itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from minihermes.runtime import AppConfig
from minihermes.runtime.store import Store, StoreError, open_store

from ._connection import DEFAULT_DATA

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
HEALTHY = ("ok", "degraded")
"""What a MiniHermes server's ``/healthz`` says: up, or up with a degraded store (and why)."""


@dataclass
class Check:
    group: str
    name: str
    status: str
    detail: str
    required: bool = False
    command: str = ""
    """What to run to act on the finding (printed whole below the table), or nothing."""


# -- storage --------------------------------------------------------------------------------------------------


def node_store(config: AppConfig | None, data_dir: Path) -> Store:
    """The store the node would open, unopened: its config's backend, else SQLite in ``data_dir``."""
    if config is None:
        return open_store("sqlite", data_dir=str(data_dir))
    node = config.model.node
    options = dict(node.backend_options)
    if node.backend == "sqlite":
        options.setdefault("data_dir", str(config.data_dir))
    return open_store(node.backend, **options)


async def check_storage(
    data_dir: Path, config: AppConfig | None = None, *, full: bool = False
) -> list[Check]:
    """The node's store backend checks itself (``Store.doctor()``; SQLite's with ``integrity_check`` instead
    of ``quick_check`` when ``full``); each finding is a storage check."""
    backend = config.model.node.backend if config is not None else "sqlite"
    try:
        store: Any = node_store(config, data_dir)
        findings = await (store.doctor(full=True) if full and backend == "sqlite" else store.doctor())
    except (ValueError, TypeError, OSError, ImportError, StoreError) as e:  # a refused config: no traceback
        return [Check("storage", backend, FAIL, str(e), True)]
    checks = [Check("storage", f.name, f.status, f.detail, f.required) for f in findings]
    if backend != "sqlite" and os.environ.get("MINIHERMES_DB_KEY"):  # a key set where it encrypts nothing
        detail = f"not encrypted by MiniHermes: MINIHERMES_DB_KEY is for SQLite only; on {backend}, encrypt the disk"
        checks.append(Check("storage", "encryption", WARN, detail))
    return checks


# -- sandbox --------------------------------------------------------------------------------------------------


def check_sandbox() -> list[Check]:
    from minihermes.tools.sandbox import SandboxError, isolation_report

    try:
        report = isolation_report()
    except SandboxError as e:
        return [Check("sandbox", "isolation", FAIL, f"the sandbox cannot start: {e}")]
    layers = sorted(name for name, info in report["layers"].items() if info["available"])
    level = report["level"]
    status = OK if level in ("full", "partial") else WARN
    detail = f"level {level}: {', '.join(layers) or 'rlimits only'}"
    if report["missing"]:
        detail += f" (missing: {', '.join(report['missing'])})"
    return [Check("sandbox", "isolation", status, detail)]


# -- port -----------------------------------------------------------------------------------------------------


async def check_port(host: str, port: int) -> tuple[Check, bool]:
    """The port's check, and whether a MiniHermes server answers there."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return Check("port", f"{host}:{port}", OK, "free", True), False
        except OSError:
            pass
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            resp = await client.get(f"http://{_hostport(host, port)}/readyz")
        body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
    except (httpx.HTTPError, ValueError):
        return Check("port", f"{host}:{port}", FAIL, "in use by another program", True), False
    if isinstance(body, dict) and "status" in body:
        return Check(
            "port", f"{host}:{port}", OK, f"in use by a MiniHermes server ({body['status']})", True
        ), True
    return Check(
        "port", f"{host}:{port}", FAIL, f"in use by another HTTP server ({resp.status_code})", True
    ), False


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- providers ------------------------------------------------------------------------------------------------


async def providers_from(url: str | None, data_dir: Path, token: str | None) -> dict[str, Any]:
    from ._backend import open_backend

    async with open_backend(url=url, data_dir=data_dir, token=token) as backend:
        reply: dict[str, Any] = await backend.ask("llm_gateway", "list_providers", {}, timeout=30)
        reply["local"] = await _detect_local(backend)
        return reply


async def _detect_local(backend: Any) -> dict[str, Any] | None:
    """``llm_gateway.detect_local``'s answer, or None where the caller may not ask it (or the node has no
    such op): a local model server to offer."""
    from ._backend import CommandError

    if not await backend.may("llm_gateway", "detect_local"):
        return None
    try:
        found: dict[str, Any] = await backend.ask("llm_gateway", "detect_local", {}, timeout=30)
    except CommandError:
        return None
    return found


def local_offer(detected: dict[str, Any] | None, where: list[str]) -> Check | None:
    """The offer of a local Ollama that answers, with the commands that register and switch to it (``where``:
    the connection options they need), or None when there is nothing to offer."""
    ollama = (detected or {}).get("ollama")
    if not ollama or not ollama.get("models"):
        return None
    registration = ollama["registration"]
    models = ", ".join(ollama["models"][:5]) + (", ..." if len(ollama["models"]) > 5 else "")
    register = _call("register_provider", registration, where)
    switch = _call("switch_provider", {"provider": registration["name"]}, where)
    return Check(
        "providers",
        "local ollama",
        WARN,
        f"A local Ollama is running at {ollama['url']} with models {models}, and the offline model answers: "
        f'switch to it (model {registration["model"]}; another by editing "model") with the command below',
        command=f"{register} && \\\n{switch}",
    )


def _call(op: str, payload: dict[str, Any], where: list[str]) -> str:
    """``minihermes call llm_gateway OP PAYLOAD WHERE...`` as shell text of short lines (a long JSON object
    over several lines inside its quotes, each option on a continued line): it is copied from a terminal."""
    body = json.dumps(payload, indent=2) if len(json.dumps(payload)) > 40 else json.dumps(payload)
    lines = [f"minihermes call llm_gateway {op} {shlex.quote(body)}"]
    lines += [shlex.join(where[i : i + 2]) for i in range(0, len(where), 2)]
    return " \\\n  ".join(lines)


def _declared(kind: str) -> Any:
    """The provider class of ``kind``, for what it declares (``probe_path``, ``default_base_url``, ...);
    None for a kind this process does not know."""
    from minihermes.llm import UnknownProviderError, provider_class

    try:
        return provider_class(kind)
    except (UnknownProviderError, ImportError):
        return None


def probe_paths() -> dict[str, str]:
    """What is probed, by provider kind: each registered provider class that declares a ``probe_path``."""
    from minihermes.llm import provider_kinds

    return {kind: cls.probe_path for kind in provider_kinds() if (cls := _declared(kind)) and cls.probe_path}


def _configured(entry: dict[str, Any]) -> bool:
    cls = _declared(entry["kind"])
    if cls is None or not cls.probe_path:
        return True
    return bool(entry.get("model")) and bool(
        entry.get("base_url") or entry.get("credential") or not cls.needs_key_at_default_url
    )


async def probe_provider(entry: dict[str, Any], timeout: float) -> tuple[str, str]:
    """``(status, detail)`` for one provider, as its class probes its server (``Provider.probe``: by
    default any HTTP answer at its ``probe_path`` is reachable; no credential is sent)."""
    kind = entry["kind"]
    cls = _declared(kind)
    found = await cls.probe(entry.get("base_url"), timeout) if cls is not None else None
    if found is None:
        return OK, f"{kind} (in-process)"
    reachable, detail = found
    if not reachable:
        return FAIL, detail
    return OK, f"{detail}, model {entry.get('model') or '?'}"


async def check_providers(listing: dict[str, Any], timeout: float) -> list[Check]:
    active = listing.get("active", {}).get("provider")
    chain = set(listing.get("failover", []))
    entries = [p for p in listing.get("providers", [])]
    configured = [p for p in entries if _configured(p) or p["name"] == active or p["name"] in chain]
    results = await asyncio.gather(*(probe_provider(p, timeout) for p in configured))
    out = []
    for p, (status, detail) in zip(configured, results, strict=True):
        required = p["name"] == active
        if status == FAIL and not required:
            status = WARN
        role = " (active)" if required else " (failover)" if p["name"] in chain else ""
        out.append(Check("providers", p["name"] + role, status, detail, required))
    for p in entries:
        if p not in configured:
            out.append(Check("providers", p["name"], SKIP, "not configured (no model or credential)"))
    return out


# -- a running server ----------------------------------------------------------------------------------------


@dataclass
class ServerReport:
    """What a running server said about itself through its HTTP API."""

    checks: list[Check]
    reachable: bool
    storage: Check
    """Its storage, as ``/readyz`` reports it (the node started and its store answers)."""


def _json_body(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None


def _error_message(resp: httpx.Response) -> str:
    body = _json_body(resp)
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return f"{err.get('code', resp.status_code)}: {err.get('message', '')}"
    return f"HTTP {resp.status_code}"


async def check_server(url: str, token: str | None, timeout: float = 5.0) -> ServerReport:
    """A running server, through its API only (nothing on this machine is opened or made): it answers
    ``/healthz``, is ready (``/readyz``: started, its store answers), accepts the credential
    (``/api/v1/whoami``), and its services are healthy (``health_monitor.get_health``, when it runs one)."""
    own = "the server keeps its own storage (--data-dir checks a data dir here)"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    checks: list[Check] = []
    storage = Check("storage", "server store", SKIP, f"not checked; {own}")
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout) as client:
            try:
                health = await client.get("/healthz")
            except httpx.HTTPError as e:
                detail = f"{url} does not answer: {e or type(e).__name__}"
                unreachable = Check("server", "health", FAIL, detail, True)
                storage = Check("storage", "server store", SKIP, f"not checked: {url} does not answer; {own}")
                return ServerReport([unreachable], False, storage)
            body = _json_body(health)
            if health.status_code != 200 or not isinstance(body, dict) or body.get("status") not in HEALTHY:
                detail = f"{url} answers HTTP {health.status_code} at /healthz: not a MiniHermes server"
                storage = Check("storage", "server store", SKIP, f"not checked: {detail}")
                return ServerReport([Check("server", "health", FAIL, detail, True)], False, storage)
            if body.get("status") == "degraded":
                reason = body.get("reason") or "store degraded"
                checks.append(Check("server", "health", FAIL, f"{url} answers, degraded: {reason}", True))
                storage = Check("storage", "server store", FAIL, f"{reason} (GET /healthz); {own}", True)
            else:
                checks.append(Check("server", "health", OK, f"{url} answers", True))
            ready = await client.get("/readyz")
            said = _json_body(ready)
            reason = str(said.get("reason") or "") if isinstance(said, dict) else ""
            if ready.status_code == 200:
                checks.append(Check("server", "ready", OK, "started", True))
                if storage.status != FAIL:
                    storage = Check("storage", "server store", OK, f"answers (GET /readyz); {own}", True)
            else:
                checks.append(Check("server", "ready", FAIL, reason or f"HTTP {ready.status_code}", True))
                status = FAIL if reason == "store unreachable" else SKIP
                storage = Check(
                    "storage", "server store", status, f"{reason or 'not ready'} (GET /readyz)", True
                )
            checks.append(await _whoami(client))
            checks.append(await _services(client))
    except httpx.InvalidURL as e:
        bad = Check("server", "health", FAIL, f"{url} is not a server address: {e}", True)
        return ServerReport([bad], False, storage)
    except httpx.HTTPError as e:  # it went away between two requests
        checks.append(Check("server", "api", FAIL, f"{url} stopped answering ({type(e).__name__})", True))
        return ServerReport(checks, False, storage)
    return ServerReport(checks, True, storage)


async def _whoami(client: httpx.AsyncClient) -> Check:
    resp = await client.get("/api/v1/whoami")
    if resp.status_code != 200:
        hint = " (--token-env names the variable with a JWT or API key)" if resp.status_code == 401 else ""
        return Check("server", "credential", FAIL, f"refused: {_error_message(resp)}{hint}", True)
    me = _json_body(resp)
    me = me if isinstance(me, dict) else {}
    who = (
        f"{me.get('principal')} in tenant {me.get('tenant')}, roles {','.join(me.get('roles') or []) or '-'}"
    )
    if not me.get("authenticated"):
        who += " (no auth: every caller is the owner)"
    return Check("server", "credential", OK, who, True)


async def _services(client: httpx.AsyncClient) -> Check:
    resp = await client.post("/api/v1/actors/health_monitor/get_health", json={})
    if resp.status_code != 200:
        return Check("server", "services", SKIP, f"health_monitor: {_error_message(resp)}")
    report = _json_body(resp)
    report = report if isinstance(report, dict) else {}
    degraded = report.get("degraded") or []
    if not degraded:
        return Check("server", "services", OK, f"{report.get('healthy', 0)} healthy")
    groups = report.get("group_health") or {}
    names = ", ".join(f"{n} ({(groups.get(n) or {}).get('reason') or 'degraded'})" for n in degraded)
    return Check("server", "services", WARN, f"degraded: {names}")


# -- all ------------------------------------------------------------------------------------------------------


async def run_checks(
    *,
    data_dir: Path | None,
    host: str,
    port: int,
    url: str | None,
    token: str | None,
    probe_timeout: float,
    config: AppConfig | None = None,
    full: bool = False,
) -> list[Check]:
    """Every check. ``data_dir`` None: not named (``./data``, or the config's); ``config``: the node's.

    ``url``: a running server, checked through its API (health, readiness and storage, the credential,
    services, providers); this machine's data dir, sandbox and port are left alone unless a data dir or
    config is named. Without ``url``, a MiniHermes server found on ``host:port`` is checked the same way,
    and when no data dir or config is named its storage is the one reported (``./data`` is not made)."""
    named = data_dir is not None or config is not None
    checks: list[Check] = []
    port_check: Check | None = None
    if url:
        source: str | None = url.rstrip("/")
    else:
        port_check, ours = await check_port(host, port)
        source = f"http://{_hostport(host, port)}" if ours else None
    server = await check_server(source, token) if source is not None else None
    if server is not None:
        checks += server.checks
    if named or server is None:
        checks += await check_storage(data_dir or DEFAULT_DATA, config, full=full)
    else:
        checks.append(server.storage)
    if url:
        checks.append(
            Check("sandbox", "isolation", SKIP, "on the server's machine: run minihermes doctor there")
        )
    else:
        checks += await asyncio.to_thread(check_sandbox)
    if port_check is not None:
        checks.append(port_check)
    if server is not None and not server.reachable:
        checks.append(Check("providers", "gateway", SKIP, f"not checked: {source} does not answer"))
        return checks
    data_dir = data_dir or (config.data_dir if config is not None else DEFAULT_DATA)
    # A server already running on this data dir owns it: ask it rather than starting a second node there.
    storage_ok = all(c.status != FAIL for c in checks if c.group == "storage")
    if source is None and not storage_ok:
        checks.append(Check("providers", "gateway", SKIP, "storage failed: cannot read the configuration"))
        return checks
    try:
        listing = await providers_from(source, data_dir, token)
    except Exception as e:  # a config that cannot be read is a finding, not a crash of the doctor
        msg = getattr(e, "message", None) or str(e)
        checks.append(
            Check("providers", "gateway", FAIL, f"cannot list providers ({source or data_dir}): {msg}", True)
        )
        return checks
    checks += await check_providers(listing, probe_timeout)
    offer = local_offer(listing.get("local"), _where(source, data_dir if named else None))
    if offer is not None:
        checks.append(offer)
    return checks


def _where(source: str | None, data_dir: Path | None) -> list[str]:
    """The options a command needs to reach the node doctor checked (and the credential it used)."""
    from ._connection import connection

    where = ["--url", source] if source else ["--data-dir", str(data_dir)] if data_dir else []
    token_env = connection().token_env
    return [*where, "--token-env", token_env] if token_env and source else where


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.required and c.status == FAIL for c in checks) else 0


def as_dicts(checks: list[Check]) -> list[dict[str, Any]]:
    return [asdict(c) for c in checks]


def show(console: Any, checks: list[Check]) -> None:
    """The checks as a table, then each check's command as it is (not wrapped: it is copied from here)."""
    console.print(render(checks))
    for c in checks:
        if c.command:
            console.print(f"To act on {c.group} / {c.name}, run:", highlight=False)
            console.print(c.command, soft_wrap=True, markup=False, highlight=False)


def render(checks: list[Check]) -> Any:
    from rich.table import Table

    colour = {OK: "green", WARN: "yellow", FAIL: "red", SKIP: "dim"}
    t = Table(title="minihermes doctor")
    for col in ("check", "", "status", "detail"):
        t.add_column(col, overflow="fold")
    for c in checks:
        t.add_row(
            c.group,
            c.name,
            f"[{colour[c.status]}]{c.status}[/]" + (" *" if c.required and c.status == FAIL else ""),
            c.detail,
        )
    return t


def env_token(name: str | None) -> str | None:
    return os.environ.get(name) if name else None
