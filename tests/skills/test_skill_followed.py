"""A learned skill does not block the next one (issue 24, item 5): a skill counts only turns that followed
it, a turn that did something else is learned as any other, and a request that only shares a word or two
with a skill gets no skill. Real turns on the app tree after one skill learned end to end
(``calculate-store-memory``); the turns' LLM replies are scripted, the extraction and its dry-run replays
use the simulated model (``tests/agent/scripted_turns.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import ActorSpec, ManualClock, Node
from minihermes.skills import SkillIndex
from minihermes.skills._extract import followed
from minihermes.skills._index import IndexDoc, weighted_terms
from tests.agent import scripted_turns as st

from .conftest import ACME, ACME_USER
from .test_learn_only_success import BUDGET, STEPS, TRUE, _chat, _learned, _status

FILES = "save the result to a file called notes.txt, then read it and list the files"
FILE_STEPS = st.calls(
    ("write_file", {"path": "notes.txt", "content": "the result"}),
    ("read_file", {"path": "notes.txt"}),
    ("list_files", {}),
)
FILES_DONE = st.answer("I wrote notes.txt, read it back and listed the files: notes.txt.")
SAME_KIND = "calculate 5 * 6, then add 7 to it, and remember the result as total"
SAME_STEPS = st.calls(
    ("calculator", {"expression": "5 * 6"}),
    ("calculator", {"expression": "30 + 7"}),
    ("memory_store", {"key": "total", "value": "37"}),
)


@pytest.fixture(autouse=True)
def _reset() -> None:
    st.reset()


async def _node(data_dir: Path, **store_args: Any) -> Node:
    """``scripted_turns.app_node`` with skill_store arguments (e.g. matching without a threshold)."""
    config = default_config(data_dir)
    for spec in config.tree.walk():
        if spec.name == "llm_gateway":
            spec.cls, spec.args = st.TurnGateway, {}
        elif spec.name == "skill_store":
            spec.args.update({"semantic": "off", **store_args})
        elif spec.name == "memory":
            spec.args["semantic"] = False
    config.tree.children.append(ActorSpec("turn_log", st.TurnLog, per_tenant=True))
    node = build_agent_node(config, clock=ManualClock())
    await node.start()
    # File writes are reviewed by default; these turns are about skills, not review.
    await node.ask("guardrails", "set_policy", {"tool_name": "write_file", "decision": "allow"}, ctx=ACME)
    return node


async def _learn_calculator(node: Node) -> dict[str, Any]:
    """The first skill, learned from a real turn and evaluated: ``calculate-store-memory``, active."""
    st.script("learn", STEPS, TRUE)
    first = await _chat(node, BUDGET, "learn")
    out = (await _learned(node, first, BUDGET))["result"]
    assert out["created"] and out["skill_status"] == "active", out
    return await _skill(node, out["skill_id"])


async def _skill(node: Node, skill_id: str) -> dict[str, Any]:
    got = await node.ask("skill_store", "get_skill", {"skill_id": skill_id}, ctx=ACME_USER)
    skill: dict[str, Any] = got["skill"]
    return skill


async def _record(node: Node, turn_id: str) -> dict[str, Any]:
    """The turn's ``turn_completed`` record, once every listener has it (the store handled it too)."""
    await node.ask("turn_log", "count", {}, ctx=ACME_USER)
    await node.ask("skill_store", "get_stats", {}, ctx=ACME)
    return next(r for r in st.RECORDS if r["turn_id"] == turn_id)


def _counts(skill: dict[str, Any]) -> tuple[int, int, int, int]:
    return skill["uses"], skill["successes"], skill["failures"], skill.get("ignored", 0)


async def test_an_unrelated_file_request_gets_no_skill_and_yields_its_own_candidate(tmp_path: Path) -> None:
    """The issue's case: after the calculator skill, a file request sharing "the result" with it is not
    matched (its coverage is under ``min_match_coverage``), and its three calls teach a skill of their own."""
    node = await _node(tmp_path / "data")
    try:
        calc = await _learn_calculator(node)
        hits = await node.ask("skill_store", "match_skills", {"query": FILES}, ctx=ACME_USER)
        assert hits["skills"] == []
        st.script("files", FILE_STEPS, FILES_DONE)
        turn = await _chat(node, FILES, "files")
        assert turn["status"] == "ok" and turn["tool_calls"] == 3
        assert (await _record(node, turn["turn_id"]))["skill_ids"] == []
        out = (await _learned(node, turn, FILES))["result"]
        assert out["status"] == "ok" and out["created"], out
        learned = await _skill(node, out["skill_id"])
        assert learned["name"] == "write-read-list-workspace-file"
        assert learned["tools"] == ["write_file", "read_file", "list_files"]
        assert learned["status"] == "candidate"  # file tools act outside the agent: an admin approves
        assert _counts(await _skill(node, calc["skill_id"])) == (0, 0, 0, 0)
    finally:
        await node.stop(deadline=5)


async def test_a_matched_skill_the_turn_did_not_follow_blocks_nothing_and_is_not_charged(
    tmp_path: Path,
) -> None:
    """Without a threshold the file request is given the calculator skill, and the turn does file work
    instead: the skill is ignored, not used; the turn yields its own candidate; a failing turn of that
    kind is no failure of the calculator skill."""
    node = await _node(tmp_path / "data", min_match_coverage=0.0)
    try:
        calc = await _learn_calculator(node)
        st.script("files", FILE_STEPS, FILES_DONE)
        turn = await _chat(node, FILES, "files")
        assert (await _record(node, turn["turn_id"]))["skill_ids"] == [calc["skill_id"]]
        assert _counts(await _skill(node, calc["skill_id"])) == (0, 0, 0, 1)
        out = (await _learned(node, turn, FILES))["result"]
        assert out["status"] == "ok" and out["created"] and out["skill_id"] != calc["skill_id"], out
        assert node.metrics.counter("skill_extractions_skipped_total", reason="skill_used") == 0

        # A turn of that kind that fails (reading a file that is not there): not the calculator's failure.
        missing = "read the result from a file called gone.txt and list the files"
        st.script(
            "fails",
            st.calls(("read_file", {"path": "gone.txt"}), ("list_files", {})),
            st.answer("gone.txt does not exist."),
        )
        failed = await _chat(node, missing, "fails")
        record = await _record(node, failed["turn_id"])
        assert record["skill_ids"] == [calc["skill_id"]] and record["success"] is False
        assert _counts(await _skill(node, calc["skill_id"])) == (0, 0, 0, 2)
    finally:
        await node.stop(deadline=5)


async def test_a_request_of_the_same_kind_follows_the_skill_and_is_not_learned_again(tmp_path: Path) -> None:
    node = await _node(tmp_path / "data")
    try:
        calc = await _learn_calculator(node)
        hits = await node.ask("skill_store", "match_skills", {"query": SAME_KIND}, ctx=ACME_USER)
        [hit] = hits["skills"]
        assert hit["skill_id"] == calc["skill_id"] and hit["coverage"] >= 0.3
        st.script("again", SAME_STEPS, st.answer("5 x 6 = 30 and 30 + 7 = 37; I stored 37 as total."))
        again = await _chat(node, SAME_KIND, "again")
        record = await _record(node, again["turn_id"])
        assert record["skill_ids"] == [calc["skill_id"]] and record["success"] is True
        assert _counts(await _skill(node, calc["skill_id"])) == (1, 1, 0, 0)
        assert node.metrics.counter("skill_extractions_skipped_total", reason="skill_used") == 1
        status = await _status(node, again["turn_id"])
        assert status["status"] == "idle" and status["completed_steps"] == []
    finally:
        await node.stop(deadline=5)


def test_followed_means_the_skills_steps_in_order_and_no_other_tool() -> None:
    steps = ["calculator", "memory_store"]
    assert followed(steps, ["calculator", "calculator", "memory_store"])
    assert followed(steps, ["find_tools", "calculator", "skill_view", "memory_store"])  # look-ups aside
    assert followed(steps, ["calculator", "memory_store", "calculator"])  # a step again, still its tools
    assert not followed(steps, ["calculator"])  # a step missing
    assert not followed(steps, ["memory_store", "calculator"])  # out of order
    assert not followed(steps, ["calculator", "memory_store", "write_file"])  # a tool outside the skill
    assert not followed(steps, ["write_file", "read_file", "list_files"])
    assert not followed(steps, [])
    assert not followed([], ["calculator"])  # no steps: nothing to follow by tools


async def test_an_instructions_only_skill_is_followed_by_reading_it(make_node: Any) -> None:
    """A skill with no tool steps (imported prose) counts a turn that read it with ``skill_view``."""
    from .conftest import skills_tree

    node = await make_node(skills_tree())
    doc = "---\nname: tone-guide\ndescription: How to answer politely\n---\n\nBe brief and kind.\n"
    imported = await node.ask("skill_store", "import_skills", {"documents": [doc], "approve": True}, ctx=ACME)
    sid = imported["imported"][0]["skill_id"]
    turn = {"turn_id": "t1", "session_id": "s1", "user_id": "bob", "user_message": "answer politely"}
    for calls in ([], [{"name": "skill_view", "input": {"name": "tone-guide"}, "is_error": False}]):
        node.send(
            "skill_store", "turn_completed", {**turn, "tool_calls": calls, "skill_ids": [sid]}, ctx=ACME_USER
        )
    await node.ask("skill_store", "get_stats", {}, ctx=ACME)
    assert _counts(await _skill(node, sid)) == (1, 1, 0, 1)


def test_coverage_is_the_share_of_the_request_a_skill_speaks_to() -> None:
    """Shared words alone are not a match: the calculator skill shares "result" with a file request, but
    covers a sixth of it; a request of its kind it covers mostly. Quoted text and file names are values."""
    index = SkillIndex()
    fields = {
        "name": "calculate store memory",
        "description": 'Handle requests like "calculate {expression}, then add {n} to it, and remember the '
        'result as {key}" with calculator, then memory_store (3 tool calls when learned).',
        "triggers": "calculate add remember result calculator memory_store learned",
        "procedure": "1. calculator: evaluate each arithmetic expression from the request\n"
        "2. memory_store: store the result under the key the request names (key: {key} from the request)",
    }
    index.upsert(IndexDoc("calc", weighted_terms(fields)))
    [(_, _, unrelated)] = index.match(FILES, 3)
    assert unrelated < 0.2  # "result" only: "called" is the description's template, not the skill's
    assert index.match(FILES, 3, min_coverage=0.3) == []
    [(_, _, same)] = index.match(SAME_KIND, 3, min_coverage=0.3)
    assert same > 0.6
    [(_, _, bare)] = index.match("calculate 2*3 and remember it", 3)
    [(_, _, quoted)] = index.match("calculate 2*3 and remember 'the weekly shopping list' in notes.txt", 3)
    assert quoted == bare > 0.7
