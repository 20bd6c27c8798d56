"""The ``minihermes`` command line."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from minihermes.runtime import AppConfig, ConfigError, RedactSecrets, build_node

app = typer.Typer(help="MiniHermes: a runtime for self-improving AI agents.", no_args_is_help=True)


@app.callback()
def _root() -> None:
    """MiniHermes: a runtime for self-improving AI agents."""


def _setup_logging(level: str, secrets: list[str]) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    redactor = RedactSecrets(secrets)
    for handler in logging.getLogger().handlers:
        handler.addFilter(redactor)


def _load_config(config: Path | None, data_dir: Path | None) -> AppConfig:
    if config is None:
        from minihermes.apps.demo import DEMO_CONFIG

        cfg = AppConfig.from_toml(DEMO_CONFIG, "<demo>")
    else:
        cfg = AppConfig.load(config)
    if data_dir is not None:
        cfg.model.node.data_dir = str(data_dir)
    return cfg


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option(help="App config (TOML). Default: the demo app.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Where the node keeps its data.")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error")] = "info",
) -> None:
    """Start a node: the supervision tree of the app config, on the embedded SQLite store."""
    try:
        cfg = _load_config(config, data_dir)
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    _setup_logging(log_level, [link.secret for link in cfg.links.values() if link.secret])
    asyncio.run(_serve(cfg))


async def _serve(cfg: AppConfig) -> None:
    log = logging.getLogger("minihermes.serve")
    node = build_node(cfg)
    stop = asyncio.Event()
    await node.start()
    node.install_signal_handlers(stop.set)
    log.info("data dir: %s", cfg.data_dir.resolve())
    for spec in cfg.tree.walk():
        kind = "virtual" if spec.virtual else "per-tenant" if spec.per_tenant else "shared"
        log.info("running %-12s %-9s %-10s restart=%s", spec.name, spec.behavior, kind, spec.restart)
    failed = asyncio.ensure_future(node.failed.wait())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({failed, stopping}, return_when=asyncio.FIRST_COMPLETED)
    log.info("stopping (%s)", "root supervisor failed" if node.failed.is_set() else "signal")
    await node.stop()
    if node.failed.is_set():
        raise SystemExit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
