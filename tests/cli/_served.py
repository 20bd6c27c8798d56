"""Running CLI commands as a person types them: embedded on a data dir, or against ``minihermes serve`` (a
child process, JWT auth) with ``--url`` and ``--token-env``."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from click.testing import Result
from typer.testing import CliRunner

from minihermes.cli.main import app

from .._server import serve_process

SECRET = "cli-test-secret-that-is-long-enough-for-hs256"
TENANT = "acme"


def bearer(sub: str, role: str) -> str:
    claims = {"tenant": TENANT, "sub": sub, "roles": [role], "exp": int(time.time()) + 3600}
    return jwt.encode(claims, SECRET, algorithm="HS256")


TOKENS = {
    "CLI_ADMIN": bearer("ada", "admin"),
    "CLI_USER": bearer("uma", "user"),
    "CLI_VIEWER": bearer("vic", "viewer"),
}


@contextlib.contextmanager
def served(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[str]:
    """``minihermes serve`` with JWT auth on a free loopback port; yields its URL."""
    data = tmp_path_factory.mktemp(name) / "data"
    with serve_process(data, ["--jwt-secret-env", "CLI_TEST_JWT"], env={"CLI_TEST_JWT": SECRET}) as url:
        yield url


def as_(url: str, who: str = "CLI_ADMIN") -> list[str]:
    """The connection options for ``url`` as one of ``TOKENS``."""
    return ["--url", url, "--token-env", who]


def cli(*args: str) -> Result:
    """``minihermes ARGS`` in this process, with ``TOKENS`` in its environment."""
    result = CliRunner().invoke(app, list(args), env=TOKENS)
    assert "Traceback" not in result.output, result.output
    return result


def ok_json(*args: str) -> Any:
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def squash(text: str) -> str:
    """Text without its whitespace: what survives wrapping to any terminal width."""
    return re.sub(r"\s+", "", text)
