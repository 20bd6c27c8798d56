"""The ``minihermes`` command line."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from minihermes.runtime import (
    AppConfig,
    ConfigError,
    DataDirBusy,
    Node,
    RedactSecrets,
    build_node,
    loop_name,
    tune_gc,
)
from minihermes.runtime import run_loop as run_main

from ._connection import NO_JSON, ConnectedTyper, connected, connection

app = typer.Typer(help="MiniHermes: a runtime for self-improving AI agents.", no_args_is_help=True)
keys_app = ConnectedTyper(
    help="API keys for the HTTP API (stored hashed in the data dir).",
    no_args_is_help=True,
    options=("data_dir",),
)
app.add_typer(keys_app, name="keys")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"minihermes {version('minihermes')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("minihermes (not installed: no package metadata)")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """MiniHermes: a runtime for self-improving AI agents."""


def _setup_logging(level: str, secrets: list[str]) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)-7s %(name)s: %(message)s", stream=sys.stderr
    )
    redactor = RedactSecrets(secrets)
    for handler in logging.getLogger().handlers:
        handler.addFilter(redactor)


def _load_config(app_name: str, config: Path | None, data_dir: Path | None) -> AppConfig:
    if config is not None:
        import minihermes.app  # noqa: F401  (registers the agent's roles for custom configs)

        cfg = AppConfig.load(config)
    elif app_name == "demo":
        from minihermes.apps.demo import DEMO_CONFIG

        cfg = AppConfig.from_toml(DEMO_CONFIG, "<demo>")
    elif app_name == "agent":
        from minihermes.app import default_config

        cfg = default_config()
    else:
        raise ConfigError("--app", f"unknown app {app_name!r} (known: agent, demo)")
    if data_dir is not None:
        cfg.model.node.data_dir = str(data_dir)
    return cfg


def _build(cfg: AppConfig) -> Node:
    if any(spec.name == "agent" for spec in cfg.tree.walk()):
        from minihermes.app import build_agent_node

        return build_agent_node(cfg)
    return build_node(cfg)


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind the HTTP API (non-loopback needs auth).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port (0: none, run the node only).")] = 8091,
    data_dir: Annotated[Path | None, typer.Option(help="Where the node keeps its data.")] = None,
    app_name: Annotated[str, typer.Option("--app", help="Built-in app: agent (default) or demo.")] = "agent",
    config: Annotated[Path | None, typer.Option(help="App config (TOML) instead of a built-in app.")] = None,
    jwt_secret_env: Annotated[
        str | None, typer.Option(help="Environment variable with an HS256 secret: require JWTs.")
    ] = None,
    api_keys: Annotated[
        bool, typer.Option(help="Accept API keys made with 'minihermes keys create'.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error")] = "info",
) -> None:
    """Start a node (the whole supervision tree on the embedded SQLite store) and its HTTP API."""
    try:
        cfg = _load_config(app_name, config, data_dir)
        auth = _auth(jwt_secret_env, api_keys)
        if port:
            from minihermes.api import InsecureBindError, check_bind

            try:
                check_bind(host, auth)
            except InsecureBindError as e:
                raise ConfigError("--host", str(e)) from None
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    secrets = [link.secret for link in cfg.links.values() if link.secret]
    if jwt_secret_env and os.environ.get(jwt_secret_env):
        secrets.append(os.environ[jwt_secret_env])
    _setup_logging(log_level, secrets)
    if auth is None and config is None and app_name == "agent":
        from minihermes.app import single_owner

        single_owner(cfg)  # loopback without auth: every request is the local owner
    try:
        run_main(_serve(cfg, host, port, auth))
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except DataDirBusy as e:
        typer.echo(
            f"error: {e}: stop it first, or give this node another --data-dir (`minihermes chat` and the other "
            f"commands with --data-dir {e.data_dir} talk to the running node)",
            err=True,
        )
        raise typer.Exit(1) from None
    except CannotListen as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


def _auth(jwt_secret_env: str | None, api_keys: bool) -> Any:
    if not jwt_secret_env and not api_keys:
        return None
    from minihermes.api import AuthConfig

    secret = None
    if jwt_secret_env:
        secret = os.environ.get(jwt_secret_env)
        if not secret:
            raise ConfigError("--jwt-secret-env", f"environment variable {jwt_secret_env} is not set")
    return AuthConfig(jwt_secret=secret, api_keys=api_keys)


class CannotListen(Exception):
    """``serve`` cannot bind its HTTP port: the message names the address and what to do."""

    def __init__(self, host: str, port: int, error: OSError) -> None:
        reason = (error.strerror or str(error)).split(" (while attempting")[0]
        super().__init__(
            f"cannot listen on {host}:{port}: {reason}. Another program may hold the port: stop it, or pick "
            f"another with --port (`minihermes doctor --port {port}` says what answers there)"
        )


async def _claim(node: Node, host: str, port: int, auth: Any) -> Any:
    """Take the data dir (``DataDirBusy`` names the node that holds it), then the port (``CannotListen``),
    before the node starts: a refused start changes nothing. Returns the bound socket (None without HTTP);
    the address goes beside the lock (``node.json``) for the CLI to find."""
    lock = node.data_dir_lock
    if lock is not None:
        lock.acquire(node_id=node.node_id, command="minihermes serve", http=bool(port), auth=auth is not None)
    if not port:
        return None
    from minihermes.api import bind_http, local_url

    try:
        sock = bind_http(host, port)
    except OSError as e:
        if lock is not None:
            lock.release()
        raise CannotListen(host, port, e) from None
    if lock is not None:
        lock.update(url=local_url(host, int(sock.getsockname()[1])))
    return sock


async def _serve(cfg: AppConfig, host: str, port: int, auth: Any) -> None:
    log = logging.getLogger("minihermes.serve")
    node = _build(cfg)
    stop = asyncio.Event()
    sock = await _claim(node, host, port, auth)
    try:
        await node.start()
    except BaseException:
        if sock is not None:
            sock.close()
        if node.data_dir_lock is not None:
            node.data_dir_lock.release()
        raise
    node.install_signal_handlers(stop.set)
    log.info("data dir: %s (event loop: %s; gc: %s)", cfg.data_dir.resolve(), loop_name(), tune_gc())
    for spec in cfg.tree.walk():
        kind = "virtual" if spec.virtual else "per-tenant" if spec.per_tenant else "shared"
        log.info("running %-16s %-9s %-10s restart=%s", spec.name, spec.behavior, kind, spec.restart)
    waiters: set[asyncio.Future[Any]] = {
        asyncio.ensure_future(node.failed.wait()),
        asyncio.ensure_future(stop.wait()),
    }
    api: asyncio.Future[Any] | None = None
    if port:
        from minihermes.api import SheddingConfig, serve_http

        http = cfg.model.http
        shedding = SheddingConfig(
            enabled=http.load_shedding,
            max_concurrent=http.max_concurrent_requests,
            max_queue=http.max_queued_requests,
            queue_timeout=http.queue_timeout,
            tenant_max_share=http.tenant_max_share,
        )
        api = asyncio.ensure_future(
            serve_http(
                node,
                host,
                port,
                auth,
                stop=stop,
                on_started=lambda h, p: log.info("HTTP API on http://%s:%d (dashboard: /)", h, p),
                log_level="warning",
                shedding=shedding,
                idempotency_window=http.idempotency_window,
                sock=sock,
                # The requests the node's stop cuts off are answered (503) before uvicorn gives up on them.
                graceful_timeout=HTTP_DRAIN_SECONDS + node.options.shutdown_deadline + HTTP_ANSWER_SECONDS,
            )
        )
        waiters.add(api)
    done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    for w in waiters:
        if w not in done and w is not api:
            w.cancel()
    failed = node.failed.is_set() or _failed(done, log)
    log.info("stopping (%s)", "root supervisor failed" if node.failed.is_set() else "signal")
    await _stop_in_order(node, api)
    if api is not None and api not in done:
        failed = _failed({api}, log) or failed
    if failed:
        raise SystemExit(1)


HTTP_DRAIN_SECONDS = 2.0
"""After the stop signal, how long the HTTP server gets to finish its requests on a running node (streams end
by themselves once it drains) before the node stops under those still waiting on it."""
HTTP_ANSWER_SECONDS = 5.0
"""After the node stopped, how long uvicorn still gives the requests it cut off to send their answers."""


async def _stop_in_order(node: Node, http: asyncio.Future[Any] | None) -> None:
    """Stop the HTTP server, then the node. ``serve_http`` saw ``stop``: it accepts no more connections, its
    streams end, and the requests in flight get ``HTTP_DRAIN_SECONDS`` to finish on a running node. Those still
    waiting then (a turn on a slow model) are cut off by the node's stop, which answers them 503
    ``shutting_down``, and uvicorn sends those answers before this returns (bounded by its graceful timeout):
    a request task left to the event loop's teardown would be cancelled there, a traceback in the log."""
    if http is None or http.done():
        await node.stop()
        return
    await asyncio.wait({http}, timeout=HTTP_DRAIN_SECONDS)
    stopping = asyncio.ensure_future(node.stop())
    await asyncio.wait({http, stopping}, return_when=asyncio.ALL_COMPLETED)
    await stopping


def _failed(done: set[asyncio.Future[Any]], log: logging.Logger) -> bool:
    """Whether a finished waiter ended with an error (logged)."""
    failed = False
    for w in done:
        if not w.cancelled() and w.exception() is not None:
            log.error("stopping after an error: %s", w.exception())
            failed = True
    return failed


# -- chat -----------------------------------------------------------------------------------------------------


def chat(
    session: Annotated[
        str,
        typer.Option(help="Session id (kept across runs; a user-role caller gets a new one of their own)."),
    ] = "cli",
) -> None:
    """Chat with the agent in the terminal: against an embedded node, or a running server with --url."""
    from .chat import run_chat

    conn = connection()
    raise typer.Exit(
        run_main(run_chat(session=session, url=conn.url, data_dir=conn.data_dir, token=conn.token))
    )


app.command()(connected(chat, NO_JSON))


# -- doctor ---------------------------------------------------------------------------------------------------


def doctor(
    host: Annotated[str, typer.Option(help="Address 'serve' binds.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port 'serve' uses.")] = 8091,
    config: Annotated[
        Path | None, typer.Option(help="The node's app config (TOML): its store backend is checked.")
    ] = None,
    probe_timeout: Annotated[float, typer.Option(help="Seconds to wait for each provider.")] = 3.0,
    full: Annotated[
        bool, typer.Option("--full", help="PRAGMA integrity_check instead of quick_check (slower).")
    ] = False,
) -> None:
    """Check providers, storage, sandbox isolation and the HTTP port, or a running server (--url) through its
    API; exit code 1 when a required check fails."""
    from rich.console import Console

    from . import doctor as dr

    conn = connection()
    logging.disable(logging.WARNING)  # the embedded node's start-up lines are not findings
    try:
        cfg = None if config is None else _load_config("agent", config, conn.data_dir_option)
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    checks = asyncio.run(
        dr.run_checks(
            data_dir=conn.data_dir_option,
            host=host,
            port=port,
            url=conn.url,
            token=conn.token,
            probe_timeout=probe_timeout,
            config=cfg,
            full=full,
        )
    )
    if conn.as_json:
        import json

        typer.echo(json.dumps({"checks": dr.as_dicts(checks), "ok": dr.exit_code(checks) == 0}, indent=2))
    else:
        dr.show(Console(), checks)
    raise typer.Exit(dr.exit_code(checks))


app.command()(connected(doctor))


# -- keys -----------------------------------------------------------------------------------------------------


async def _with_store(fn: Any) -> Any:
    """Run ``fn`` on the data dir's store, holding the data dir's lock meanwhile: a running node is the only
    writer of its store (a second process writing it is SQLite's multi-writer case), so with a node there
    the keys are changed through it, and a node does not start while this runs."""
    from minihermes.runtime import DataDirLock
    from minihermes.runtime.store import open_store

    data_dir = connection().data_dir
    lock = DataDirLock(data_dir)
    try:
        lock.acquire(command="minihermes keys")
    except DataDirBusy as e:
        raise KeysRefused(
            f"{e}: while it runs, API keys are managed through it, by an admin of the tenant (the "
            "dashboard's Providers page, or POST / GET / DELETE /api/v1/api-keys); or stop it and run this again"
        ) from None
    try:
        store = open_store("sqlite", data_dir=str(data_dir))
        await store.open()
        try:
            return await fn(store)
        finally:
            await store.close()
    finally:
        lock.release()


class KeysRefused(Exception):
    """A ``keys`` command on a data dir a node is running on."""


def _keys(fn: Any) -> Any:
    try:
        return asyncio.run(_with_store(fn))
    except KeysRefused as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="Tenant the key acts in.")],
    principal: Annotated[str, typer.Option(help="Who the key acts as.")],
    roles: Annotated[str, typer.Option(help="Comma-separated: admin, user, viewer.")] = "user",
    name: Annotated[str, typer.Option(help="A label.")] = "",
) -> None:
    """Create an API key; the key is printed once and stored only as a hash."""
    from minihermes.api import create_api_key

    role_list = [r.strip() for r in roles.split(",") if r.strip()]
    try:
        new = _keys(
            lambda s: create_api_key(s, tenant=tenant, principal=principal, roles=role_list, name=name)
        )
    except (ValueError, TypeError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(new.key)
    typer.echo(f"key id {new.info.key_id} for {tenant}/{principal} roles={','.join(role_list)}", err=True)


@keys_app.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
) -> None:
    """List keys (ids and who they act as; never the keys)."""
    from minihermes.api import list_api_keys

    for info in _keys(lambda s: list_api_keys(s, tenant=tenant)):
        state = "revoked" if info.revoked_at is not None else "active"
        typer.echo(
            f"{info.key_id}\t{info.tenant}\t{info.principal}\t{','.join(info.roles)}\t{state}\t{info.name}"
        )


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="Key id (or the key).")],
) -> None:
    """Revoke a key: requests with it are refused from now on."""
    from minihermes.api import revoke_api_key

    if not _keys(lambda s: revoke_api_key(s, key_id)):
        typer.echo("error: no active key with that id", err=True)
        raise typer.Exit(1)
    typer.echo("revoked")


def _scripting() -> None:
    from .commands import call, cron_app, kanban_app, memory_app
    from .goals import goals_app
    from .mcp_servers import mcp_app
    from .quarantine import quarantine_app
    from .skills import skills_app
    from .skills_io import skills_export  # noqa: F401  (registers skills import / export)
    from .store_keys import keys_rotate

    keys_app.command("rotate")(keys_rotate)  # the store's encryption key, beside the API keys
    from .tools import tools_app

    app.command("call")(connected(call, NO_JSON))
    app.add_typer(skills_app, name="skills")
    app.add_typer(cron_app, name="cron")
    app.add_typer(kanban_app, name="kanban")
    app.add_typer(memory_app, name="memory")
    app.add_typer(goals_app, name="goals")
    app.add_typer(quarantine_app, name="quarantine")
    app.add_typer(mcp_app, name="mcp")
    app.add_typer(tools_app, name="tools")
    from .audit import audit_app

    app.add_typer(audit_app, name="audit")
    from .usage import usage

    app.command("usage")(connected(usage))
    from .backup import backup, restore

    app.command("backup")(connected(backup, ("data_dir", "as_json")))
    app.command("restore")(connected(restore, ("data_dir", "as_json")))


_scripting()


def main() -> None:
    try:
        app()
    except Exception as e:
        # The commands report these themselves; this is the net for any path that does not: one line, no
        # traceback, for a server that cannot be reached or an op's error. Anything else is a bug: shown whole.
        import httpx

        from ._backend import CommandError, unreachable

        if isinstance(e, httpx.TransportError):
            try:
                where = str(e.request.url.copy_with(path="/", query=None, fragment=None)).rstrip("/")
            except RuntimeError:
                where = "the server"
            e = unreachable(where, e)
        if not isinstance(e, CommandError):
            raise
        typer.echo(f"error {e.code}: {e.message}", err=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
