"""Skills are learned only from turns that were a success, never from one the user corrected, and a learned
skill is parameterized by what varies (no file name, key, number or quoted text of the request in it).
Real turns on the app tree; the turn's LLM replies are scripted, the workflow's extraction and dry-run
replays use the simulated model (``tests/agent/scripted_turns.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime import Node
from minihermes.skills import _extract as extract
from minihermes.skills._store_io import workflow_key
from tests.agent import scripted_turns as st

from .conftest import ACME, ACME_USER

BUDGET = "calculate 17 * 23, then add 100 to it, and remember the result as budget"
STEPS = st.calls(
    ("calculator", {"expression": "17 * 23"}),
    ("calculator", {"expression": "391 + 100"}),
    ("memory_store", {"key": "budget", "value": "491"}),
)
TRUE = st.answer("17 x 23 = 391 and 391 + 100 = 491; I stored 491 as budget.")


@pytest.fixture(autouse=True)
def _reset() -> None:
    st.reset()


async def _chat(node: Node, message: str, session: str) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(
        "agent", "chat", {"message": message, "session_id": session}, ctx=ACME_USER
    )
    return reply


async def _learned(node: Node, reply: dict[str, Any], message: str) -> dict[str, Any]:
    """The extraction workflow's outcome for the turn: ``run`` joins the run the store started (or starts
    it with the same arguments, which the store's start then joins) and answers when it ends."""
    args = {
        "session_id": reply["session_id"],
        "turn_id": reply["turn_id"],
        "user_intent": message,
        "user_id": ACME_USER.principal,
    }
    out: dict[str, Any] = await node.ask(
        f"skill_workflow/{workflow_key(reply['turn_id'])}", "run", args, ctx=ACME_USER, timeout=120
    )
    return out


async def _status(node: Node, turn_id: str) -> dict[str, Any]:
    got: dict[str, Any] = await node.ask(
        f"skill_workflow/{workflow_key(turn_id)}", "query", {"name": "status"}, ctx=ACME_USER
    )
    return got


async def _skills(node: Node, status: str = "") -> list[dict[str, Any]]:
    got = await node.ask("skill_store", "list_skills", {"status": status}, ctx=ACME)
    return list(got["skills"])


async def test_a_turn_whose_answer_contradicts_its_tools_teaches_nothing(tmp_path: Path) -> None:
    """Three good tool calls, then an answer with a number no tool returned: no extraction starts, no
    skill; the same turn answered truthfully is learned."""
    st.script("lie", STEPS, st.answer("17 x 23 = 391, plus 100 gives 500. The result is 500."))
    st.script("true", STEPS, TRUE)
    node = await st.app_node(tmp_path / "data")
    try:
        lie = await _chat(node, BUDGET, "lie")
        assert lie["status"] == "ok" and lie["tool_calls"] == 3
        await node.ask("skill_store", "get_stats", {}, ctx=ACME)  # the turn's record is handled
        status = await _status(node, lie["turn_id"])
        assert status["status"] == "idle" and status["completed_steps"] == []
        assert (
            node.metrics.counter("skill_extractions_skipped_total", tenant="acme", reason="fell_short") == 1
        )
        assert await _skills(node) == []

        true = await _chat(node, BUDGET, "true")
        out = await _learned(node, true, BUDGET)
        assert out["result"]["status"] == "ok" and out["result"]["created"]
        [skill] = await _skills(node)
        assert skill["provenance"]["turn_id"] == true["turn_id"]
    finally:
        await node.stop(deadline=5)


async def test_a_learned_skill_names_the_family_and_keeps_what_varies_as_parameters(tmp_path: Path) -> None:
    st.script("true", STEPS, TRUE)
    node = await st.app_node(tmp_path / "data")
    try:
        true = await _chat(node, BUDGET, "true")
        out = (await _learned(node, true, BUDGET))["result"]
        got = await node.ask("skill_store", "get_skill", {"skill_id": out["skill_id"]}, ctx=ACME_USER)
        skill = got["skill"]
    finally:
        await node.stop(deadline=5)
    assert skill["name"] == "calculate-store-memory"
    assert "{key}" in skill["procedure"] and "budget" not in skill["procedure"]
    for text in (skill["procedure"], skill["description"], " ".join(skill["triggers"])):
        assert "budget" not in text and "17" not in text and "100" not in text, text
    assert skill["tools"] == ["calculator", "memory_store"]


def test_the_extraction_parameterizes_files_keys_and_quoted_text() -> None:
    """The issue's case: "write 'buy milk' to todo.txt, then read todo.txt, then list the files"."""
    intent = "write 'buy milk' to todo.txt, then read todo.txt, then list the files"
    calls = [
        extract.TurnCall("write_file", {"path": "todo.txt", "content": "buy milk"}, True),
        extract.TurnCall("read_file", {"path": "todo.txt"}, True),
        extract.TurnCall("list_files", {}, True),
    ]
    named = extract.fallback_name(intent, calls)
    assert named["name"] == "write-read-list-workspace-file"
    procedure = extract.fallback_procedure(calls, intent)
    assert procedure.splitlines() == [
        "1. write_file: write the text the request gives to the file (path: {path} from the request)",
        "2. read_file: read the file (path: {path} from the request)",
        "3. list_files: list the files",
    ]
    triggers = extract.fallback_triggers(intent, calls)["triggers"]
    for text in (named["description"], procedure, " ".join(triggers)):
        assert "todo" not in text and "milk" not in text, text
    assert "write '{content}' to {path}, then read {path}" in named["description"]
    # A model's answer that copies the request's values is not used (the deterministic one is).
    values = extract.varying(intent, calls)
    copied = '{"procedure": "1. write_file: path=todo.txt\\n2. read_file: path=todo.txt\\n3. list_files: ."}'
    assert extract.parse_procedure(copied, calls, values) is None
    assert extract.parse_name('{"name": "write-buy-milk", "description": "Todo."}', values) is None
    assert extract.parse_name('{"name": "note-file", "description": "Write a note."}', values) is not None
    # A value the model chose itself (not in the request) stays as it is.
    fixed = [extract.TurnCall("memory_store", {"key": "last_calc", "value": "2"}, True)]
    assert (
        extract.fallback_procedure(fixed, "add 1 and 1")
        == "1. memory_store: store the result under key last_calc"
    )


async def test_a_correction_archives_the_skill_learned_from_the_corrected_turn(tmp_path: Path) -> None:
    """The skill was learned (and evaluated) before the user said the answer was wrong: it is archived,
    with the reason in the audit trail, and the request may be taught again."""
    st.script("s1", STEPS, TRUE, st.answer("Sorry, I'll redo it."))
    node = await st.app_node(tmp_path / "data")
    try:
        first = await _chat(node, BUDGET, "s1")
        out = (await _learned(node, first, BUDGET))["result"]
        assert out["created"]
        await _chat(node, "no, that's wrong", "s1")
        await node.ask("skill_store", "get_stats", {}, ctx=ACME)  # the correction's record is handled
        got = await node.ask("skill_store", "get_skill", {"skill_id": out["skill_id"]}, ctx=ACME_USER)
        assert got["skill"]["status"] == "archived"
        assert [s for s in await _skills(node) if s["status"] in ("active", "stale", "candidate")] == []
        events = await node.ask(
            "audit_event", "query_events", {"event_type": "skill_status_changed"}, ctx=ACME
        )
        assert any(
            out["skill_id"] in e["detail"] and "reason=corrected by the user" in e["detail"]
            for e in events["events"]
        ), events
        # Taught again by a turn the user does not correct.
        st.script("s2", STEPS, TRUE)
        again = await _chat(node, BUDGET, "s2")
        assert (await _learned(node, again, BUDGET))["result"]["status"] == "ok"
    finally:
        await node.stop(deadline=5)


async def test_a_correction_while_the_skill_is_being_extracted_leaves_no_skill(tmp_path: Path) -> None:
    """The correction arrives while the extraction waits for the model: the extraction is cancelled (or,
    had its proposal got through first, refused), and no skill from the turn ever exists."""
    st.script("s1", STEPS, TRUE, st.answer("Sorry, I'll redo it."))
    release = st.HOLD["skill-learning:"] = asyncio.Event()
    entered = st.ENTERED["skill-learning:"] = asyncio.Event()
    node = await st.app_node(tmp_path / "data")
    try:
        first = await _chat(node, BUDGET, "s1")
        await entered.wait()  # the workflow asks the model for the skill's name
        await _chat(node, "that's not right", "s1")
        await node.ask("skill_store", "get_stats", {}, ctx=ACME)  # the correction's record is handled
        release.set()
        status = await _status(node, first["turn_id"])
        while status["status"] == "running":  # the cancel signal is on its way to the workflow
            await node.ask("skill_store", "get_stats", {}, ctx=ACME)
            status = await _status(node, first["turn_id"])
        assert status["status"] in ("cancelled", "completed"), status
        if status["status"] == "completed":
            out = await node.ask(
                f"skill_workflow/{workflow_key(first['turn_id'])}", "result", {}, ctx=ACME_USER
            )
            assert out["result"] == {"status": "skipped", "reason": "corrected by the user"}
        assert await _skills(node) == []
    finally:
        release.set()
        await node.stop(deadline=5)


async def test_a_proposal_from_a_corrected_turn_is_refused(tmp_path: Path) -> None:
    """However late the extraction's proposal comes, the store refuses it for a corrected turn."""
    st.script("s1", st.answer("Hello."), st.answer("Sorry."))
    node = await st.app_node(tmp_path / "data")
    try:
        first = await _chat(node, "hello", "s1")
        await _chat(node, "wrong", "s1")
        await node.ask("skill_store", "get_stats", {}, ctx=ACME)
        proposal = {
            "name": "greet",
            "description": "Greet.",
            "procedure": "1. calculator: evaluate it",
            "turn_id": first["turn_id"],
            "session_id": "s1",
        }
        refused = await node.ask("skill_store", "propose_skill", proposal, ctx=ACME)
        assert refused["retracted"] is True and refused["skill_id"] == ""
        assert await _skills(node) == []
    finally:
        await node.stop(deadline=5)
