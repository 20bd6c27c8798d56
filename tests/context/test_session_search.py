"""session_search: finished turns are indexed; users search their own sessions, admins the tenant; the LLM
tool; tenant isolation; what the index finds (windows, stems, speakers, dates)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import Agent
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS
from minihermes.context import session_index
from minihermes.runtime import ActorSpec, GenServer, InvalidArgument, PermissionDenied, RequestContext, call

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
            "tool_executor",
            ToolExecutor,
            per_tenant=True,
            args={"workspace_root": str(tmp_path / "ws"), "toolsets": TOOLSETS},
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
    # Who said it and when (the manual clock starts at 1.8e9 s: 2027-01-15 08:00 UTC).
    assert '"speaker": "bob"' in result["content"] and '"when": "2027-01-15 08:00 UTC"' in result["content"]
    # The result is marked as data from outside (transcripts hold earlier tool output).
    assert "untrusted_content" in result["content"]


async def test_bad_queries_are_structured_errors(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    with pytest.raises(InvalidArgument):
        await search(node, " ")
    with pytest.raises(InvalidArgument):
        await search(node, "x", limit=0)


class Transcripts(GenServer):
    """The index's functions called directly, as the agent does at the end of a turn and on a search."""

    @call
    async def index(self, session: str, turn: str, messages: list[dict[str, Any]], at: float) -> int:
        return await session_index.index_turn(self.host, session, "bob", turn, messages, at)

    @call
    async def search(self, query: str, limit: int = 10, session: str = "") -> list[dict[str, Any]]:
        return await session_index.search(
            self.host, query, user_id="bob", tenant_wide=False, limit=limit, session_id=session
        )


def day(year: int, month: int, d: int) -> float:
    return datetime(year, month, d, 15, 0, tzinfo=UTC).timestamp()


async def transcripts(make_node) -> Any:
    node = await make_node([ActorSpec("transcripts", Transcripts, per_tenant=True)])

    async def index(session: str, turn: str, messages: list[dict[str, Any]], at: float = 0.0) -> None:
        await node.ask(
            "transcripts",
            "index",
            {"session": session, "turn": turn, "messages": messages, "at": at},
            ctx=ACME,
        )

    async def search(query: str, **kw: Any) -> list[dict[str, Any]]:
        return await node.ask("transcripts", "search", {"query": query, **kw}, ctx=ACME)

    return index, search


def said(role: str, content: str, name: str = "") -> dict[str, Any]:
    return {"role": role, "content": content} | ({"name": name} if name else {})


async def test_an_answer_is_found_by_the_words_of_its_question(make_node):
    index, search = await transcripts(make_node)
    await index(
        "s1",
        "t1",
        [
            said("user", "How often do we rotate the wifi passphrase?"),
            said("assistant", "Every ninety days."),
        ],
    )
    await index("s2", "t2", [said("user", "Lunch at noon?"), said("assistant", "Sure, the usual place.")])
    hits = await search("wifi passphrase rotation")
    assert {(h["session_id"], h["role"]) for h in hits} == {("s1", "user"), ("s1", "assistant")}
    assert hits[0]["role"] == "user"  # the message with the words itself comes first


async def test_derived_words_and_possessives_match(make_node):
    index, search = await transcripts(make_node)
    await index("s1", "t1", [said("user", "Gina and Jon agreed to collaborate on the dance videos.")])
    await index("s2", "t2", [said("user", "The plumber fixed the sink.")])
    hits = await search("Gina's collaboration")
    assert [h["session_id"] for h in hits] == ["s1"]
    assert "[Gina]" in hits[0]["snippet"] and "[collaborate]" in hits[0]["snippet"]


async def test_the_named_speaker_comes_first(make_node):
    index, search = await transcripts(make_node)
    await index(
        "room",
        "t1",
        [
            said("user", "The budget review moved to Friday, the budget is tight.", name="Alice"),
            said("user", "Fine by me.", name="Carol"),
            said("user", "Carol, the budget review needs the new numbers.", name="Bob"),
        ],
    )
    hits = await search("what did Bob say about the budget review")
    assert hits[0]["speaker"] == "Bob" and hits[0]["message_index"] == 2
    assert (await search("what did Alice say about the budget review"))[0]["speaker"] == "Alice"


async def test_a_date_in_the_query_finds_that_days_messages(make_node):
    index, search = await transcripts(make_node)
    await index("s1", "t1", [said("user", "Standup: the release slipped a week.")], at=day(2022, 11, 9))
    await index("s2", "t2", [said("user", "Standup: the release is on track.")], at=day(2022, 11, 14))
    await index("s3", "t3", [said("user", "Standup: nothing new.")], at=day(2022, 12, 9))
    first = await search("what did the standup say about the release on 9 November, 2022?")
    assert first[0]["session_id"] == "s1"
    # A day also counts its month, below the day itself; other months not at all.
    assert [h["session_id"] for h in await search("November 9th 2022")] == ["s1", "s2"]
    in_november = [h["session_id"] for h in await search("standup in November 2022")]
    assert set(in_november[:2]) == {"s1", "s2"} and in_november[2:] == ["s3"]
    # Without a year it is words: "9" and "november" are in no message.
    assert await search("on 9 November") == []


async def test_one_sessions_hits(make_node):
    index, search = await transcripts(make_node)
    for n in range(30):
        await index(f"s{n}", "t", [said("user", f"deploy notes number {n}: the deploy went fine")])
    hits = await search("deploy notes", session="s7", limit=5)
    assert [h["session_id"] for h in hits] == ["s7"]
