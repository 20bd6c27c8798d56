"""memory: a user names only their own sessions as a fact's ``source_session`` (or ``session_id``); admins
name any (issue 23, item 9). Ownership is the session owner index (written at a session's first turn) or,
before any turn, the session manager's record."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.memory import Memory
from minihermes.agent.session_manager import SessionManager
from minihermes.runtime import ActorSpec, PermissionDenied, RequestContext

from .conftest import ACME, ACME_USER

CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))
SPECS = [
    ActorSpec("audit_event", AuditEvent, per_tenant=True),
    ActorSpec("memory", Memory, per_tenant=True),
    ActorSpec("session_manager", SessionManager, per_tenant=True),
]


async def mem(node: Any, op: str, ctx: RequestContext, **payload: Any) -> Any:
    return await node.ask("memory", op, payload, ctx=ctx)


async def bobs_session(node: Any) -> str:
    """A session bob started a turn in (the agent records its owner then)."""
    await node.store.tuples.write(ACME.scope, ["session_owner", "s-bob", "bob"])
    return "s-bob"


@pytest.mark.parametrize(
    "naming",
    [
        {"source_session": "SID"},
        {"session_id": "SID"},  # the source defaults to it
        {"session_id": "SID", "scope": "session"},
        {"session_id": "s-carol", "source_session": "SID"},
    ],
)
async def test_a_user_cannot_name_another_users_session(make_node: Any, naming: dict[str, str]) -> None:
    node = await make_node(SPECS)
    sid = await bobs_session(node)
    payload = {k: v.replace("SID", sid) for k, v in naming.items()}
    with pytest.raises(PermissionDenied) as info:
        await mem(node, "store_memory", CAROL, key="k", value="planted", **payload)
    field = "source_session" if "source_session" in naming else "session_id"
    assert info.value.details["field"] == field
    assert "not yours" in str(info.value)
    assert (await mem(node, "list_memories", ACME))["total"] == 0
    # bob's forgetting of his session takes nothing of carol's along, and there is nothing to take.
    assert (await mem(node, "forget", ACME_USER, session_id=sid))["memories"] == 0


async def test_a_user_names_their_own_or_a_new_session(make_node: Any) -> None:
    node = await make_node(SPECS)
    sid = await bobs_session(node)
    await mem(node, "store_memory", ACME_USER, key="a", value="x", source_session=sid)
    await mem(node, "store_memory", ACME_USER, key="b", value="y", session_id=sid, scope="session")
    await mem(node, "store_memory", ACME_USER, key="c", value="z", source_session="s-new")
    listed = (await mem(node, "list_memories", ACME_USER))["memories"]
    assert {m["key"]: m.get("source_session") for m in listed} == {"a": sid, "b": sid, "c": "s-new"}


async def test_an_admin_names_any_session(make_node: Any) -> None:
    node = await make_node(SPECS)
    sid = await bobs_session(node)
    await mem(node, "store_memory", ACME, key="shared", value="x", source_session=sid)
    await mem(
        node, "store_memory", ACME, key="his", value="y", source_session=sid, private=True, user_id="bob"
    )
    found = (await mem(node, "list_memories", ACME_USER))["memories"]
    assert {m["key"] for m in found} == {"shared", "his"}


async def test_a_session_not_yet_started_is_its_owners_by_the_session_manager(make_node: Any) -> None:
    node = await make_node(SPECS)
    made = await node.ask("session_manager", "create_session", {"channel": "web"}, ctx=CAROL)
    sid = made["session_id"]
    with pytest.raises(PermissionDenied):
        await mem(node, "store_memory", ACME_USER, key="k", value="planted", source_session=sid)
    await mem(node, "store_memory", CAROL, key="k", value="hers", source_session=sid)
    for_bob = await node.ask("session_manager", "create_session", {"user_id": "bob"}, ctx=ACME)
    await mem(node, "store_memory", ACME_USER, key="k", value="his", source_session=for_bob["session_id"])
