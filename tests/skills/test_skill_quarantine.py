"""Skill provenance and quarantine (issue 25): a skill derived from untrusted content (learned from a turn
that read a web page, a file, an MCP or tool result; written or imported in such a turn) is held: never
matched, never in a later turn's prompt, never merged by the curator, until its owner or an admin confirms
it; discarding archives it. No argument a model or a caller passes sets a record's provenance."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS, build_agent_node, default_config
from minihermes.runtime import ActorError, ActorSpec, ManualClock, Node, NotFound, RequestContext
from minihermes.skills import SkillTools
from minihermes.skills._store_io import workflow_key
from tests.agent import scripted_turns as st

from .conftest import ACME, ACME_USER, GLOBEX, skills_tree
from .doubles import SUMS, HistoryAgent, SimGateway

CALC = "1. calculator: evaluate each arithmetic expression from the request"
CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))
TAINTED = replace(ACME_USER, provenance="tool:http_request", untrusted=True)
"""bob's request as the agent stamps a tool call made after an untrusted result came into the turn."""


def _sums_calls() -> list[dict[str, Any]]:
    return [{"name": "calculator", "input": {"expression": e}} for e in ("2 + 2", "3 * 3", "5 - 1")]


def _turn(turn_id: str, *, untrusted: bool) -> dict[str, Any]:
    """A ``TurnCompleted`` record of bob's sums turn, as the agent publishes it."""
    return {
        "turn_id": turn_id,
        "session_id": "s1",
        "user_id": "bob",
        "user_message": SUMS,
        "status": "ok",
        "response": "2 + 2 = 4. 3 x 3 = 9. 5 - 1 = 4.",
        "tool_calls": _sums_calls(),
        "skill_ids": [],
        "success": True,
        "episodic": True,
        "truthful": True,
        "fell_short": False,
        "corrects_turn": "",
        "untrusted": untrusted,
        "untrusted_sources": ["tool:http_request"] if untrusted else [],
    }


async def _learn_node(make_node: Any) -> Any:
    return await make_node(
        skills_tree(
            ActorSpec("agent", HistoryAgent, virtual=True, key_field="session_id"),
            ActorSpec("llm_gateway", SimGateway, per_tenant=True),
        )
    )


async def _learned(node: Any, turn_id: str) -> dict[str, Any]:
    addr = f"skill_workflow/{workflow_key(turn_id)}"
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            status = await node.ask(addr, "query", {"name": "status"}, ctx=ACME_USER)
        except ActorError:
            status = {"status": "idle"}
        if status["status"] in ("completed", "failed", "cancelled"):
            break
        assert asyncio.get_running_loop().time() < deadline, status
        await asyncio.sleep(0.01)
    assert status["status"] == "completed", status
    out: dict[str, Any] = (await node.ask(addr, "result", {}, ctx=ACME_USER))["result"]
    return out


async def _skill(node: Any, skill_id: str) -> dict[str, Any]:
    got: dict[str, Any] = (await node.ask("skill_store", "get_skill", {"skill_id": skill_id}, ctx=ACME))[
        "skill"
    ]
    return got


async def _matched(node: Any, query: str = "what is 7*6 and 2+5 and 9-3") -> list[str]:
    reply = await node.ask("skill_store", "match_skills", {"query": query}, ctx=ACME_USER)
    return [s["skill_id"] for s in reply["skills"]]


async def _events(node: Any, event_type: str) -> list[dict[str, Any]]:
    reply = await node.ask("audit_event", "query_events", {"event_type": event_type, "limit": 100}, ctx=ACME)
    return list(reply["events"])


async def test_a_skill_learned_from_an_untrusted_turn_is_held_until_its_owner_confirms_it(make_node):
    node = await _learn_node(make_node)
    node.send("skill_store", "turn_completed", _turn("turn-1", untrusted=True), ctx=ACME_USER)
    out = await _learned(node, "turn-1")
    assert out["created"] and out["passed"] and out["skill_status"] == "active"
    skill = await _skill(node, out["skill_id"])
    assert skill["provenance"]["source"] == "agent" and skill["provenance"]["turn_id"] == "turn-1"
    assert skill["derived_from_untrusted"] is True and skill["quarantined"] is True
    assert skill["untrusted_sources"] == ["tool:http_request"]
    # Active (its evaluation passed) and still never matched: the same query matches it once confirmed.
    assert await _matched(node) == []
    assert [e["data"]["skill_id"] for e in await _events(node, "skill_quarantined")] == [out["skill_id"]]

    held = await node.ask("skill_store", "list_quarantined", {}, ctx=ACME_USER)
    assert held["count"] == 1 and held["skills"][0]["skill_id"] == out["skill_id"]
    assert held["skills"][0]["provenance"]["source"] == "agent" and held["total"] == 1
    # What the person confirms is the procedure itself, with when and why it was held.
    assert held["skills"][0]["procedure"] == skill["procedure"] and held["skills"][0]["quarantined_at"]
    assert held["skills"][0]["untrusted_sources"] == ["tool:http_request"]
    assert (await node.ask("skill_store", "list_quarantined", {}, ctx=ACME))["count"] == 1  # admin: all
    # Another user neither sees nor confirms (nor discards) it: not found, as their skills are.
    assert (await node.ask("skill_store", "list_quarantined", {}, ctx=CAROL))["count"] == 0
    for op in ("confirm_skill", "discard_skill"):
        with pytest.raises(NotFound):
            await node.ask("skill_store", op, {"skill_id": out["skill_id"]}, ctx=CAROL)
    assert (await _skill(node, out["skill_id"]))["quarantined"] is True

    confirmed = await node.ask("skill_store", "confirm_skill", {"skill_id": out["skill_id"]}, ctx=ACME_USER)
    assert confirmed["confirmed"] is True and confirmed["skill_id"] == out["skill_id"]
    assert confirmed["quarantined"] is False and confirmed["skill_status"] == "active"
    assert await _matched(node) == [out["skill_id"]]
    skill = await _skill(node, out["skill_id"])
    # It still says where it came from, and who vouched for it.
    assert skill["derived_from_untrusted"] is True and skill["quarantined"] is False
    assert skill["confirmed_by"] == "bob"
    assert (await node.ask("skill_store", "list_quarantined", {}, ctx=ACME_USER))["count"] == 0
    [event] = await _events(node, "skill_confirmed")
    assert event["data"]["skill_id"] == out["skill_id"] and event["data"]["by"] == "bob"
    again = await node.ask("skill_store", "confirm_skill", {"skill_id": out["skill_id"]}, ctx=ACME_USER)
    assert again["confirmed"] is True and again["changed"] is False


async def test_a_trusted_turn_still_teaches_after_an_untrusted_one_and_is_matched_at_once(make_node):
    node = await _learn_node(make_node)
    node.send("skill_store", "turn_completed", _turn("turn-1", untrusted=True), ctx=ACME_USER)
    held = await _learned(node, "turn-1")
    node.send("skill_store", "turn_completed", _turn("turn-2", untrusted=False), ctx=ACME_USER)
    clean = await _learned(node, "turn-2")
    # A skill of its own (the held one is neither patched by it nor patches it), live at once.
    assert clean["created"] and clean["skill_id"] != held["skill_id"]
    skill = await _skill(node, clean["skill_id"])
    assert skill["derived_from_untrusted"] is False and skill["quarantined"] is False
    assert skill["provenance"]["source"] == "agent"
    assert await _matched(node) == [clean["skill_id"]]
    assert (await _skill(node, held["skill_id"]))["version"] == 1


async def test_discarding_a_held_skill_archives_it_and_recovering_it_does_not_release_it(make_node):
    node = await make_node(skills_tree())
    p = await node.ask(
        "skill_store",
        "propose_skill",
        {"name": "sum-numbers", "description": "Add up arithmetic expressions", "procedure": CALC},
        ctx=TAINTED,
    )
    sid = p["skill_id"]
    await node.ask(
        "skill_store", "record_evaluation", {"skill_id": sid, "version": 1, "passed": True}, ctx=ACME
    )
    skill = await _skill(node, sid)
    assert skill["provenance"]["source"] == "tool:http_request" and skill["quarantined"] is True
    assert skill["status"] == "active" and await _matched(node, "sum numbers add up arithmetic") == []

    out = await node.ask("skill_store", "discard_skill", {"skill_id": sid}, ctx=ACME_USER)
    assert out["discarded"] is True and out["skill_status"] == "archived"
    skill = await _skill(node, sid)  # never deleted
    assert skill["status"] == "archived" and skill["discarded"]["by"] == "bob"
    assert (await node.ask("skill_store", "list_quarantined", {}, ctx=ACME_USER))["count"] == 0
    [event] = await _events(node, "skill_discarded")
    assert event["data"]["skill_id"] == sid and event["data"]["by"] == "bob"
    await node.ask("skill_store", "recover", {"skill_id": sid}, ctx=ACME)
    assert (await _skill(node, sid))["status"] == "active"
    assert await _matched(node, "sum numbers add up arithmetic") == []  # still held
    # A trusted skill is retired with archive, not discard.
    t = await node.ask(
        "skill_store",
        "propose_skill",
        {"name": "store-fact", "description": "Store a fact", "procedure": "1. memory_store: store it"},
        ctx=ACME_USER,
    )
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "discard_skill", {"skill_id": t["skill_id"]}, ctx=ACME_USER)
    assert e.value.code == "conflict"


async def test_no_argument_sets_provenance(make_node, tmp_path):
    """A model's ``provenance: "user"`` in a tool call's input is refused with the call; a caller's is
    no argument of the ops; the record says what the runtime stamped."""
    node = await make_node(
        [
            *skills_tree(),
            ActorSpec("tool_executor", ToolExecutor, per_tenant=True, args={"toolsets": TOOLSETS}),
            ActorSpec("skill_tools", SkillTools, per_tenant=True, args={"tools_root": str(tmp_path / "t")}),
        ]
    )
    tool = {
        "action": "create",
        "name": "add_numbers",
        "description": "Add two numbers",
        "parameters": {"a": "number", "b": "number"},
        "code": "def run(a, b):\n    return {'sum': a + b}\n",
        "test": "assert run(a=2, b=3) == {'sum': 5}\n",
    }
    claim = await node.ask(
        "tool_executor",
        "execute",
        {"name": "skill_manage", "input": {**tool, "provenance": "user"}, "session_id": "s1"},
        ctx=TAINTED,
    )
    assert claim["status"] == "error" and claim["error"]["code"] == "invalid_input"
    made = await node.ask(
        "tool_executor", "execute", {"name": "skill_manage", "input": tool, "session_id": "s1"}, ctx=TAINTED
    )
    assert made["status"] == "ok" and made["result"]["quarantined"] is True, made
    [listed] = (await node.ask("skill_tools", "list_tools", {}, ctx=ACME_USER))["tools"]
    assert listed["provenance"] == "tool:http_request" and listed["derived_from_untrusted"] is True
    assert listed["quarantined"] is True and listed["promoted"] is False
    with pytest.raises(ActorError) as e:  # unpromoted until confirmed
        await node.ask("skill_tools", "promote_tool", {"name": "add_numbers"}, ctx=ACME)
    assert e.value.code == "quarantined"
    with pytest.raises(NotFound):
        await node.ask("skill_tools", "confirm_tool", {"name": "add_numbers"}, ctx=CAROL)
    ok = await node.ask("skill_tools", "confirm_tool", {"name": "add_numbers"}, ctx=ACME_USER)
    assert ok["confirmed"] is True and ok["derived_from_untrusted"] is True
    assert (await node.ask("skill_tools", "promote_tool", {"name": "add_numbers"}, ctx=ACME))["promoted"]

    # A tool written in an admin's tainted turn is not the tenant's at once either.
    admin_tainted = replace(ACME, provenance="tool:read_file", untrusted=True)
    made = await node.ask(
        "tool_executor",
        "execute",
        {"name": "skill_manage", "input": {**tool, "name": "add_more"}, "session_id": "s1"},
        ctx=admin_tainted,
    )
    assert made["status"] == "ok", made
    rows = {t["name"]: t for t in (await node.ask("skill_tools", "list_tools", {}, ctx=ACME))["tools"]}
    assert rows["add_more"]["promoted"] is False and rows["add_more"]["quarantined"] is True

    # The skill store's ops take no provenance at all, and an op in a tainted request is held.
    with pytest.raises(ActorError) as e:
        await node.ask(
            "skill_store",
            "propose_skill",
            {"name": "x-skill", "description": "d", "procedure": CALC, "provenance": "user"},
            ctx=TAINTED,
        )
    assert e.value.code == "invalid_argument"
    p = await node.ask(
        "skill_store",
        "propose_skill",
        {"name": "x-skill", "description": "d", "procedure": CALC},
        ctx=TAINTED,
    )
    skill = await _skill(node, p["skill_id"])
    assert skill["provenance"]["source"] == "tool:http_request" and skill["quarantined"] is True
    # A person's own request is theirs.
    p = await node.ask(
        "skill_store",
        "propose_skill",
        {"name": "y-skill", "description": "remember", "procedure": "1. memory_store: keep it"},
        ctx=ACME_USER,
    )
    skill = await _skill(node, p["skill_id"])
    assert skill["provenance"]["source"] == "user" and skill["quarantined"] is False
    # An edit in a tainted request takes the trust down with it.
    await node.ask(
        "skill_store",
        "update_skill",
        {"skill_id": p["skill_id"], "procedure": "1. memory_store: keep it always"},
        ctx=TAINTED,
    )
    skill = await _skill(node, p["skill_id"])
    assert skill["derived_from_untrusted"] is True and skill["quarantined"] is True


async def test_the_curator_never_merges_a_held_skill_and_a_merge_keeps_the_lower_trust(make_node):
    node = await make_node(skills_tree(store_args={"duplicate_similarity": 99}))

    async def active(name: str, triggers: list[str], ctx: RequestContext) -> str:
        p = await node.ask(
            "skill_store",
            "propose_skill",
            {
                "name": name,
                "description": "Add up arithmetic expressions",
                "procedure": CALC,
                "triggers": triggers,
            },
            ctx=ctx,
        )
        sid = str(p["skill_id"])
        await node.ask(
            "skill_store", "record_evaluation", {"skill_id": sid, "version": 1, "passed": True}, ctx=ACME
        )
        return sid

    trusted = await active("sum-numbers", ["sum", "add"], ACME_USER)
    confirmed = await active("sum-up-numbers", ["total"], TAINTED)
    held = await active("add-up-numbers", ["plus"], TAINTED)
    await node.ask("skill_store", "confirm_skill", {"skill_id": confirmed}, ctx=ACME_USER)
    for _ in range(2):
        await node.ask("skill_store", "record_usage", {"skill_id": trusted}, ctx=ACME_USER)
    await node.ask("skill_store", "record_usage", {"skill_id": held}, ctx=ACME_USER)

    out = await node.ask("curator", "curate", {}, ctx=ACME)
    assert out["merged"] == [{"kept": trusted, "archived": confirmed}]
    kept = await _skill(node, trusted)
    # The merge carries the confirmed skill's origin: the kept one is no more trusted than it.
    assert kept["derived_from_untrusted"] is True and kept["quarantined"] is False
    assert "total" in kept["triggers"] and "plus" not in kept["triggers"]
    assert (await _skill(node, held))["status"] == "active" and (await _skill(node, held))["quarantined"]
    # Asked directly, the store refuses to merge a held skill into another.
    with pytest.raises(ActorError) as e:
        await node.ask(
            "skill_store",
            "update_skill",
            {"skill_id": trusted, "procedure": CALC, "merged_from": [held]},
            ctx=ACME,
        )
    assert e.value.code == "conflict"


async def test_an_export_of_a_held_skill_is_held_again_when_imported(make_node):
    node = await make_node(skills_tree())
    p = await node.ask(
        "skill_store",
        "propose_skill",
        {"name": "sum-numbers", "description": "Add up arithmetic expressions", "procedure": CALC},
        ctx=TAINTED,
    )
    [doc] = (await node.ask("skill_store", "export_skills", {}, ctx=ACME))["documents"]
    assert '"quarantined": true' in doc["skill_md"] and '"derived_from_untrusted": true' in doc["skill_md"]
    # Imported into another tenant (another store), approved by its admin at once: still held.
    out = await node.ask(
        "skill_store", "import_skills", {"documents": [doc["skill_md"]], "approve": True}, ctx=GLOBEX
    )
    [imported] = out["imported"]
    assert imported["quarantined"] is True and imported["status"] == "active"
    got = await node.ask("skill_store", "get_skill", {"skill_id": imported["skill_id"]}, ctx=GLOBEX)
    skill = got["skill"]
    assert skill["provenance"]["source"] == "import" and skill["trusted"] is False
    assert skill["derived_from_untrusted"] is True and skill["skill_id"] == p["skill_id"]
    view = await node.ask("skill_store", "view_skill", {"name": "sum-numbers"}, ctx=GLOBEX)
    assert view["trusted"] is False  # skill_view hands it to a model as data
    matched = await node.ask("skill_store", "match_skills", {"query": "sum numbers add up"}, ctx=GLOBEX)
    assert matched["skills"] == []
    # A clean one imported the same way is live at once.
    clean = doc["skill_md"].replace('"quarantined": true', '"quarantined": false')
    clean = clean.replace('"derived_from_untrusted": true', '"derived_from_untrusted": false')
    clean = clean.replace("sum-numbers", "sum-figures")
    out = await node.ask("skill_store", "import_skills", {"documents": [clean], "approve": True}, ctx=GLOBEX)
    assert "quarantined" not in out["imported"][0]
    matched = await node.ask("skill_store", "match_skills", {"query": "sum figures add up"}, ctx=GLOBEX)
    assert [s["name"] for s in matched["skills"]] == ["sum-figures"]


# -- through the agent: what a later turn's model is sent ------------------------------------------------

PROMPTS: list[tuple[str, str]] = []


class _RecordingGateway(st.TurnGateway):
    async def _answer(self, session_id: str, request: Any) -> dict[str, Any]:
        PROMPTS.append((session_id, "\n".join(str(dict(m).get("content") or "") for m in request.messages)))
        return await super()._answer(session_id, request)


async def _app(data_dir: Path) -> Node:
    config = default_config(data_dir)
    for spec in config.tree.walk():
        if spec.name == "llm_gateway":
            spec.cls = _RecordingGateway
            spec.args = {}
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
        elif spec.name == "memory":
            spec.args["semantic"] = False
    node = build_agent_node(config, clock=ManualClock())
    await node.start()
    return node


async def test_a_held_skill_reaches_no_later_prompt_until_confirmed(tmp_path: Path) -> None:
    st.reset()
    PROMPTS.clear()
    node = await _app(tmp_path / "data")
    try:
        p = await node.ask(
            "skill_store",
            "propose_skill",
            {
                "name": "arithmetic-sums",
                "description": "Work out arithmetic expressions with the calculator",
                "procedure": CALC,
                "triggers": ["what is", "arithmetic"],
            },
            ctx=TAINTED,
        )
        sid = p["skill_id"]
        await node.ask(
            "skill_store", "record_evaluation", {"skill_id": sid, "version": 1, "passed": True}, ctx=ACME
        )
        message = "what is 7*6 and 8+1 and 9-2? arithmetic please"
        for session in ("before", "after"):
            st.script(session, st.answer("Noted."))
            if session == "after":
                await node.ask("skill_store", "confirm_skill", {"skill_id": sid}, ctx=ACME_USER)
            reply = await node.ask(
                "agent", "chat", {"message": message, "session_id": session}, ctx=ACME_USER, timeout=60
            )
            assert reply["status"] == "ok"
        before = "\n".join(text for s, text in PROMPTS if s == "before")
        after = "\n".join(text for s, text in PROMPTS if s == "after")
        assert before and "## Relevant Skills" not in before and "arithmetic-sums" not in before
        assert "## Relevant Skills" in after and "### arithmetic-sums" in after
    finally:
        await node.stop(deadline=5)
        st.reset()
