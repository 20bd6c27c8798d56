"""Episodes only from turns that did what was asked, and never as search results presented as facts (issue
19, bug 4): a refusal or a search that found nothing leaves no episode (``consistency.fell_short``), a turn
that only looked memories up leaves none either (``memory.LOOKUP_TOOLS``), memory search leaves episodes out
unless asked, and stated facts rank above episodes. Real turns of the offline model on the app tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minihermes.context import recall
from minihermes.context.consistency import ToolOutcome, could_not, fell_short, found_nothing
from minihermes.runtime import Node

from . import scripted_turns as st
from .conftest import ACME_USER

NO_HITS = ToolOutcome("memory_search", {"query": "coffee"}, False, '{"memories": [], "count": 0}')
HIT = ToolOutcome("memory_search", {"query": "colour"}, False, '{"memories": [{"key": "c"}], "count": 1}')
NOT_FOUND = ToolOutcome("memory_recall", {"key": "colour"}, False, '{"key": "colour", "found": false}')
STORED = ToolOutcome("memory_store", {"key": "k", "value": "v"}, False, '{"stored": true}')
COULD_NOT = "the answer says it could not do the request"


@pytest.fixture(autouse=True)
def _reset() -> None:
    st.reset()


# -- the checks on their own ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "I can't do that.",
        "I cannot reach the internet.",
        "I can not help with that",
        "I couldn't open the page.",
        "I could not finish.",
        "I don't have your favourite colour stored yet.",
        "I do not have access to the weather.",
        "I'm unable to check that.",
        "I\u2019m not able to do that.",
        "I was unable to send it.",
        "Sorry, I can't help with that.",
        "I'm sorry, but I cannot do this.",
        "Unfortunately I couldn't find it.",
        "I stored the note. I couldn't send the mail.",  # part of the request not done
        '- "I can\'t answer that here."',
    ],
)
def test_an_answer_saying_it_could_not_falls_short(answer: str) -> None:
    assert could_not(answer) == COULD_NOT
    assert fell_short("ok", answer, [STORED]) == COULD_NOT


@pytest.mark.parametrize(
    "answer",
    [
        "I stored your favourite colour.",
        "The file I can't stand is deleted.",
        "I can help: 2 + 2 = 4.",
        "Icant is a word.",
        "Here is what I found: favourite colour: teal.",
        "You said you can't come; noted.",
    ],
)
def test_an_answer_that_did_the_request_is_a_success(answer: str) -> None:
    assert could_not(answer) == ""
    assert fell_short("ok", answer, [STORED, HIT]) == ""


def test_searches_that_found_nothing_and_say_so_fall_short() -> None:
    why = "the turn found nothing (memory_search returned no results)"
    assert found_nothing("No memories matched 'coffee'.", [NO_HITS]) == why
    assert fell_short("ok", "There were no results for coffee.", [NO_HITS]) == why
    assert "memory_recall returned no results" in fell_short("ok", "Nothing was found.", [NOT_FOUND])
    # One search found something: the turn did find; an answer not saying "nothing" is no miss.
    assert found_nothing("Nothing found for coffee, but colour: teal.", [NO_HITS, HIT]) == ""
    assert found_nothing("Your memory holds no coffee notes yet, ask me to remember one.", [NO_HITS]) == ""
    assert found_nothing("Nothing found.", [STORED]) == ""  # no search in the turn


def test_an_old_episode_of_a_refusal_stays_out_of_the_prompt() -> None:
    """Episodes stored before this check (``Outcome: ok`` over "I couldn't ...") are not recalled."""
    old = {"kind": "episodic", "score": 0.9}
    refused = {
        **old,
        "key": "e1",
        "value": "Task: coffee?\nTools used: none\nOutcome: ok: I couldn't find it.",
    }
    done = {**old, "key": "e2", "value": "Task: store x\nTools used: memory_store\nOutcome: ok: Stored x."}
    fact = {"kind": "semantic", "key": "favourite colour", "value": "teal", "score": 0.1}
    assert [m["key"] for m in recall.for_prompt([refused, done, fact], 5)] == ["favourite colour", "e2"]


def test_a_long_answer_is_read_in_linear_time() -> None:
    assert could_not("." + " " * 200_000 + "x") == ""
    assert could_not("\n" * 200_000 + "I can't") == ""  # past the window


# -- real turns of the offline model -------------------------------------------------------------------


async def _chat(node: Node, message: str, session: str = "s1") -> str:
    reply: dict[str, Any] = await node.ask(
        "agent", "chat", {"message": message, "session_id": session}, ctx=ACME_USER
    )
    assert reply["status"] == "ok"
    return str(reply["response"])


async def _records(node: Node) -> list[dict[str, Any]]:
    await node.ask("turn_log", "count", {}, ctx=ACME_USER)  # every record cast before it is in
    return list(st.RECORDS)


async def _episodes(node: Node) -> list[str]:
    await node.ask("turn_log", "count", {}, ctx=ACME_USER)  # memory got its casts before turn_log's
    got = await node.ask("memory", "list_memories", {"kind": "episodic"}, ctx=ACME_USER)
    return [m["value"] for m in got["memories"]]


async def _search(node: Node, query: str, **args: Any) -> list[dict[str, Any]]:
    got = await node.ask("memory", "search_memories", {"query": query, **args}, ctx=ACME_USER)
    return list(got["memories"])


@pytest.fixture
async def node(tmp_path: Path) -> Any:
    node = await st.app_node(tmp_path / "data")
    try:
        yield node
    finally:
        await node.stop(deadline=5)


async def test_asking_twice_about_something_unknown_finds_nothing_both_times(node: Node) -> None:
    """The first miss leaves no episode, so the second search cannot present it as a find."""
    first = await _chat(node, "what do you know about coffee")
    second = await _chat(node, "what do you know about coffee")
    assert first == second and "couldn't find anything" in first and "coffee" in first
    assert "episode" not in second and "Task:" not in second
    records = await _records(node)
    assert [r["success"] for r in records] == [False, False]
    assert all("found nothing" in r["fell_short"] for r in records)
    assert await _episodes(node) == []


async def test_a_memory_search_answers_with_the_fact_and_leaves_no_episode(node: Node) -> None:
    await _chat(node, "remember my favourite colour is teal")
    stated = await _episodes(node)
    assert len(stated) == 1 and stated[0].startswith("Task: remember my favourite colour is teal")
    for _ in range(2):
        answer = await _chat(node, "search my memory for colour")
        assert "favourite colour: teal" in answer
        assert "episode" not in answer and "Task:" not in answer  # the fact only, no past turn
    assert "teal" in await _chat(node, "what is my favourite colour")
    assert [r["success"] for r in await _records(node)] == [True, True, True, True]
    assert await _episodes(node) == stated  # the lookups echo memories: no episode of them

    # A person's search: the stated fact only; with the episodes asked for, the fact still comes first.
    assert [m["key"] for m in await _search(node, "colour")] == ["favourite colour"]
    both = await _search(node, "colour", include_episodes=True)
    assert [m["kind"] for m in both] == ["semantic", "episodic"]
    assert [m["kind"] for m in await _search(node, "colour", kind="episodic")] == ["episodic"]
    # The agent's recall (``include_episodes`` false) does not return an episode; a person naming its key does.
    key = (await _search(node, "colour", kind="episodic"))[0]["key"]
    hidden = {"key": key, "include_episodes": False}
    assert (await node.ask("memory", "recall_memory", hidden, ctx=ACME_USER))["found"] is False
    assert (await node.ask("memory", "recall_memory", {"key": key}, ctx=ACME_USER))["found"] is True


async def test_a_refusal_is_no_success_and_leaves_no_episode(node: Node) -> None:
    answer = await _chat(node, "what's the weather")
    assert could_not(answer)
    [record] = await _records(node)
    assert (record["success"], record["truthful"], record["fell_short"]) == (False, True, COULD_NOT)
    assert await _episodes(node) == []


async def test_a_fact_outranks_a_closer_episode(node: Node) -> None:
    """An episode whose words match the query better than the fact's still ranks below it."""
    store = {"scope": "global", "private": True}
    await node.ask(
        "memory", "store_memory", {"key": "favourite colour", "value": "teal", **store}, ctx=ACME_USER
    )
    episode = "Task: colour colour colour\nTools used: none\nOutcome: ok: colour"
    await node.ask(
        "memory",
        "store_memory",
        {"key": "episode:x", "value": episode, "kind": "episodic", **store},
        ctx=ACME_USER,
    )
    found = await _search(node, "colour", include_episodes=True)
    assert [m["key"] for m in found] == ["favourite colour", "episode:x"]
    assert found[1]["relevance"] > found[0]["relevance"]  # the episode matches better, yet comes second
