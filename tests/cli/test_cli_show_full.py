"""Every ``show`` prints every field whole (issue 19: they were cut to ~80 characters): long text wraps to
the terminal, nested records and lists are shown, console markup in the data is printed as text, and
``--json`` prints the op's reply as it is. Embedded and against a served node."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ._served import as_, cli, ok_json, served, squash

PROMPT = (
    "Summarize yesterday: " + " ".join(f"section{i}" for i in range(40)) + " https://example.org/" + "x" * 120
)
TITLE = "Move the archive to the new bucket, then check every link of the index page still resolves, twice"
BODY = "Steps:\n" + "\n".join(f"{i}. do part {i} of the migration carefully and log it" for i in range(12))
DESCRIPTION = "Add two numbers the user gives, " + " ".join(f"case{i}" for i in range(30))
PROCEDURE = "1. calculator: add {a} and {b} [bold]exactly[/bold]\n2. calculator: " + "check " * 30


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory, "show") as u:
        yield u


def _whole(args: list[str], *texts: str) -> None:
    shown = cli(*args)
    assert shown.exit_code == 0, shown.output
    assert "…" not in shown.stdout
    for text in texts:
        assert squash(text) in squash(shown.stdout), (text, shown.stdout)


def _raw(args: list[str], actor: str, op: str, payload: dict, where: list[str]) -> dict:
    """``show --json`` is exactly the op's reply (as ``minihermes call`` prints it)."""
    shown = ok_json(*args)
    called = cli("call", actor, op, json.dumps(payload), *where)
    assert called.exit_code == 0, called.output
    assert shown == json.loads(called.stdout)
    return shown


def _shows(where: list[str]) -> None:
    ok_json("cron", "create", "daily", "--schedule", "0 9 * * *", "--prompt", PROMPT, *where)
    _whole(["cron", "show", "daily", *where], PROMPT, "0 9 * * *")
    _raw(["cron", "show", "daily", *where], "cron_scheduler", "get_job", {"job_id": "daily"}, where)

    task_id = ok_json("kanban", "create", TITLE, "--body", BODY, *where)["task_id"]
    _whole(["kanban", "show", task_id, *where], TITLE, BODY, "created")  # the card and its events
    shown = _raw(["kanban", "show", task_id, *where], "kanban", "show", {"task_id": task_id}, where)
    assert shown["task"]["body"] == BODY

    made = cli(
        "call",
        "skill_store",
        "propose_skill",
        json.dumps({"name": "add-numbers", "description": DESCRIPTION, "procedure": PROCEDURE}),
        *where,
    )
    skill_id = json.loads(made.stdout)["skill_id"]
    _whole(["skills", "show", skill_id, *where], DESCRIPTION, PROCEDURE, "proposed")  # with its versions
    _raw(["skills", "show", skill_id, *where], "skill_store", "get_skill", {"skill_id": skill_id}, where)

    goal = ok_json("goals", "set", PROMPT, *where)
    _whole(["goals", "show", goal["goal_id"], *where], PROMPT)


def test_shows_on_the_local_data_dir(tmp_path):
    _shows(["--data-dir", str(tmp_path / "data")])


@pytest.mark.slow
def test_shows_against_a_served_node(url):
    _shows(as_(url))
