"""memory: expiry (issue 25). A memory stored with ``ttl_seconds`` (or its kind's default) is absent from every
read path from the moment it expires (recall, list, search, the core snapshot, the turn's prompt), before any
retention pass; the retention pass then removes its record, index entry, tuple and embedding from the store.
On SQLite and on PostgreSQL (the fixtures of ``test_memory_atomic``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from minihermes.agent.memory import MAX_TTL_SECONDS, Memory, ttl_defaults
from minihermes.app import build_agent_node, default_config
from minihermes.runtime import ActorSpec, InvalidArgument, ManualClock, Node, PermissionDenied

from . import scripted_turns as st
from . import test_memory_atomic as atomic
from .conftest import ACME, ACME_USER
from .test_memory_atomic import NOTHING, mem, stored

memory_node = atomic.make_node
"""The fixture of ``test_memory_atomic`` (memory on SQLite and on PostgreSQL), under this file's name."""

DAY = 86_400
HOUR = 3_600
PARKING = "memp:bob:global::parking"
DOOR = "memp:bob:global::door code"


async def every_read(node: Node, ctx: Any = ACME_USER) -> dict[str, Any]:
    """What each read path shows of the test's memories: recall, search, list, core snapshot (as ``ctx``),
    and the admin's whole-tenant list."""
    recall = await mem(node, "recall_memory", ctx, key="parking")
    search = await mem(node, "search_memories", ctx, query="parking level spot", include_episodes=True)
    listed = await mem(node, "list_memories", ctx, include_episodes=True)
    core = await mem(node, "core_snapshot", ctx)
    admin = await mem(node, "list_memories", ACME, include_episodes=True)
    return {
        "recall": recall["value"],
        "search": sorted(m["key"] for m in search["memories"]),
        "list": sorted(m["key"] for m in listed["memories"]),
        "core": sorted(m["key"] for m in core["memories"]),
        "admin": sorted(m["key"] for m in admin["memories"]),
    }


async def test_an_expired_memory_is_gone_from_every_read_at_once_and_from_the_store_after_the_pass(
    memory_node: Callable[..., Any], clock: ManualClock
) -> None:
    node = await memory_node(semantic=True)  # embeddings too: the pass must remove the vector
    t0 = clock.time()
    stored_reply = await mem(
        node, "store_memory", ACME_USER, key="parking", value="car on level 3, spot 42", ttl_seconds=60
    )
    assert stored_reply["expires_at"] == t0 + 60
    await mem(
        node, "store_memory", ACME_USER, key="door code", value="level 3 door", tier="core", ttl_seconds=60
    )
    await mem(node, "store_memory", ACME_USER, key="colour", value="teal parking level spot", tier="core")
    before = await every_read(node)
    assert before == {
        "recall": "car on level 3, spot 42",
        "search": ["colour", "door code", "parking"],
        "list": ["colour", "door code", "parking"],
        "core": ["colour", "door code"],  # read now: the core snapshot is cached from here on
        "admin": ["colour", "door code", "parking"],
    }
    listed = {m["key"]: m for m in (await mem(node, "list_memories", ACME_USER))["memories"]}
    assert listed["parking"]["expires_at"] == t0 + 60 and listed["colour"]["expires_at"] is None

    await clock.advance(59)
    assert await every_read(node) == before  # not yet

    await clock.advance(2)  # expired: absent from every read at once, while the store still holds it
    assert await every_read(node) == {
        "recall": None,
        "search": ["colour"],
        "list": ["colour"],
        "core": ["colour"],
        "admin": ["colour"],
    }
    assert (await mem(node, "search_memories", ACME_USER, query="car level spot 42"))["total"] == 1
    held = await stored(node, PARKING)
    assert (held["record"]["value"], held["index"], held["vector"], len(held["tuples"])) == (
        "car on level 3, spot 42",
        [PARKING],
        True,
        1,
    )
    assert (await mem(node, "get_stats"))["memories"] == 3

    # The retention pass: its reminder fires at the end of the hour the memories expired in.
    await clock.advance(t0 + HOUR - clock.time() - 1)
    assert (await stored(node, PARKING))["record"] is not None
    await clock.advance(1)
    assert (await mem(node, "get_stats"))["memories"] == 1  # answered after the pass the reminder queued
    assert await stored(node, PARKING) == NOTHING
    assert await stored(node, DOOR) == NOTHING
    assert (await stored(node, "memp:bob:global::colour"))["record"]["value"] == "teal parking level spot"
    assert await every_read(node) == {
        "recall": None,
        "search": ["colour"],
        "list": ["colour"],
        "core": ["colour"],
        "admin": ["colour"],
    }
    # Nothing else expires: the pass left no reminder armed.
    assert (await mem(node, "purge_expired", ACME))["next_purge_at"] is None


async def test_episodes_take_their_kind_default_and_facts_never_expire(
    memory_node: Callable[..., Any], clock: ManualClock
) -> None:
    node = await memory_node()
    t0 = clock.time()
    node.send(
        "memory",
        "turn_completed",
        {
            "session_id": "s1",
            "user_id": "bob",
            "user_message": "book the parking for Tuesday",
            "status": "ok",
            "response": "Booked.",
            "tool_calls": [{"name": "book", "input": {}, "is_error": False, "result": "ok"}],
        },
        ctx=ACME_USER,
    )
    await mem(node, "store_memory", ACME_USER, key="colour", value="teal")
    await mem(node, "store_memory", ACME_USER, key="manual", value="how to fold a map", kind="declarative")
    views = {
        m["kind"]: m for m in (await mem(node, "list_memories", ACME_USER, include_episodes=True))["memories"]
    }
    assert views["episodic"]["expires_at"] == t0 + 90 * DAY
    assert views["semantic"]["expires_at"] is None and views["declarative"]["expires_at"] is None

    await clock.advance(90 * DAY)
    kept = await mem(node, "list_memories", ACME_USER, include_episodes=True)
    assert sorted(m["key"] for m in kept["memories"]) == ["colour", "manual"]
    found = await mem(node, "search_memories", ACME_USER, query="parking Tuesday", include_episodes=True)
    assert found["memories"] == []
    await clock.advance(10 * 365 * DAY)  # facts stay
    assert (await mem(node, "recall_memory", ACME_USER, key="colour"))["value"] == "teal"
    assert (await mem(node, "purge_expired", ACME))["purged"] == 0  # the reminder removed the episode
    assert (await mem(node, "get_stats"))["memories"] == 2


async def test_configured_defaults_an_explicit_never_and_an_overwrite_that_recomputes(
    memory_node: Callable[..., Any], clock: ManualClock
) -> None:
    node = await memory_node(ttl_defaults={"semantic": HOUR, "episodic": -1}, retention_interval=60)
    t0 = clock.time()
    assert (await mem(node, "store_memory", ACME_USER, key="a", value="one"))["expires_at"] == t0 + HOUR
    assert (await mem(node, "store_memory", ACME_USER, key="b", value="two", ttl_seconds=-1))[
        "expires_at"
    ] is None
    episode = await mem(node, "store_memory", ACME_USER, key="e", value="a turn", kind="episodic")
    assert episode["expires_at"] is None
    short = await mem(node, "store_memory", ACME_USER, key="c", value="three", ttl_seconds=30)
    assert short["expires_at"] == t0 + 30
    # Overwriting sets the expiry anew: the kind's default this time, then "never".
    assert (await mem(node, "store_memory", ACME_USER, key="c", value="three"))["expires_at"] == t0 + HOUR
    await mem(node, "store_memory", ACME_USER, key="a", value="one", ttl_seconds=-1)
    await clock.advance(HOUR + 1)
    listed = await mem(node, "list_memories", ACME_USER, include_episodes=True)
    assert sorted(m["key"] for m in listed["memories"]) == ["a", "b", "e"]
    # A fact that expired (removed or not yet) is new when stored again.
    again = await mem(node, "store_memory", ACME_USER, key="c", value="three again", ttl_seconds=10)
    assert again["created"] is True
    await clock.advance(11)
    assert (await mem(node, "recall_memory", ACME_USER, key="c"))["found"] is False


async def test_a_user_store_arms_the_pass_as_the_memory_service_not_as_the_user(
    memory_node: Callable[..., Any], clock: ManualClock
) -> None:
    """The reminder runs in the context it was set in: a user's store must not leave a pass that runs as
    that user (the pass is admin-only, so it would fail and nothing would ever be removed)."""
    node = await memory_node()
    await mem(node, "store_memory", ACME_USER, key="parking", value="level 3", ttl_seconds=5)
    [reminder] = await node.store.reminders.list(ACME.scope, "memory")
    assert (reminder.context["principal"], reminder.context["roles"]) == ("memory", ["system"])
    await clock.advance(HOUR)
    assert (await mem(node, "get_stats"))["memories"] == 0  # answered after the pass the reminder queued
    assert await stored(node, PARKING) == NOTHING
    with pytest.raises(PermissionDenied):
        await mem(node, "purge_expired", ACME_USER)


@pytest.mark.parametrize("ttl", [-2, 0.5, MAX_TTL_SECONDS + 1, "60", True, None, [60]])
async def test_bad_ttl_values_are_refused(memory_node: Callable[..., Any], ttl: Any) -> None:
    node = await memory_node()
    with pytest.raises(InvalidArgument) as refused:
        await mem(node, "store_memory", ACME_USER, key="k", value="v", ttl_seconds=ttl)
    assert refused.value.details.get("field") == "ttl_seconds"
    assert (await mem(node, "get_stats"))["memories"] == 0


def test_bad_ttl_defaults_are_refused_at_start_up() -> None:
    assert ttl_defaults({}) == {"episodic": 90 * DAY}
    assert ttl_defaults({"episodic": -1, "semantic": 60}) == {"episodic": -1, "semantic": 60}
    for bad in ({"procedural": 60}, {"semantic": 0}, {"semantic": -5}, {"semantic": "1d"}):
        with pytest.raises(InvalidArgument):
            ttl_defaults(bad)
        with pytest.raises(ValidationError):
            Memory.Args.model_validate({"ttl_defaults": bad})
    with pytest.raises(ValidationError):
        Memory.Args.model_validate({"retention_interval": 0})


# ------------------------------------------------------------------------- through the agent's turns


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[tuple[Node, ManualClock]]:
    st.reset()
    config = default_config(tmp_path / "data")
    for spec in config.tree.walk():
        if spec.name == "llm_gateway":
            spec.cls = st.TurnGateway
            spec.args = {}
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
        elif spec.name == "memory":
            spec.args["semantic"] = False
    config.tree.children.append(ActorSpec("turn_log", st.TurnLog, per_tenant=True))
    clock = ManualClock()
    node = build_agent_node(config, clock=clock)
    await node.start()
    yield node, clock
    await node.stop(deadline=5)
    st.reset()


async def turn(node: Node, session: str, message: str) -> str:
    reply = await node.ask("agent", "chat", {"message": message, "session_id": session}, ctx=ACME_USER)
    assert reply["status"] == "ok", reply
    await node.ask("turn_log", "count", {}, ctx=ACME_USER)  # memory got the turn's record before turn_log
    return str(reply["response"])


def prompt_of(session: str) -> str:
    return "\n".join(str(m.content) for m in st.SCRIPTS[session].requests[0].messages)


async def test_the_memory_store_tool_takes_ttl_seconds_and_the_prompt_drops_the_fact_when_it_expires(
    app: tuple[Node, ManualClock],
) -> None:
    node, clock = app
    t0 = clock.time()
    remember = {"key": "parking spot", "value": "level 3, bay 42", "ttl_seconds": 120}
    st.script("s1", st.calls(("memory_store", remember)), st.answer("Noted for two minutes."))
    await turn(node, "s1", "remember my parking spot for two minutes")
    tool_result = str(st.SCRIPTS["s1"].requests[1].messages[-1].content)
    assert str(t0 + 120) in tool_result  # the tool answers with expires_at
    views = await node.ask("memory", "list_memories", {"include_episodes": True}, ctx=ACME_USER)
    by_key = {m["key"]: m for m in views["memories"]}
    assert by_key["parking spot"]["expires_at"] == t0 + 120
    # The episode of that turn quotes the fact: it expires with it, not 90 days later.
    [episode] = [m for m in views["memories"] if m["kind"] == "episodic"]
    assert episode["expires_at"] == t0 + 120

    st.script("s2", st.answer("It is on level 3."))
    await turn(node, "s2", "where is my parking spot?")
    assert "bay 42" in prompt_of("s2")  # in the prompt's relevant memories

    await clock.advance(121)
    st.script("s3", st.answer("I do not know."))
    await turn(node, "s3", "where is my parking spot?")
    assert "parking spot" not in prompt_of("s3").split("where is my parking spot?")[0]
    assert "bay 42" not in prompt_of("s3")


@pytest.mark.parametrize("ttl", [0, -5, "soon"])
async def test_the_tool_refuses_a_bad_ttl(app: tuple[Node, ManualClock], ttl: Any) -> None:
    node, _ = app
    args = {"key": "k", "value": "v", "ttl_seconds": ttl}
    st.script("s1", st.calls(("memory_store", args)), st.answer("Done."))
    await turn(node, "s1", "remember k")
    result = str(st.SCRIPTS["s1"].requests[1].messages[-1].content)
    if ttl == 0:
        assert '"stored": true' in result  # 0: the kind's default
    else:
        assert "ttl_seconds" in result and '"stored"' not in result
        assert (await node.ask("memory", "recall_memory", {"key": "k"}, ctx=ACME_USER))["found"] is False
