"""The options that say where a command runs, declared once: ``--url``, ``--data-dir``, ``--token-env``, ``--json``.

Users type them after the command (``minihermes cron list --url http://... --json``), so they are options
of each command, not of a group callback (which would take them before the subcommand). ``connected(fn)``
adds them to a command's signature, after its own parameters, and hands their values to the command's
body as a ``Connection`` (``connection()``) instead of as arguments; a ``ConnectedTyper`` does that for
every command it registers. A command declares only its own arguments.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_DATA = Path("./data")


@dataclass(frozen=True)
class Connection:
    """The values of the shared options for the command being run."""

    url: str | None = None
    """A running server; None: the node serving ``data_dir`` if one runs, else an embedded node on it."""
    data_dir_option: Path | None = None
    """``--data-dir`` as given (None: not given, ``./data``)."""
    token_env: str | None = None
    as_json: bool = False

    @property
    def data_dir(self) -> Path:
        return self.data_dir_option or DEFAULT_DATA

    @property
    def token(self) -> str | None:
        """The credential from the environment variable ``--token-env`` names (never an option's value)."""
        return os.environ.get(self.token_env) if self.token_env else None


_SHARED: dict[str, tuple[Any, Any]] = {  # name: (annotation, default)
    "url": (
        Annotated[
            str | None,
            typer.Option(
                "--url", help="A running server, e.g. http://127.0.0.1:8091 (default: a node on --data-dir)."
            ),
        ],
        None,
    ),
    "data_dir": (
        Annotated[
            Path | None,
            typer.Option(
                "--data-dir",
                help="The node's data dir (default: ./data); a node serving it is used through its HTTP API.",
            ),
        ],
        None,
    ),
    "token_env": (
        Annotated[
            str | None,
            typer.Option(
                "--token-env",
                help="Environment variable with a JWT or API key (with --url, or a served data dir with auth).",
            ),
        ],
        None,
    ),
    "as_json": (Annotated[bool, typer.Option("--json", help="Print the reply as JSON.")], False),
}
ALL = tuple(_SHARED)
"""Every shared option."""
NO_JSON = ("url", "data_dir", "token_env")
"""For commands whose output has one form (``chat``, ``call``)."""

_current: ContextVar[Connection] = ContextVar("minihermes_cli_connection")


def connection() -> Connection:
    """The shared options of the running command (the defaults outside one)."""
    return _current.get(Connection())


def connected(fn: F, options: tuple[str, ...] = ALL) -> Callable[..., Any]:
    """``fn`` with the shared ``options`` added after its own parameters, for typer to register; while ``fn``
    runs, ``connection()`` holds their values."""
    own = inspect.signature(fn, eval_str=True)
    keyword = inspect.Parameter.KEYWORD_ONLY
    extra = [inspect.Parameter(n, keyword, default=_SHARED[n][1], annotation=_SHARED[n][0]) for n in options]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in options}
        token = _current.set(
            Connection(
                given.get("url"), given.get("data_dir"), given.get("token_env"), given.get("as_json", False)
            )
        )
        try:
            return fn(*args, **kwargs)
        finally:
            _current.reset(token)

    command.__signature__ = own.replace(parameters=[*own.parameters.values(), *extra])  # type: ignore[attr-defined]
    return command


class ConnectedTyper(typer.Typer):
    """A typer app whose every command takes the shared ``options`` (``connected``)."""

    def __init__(self, *args: Any, options: tuple[str, ...] = ALL, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.options = options

    def command(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        register = super().command(*args, **kwargs)

        def decorator(fn: F) -> F:
            register(connected(fn, self.options))
            return fn

        return decorator
