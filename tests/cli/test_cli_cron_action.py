"""Issue 24 in the scripting commands: ``cron create --action notify`` makes a reminder and ``cron list``
shows each job's action (a reminder's run reaching the inbox: tests/work/test_notifications.py, and the chat
showing it: tests/cli/test_chat_notifications.py); ``memory store --ttl`` sets a
fact's expiry (-1: never)."""

from __future__ import annotations

import json
import time
from typing import Any

from typer.testing import CliRunner

from minihermes.cli.main import app

runner = CliRunner()


def _json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cron_create_makes_a_reminder_with_action_notify(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    made = _json("cron", "create", "plants", "--schedule", "0 9 * * 1", "--prompt", "Water the plants",
                 "--action", "notify", *d)  # fmt: skip
    assert made["action"] == "notify"
    ran = _json("cron", "create", "digest", "--schedule", "every 1d", "--prompt", "Summarize my tasks", *d)
    assert ran["action"] == "run"  # the default
    jobs = {j["job_id"]: j for j in _json("cron", "list", *d)["jobs"]}
    assert (jobs["plants"]["action"], jobs["digest"]["action"]) == ("notify", "run")
    table = runner.invoke(app, ["cron", "list", *d])
    assert table.exit_code == 0 and "action" in table.stdout and "notify" in table.stdout
    got = _json("cron", "show", "plants", *d)["job"]
    assert (got["action"], got["prompt"]) == ("notify", "Water the plants")

    bad = runner.invoke(app, ["cron", "create", "x", "--schedule", "every 1d", "--prompt", "p",
                              "--action", "shout", *d])  # fmt: skip
    assert bad.exit_code == 2 and "shout" in bad.output


def test_memory_store_takes_a_ttl(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    before = time.time()
    _json("memory", "store", "parking", "level 3", "--ttl", "3600", *d)
    _json("memory", "store", "colour", "teal", "--ttl", "-1", *d)
    _json("memory", "store", "city", "Lyon", *d)
    listed = {m["key"]: m for m in _json("memory", "list", *d)["memories"]}
    assert before + 3600 <= listed["parking"]["expires_at"] <= time.time() + 3600
    assert listed["colour"]["expires_at"] is None and listed["city"]["expires_at"] is None
    bad = runner.invoke(app, ["memory", "store", "k", "v", "--ttl", "-5", *d])
    assert bad.exit_code == 1 and "ttl_seconds" in bad.stderr
