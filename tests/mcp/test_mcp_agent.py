"""An agent turn that uses an MCP tool: the LLM calls it, the guardrails send it to a person, the approval
resumes the turn, the executor runs it on the MCP server and the LLM reads the (untrusted) result."""

from __future__ import annotations

from minihermes.embed import MiniHermes

from .conftest import http_config


async def test_a_turn_pauses_for_approval_then_runs_the_mcp_tool(tmp_path, http_server):
    script = [
        {
            "content": "",
            "stop_reason": "tool_use",
            "tool_calls": [{"name": "mcp_t_add", "input": {"a": 2, "b": 3}}],
        },
        {"content": "The sum is 5."},
    ]
    async with MiniHermes(data_dir=tmp_path / "data") as mh:
        added = await mh.ask("mcp_manager", "add_server", http_config(http_server, tools=["add"]), timeout=60)
        assert added["tools"] == ["mcp_t_add"]
        await mh.ask(
            "llm_gateway",
            "register_provider",
            {"name": "script", "kind": "scripted", "model": "scripted", "options": {"script": script}},
        )
        await mh.ask("llm_gateway", "switch_provider", {"provider": "script"})

        paused = await mh.chat("add 2 and 3 with the MCP server", session_id="m1")
        assert paused["status"] == "paused"
        (approval,) = (await mh.ask("guardrails", "list_approvals", {}))["approvals"]
        assert approval["tool"] == "mcp_t_add" and approval["input"] == {"a": 2, "b": 3}

        # Nobody approves their own request: the approval comes from another admin.
        from minihermes.runtime import RequestContext

        reviewer = RequestContext(tenant="default", principal="reviewer", roles=frozenset({"admin"}))
        done = await mh.node.ask(
            "guardrails", "approve", {"approval_id": approval["approval_id"]}, 120, ctx=reviewer
        )
        assert done["decision"] == "approved"
        assert done["turn"]["status"] == "ok" and done["turn"]["response"] == "The sum is 5."

        (call,) = await mh.tool_history("m1")
        assert call["tool"] == "mcp_t_add" and not call["is_error"]
        assert call["output"]["untrusted_content"]["structured"] == {"result": 5}
