"""SIGKILL the server, start it again on the same data dir: everything acknowledged is back."""

from __future__ import annotations

import httpx
import pytest

API = "/api/v1/actors"


async def call(c: httpx.AsyncClient, actor: str, op: str, body: dict, status: int = 200) -> dict:
    r = await c.post(f"{API}/{actor}/{op}", json=body)
    assert r.status_code == status, (actor, op, r.status_code, r.text)
    return r.json()


@pytest.mark.slow
async def test_everything_is_back_after_sigkill(server_factory, tmp_path):
    data = tmp_path / "data"
    srv = await server_factory(data)
    async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
        await call(
            c, "agent", "chat", {"message": "calculate 42 * 17 and remember the result", "session_id": "s1"}
        )
        await call(
            c, "agent", "chat", {"message": "remember that my favourite colour is teal", "session_id": "s1"}
        )
        history = (await call(c, "agent", "get_history", {"session_id": "s1"}))["messages"]
        await call(
            c,
            "tool_executor",
            "register_tool",
            {
                "name": "weather",
                "description": "Get weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                "handler_type": "service_link",
                "handler_config": {"link_name": "openweather", "path": "/data/2.5/weather", "method": "GET"},
            },
        )
        await call(c, "guardrails", "set_policy", {"tool_name": "delete_file", "decision": "deny"})
        await call(c, "guardrails", "set_policy", {"tool_name": "calculator", "decision": "review"})
        paused = await call(
            c, "agent", "chat", {"message": "calculate 2 * 3", "session_id": "s2", "user_id": "bob"}
        )
        assert paused["status"] == "paused"
        # a provider that fails (nothing listens on its port) trips its circuit; then switch away
        await call(
            c,
            "llm_gateway",
            "register_provider",
            {
                "name": "broken",
                "kind": "openai",
                "model": "x",
                "base_url": "http://127.0.0.1:9/v1",
                "timeout": 2,
            },
        )
        await call(c, "llm_gateway", "switch_provider", {"provider": "broken"})
        for i in range(3):
            await call(c, "agent", "chat", {"message": f"hi {i}", "session_id": f"b{i}"}, status=503)
        circuit = await call(c, "llm_gateway", "get_circuit", {"provider": "broken"})
        assert circuit["state"] == "open"
        await call(c, "llm_gateway", "switch_provider", {"provider": "simulated", "model": "sim-2"})
        # Read right after the last acknowledged action: every event of an acknowledged action is in it.
        trail = (await call(c, "audit_event", "query_events", {"limit": 1000}))["events"]

    await srv.kill()  # SIGKILL: no flush, no goodbye
    srv2 = await server_factory(data)
    async with httpx.AsyncClient(base_url=srv2.url, timeout=60) as c:
        assert (await call(c, "agent", "get_history", {"session_id": "s1"}))["messages"] == history
        recall = await call(c, "memory", "recall_memory", {"key": "favourite colour"})
        assert recall["found"] and recall["value"] == "teal"
        tools = [t["name"] for t in (await call(c, "tool_executor", "list_tools", {}))["tools"]]
        assert "weather" in tools
        policies = (await call(c, "guardrails", "get_policies", {}))["policies"]
        assert policies.get("delete_file") == "deny" and policies.get("calculator") == "review"
        pending = (await call(c, "guardrails", "list_approvals", {}))["approvals"]
        assert [a["approval_id"] for a in pending] == [paused["approval_id"]]
        providers = await call(c, "llm_gateway", "list_providers", {})
        assert providers["active"]["provider"] == "simulated" and providers["active"]["model"] == "sim-2"
        assert (await call(c, "llm_gateway", "get_circuit", {"provider": "broken"}))["state"] == "open"
        # The audit trail: what was read before the kill is all there, unchanged and still chained, with an
        # event for each kind of action acknowledged above.
        after = (await call(c, "audit_event", "query_events", {"limit": 1000}))["events"]
        assert [(e["seq"], e["hash"]) for e in after[: len(trail)]] == [(e["seq"], e["hash"]) for e in trail]
        kinds = {e["event_type"] for e in after}
        assert {
            "tool_executed",
            "tool_registered",
            "policy_set",
            "provider_switched",
            "circuit_changed",
        } <= kinds
        assert sum(1 for e in after if e["event_type"] == "policy_set") == 2
        assert (await call(c, "audit_event", "verify", {}))["ok"] is True
        # the paused turn can still be approved after the restart, and finishes
        done = await call(c, "guardrails", "approve", {"approval_id": paused["approval_id"]})
        assert "6" in done["turn"]["response"]
    assert await srv2.terminate() == 0
