"""Tool access (issue 17): every tool declares what a call does in the permission model; tools a user
registers are their own (listed to and run by them only, untrusted, bounded in number)."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.memory import Memory
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS, default_config
from minihermes.permissions import DEFAULT_PERMISSIONS, ROLES
from minihermes.runtime import ActorError, ActorSpec, RequestContext
from minihermes.tools.catalog import Catalog
from minihermes.tools.contract import resolve_permission

from .conftest import ACME, ACME_USER, ACME_VIEWER

ALICE_USER = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
SUM = {
    "name": "double",
    "description": "Calculate with a fixed expression",
    "input_schema": {"type": "object"},
    "handler_type": "calculator",
    "handler_config": {"fixed_input": {"expression": "2 * 21"}},
}


def specs(**tool_args: Any) -> list[ActorSpec]:
    return [
        ActorSpec("audit_event", AuditEvent, per_tenant=True),
        ActorSpec("memory", Memory, per_tenant=True),
        ActorSpec("tool_executor", ToolExecutor, per_tenant=True, args=tool_args),
    ]


async def ask(node: Any, op: str, payload: dict[str, Any], ctx: RequestContext = ACME) -> Any:
    return await node.ask("tool_executor", op, payload, ctx=ctx)


def test_every_built_in_tool_declares_its_permission():
    BUILTINS = Catalog(TOOLSETS).tools  # every toolset of the agent app
    # the app's classified ops: declared on their handlers (@call(access=...)) or listed in the table
    classified = DEFAULT_PERMISSIONS.with_declared(
        {s.name: s.cls for s in default_config().tree.walk()}
    ).entries()
    assert resolve_permission(None, {}) == "admin"  # a kind that declares nothing is closed
    for name, tool in BUILTINS.items():
        assert tool.permission is not None, name
        got = tool.permission_for({"action": "create", "method": "GET"})
        if isinstance(got, tuple):
            assert got in classified, (name, got)  # a classified op, not a closed-by-accident one
        else:
            assert got in ("read", "write"), (name, got)
    assert BUILTINS["kanban_delete"].permission_for({}) == ("kanban", "delete")
    assert BUILTINS["skill_manage"].permission_for({"action": "list"}) == ("skill_tools", "list_tools")
    assert BUILTINS["http_request"].permission_for({"method": "POST"}) == "write"
    assert set(ROLES) == {"admin", "user", "viewer"}


async def test_describe_shows_what_a_call_needs(make_node):
    node = await make_node(specs())
    store = await ask(node, "describe_tool", {"name": "memory_store"}, ACME_USER)
    assert store["permission"] == {"actor": "memory", "op": "store_memory"} and store["owner"] == ""
    calc = await ask(node, "describe_tool", {"name": "calculator"}, ACME_VIEWER)
    assert calc["permission"] == {"access": "read"}
    refused = await ask(
        node, "execute", {"name": "memory_store", "input": {"key": "k", "value": "v"}}, ACME_VIEWER
    )
    assert refused["error"]["code"] == "permission_denied"
    assert (refused["error"]["actor"], refused["error"]["op"]) == ("memory", "store_memory")


async def test_a_users_tool_is_their_own(make_node):
    node = await make_node(specs())
    with pytest.raises(ActorError) as e:  # a link or a function: only an admin wires those up
        await ask(
            node,
            "register_tool",
            {**SUM, "handler_type": "service_link", "handler_config": {"link_name": "w", "path": "/w"}},
            ACME_USER,
        )
    assert e.value.code == "permission_denied"
    with pytest.raises(ActorError) as e:
        await ask(node, "register_tool", SUM, ACME_VIEWER)
    assert e.value.code == "permission_denied"
    got = await ask(node, "register_tool", {**SUM, "owner": "alice"}, ACME_USER)  # the owner is the caller
    assert got["owner"] == "bob" and got["trust"] == "untrusted"
    bobs = await ask(node, "list_tools", {}, ACME_USER)
    alices = await ask(node, "list_tools", {}, ALICE_USER)
    assert "double" in {t["name"] for t in bobs["tools"]}
    assert "double" not in {t["name"] for t in alices["tools"]}
    assert bobs["digest"] != alices["digest"]
    ran = await ask(node, "execute", {"name": "double", "input": {}}, ACME_USER)
    assert ran["untrusted"] is True and ran["result"]["untrusted_content"]["result"] == 42
    assert (await ask(node, "execute", {"name": "double", "input": {}}, ALICE_USER))["error"][
        "code"
    ] == "unknown_tool"
    with pytest.raises(ActorError) as e:  # alice cannot take it over
        await ask(node, "register_tool", SUM, ALICE_USER)
    assert e.value.code == "permission_denied"
    with pytest.raises(ActorError) as e:
        await ask(node, "unregister_tool", {"name": "double"}, ALICE_USER)
    assert e.value.code == "permission_denied"
    # an admin makes it the tenant's by registering it without an owner
    tenant = await ask(node, "register_tool", SUM, ACME)
    assert "owner" not in tenant and tenant["trust"] == "trusted"
    assert "double" in {t["name"] for t in (await ask(node, "list_tools", {}, ALICE_USER))["tools"]}
    with pytest.raises(ActorError) as e:  # and then bob no longer replaces or removes it
        await ask(node, "register_tool", SUM, ACME_USER)
    assert e.value.code == "permission_denied"
    await ask(node, "register_tool", {**SUM, "name": "mine"}, ACME_USER)
    assert (await ask(node, "unregister_tool", {"name": "mine"}, ACME_USER))["status"] == "ok"


async def test_a_principal_owns_a_bounded_number_of_tools(make_node):
    node = await make_node(specs(max_owned_tools=2))
    for name in ("one", "two"):
        await ask(node, "register_tool", {**SUM, "name": name}, ACME_USER)
    await ask(node, "register_tool", {**SUM, "name": "two"}, ACME_USER)  # a new version is not a new tool
    with pytest.raises(ActorError) as e:
        await ask(node, "register_tool", {**SUM, "name": "three"}, ACME_USER)
    assert e.value.code == "quota_exceeded"
    assert (await ask(node, "register_tool", {**SUM, "name": "three"}, ALICE_USER))["owner"] == "alice"
