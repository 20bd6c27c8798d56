"""``minihermes goals``: set, list, show, complete, clear, embedded and against a served node (issue 19)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ._served import as_, cli, ok_json, served, squash

LONG = "Plan the trip to Porto: " + " ".join(f"stop{i}" for i in range(40))


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory, "goals") as u:
        yield u


def _lifecycle(where: list[str]) -> None:
    made = ok_json("goals", "set", LONG, "--session", "trip", "--max-turns", "5", *where)
    goal_id = made["goal_id"]
    assert made["goal"]["text"] == LONG and made["goal"]["max_turns"] == 5

    listed = ok_json("goals", "list", *where)
    assert [(g["goal_id"], g["session_id"], g["status"]) for g in listed["goals"]] == [
        (goal_id, "trip", "active")
    ]
    table = cli("goals", "list", *where)
    assert table.exit_code == 0 and goal_id in table.stdout

    shown = cli("goals", "show", goal_id, *where)
    assert shown.exit_code == 0 and squash(LONG) in squash(shown.stdout)  # the whole text, wrapped

    done = ok_json("goals", "complete", goal_id, "--reason", "booked", *where)
    assert done["goal"]["status"] == "completed" and done["goal"]["reason"] == "booked"
    assert ok_json("goals", "list", *where)["goals"] == []
    completed = ok_json("goals", "list", "--status", "completed", *where)["goals"]
    assert [g["goal_id"] for g in completed] == [goal_id]

    again = cli("goals", "complete", goal_id, *where)
    assert again.exit_code == 1 and "conflict" in again.stderr

    assert ok_json("goals", "clear", goal_id, *where)["cleared"] == 1
    assert ok_json("goals", "list", "--status", "all", *where)["goals"] == []
    gone = cli("goals", "clear", goal_id, *where)
    assert gone.exit_code == 1 and "not_found" in gone.stderr and len(gone.stderr.strip().splitlines()) == 1


def test_goals_on_the_local_data_dir(tmp_path):
    _lifecycle(["--data-dir", str(tmp_path / "data")])


def test_goals_default_to_the_chat_session_and_bad_input_is_a_usage_error(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    made = ok_json("goals", "set", "Learn the tides", *d)
    assert made["goal"]["session_id"] == "cli"  # the session `minihermes chat` uses by default
    assert [g["text"] for g in ok_json("goals", "list", "--session", "cli", *d)["goals"]] == [
        "Learn the tides"
    ]
    assert ok_json("goals", "list", "--session", "other", *d)["goals"] == []
    assert cli("goals", "list", "--status", "someday", *d).exit_code == 2
    empty = cli("goals", "set", "   ", *d)
    assert empty.exit_code == 1 and "invalid_argument" in empty.stderr


@pytest.mark.slow
def test_goals_against_a_served_node(url):
    _lifecycle(as_(url))
    # A user sets goals in sessions of theirs and sees their own; a viewer may look but not set.
    made = cli("call", "session_manager", "create_session", '{"channel": "cli"}', *as_(url, "CLI_USER"))
    sid = json.loads(made.stdout)["session_id"]
    others = cli("goals", "set", "Read a book", "--session", "not-mine", *as_(url, "CLI_USER"))
    assert others.exit_code == 1 and "not_found" in others.stderr
    mine = ok_json("goals", "set", "Read a book", "--session", sid, *as_(url, "CLI_USER"))
    assert mine["goal"]["owner"] == "uma"
    assert [g["text"] for g in ok_json("goals", "list", *as_(url, "CLI_USER"))["goals"]] == ["Read a book"]
    refused = cli("goals", "set", "Nope", *as_(url, "CLI_VIEWER"))
    assert refused.exit_code == 1 and "permission_denied" in refused.stderr
    assert ok_json("goals", "list", *as_(url, "CLI_VIEWER"))["count"] >= 0
