"""session_search: finished turns are indexed; users search their own sessions, admins the tenant; the LLM
tool; tenant isolation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import Agent
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.runtime import ActorSpec, InvalidArgument, PermissionDenied, RequestContext

from . import doubles
from .conftest import ACME, ACME_USER, GLOBEX
from .doubles import ANSWER, FnGateway, end, tool_use

CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))


@pytest.fixture(autouse=True)
def _clean():
    doubles.reset()


def specs(tmp_path: Path) -> list[ActorSpec]:
    return [
        ActorSpec("llm_gateway", FnGateway, per_tenant=True),
        ActorSpec(
            "tool_executor", ToolExecutor, per_tenant=True, args={"workspace_root": str(tmp_path / "ws")}
        ),
        ActorSpec("agent", Agent, virtual=True, key_field="session_id"),
    ]


async def chat(node, message: str, session: str, ctx=ACME) -> dict[str, Any]:
    return await node.ask("agent", "chat", {"message": message, "session_id": session}, ctx=ctx)


async def search(node, query: str, ctx=ACME, session: str = "s-any", **kw: Any) -> dict[str, Any]:
    return await node.ask(f"agent/{session}", "session_search", {"query": query, **kw}, ctx=ctx)


async def test_turns_are_searchable_with_snippets_and_session_ids(make_node, tmp_path):
    ANSWER["fn"] = lambda req: end(
        "The deployment goes to Amsterdam." if "deploy" in req["messages"][-1]["content"] else "Miso."
    )
    node = await make_node(specs(tmp_path))
    await chat(node, "Where should we deploy the billing service?", "s1")
    await chat(node, "What is a good name for a cat?", "s2")
    found = await search(node, "deployment of billing")
    assert found["status"] == "ok" and found["sessions"][0] == "s1"
    top = found["hits"][0]
    assert top["session_id"] == "s1" and top["turn_id"] and top["role"] in ("user", "assistant")
    assert "[billing]" in top["snippet"] or "[deployment]" in top["snippet"]
    assert all(h["session_id"] == "s1" for h in found["hits"])
    assert (await search(node, "zebra xylophone"))["count"] == 0
    only_s2 = await search(node, "cat name deployment", in_session="s2")
    assert {h["session_id"] for h in only_s2["hits"]} == {"s2"}


async def test_users_see_only_their_own_sessions_and_admins_the_tenant(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    await chat(node, "bob's secret project is called Aurora", "bob-1", ctx=ACME_USER)
    await chat(node, "carol's project is called Aurora too", "carol-1", ctx=CAROL)
    bob = await search(node, "Aurora project", ctx=ACME_USER)
    assert {h["session_id"] for h in bob["hits"]} == {"bob-1"}
    carol = await search(node, "Aurora project", ctx=CAROL)
    assert {h["session_id"] for h in carol["hits"]} == {"carol-1"}
    admin = await search(node, "Aurora project", ctx=ACME)
    assert {h["session_id"] for h in admin["hits"]} == {"bob-1", "carol-1"}
    one_user = await search(node, "Aurora project", ctx=ACME, user_id="carol")
    assert {h["session_id"] for h in one_user["hits"]} == {"carol-1"}
    with pytest.raises(PermissionDenied):
        await search(node, "Aurora", ctx=ACME_USER, user_id="carol")
    assert (await search(node, "Aurora project", ctx=GLOBEX))["count"] == 0  # other tenant


async def test_the_llm_can_call_session_search(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    ANSWER["fn"] = lambda req: end("Noted: the launch date is March 3rd.")
    await chat(node, "The launch date is March 3rd.", "old", ctx=ACME_USER)
    ANSWER["fn"] = lambda req: (
        tool_use(("session_search", {"query": "launch date"}))
        if req["messages"][-1]["role"] == "user"
        else end("found it")
    )
    await chat(node, "When was the launch again?", "new", ctx=ACME_USER)
    history = (await node.ask("agent/new", "get_history", {}, ctx=ACME_USER))["messages"]
    result = next(m for m in history if m["role"] == "tool")
    assert result["name"] == "session_search" and not result["is_error"]
    assert '"session_id": "old"' in result["content"] and "March" in result["content"]
    # The result is marked as data from outside (transcripts hold earlier tool output).
    assert "untrusted_content" in result["content"]


async def test_bad_queries_are_structured_errors(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    with pytest.raises(InvalidArgument):
        await search(node, " ")
    with pytest.raises(InvalidArgument):
        await search(node, "x", limit=0)
