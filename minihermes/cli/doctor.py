"""``minihermes doctor``: is this machine ready to run MiniHermes, and is the configured setup healthy?

Checks, each ``ok``, ``warn``, ``fail`` or ``skip``; the exit code is 1 when a *required* one fails:

- storage (required): the data dir exists or can be made and is writable; SQLite is recent enough, has FTS5
  and runs in WAL mode there; the database's schema version is one this version can open;
- sandbox: the isolation level of the terminal tool's sandbox (namespaces, seccomp, landlock, or rlimits
  only); ``minimal`` is a warning, not a failure (tools still run, less isolated);
- port: the HTTP port is free, or a MiniHermes server answers on it (in use by anything else fails);
- providers: the LLM gateway's configured providers (from the running server on that port or ``--url``, or
  else the data dir): the simulated one is always fine; a real one is probed with a short timeout (any HTTP
  answer means reachable; no credential is sent). The active provider is required, the others warn.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
MIN_SQLITE = (3, 35, 0)
_PROBE_PATHS = {"openai": "/models", "anthropic": "/v1/models", "ollama": "/api/tags"}


@dataclass
class Check:
    group: str
    name: str
    status: str
    detail: str
    required: bool = False


# -- storage --------------------------------------------------------------------------------------------------


def check_storage(data_dir: Path) -> list[Check]:
    from minihermes.runtime.store._sqlite_schema import DB_FILENAME, LATEST_VERSION

    out: list[Check] = []
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".doctor-", delete=True) as f:
            f.write(b"x")
            f.flush()
        out.append(Check("storage", "data dir", OK, f"{data_dir.resolve()} is writable", True))
    except OSError as e:
        out.append(Check("storage", "data dir", FAIL, f"{data_dir}: {e.strerror or e}", True))
        return out
    version = sqlite3.sqlite_version_info
    out.append(
        Check(
            "storage",
            "sqlite",
            OK if version >= MIN_SQLITE else FAIL,
            f"SQLite {sqlite3.sqlite_version} (needs {'.'.join(map(str, MIN_SQLITE))} or later)",
            True,
        )
    )
    scratch = data_dir / ".doctor.db"
    try:
        conn = sqlite3.connect(scratch)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            out.append(Check("storage", "WAL", OK if mode == "wal" else FAIL, f"journal_mode={mode}", True))
            try:
                conn.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
                conn.execute("INSERT INTO t VALUES ('doctor check')")
                hits = conn.execute("SELECT count(*) FROM t WHERE t MATCH 'doctor'").fetchone()[0]
                out.append(
                    Check("storage", "FTS5", OK if hits == 1 else FAIL, "full-text search works", True)
                )
            except sqlite3.OperationalError as e:
                out.append(Check("storage", "FTS5", FAIL, f"FTS5 is not available: {e}", True))
        finally:
            conn.close()
    except sqlite3.Error as e:
        out.append(Check("storage", "WAL", FAIL, f"cannot open a database in {data_dir}: {e}", True))
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{scratch}{suffix}").unlink(missing_ok=True)
    db = data_dir / DB_FILENAME
    if not db.exists():
        out.append(
            Check(
                "storage", "schema", OK, f"no database yet (created on first start, version {LATEST_VERSION})"
            )
        )
        return out
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as e:
        out.append(Check("storage", "schema", FAIL, f"{db}: {e}", True))
        return out
    if row is None:
        out.append(Check("storage", "schema", FAIL, f"{db} is not a MiniHermes database", True))
        return out
    have = int(row[0])
    if have > LATEST_VERSION:
        status, detail = (
            FAIL,
            f"schema version {have} is newer than this MiniHermes ({LATEST_VERSION}): upgrade",
        )
    elif have < LATEST_VERSION:
        status, detail = OK, f"schema version {have}; migrated to {LATEST_VERSION} on next start"
    else:
        status, detail = OK, f"schema version {have} (current), journal_mode={mode}"
    out.append(Check("storage", "schema", status, detail, True))
    return out


# -- sandbox --------------------------------------------------------------------------------------------------


def check_sandbox() -> list[Check]:
    from minihermes.tools._sandbox_report import isolation_report
    from minihermes.tools.sandbox import SandboxError

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
        return reply


def _configured(entry: dict[str, Any]) -> bool:
    if entry["kind"] not in _PROBE_PATHS:
        return True
    return bool(entry.get("model")) and bool(
        entry.get("base_url") or entry.get("credential") or entry["kind"] == "ollama"
    )


async def probe_provider(entry: dict[str, Any], timeout: float) -> tuple[str, str]:
    """``(status, detail)`` for one provider: any HTTP answer from its server is reachable."""
    from minihermes.llm import _anthropic, _ollama, _openai

    kind = entry["kind"]
    if kind not in _PROBE_PATHS:
        return OK, f"{kind} (in-process)"
    defaults = {
        "openai": _openai.DEFAULT_BASE_URL,
        "anthropic": _anthropic.DEFAULT_BASE_URL,
        "ollama": _ollama.DEFAULT_BASE_URL,
    }
    base = (entry.get("base_url") or defaults[kind]).rstrip("/")
    target = base + _PROBE_PATHS[kind]
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            resp = await client.get(target)
    except httpx.HTTPError as e:
        return FAIL, f"{base}: unreachable ({type(e).__name__})"
    return OK, f"{base}: answers (HTTP {resp.status_code}), model {entry.get('model') or '?'}"


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


# -- all ------------------------------------------------------------------------------------------------------


async def run_checks(
    *, data_dir: Path, host: str, port: int, url: str | None, token: str | None, probe_timeout: float
) -> list[Check]:
    checks = await asyncio.to_thread(check_storage, data_dir)
    checks += await asyncio.to_thread(check_sandbox)
    port_check, ours = await check_port(host, port)
    checks.append(port_check)
    # A server already running on this data dir owns it: ask it rather than starting a second node there.
    source = url or (f"http://{_hostport(host, port)}" if ours else None)
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
    return checks


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.required and c.status == FAIL for c in checks) else 0


def as_dicts(checks: list[Check]) -> list[dict[str, Any]]:
    return [asdict(c) for c in checks]


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
