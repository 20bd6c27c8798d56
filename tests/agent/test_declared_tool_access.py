"""The tool executor authorizes a tool call with the same effective access as the HTTP edge: the access
class the op declares on its handler (``@call(access=...)``) under the permission table's overrides."""

from __future__ import annotations

from typing import Any

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.permissions import PermissionTable
from minihermes.runtime import ActorSpec, GenServer, call
from minihermes.tools import MUTATING, TRUSTED, Tool, ToolEnv, Toolset

from .conftest import ACME_USER, ACME_VIEWER


class Notes(GenServer):
    @call(access="write")  # in no table: only the declaration lets a user call it
    def add(self, text: str) -> dict[str, Any]:
        return {"status": "ok", "text": text}


async def add_note(args: dict[str, Any], env: ToolEnv) -> Any:
    return await env.host.ask("notes", "add", {"text": args["text"]})


NOTES = Toolset(
    "notes",
    [
        Tool(
            "note_add",
            "Add a note.",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            MUTATING,
            TRUSTED,
            handler=add_note,
            permission=("notes", "add"),
        )
    ],
)


def specs(**tool_args: Any) -> list[ActorSpec]:
    return [
        ActorSpec("audit_event", AuditEvent, per_tenant=True),
        ActorSpec("notes", Notes, per_tenant=True),
        ActorSpec("tool_executor", ToolExecutor, per_tenant=True, args={"toolsets": [NOTES], **tool_args}),
    ]


async def run(node: Any, ctx: Any) -> Any:
    return await node.ask("tool_executor", "execute", {"name": "note_add", "input": {"text": "hi"}}, ctx=ctx)


async def test_a_tool_call_gets_the_ops_declared_access(make_node: Any) -> None:
    node = await make_node(specs())
    described = await node.ask("tool_executor", "describe_tool", {"name": "note_add"}, ctx=ACME_USER)
    assert described["permission"] == {"actor": "notes", "op": "add"}
    assert (await run(node, ACME_USER))["result"]["text"] == "hi"  # write: a user may
    refused = await run(node, ACME_VIEWER)  # a viewer may not
    assert refused["error"]["code"] == "permission_denied" and refused["error"]["access"] == "write"


async def test_the_table_overrides_the_declaration_for_tools_too(make_node: Any) -> None:
    node = await make_node(specs(permissions=PermissionTable({("notes", "add"): "admin"})))
    assert (await run(node, ACME_USER))["error"]["code"] == "permission_denied"
