"""``minihermes backup DEST`` and ``minihermes restore SRC --data-dir NEW``.

SQLite: the backup reads the store through a connection of its own, in one read snapshot, paced (pages per
step, a pause between steps), so a node serving the data dir goes on serving meanwhile, and nothing is
written to its data dir (``runtime.store._backup`` says why the copy is consistent). With no node there, the
data dir's lock is held for the copy. The data
dir's other files (workspaces, ``credential.key``, ``anchor.key``) are copied beside it and every file is
listed with its SHA-256 in ``manifest.json``. ``--keep N`` removes the oldest backups beside DEST beyond N
(those named with DEST's prefix up to its first digit: ``/backups/mh-2026-05-01`` keeps ``/backups/mh-*``).

PostgreSQL (``--config`` with ``backend = "postgres"``): ``pg_dump --format=custom`` of the store's schema
into ``postgres.dump`` beside the data dir's files; ``restore`` runs ``pg_restore`` into the configured
database, whose schema must not exist yet.

Restore checks every checksum first and refuses a target that exists and is not empty, or a backup that
differs from its manifest; ``minihermes serve --data-dir NEW`` then starts from it.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Any

import typer

from minihermes.runtime import AppConfig, ConfigError, DataDirBusy, DataDirLock, running_node
from minihermes.runtime.store import (
    BackupError,
    Rate,
    StoreError,
    backup_store,
    finish_backup,
    prune,
    restore_backup,
)

from ._connection import connection

PG_DUMP_FILE = "postgres.dump"


def _config(config: Path | None) -> tuple[AppConfig | None, Path]:
    """The app config (when given) and the data dir: ``--data-dir``, else the config's, else ``./data``."""
    cfg = AppConfig.load(config) if config is not None else None
    data_dir = connection().data_dir_option
    if data_dir is None:
        data_dir = cfg.data_dir if cfg is not None else connection().data_dir
    return cfg, Path(data_dir)


def backup(
    dest: Annotated[Path, typer.Argument(help="A new folder (absent or empty) to write the backup into.")],
    config: Annotated[
        Path | None,
        typer.Option(help="The node's app config (TOML): its store backend, key and data dir."),
    ] = None,
    pages_per_step: Annotated[int, typer.Option(help="Database pages copied per step.")] = 256,
    pause: Annotated[float, typer.Option(help="Seconds between two steps (0: as fast as it goes).")] = 0.01,
    keep: Annotated[
        int | None,
        typer.Option(help="Then keep only the newest N backups named like DEST beside it (oldest removed)."),
    ] = None,
) -> None:
    """Back up a node's data dir (while it serves, too): database, workspaces, keys and a checked manifest."""
    try:
        cfg, data_dir = _config(config)
        rate = Rate(pages=pages_per_step, pause=pause)
        if keep is not None and keep < 1:
            raise ConfigError("--keep", "must be 1 or more")
        if cfg is not None and cfg.model.node.backend == "postgres":
            manifest = _pg_backup(cfg, data_dir, dest)
        else:
            manifest = _sqlite_backup(cfg, data_dir, dest, rate)
        removed = _keep(dest, keep) if keep is not None else []
    except (ConfigError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except (StoreError, OSError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    if connection().as_json:
        typer.echo(json.dumps({**manifest, "removed": [str(p) for p in removed]}, indent=2))
    else:
        size = sum(f["size"] for f in manifest["files"])
        typer.echo(
            f"backed up {data_dir} into {dest}: {len(manifest['files'])} files, {size} bytes, schema "
            f"{manifest['schema_version']}" + (", encrypted" if manifest.get("encrypted") else "")
        )
        for path in removed:
            typer.echo(f"removed the older backup {path}", err=True)
    if manifest.get("quick_check", ["ok"]) != ["ok"]:
        typer.echo(
            f"warning: the copied database fails its check: {'; '.join(manifest['quick_check'])}", err=True
        )
        raise typer.Exit(1)


def _sqlite_backup(cfg: AppConfig | None, data_dir: Path, dest: Path, rate: Rate) -> dict[str, Any]:
    from .doctor import node_store

    store: Any = node_store(cfg, data_dir)
    key = store.resolve_key()
    folder = store.path.parent
    # With no node on the data dir, hold it for the copy: no node starts (and migrates) meanwhile, and the
    # copy's connection may then be a read-write one, whose close removes the -wal/-shm files it made (left
    # behind by a read-only one, owned by whoever ran the backup, they could keep the node from opening).
    lock = DataDirLock(folder) if folder.is_dir() else None
    try:
        if lock is not None:
            lock.acquire(command="minihermes backup")
    except DataDirBusy:
        lock = None  # a node serves it: read beside it, read only
    try:
        return backup_store(
            store.path, dest, key=key, rate=rate, data_dir=folder, reason="manual", read_only=lock is None
        )
    finally:
        if lock is not None:
            lock.release()


def _keep(dest: Path, keep: int) -> list[Path]:
    prefix = re.split(r"\d", dest.name, maxsplit=1)[0]
    if not prefix:
        raise ConfigError("--keep", f"{dest.name!r} has no name before its first digit to group backups by")
    return prune(dest.parent, prefix, keep)


def restore(
    src: Annotated[Path, typer.Argument(help="A backup folder made by `minihermes backup`.")],
    config: Annotated[
        Path | None,
        typer.Option(help="The new node's app config (its key for an encrypted store; its PostgreSQL)."),
    ] = None,
) -> None:
    """Check a backup against its manifest and restore it into a new data dir (--data-dir, absent or empty)."""
    if connection().data_dir_option is None and config is None:
        typer.echo(
            "error: name the new data dir with --data-dir (restore never writes into ./data by default)",
            err=True,
        )
        raise typer.Exit(2)
    try:
        cfg, data_dir = _config(config)
        from .doctor import node_store

        holder = running_node(data_dir) if data_dir.is_dir() else None
        if holder is not None:  # a node's own data dir is not a new one: never copied under it
            typer.echo(
                f"error: {DataDirBusy(data_dir.resolve(), holder)}: restore into a new data dir", err=True
            )
            raise typer.Exit(1)
        if cfg is not None and cfg.model.node.backend == "postgres":
            manifest = _pg_restore(cfg, src, data_dir)
        else:
            store: Any = node_store(cfg, data_dir)
            manifest = restore_backup(
                src, data_dir, key_for=lambda m: store.resolve_key() if m.get("encrypted") else None
            )
    except (ConfigError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except (StoreError, OSError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    if connection().as_json:
        typer.echo(json.dumps({**manifest, "restored_into": str(data_dir)}, indent=2))
    else:
        typer.echo(
            f"restored {src} ({manifest.get('created_at')}, schema {manifest.get('schema_version')}) into "
            f"{data_dir}: start it with `minihermes serve --data-dir {data_dir}`"
        )


# -- PostgreSQL ----------------------------------------------------------------------------------------------


def _pg_tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(re.findall(r"/(\d+)/bin/", p)[0]),
    )
    if not candidates:
        raise BackupError(f"{name} is not installed (the postgresql-client package has it)")
    return candidates[-1]


def _pg_target(cfg: AppConfig) -> tuple[str, dict[str, str], str]:
    """The connection string without its password, the environment that carries it, and the schema."""
    from psycopg import conninfo

    options = dict(cfg.model.node.backend_options)
    dsn = options.get("dsn") or os.environ.get(str(options.get("dsn_env") or "MINIHERMES_PG_DSN"), "")
    if not dsn:
        raise ConfigError("node.backend_options", "no dsn, and its dsn_env (MINIHERMES_PG_DSN) is not set")
    params = conninfo.conninfo_to_dict(str(dsn))
    env = dict(os.environ)
    if params.get("password"):
        env["PGPASSWORD"] = str(params.pop("password"))  # not on the command line, where ps shows it
    return (
        conninfo.make_conninfo(**{k: str(v) for k, v in params.items()}),
        env,
        str(options.get("schema", "minihermes")),
    )


def _pg_backup(cfg: AppConfig, data_dir: Path, dest: Path) -> dict[str, Any]:
    """``pg_dump`` of the store's schema, then the data dir's files, under one manifest."""
    dsn, env, schema = _pg_target(cfg)
    partial = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"backup destination {dest} exists and is not an empty folder: name a new one")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True, mode=0o700)
    try:
        done = subprocess.run(
            [
                _pg_tool("pg_dump"),
                "--format=custom",
                f"--schema={schema}",
                f"--file={partial / PG_DUMP_FILE}",
                dsn,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if done.returncode != 0:
            raise BackupError(
                f"pg_dump failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
            )
        version = _pg_version(dsn, env, schema)
        return finish_backup(
            partial, dest, data_dir, backend="postgres", schema_version=version, extra={"schema": schema}
        )
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _pg_version(dsn: str, env: dict[str, str], schema: str) -> int | None:
    """The schema version the dump holds (read only: opening the store would migrate it)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, password=env.get("PGPASSWORD") or None) as conn:
        query = sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(
            sql.Identifier(schema)
        )
        try:
            row = conn.execute(query).fetchone()
        except psycopg.Error as e:
            raise BackupError(f"schema {schema!r} is not a MiniHermes store: {e}") from None
    return None if row is None else int(row[0])


def _pg_restore(cfg: AppConfig, src: Path, data_dir: Path) -> dict[str, Any]:
    dsn, env, schema = _pg_target(cfg)
    manifest = restore_backup(src, data_dir, key_for=lambda m: None)
    if manifest.get("backend") != "postgres":
        shutil.rmtree(data_dir, ignore_errors=True)
        raise BackupError(f"{src} is a {manifest.get('backend')} backup; this config's store is PostgreSQL")
    dump = data_dir / PG_DUMP_FILE
    done = subprocess.run(
        [_pg_tool("pg_restore"), "--exit-on-error", "--no-owner", f"--dbname={dsn}", str(dump)],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    dump.unlink()
    if done.returncode != 0:
        shutil.rmtree(data_dir, ignore_errors=True)  # made by this restore: nothing half-restored is left
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else str(done.returncode)
        raise BackupError(f"pg_restore into schema {schema} failed (it must not exist yet): {last}")
    return manifest
