"""A turn's truthfulness (``minihermes.context.consistency``, ``TurnCompleted.truthful/fell_short/success``)
and a user's correction of the previous turn (``corrects_turn``): real turns on the app tree with an LLM the
test scripts exactly, plus the checks on their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from minihermes.context.consistency import ToolOutcome, contradiction, fell_short, is_correction
from minihermes.runtime import Node

from . import scripted_turns as st
from .conftest import ACME_USER

CALC = ToolOutcome("calculator", {"expression": "17*23"}, False, '{"expression": "17*23", "result": 391}')
LISTED = ToolOutcome(
    "list_files",
    {},
    False,
    json.dumps({"notice": "data", "untrusted_content": {"entries": [{"path": "todo.txt"}], "count": 1}}),
)
EMPTY = ToolOutcome("list_files", {}, False, '{"untrusted_content": {"entries": [], "count": 0}}')


@pytest.fixture(autouse=True)
def _reset() -> None:
    st.reset()


# -- the checks on their own ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "calls", "why"),
    [
        ("There are no files in the workspace.", [LISTED], "list_files returned entries"),
        ("I found nothing.", [LISTED], "list_files returned entries"),
        ("17 x 23 = 392.", [CALC], "the calculator gives 391"),
        ("17 \u00d7 23 = 392.", [CALC], "the calculator gives 391"),
        ("The result is 392.", [CALC], "392 as a result"),
        ('Done: {"untrusted_content": {"content": "buy milk"}}', [], "internal wrapper"),
        (f"Here it is: {LISTED.result}", [LISTED], "internal wrapper"),
    ],
)
def test_an_answer_contradicting_its_tool_results_is_caught(
    answer: str, calls: list[ToolOutcome], why: str
) -> None:
    assert why in contradiction(answer, calls)
    assert why in fell_short("ok", answer, calls)


@pytest.mark.parametrize(
    ("answer", "calls"),
    [
        ("The workspace holds todo.txt.", [LISTED]),
        ("There are no files in the workspace.", [EMPTY]),
        ("There are no other files besides todo.txt.", [LISTED]),
        ("17 x 23 = 391.", [CALC]),
        ("17 x 23 = 391, and 391 + 100 = 491, so the total is 491.", [CALC]),
        ("Step 2 - 391 + 100 = 491.", [CALC]),  # a dash before the expression is no minus
        ("1" * 50_000 + " = 2", [CALC]),  # long runs are checked in a bounded window
        ("The result is 391.", [CALC]),
        ("10 / 3 = 3.33", [ToolOutcome("calculator", {}, False, '{"result": 3.3333333333333335}')]),
        ("The answer is 42.", []),  # no calculator in the turn: nothing to hold the number against
        ("You said 400; the result is 391.", [CALC]),
    ],
)
def test_a_true_answer_passes(answer: str, calls: list[ToolOutcome]) -> None:
    assert contradiction(answer, calls, "what is 17*23? is it 400?") == ""


def test_a_failed_call_or_the_step_limit_falls_short_whatever_the_answer() -> None:
    failed = ToolOutcome("read_file", {"path": "x"}, True, '{"error": {"code": "not_found"}}')
    assert fell_short("ok", "All done.", [failed]) == "a tool call failed (read_file)"
    assert fell_short("max_iterations", "All done.", []) == "the turn ended with status max_iterations"
    assert fell_short("ok", "All done.", [CALC]) == ""


@pytest.mark.parametrize(
    "message",
    [
        "no, that's wrong",
        "No. That is not right.",
        "that's not right",
        "That is incorrect",
        "actually it's 408",
        "Actually, the answer is 408",
        "you forgot the butter",
        "Wrong!",
        "nope, you missed one",
        "no you didn't read it back",
    ],
)
def test_a_correction_is_recognised(message: str) -> None:
    assert is_correction(message)


@pytest.mark.parametrize(
    "message",
    [
        "what went wrong with the build?",
        "no thanks",
        "actually, can you also list the files?",
        "is it wrong to ask twice?",
        "calculate 2 + 2",
        "Nothing else, thank you",
    ],
)
def test_an_ordinary_message_is_no_correction(message: str) -> None:
    assert not is_correction(message)


# -- real turns ------------------------------------------------------------------------------------------


async def _chat(node: Node, message: str, session: str = "s1") -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(
        "agent", "chat", {"message": message, "session_id": session}, ctx=ACME_USER
    )
    return reply


async def _records(node: Node) -> list[dict[str, Any]]:
    await node.ask("turn_log", "count", {}, ctx=ACME_USER)  # every record cast before it is in
    return list(st.RECORDS)


async def _episodes(node: Node) -> list[str]:
    got = await node.ask("memory", "list_memories", {"kind": "episodic"}, ctx=ACME_USER)
    return [m["value"] for m in got["memories"]]


BUDGET = "calculate 17 * 23, then add 100 to it, and remember the result as budget"
STEPS = st.calls(
    ("calculator", {"expression": "17 * 23"}),
    ("calculator", {"expression": "391 + 100"}),
    ("memory_store", {"key": "budget", "value": "491"}),
)


async def test_a_contradicting_answer_is_no_success_and_leaves_no_episode(tmp_path: Path) -> None:
    """The scripted model computes right with the calculator, then answers a different number: the record
    says the turn fell short (not truthful, not a success), and memory keeps no episode of it. The same
    turn answered truthfully is a success with its episode."""
    st.script(
        "lie", STEPS, st.answer("17 x 23 = 391, plus 100 gives 500. The result is 500, stored as budget.")
    )
    st.script("true", STEPS, st.answer("17 x 23 = 391 and 391 + 100 = 491; I stored 491 as budget."))
    node = await st.app_node(tmp_path / "data")
    try:
        lie = await _chat(node, BUDGET, "lie")
        assert lie["status"] == "ok" and lie["tool_calls"] == 3
        [record] = await _records(node)
        assert record["turn_id"] == lie["turn_id"] and record["status"] == "ok"
        assert (record["success"], record["truthful"]) == (False, False)
        assert "500" in record["fell_short"] and record["corrects_turn"] == ""
        assert all(not c["is_error"] for c in record["tool_calls"])
        assert await _episodes(node) == []

        true = await _chat(node, BUDGET, "true")
        _, record = await _records(node)
        assert record["turn_id"] == true["turn_id"]
        assert (record["success"], record["truthful"], record["fell_short"]) == (True, True, "")
        [episode] = await _episodes(node)
        assert episode.startswith(f"Task: {BUDGET}") and "491" in episode
    finally:
        await node.stop(deadline=5)


async def test_nothing_found_over_entries_and_a_leaked_wrapper_fall_short(tmp_path: Path) -> None:
    """A search that returned entries answered with "nothing found", and an answer pasting the internal
    ``untrusted_content`` envelope: neither is truthful, neither is remembered."""
    st.script(
        "found",
        st.calls(("memory_store", {"key": "favourite colour", "value": "teal"})),
        st.calls(("memory_search", {"query": "favourite colour"})),
        st.answer("I found nothing about your favourite colour."),
    )
    st.script(
        "wrapped",
        st.calls(("memory_search", {"query": "favourite colour"})),
        st.answer('Here is what I found: {"untrusted_content": {"memories": ["teal"]}}'),
    )
    node = await st.app_node(tmp_path / "data")
    try:
        await _chat(node, "remember my favourite colour is teal, then look it up", "found")
        await _chat(node, "what is my favourite colour?", "wrapped")
        found, wrapped = await _records(node)
        assert not found["success"] and "memory_search returned entries" in found["fell_short"]
        assert not wrapped["success"] and "internal wrapper" in wrapped["fell_short"]
        assert await _episodes(node) == []
    finally:
        await node.stop(deadline=5)


async def test_a_correction_names_the_previous_turn_and_takes_its_episode_back(tmp_path: Path) -> None:
    st.script(
        "s1",
        STEPS,
        st.answer("17 x 23 = 391 and 391 + 100 = 491; I stored 491 as budget."),
        st.answer("Sorry about that."),
        st.answer("Noted."),
    )
    node = await st.app_node(tmp_path / "data")
    try:
        first = await _chat(node, BUDGET)
        [record] = await _records(node)
        assert record["success"] and record["corrects_turn"] == ""
        assert [e.splitlines()[0] for e in await _episodes(node)] == [f"Task: {BUDGET}"]

        second = await _chat(node, "no, that's wrong: I wanted 17 * 24")
        third = await _chat(node, "thanks, that's all")
        _, correction, ordinary = await _records(node)
        assert correction["turn_id"] == second["turn_id"] and correction["corrects_turn"] == first["turn_id"]
        assert ordinary["turn_id"] == third["turn_id"] and ordinary["corrects_turn"] == ""
        # The corrected turn's episode is gone; the later turns keep theirs.
        assert all(not e.startswith(f"Task: {BUDGET}") for e in await _episodes(node))
        assert len(await _episodes(node)) == 2
    finally:
        await node.stop(deadline=5)
