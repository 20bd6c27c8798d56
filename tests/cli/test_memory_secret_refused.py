"""A secret typed into ``minihermes memory store`` or the terminal chat's ``/memory store`` is refused in words
(``secret_not_stored``), never stored as a silent ``[REDACTED]`` and never echoed (issue 24, item 7)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from minihermes.cli._backend import Embedded
from minihermes.cli.chat import ChatLoop
from minihermes.cli.main import app

from .conftest import Captured, lines

runner = CliRunner()


def test_memory_store_refuses_a_password_and_stores_nothing(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    refused = runner.invoke(app, ["memory", "store", "wifi", "password: hunter2", *d])
    assert refused.exit_code == 1, refused.output
    assert "secret_not_stored" in refused.stderr and "credential vault" in refused.stderr
    assert "hunter2" not in refused.output and "Traceback" not in refused.output
    listed = runner.invoke(app, ["memory", "list", *d, "--json"])
    assert listed.exit_code == 0 and json.loads(listed.stdout)["memories"] == []


async def test_the_terminal_chat_says_the_password_was_not_stored(embedded: Embedded, captured: Captured):
    loop = ChatLoop(captured.console, embedded, "s1")
    assert await loop.run(lines("/memory store wifi password: hunter2", "/memory", "/quit")) == 0
    out = captured.text
    assert "secret_not_stored" in out and "not stored" in out and "credential vault" in out
    assert "remembered wifi" not in out and "hunter2" not in out and "REDACTED" not in out
    assert "no memories" in out
