"""``minihermes keys rotate``: re-encrypt the data dir's SQLite store with a new key.

With a node serving the data dir, the node does it (it keeps serving, requests wait while the pages are
rewritten); with none, the command does it under the data dir's lock. A plain store is encrypted this way
(node stopped). The new key is read from a file outside the data dir, by the node itself: it never travels.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from minihermes.runtime import AppConfig, ConfigError
from minihermes.runtime.store import StoreError, StoreKeyError, rotate_store_key

from ._connection import connection


def keys_rotate(
    new_key_file: Annotated[
        Path,
        typer.Option(
            "--new-key-file",
            help="File (outside the data dir) with the new key: 64 hex digits, or a passphrase.",
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            help="App config whose node.backend_options name the current key (default: MINIHERMES_DB_KEY)."
        ),
    ] = None,
) -> None:
    """Re-encrypt the SQLite store with a new key (by the node serving it, if one runs); encrypts a plain one."""
    options: dict[str, Any] = {}
    data_dir = connection().data_dir
    try:
        if config is not None:
            cfg = AppConfig.load(config)
            if cfg.model.node.backend != "sqlite":
                raise ConfigError("node.backend", "only the SQLite store is encrypted by MiniHermes")
            options = {
                k: v
                for k, v in cfg.model.node.backend_options.items()
                if k in ("encryption_key_file", "encryption_key_provider", "busy_timeout")
            }
            if connection().data_dir_option is None:
                data_dir = cfg.data_dir
        result = asyncio.run(rotate_store_key(data_dir, new_key_file, **options))
    except (StoreKeyError, ConfigError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except (StoreError, OSError) as e:  # the store refused (another process on it, a failed copy)
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    if not result.get("ok"):
        typer.echo(f"error: {result.get('error')}", err=True)
        raise typer.Exit(1)
    how = {
        "served": "by the node serving it",
        "offline": "no node was running",
        "encrypted": "it was plain until now",
    }[result["mode"]]
    typer.echo(f"re-encrypted {data_dir} with the key from {result['key_source']} ({how})")
    typer.echo(
        "configure that key for the next start (MINIHERMES_DB_KEY, or encryption_key_file): the old one no "
        "longer opens the store",
        err=True,
    )
