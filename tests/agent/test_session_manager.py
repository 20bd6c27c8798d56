"""session_manager: KV-backed sessions with a channel+user index, tenant-scoped, per-user visibility, audited."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.session_manager import SessionManager, channel_of, session_title
from minihermes.app import build_agent_node, default_config
from minihermes.permissions import DEFAULT_PERMISSIONS
from minihermes.runtime import (
    ActorSpec,
    InvalidArgument,
    ManualClock,
    Node,
    NotFound,
    PermissionDenied,
    RequestContext,
)

from .conftest import ACME, ACME_USER, ACME_VIEWER, GLOBEX

ACME_USER2 = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))


def specs() -> list[ActorSpec]:
    return [
        ActorSpec("audit_event", AuditEvent, per_tenant=True),
        ActorSpec("session_manager", SessionManager, per_tenant=True),
    ]


async def test_create_get_by_id_and_by_channel_index(make_node):
    node = await make_node(specs())
    r = await node.ask(
        "session_manager", "create_session", {"channel": "telegram", "user_id": "u1"}, ctx=ACME
    )
    sid = r["session_id"]
    assert r["status"] == "ok" and sid.startswith("sess-") and len(sid) == 37
    assert r["state"] == "active" and r["channel"] == "telegram" and r["user_id"] == "u1"
    by_id = await node.ask("session_manager", "get_session", {"session_id": sid}, ctx=ACME)
    by_index = await node.ask(
        "session_manager", "get_session", {"channel": "telegram", "user_id": "u1"}, ctx=ACME
    )
    assert by_id == by_index and by_id["session_id"] == sid


async def test_session_ids_are_unguessable_and_index_points_at_newest(make_node):
    node = await make_node(specs())
    ids = [
        (await node.ask("session_manager", "create_session", {"channel": "web", "user_id": "u"}, ctx=ACME))[
            "session_id"
        ]
        for _ in range(20)
    ]
    assert len(set(ids)) == 20
    # no shared structure between consecutive ids beyond the prefix (random, not a counter or a timestamp)
    assert len({i[5:13] for i in ids}) == 20
    got = await node.ask("session_manager", "get_session", {"channel": "web", "user_id": "u"}, ctx=ACME)
    assert got["session_id"] == ids[-1]


async def test_index_keys_do_not_collide_through_separators(make_node):
    node = await make_node(specs())
    a = await node.ask("session_manager", "create_session", {"channel": "a:b", "user_id": "c"}, ctx=ACME)
    b = await node.ask("session_manager", "create_session", {"channel": "a", "user_id": "b:c"}, ctx=ACME)
    got_a = await node.ask("session_manager", "get_session", {"channel": "a:b", "user_id": "c"}, ctx=ACME)
    got_b = await node.ask("session_manager", "get_session", {"channel": "a", "user_id": "b:c"}, ctx=ACME)
    assert got_a["session_id"] == a["session_id"] and got_b["session_id"] == b["session_id"]


async def test_end_session_is_idempotent_and_unindexes(make_node):
    node = await make_node(specs())
    sid = (await node.ask("session_manager", "create_session", {"user_id": "u"}, ctx=ACME))["session_id"]
    r = await node.ask("session_manager", "end_session", {"session_id": sid}, ctx=ACME)
    assert r == {"status": "ok", "session_id": sid, "state": "ended", "already_ended": False}
    again = await node.ask("session_manager", "end_session", {"session_id": sid}, ctx=ACME)
    assert again["already_ended"] is True
    got = await node.ask("session_manager", "get_session", {"session_id": sid}, ctx=ACME)
    assert got["state"] == "ended" and got["ended_at"] is not None
    with pytest.raises(NotFound):
        await node.ask("session_manager", "get_session", {"channel": "web", "user_id": "u"}, ctx=ACME)


async def test_missing_and_malformed_lookups_are_structured(make_node):
    node = await make_node(specs())
    with pytest.raises(NotFound):
        await node.ask("session_manager", "get_session", {"session_id": "sess-nope"}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "get_session", {}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "get_session", {"session_id": "../../etc"}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "create_session", {"channel": "", "user_id": "u"}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "create_session", {"channel": "x\n", "user_id": "u"}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "list_sessions", {"state": "zombie"}, ctx=ACME)


async def test_tenants_never_see_each_others_sessions(make_node):
    node = await make_node(specs())
    sid = (await node.ask("session_manager", "create_session", {"user_id": "u"}, ctx=ACME))["session_id"]
    with pytest.raises(NotFound):
        await node.ask("session_manager", "get_session", {"session_id": sid}, ctx=GLOBEX)
    with pytest.raises(NotFound):
        await node.ask("session_manager", "end_session", {"session_id": sid}, ctx=GLOBEX)
    assert (await node.ask("session_manager", "list_sessions", {}, ctx=GLOBEX))["sessions"] == []
    assert (await node.ask("session_manager", "list_sessions", {}, ctx=ACME))["count"] == 1


async def test_users_see_only_their_own_sessions(make_node):
    node = await make_node(specs())
    mine = await node.ask("session_manager", "create_session", {"channel": "web"}, ctx=ACME_USER)
    assert mine["user_id"] == "bob"  # a user's session belongs to the user, whatever the default says
    theirs = await node.ask("session_manager", "create_session", {}, ctx=ACME_USER2)
    admin_made = await node.ask("session_manager", "create_session", {"user_id": "bob"}, ctx=ACME)
    with pytest.raises(PermissionDenied):
        await node.ask("session_manager", "create_session", {"user_id": "carol"}, ctx=ACME_USER)
    with pytest.raises(NotFound):  # same answer as a missing session: existence is not disclosed
        await node.ask("session_manager", "get_session", {"session_id": theirs["session_id"]}, ctx=ACME_USER)
    with pytest.raises(NotFound):
        await node.ask("session_manager", "end_session", {"session_id": theirs["session_id"]}, ctx=ACME_USER)
    with pytest.raises(PermissionDenied):
        await node.ask("session_manager", "list_sessions", {"user_id": "carol"}, ctx=ACME_USER)
    listed = await node.ask("session_manager", "list_sessions", {}, ctx=ACME_USER)
    assert {s["session_id"] for s in listed["sessions"]} == {mine["session_id"], admin_made["session_id"]}
    assert (await node.ask("session_manager", "list_sessions", {}, ctx=ACME))["total"] == 3
    # a viewer owns no session and sees none of the users' (their transcripts are theirs)
    assert (await node.ask("session_manager", "list_sessions", {}, ctx=ACME_VIEWER))["total"] == 0
    with pytest.raises(NotFound):
        await node.ask("session_manager", "get_session", {"session_id": mine["session_id"]}, ctx=ACME_VIEWER)
    only_carol = await node.ask("session_manager", "list_sessions", {"user_id": "carol"}, ctx=ACME)
    assert [s["session_id"] for s in only_carol["sessions"]] == [theirs["session_id"]]


async def test_owner_lists_a_principals_own_sessions_also_for_an_admin(make_node):
    """The dashboard's chat picker: an admin's list is everyone's, ``owner`` narrows it to theirs (those
    made for them, and those they made for nobody in particular), never another user's."""
    node = await make_node(specs())

    async def make(ctx: RequestContext, **args: Any) -> str:
        return str((await node.ask("session_manager", "create_session", args, ctx=ctx))["session_id"])

    for_alice = await make(ACME, user_id="alice")
    by_alice = await make(ACME)  # user_id left out: "anonymous", made by alice
    other_admins = await make(RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"})))
    bobs = await make(ACME_USER)

    async def owned(ctx: RequestContext, owner: str, **more: Any) -> set[str]:
        reply = await node.ask("session_manager", "list_sessions", {"owner": owner, **more}, ctx=ctx)
        return {s["session_id"] for s in reply["sessions"]}

    assert await owned(ACME, "alice") == {for_alice, by_alice}
    assert await owned(ACME, "ada") == {other_admins}
    assert await owned(ACME, "bob") == {bobs}
    assert await owned(ACME_USER, "bob") == {bobs}
    with pytest.raises(PermissionDenied):
        await owned(ACME_USER, "alice")
    assert await owned(ACME, "alice", user_id="alice") == {for_alice}
    assert await owned(GLOBEX, "alice") == set()


async def test_list_filters_order_and_limit(make_node, clock):
    node = await make_node(specs())
    ids = []
    for ch in ("web", "cli", "web"):
        ids.append(
            (await node.ask("session_manager", "create_session", {"channel": ch, "user_id": "u"}, ctx=ACME))[
                "session_id"
            ]
        )
        await clock.advance(1)
    await node.ask("session_manager", "end_session", {"session_id": ids[0]}, ctx=ACME)
    everything = await node.ask("session_manager", "list_sessions", {}, ctx=ACME)
    assert [s["session_id"] for s in everything["sessions"]] == ids[::-1]
    active_web = await node.ask(
        "session_manager", "list_sessions", {"state": "active", "channel": "web"}, ctx=ACME
    )
    assert [s["session_id"] for s in active_web["sessions"]] == [ids[2]]
    top = await node.ask("session_manager", "list_sessions", {"limit": 1}, ctx=ACME)
    assert top["count"] == 1 and top["total"] == 3


async def test_touch_updates_last_active(make_node, clock):
    node = await make_node(specs())
    r = await node.ask("session_manager", "create_session", {}, ctx=ACME)
    await clock.advance(30)
    assert await node.ask("session_manager", "touch", {"session_id": r["session_id"]}, ctx=ACME) == {
        "status": "accepted"
    }
    got = await node.ask("session_manager", "get_session", {"session_id": r["session_id"]}, ctx=ACME)
    assert got["last_active_at"] == pytest.approx(r["created_at"] + 30)
    node.send("session_manager", "touch", {"session_id": "sess-unknown"}, ctx=ACME)  # ignored, no crash
    assert (await node.ask("session_manager", "get_stats", {}, ctx=ACME))["total_created"] == 1


async def test_sessions_survive_a_restart(make_node, tmp_path):
    node = await make_node(specs(), data_dir=tmp_path / "d")
    sid = (await node.ask("session_manager", "create_session", {"channel": "c", "user_id": "u"}, ctx=ACME))[
        "session_id"
    ]
    await node.stop()
    node2 = await make_node(specs(), data_dir=tmp_path / "d")
    got = await node2.ask("session_manager", "get_session", {"channel": "c", "user_id": "u"}, ctx=ACME)
    assert got["session_id"] == sid
    assert (await node2.ask("session_manager", "get_stats", {}, ctx=ACME))["total_created"] == 1


async def test_start_and_end_are_audited(make_node):
    node = await make_node(specs())
    sid = (await node.ask("session_manager", "create_session", {"channel": "web", "user_id": "u"}, ctx=ACME))[
        "session_id"
    ]
    await node.ask("session_manager", "end_session", {"session_id": sid}, ctx=ACME)
    events = (await node.ask("audit_event", "query_events", {"session_id": sid}, ctx=ACME))["events"]
    assert [e["event_type"] for e in events] == ["session_started", "session_ended"]
    assert events[0]["principal"] == "alice" and events[0]["data"]["channel"] == "web"


async def test_works_without_an_audit_actor(make_node):
    node = await make_node([ActorSpec("session_manager", SessionManager, per_tenant=True)])
    r = await node.ask("session_manager", "create_session", {}, ctx=ACME)
    assert r["status"] == "ok"


# -- sessions from every door (issue 19): the agent registers each turn's session -----------------------------

BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))


@pytest.fixture
async def app(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Node]:
    """The whole agent app (simulated model) on SQLite with the manual clock."""
    config = default_config(tmp_path / "data")
    for spec in config.tree.walk():
        if spec.name == "memory":
            spec.args["semantic"] = False
        if spec.name == "skill_store":
            spec.args["semantic"] = "off"
    node = build_agent_node(config, clock=clock)
    await node.start()
    yield node
    await node.stop(deadline=5)


async def chat(node: Node, ctx: RequestContext, session_id: str, message: str, **extra: Any) -> None:
    reply = await node.ask("agent", "chat", {"message": message, "session_id": session_id, **extra}, ctx=ctx)
    assert reply["status"] == "ok", reply


async def listed(node: Node, ctx: RequestContext, **filters: Any) -> list[dict[str, Any]]:
    return list((await node.ask("session_manager", "list_sessions", filters, ctx=ctx))["sessions"])


async def test_every_turn_registers_its_session_with_owner_channel_title_and_activity(app, clock):
    await chat(app, BOB, "plain-1", "  What is 17 + 25?\nand some more detail on a second line")
    [s] = await listed(app, BOB)
    assert (s["session_id"], s["user_id"], s["channel"], s["state"]) == ("plain-1", "bob", "api", "active")
    assert s["title"] == "What is 17 + 25?" and s["message_count"] == 1
    first_active = s["last_active_at"]
    await clock.advance(10)
    await chat(app, BOB, "plain-2", "word " * 60)
    await clock.advance(10)
    await chat(app, BOB, "plain-1", "and times two?")
    sessions = await listed(app, BOB)
    assert [x["session_id"] for x in sessions] == ["plain-1", "plain-2"]  # the most recently active first
    again = sessions[0]
    assert again["last_active_at"] == first_active + 20 and again["message_count"] == 2
    assert again["title"] == "What is 17 + 25?"  # the first message's, kept
    long_title = sessions[1]["title"]
    assert len(long_title) <= 80 and long_title.endswith("…") and "\n" not in long_title
    # an admin sees every user's sessions; the owner is whoever chatted, never changed by another's turn
    await chat(app, ACME, "admin-1", "hello from the admin")
    assert {x["session_id"] for x in await listed(app, ACME)} == {"plain-1", "plain-2", "admin-1"}
    assert {x["session_id"] for x in await listed(app, BOB)} == {"plain-1", "plain-2"}


async def test_the_channel_is_the_doors_or_the_one_the_session_id_tells(app):
    await chat(app, BOB, "term", "from the terminal", channel="cli")
    await chat(app, BOB, "cron:water", "Remind me to water the plants")
    await chat(app, BOB, "kanban:t7:1", "Compute 6 * 7\n\nthe card's body")
    await chat(app, BOB, "delegate:abc", "You are a sub-agent.\n\nGoal: find the answer\n\nContext:\nx")
    got = {s["session_id"]: (s["channel"], s["title"]) for s in await listed(app, BOB)}
    assert got == {
        "term": ("cli", "from the terminal"),
        "cron:water": ("cron", "Remind me to water the plants"),
        "kanban:t7:1": ("kanban", "Compute 6 * 7"),
        "delegate:abc": ("delegation", "find the answer"),
    }


async def test_a_created_session_keeps_its_channel_and_gets_a_title(app):
    made = await app.ask("session_manager", "create_session", {"channel": "web"}, ctx=BOB)
    assert made["title"] == "" and made["message_count"] == 0
    await chat(app, BOB, made["session_id"], "plan my week")
    got = await app.ask("session_manager", "get_session", {"session_id": made["session_id"]}, ctx=BOB)
    assert (got["channel"], got["title"], got["message_count"], got["user_id"]) == (
        "web",
        "plan my week",
        1,
        "bob",
    )


async def test_a_session_another_principal_owns_is_never_changed(make_node, clock):
    node = await make_node(specs())
    carols = await node.ask("session_manager", "create_session", {"channel": "web"}, ctx=ACME_USER2)
    await clock.advance(5)
    node.send(
        "session_manager",
        "record_turn",
        {"session_id": carols["session_id"], "title_hint": "bob's"},
        ctx=ACME_USER,
    )
    node.send(
        "session_manager",
        "record_turn",
        {"session_id": "bob-1", "channel": "api", "title_hint": "mine"},
        ctx=ACME_USER,
    )
    node.send(
        "session_manager", "record_turn", {"session_id": "bad id!", "title_hint": "x"}, ctx=ACME_USER
    )  # ignored
    got = await node.ask(
        "session_manager", "get_session", {"session_id": carols["session_id"]}, ctx=ACME_USER2
    )
    assert got == {"status": "ok", **{k: v for k, v in carols.items() if k != "status"}}
    mine = await node.ask("session_manager", "get_session", {"session_id": "bob-1"}, ctx=ACME_USER)
    assert (mine["user_id"], mine["title"], mine["created_at"]) == ("bob", "mine", carols["created_at"] + 5)
    # a session id already registered by bob is his: carol's turn there changes nothing of it either
    node.send(
        "session_manager", "record_turn", {"session_id": "bob-1", "title_hint": "carol's"}, ctx=ACME_USER2
    )
    again = await node.ask("session_manager", "get_session", {"session_id": "bob-1"}, ctx=ACME_USER)
    assert again == mine
    assert (await node.ask("session_manager", "get_stats", {}, ctx=ACME))["total_created"] == 2


async def test_list_sessions_finds_sessions_by_title(make_node):
    node = await make_node(specs())
    for sid, title, ctx in (
        ("s1", "Plan the garden party", ACME_USER),
        ("s2", "garden: water the plants", ACME_USER),
        ("s3", "tax return", ACME_USER),
        ("s4", "Garden of carol", ACME_USER2),
    ):
        node.send("session_manager", "record_turn", {"session_id": sid, "title_hint": title}, ctx=ctx)
    found = await node.ask("session_manager", "list_sessions", {"query": "GARDEN"}, ctx=ACME_USER)
    assert {s["session_id"] for s in found["sessions"]} == {"s1", "s2"}  # bob's only
    both = await node.ask("session_manager", "list_sessions", {"query": "garden plants"}, ctx=ACME_USER)
    assert [s["session_id"] for s in both["sessions"]] == ["s2"]  # every word
    every = await node.ask("session_manager", "list_sessions", {"query": "garden"}, ctx=ACME)
    assert {s["session_id"] for s in every["sessions"]} == {"s1", "s2", "s4"}
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "list_sessions", {"query": "x" * 201}, ctx=ACME)


def test_record_turn_is_an_admins_op_over_http():
    """A user's turn casts it from inside the node; over HTTP nobody but an admin names sessions for others."""
    assert (
        DEFAULT_PERMISSIONS.with_declared({"session_manager": SessionManager}).access(
            "session_manager", "record_turn"
        )
        == "admin"
    )
    assert (
        channel_of("cli") == "cli" and channel_of("x", "telegram") == "telegram" and channel_of("x") == "api"
    )
    assert session_title("\n\n  a   b \n c") == "a b"
