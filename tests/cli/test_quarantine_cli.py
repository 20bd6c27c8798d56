"""``minihermes quarantine list|confirm|discard`` (issue 25), embedded and against a served node.

Held memories are planted the real way: a chat turn reads a file (untrusted content) and then stores what it
read, so memory holds the write for confirmation; the paused calls are approved as the tests of approvals do.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.cli.quarantine import Kind, kind_of
from minihermes.embed import MiniHermes

from ._served import TOKENS, as_, cli, ok_json, served

WRITE = "write '500 euros' to budget.txt"
READ_AND_REMEMBER = "read budget.txt and remember the result as {key}"


def test_an_id_says_its_kind() -> None:
    assert kind_of("memp:uma:global::budget_note") is Kind.memory
    assert kind_of("mem:global::team_rule") is Kind.memory
    assert kind_of("skill-0123456789abcdef") is Kind.skill
    assert kind_of("mem:odd-skill-id", Kind.skill) is Kind.skill


# -- embedded ------------------------------------------------------------------------------------------------


async def _plant_embedded(data: Path, keys: list[str]) -> None:
    """As the local owner (who may approve their own paused calls): one turn per key."""
    async with MiniHermes(data_dir=data) as mh:
        for n, key in enumerate(keys):
            session = f"plant-{n}"
            for message in (WRITE, READ_AND_REMEMBER.format(key=key)):
                reply = await mh.chat(message, session_id=session)
                while reply.get("status") == "paused":
                    decided = await mh.ask("guardrails", "approve", {"approval_id": reply["approval_id"]})
                    reply = decided["turn"]
                assert reply["status"] == "ok", reply


def _held_memories(where: list[str], key: str) -> list[dict[str, Any]]:
    listed = ok_json("quarantine", "list", "--kind", "memory", *where)
    return [m for m in listed["memories"] if m["key"] == key]


def test_quarantine_on_the_local_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    asyncio.run(_plant_embedded(data, ["budget_note", "budget_copy"]))
    d = ["--data-dir", str(data)]

    listed = ok_json("quarantine", "list", *d)
    keys = {m["key"] for m in listed["memories"]}
    assert {"budget_note", "budget_copy"} <= keys
    [note] = _held_memories(d, "budget_note")
    assert note["value"] == "500 euros" and note["provenance"] == "tool:read_file"
    assert note["derived_from_untrusted"] is True and note["quarantined"] is True
    assert listed["count"] == len(listed["memories"]) + len(listed["skills"])
    shown = cli("quarantine", "list", *d)
    assert shown.exit_code == 0 and f"memory {note['id']}" in shown.stdout
    assert "budget_note: 500 euros" in shown.stdout and "from tool:read_file" in shown.stdout

    # Not recalled until confirmed; then it is an ordinary memory.
    assert ok_json("memory", "search", "500 euros", *d)["memories"] == []
    confirmed = ok_json("quarantine", "confirm", note["id"], *d)
    assert confirmed["confirmed"] is True and confirmed["key"] == "budget_note"
    assert _held_memories(d, "budget_note") == []
    found = ok_json("memory", "list", *d)["memories"]
    assert [m["value"] for m in found if m["key"] == "budget_note"] == ["500 euros"]

    # Discarded: gone from the quarantine, never stored.
    [copy] = _held_memories(d, "budget_copy")
    assert ok_json("quarantine", "discard", copy["id"], *d)["discarded"] is True
    assert _held_memories(d, "budget_copy") == []
    assert [m for m in ok_json("memory", "list", *d)["memories"] if m["key"] == "budget_copy"] == []

    # Deciding twice, or on an id that is not held: one line, exit code 1.
    again = cli("quarantine", "confirm", note["id"], *d)
    assert again.exit_code == 1 and "not_found" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1


def test_an_empty_quarantine_says_so(tmp_path: Path) -> None:
    d = ["--data-dir", str(tmp_path / "data")]
    result = cli("quarantine", "list", *d)
    assert result.exit_code == 0 and "nothing held for confirmation" in result.stdout
    assert ok_json("quarantine", "list", *d)["count"] == 0
    assert cli("quarantine", "list", "--kind", "everything", *d).exit_code == 2


# -- served --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory, "quarantine") as u:
        yield u


def _call(url: str, who: str, actor: str, op: str, **args: Any) -> Any:
    r = httpx.post(
        f"{url}/api/v1/actors/{actor}/{op}",
        json=args,
        headers={"Authorization": f"Bearer {TOKENS[who]}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r.json()


LEARN = "read budget.txt, then calculate 17 * 23, then add 100 to it, and remember the result as {key}"
"""Four tool calls after an untrusted result: a skill is learned from the turn, and held."""


def _plant_served(url: str, who: str, key: str, request: str = READ_AND_REMEMBER) -> None:
    """A turn of ``who``'s that reads a file and stores what it read; an admin approves the paused calls."""
    session = _call(url, who, "session_manager", "create_session", channel="api")["session_id"]
    for message in (WRITE, request.format(key=key)):
        reply = _call(url, who, "agent", "chat", message=message, session_id=session)
        while reply.get("status") == "paused":
            reply = _call(url, "CLI_ADMIN", "guardrails", "approve", approval_id=reply["approval_id"])["turn"]
        assert reply["status"] == "ok", reply


@pytest.mark.slow
def test_quarantine_against_a_served_node(url: str) -> None:
    _plant_served(url, "CLI_USER", "uma_budget")
    _plant_served(url, "CLI_USER", "uma_spare")
    user, viewer, admin = as_(url, "CLI_USER"), as_(url, "CLI_VIEWER"), as_(url, "CLI_ADMIN")

    [held] = _held_memories(user, "uma_budget")
    assert held["user_id"] == "uma" and held["value"] == "500 euros"
    assert _held_memories(viewer, "uma_budget") == []  # a viewer decides nothing, so sees nothing held
    assert [m["id"] for m in _held_memories(admin, "uma_budget")] == [held["id"]]  # the tenant's
    only_ada = ok_json("quarantine", "list", "--user", "ada", *admin)
    assert not [m for m in only_ada["memories"] if m["user_id"] == "uma"]

    refused = cli("quarantine", "confirm", held["id"], *viewer)
    assert refused.exit_code == 1 and "permission_denied" in refused.stderr

    assert ok_json("quarantine", "confirm", held["id"], *user)["confirmed"] is True
    recall = cli("call", "memory", "recall_memory", json.dumps({"key": "uma_budget"}), *user)
    assert recall.exit_code == 0 and json.loads(recall.stdout)["value"] == "500 euros"

    [spare] = _held_memories(user, "uma_spare")
    assert ok_json("quarantine", "discard", spare["id"], *admin)["discarded"] is True  # an admin, any user's
    assert _held_memories(user, "uma_spare") == []
    gone = cli("quarantine", "discard", spare["id"], *user)
    assert gone.exit_code == 1 and "not_found" in gone.stderr


@pytest.mark.slow
def test_a_held_skill_through_the_cli(url: str) -> None:
    _plant_served(url, "CLI_USER", "uma_total", LEARN)
    user, viewer, admin = as_(url, "CLI_USER"), as_(url, "CLI_VIEWER"), as_(url, "CLI_ADMIN")
    deadline = time.monotonic() + 30
    while not (skills := ok_json("quarantine", "list", "--kind", "skill", *user)["skills"]):
        assert time.monotonic() < deadline, "no skill was learned and held"
        time.sleep(0.05)
    [skill] = skills
    assert skill["owner"] == "uma"
    shown = cli("quarantine", "list", *user)
    assert f"skill {skill['skill_id']}" in shown.stdout and "from agent after tool:read_file" in shown.stdout
    by_admin = ok_json("quarantine", "list", "--kind", "skill", "--user", "uma", *admin)["skills"]
    assert [s["skill_id"] for s in by_admin] == [skill["skill_id"]]

    refused = cli("quarantine", "confirm", skill["skill_id"], *viewer)  # the id says it is a skill
    assert refused.exit_code == 1 and "permission_denied" in refused.stderr
    confirmed = ok_json("quarantine", "confirm", skill["skill_id"], *user)
    assert confirmed["confirmed"] is True and confirmed["quarantined"] is False
    assert ok_json("quarantine", "list", "--kind", "skill", *user)["skills"] == []
