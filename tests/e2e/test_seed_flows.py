"""The documented test-script flows, end to end over HTTP, sent as the curl examples send them."""

from __future__ import annotations

import httpx

API = "/api/v1/actors"
SECRET = "sk-ant-THIS-KEY-MUST-NEVER-COME-BACK-9f8e7d"


async def ask(client: httpx.AsyncClient, actor: str, body: dict, status: int = 200) -> dict:
    r = await client.post(f"{API}/{actor}/{body['op']}", json=body)
    assert r.status_code == status, r.text
    return r.json()


async def test_simple_chat_and_calculation(client):
    reply = await ask(client, "agent", {"op": "chat", "message": "Hello", "session_id": "test-1"})
    assert reply["status"] == "ok" and reply["session_id"] == "test-1" and reply["response"]
    reply = await ask(client, "agent", {"op": "chat", "message": "Calculate 42 * 17", "session_id": "test-1"})
    assert "714" in reply["response"] and reply["tool_calls"] >= 1
    chained = await ask(
        client,
        "agent",
        {"op": "chat", "message": "calculate 42 * 17 and remember the result", "session_id": "t2"},
    )
    assert "714" in chained["response"] and chained["tool_calls"] == 2


async def test_memory_store_and_recall_across_sessions(client):
    await ask(
        client,
        "agent",
        {"op": "chat", "message": "remember that my favourite colour is teal", "session_id": "a"},
    )
    reply = await ask(
        client, "agent", {"op": "chat", "message": "what is my favourite colour", "session_id": "b"}
    )
    assert "teal" in reply["response"].lower()
    found = await ask(client, "memory", {"op": "search_memories", "query": "colour"})
    assert any("teal" in m["value"] for m in found["memories"])


async def test_register_a_tool_at_run_time(client):
    await ask(
        client,
        "tool_executor",
        {
            "op": "register_tool",
            "name": "weather",
            "description": "Get weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "handler_type": "service_link",
            "handler_config": {"link_name": "openweather", "path": "/data/2.5/weather", "method": "GET"},
        },
    )
    tools = await ask(client, "tool_executor", {"op": "list_tools"})
    assert "weather" in [t["name"] for t in tools["tools"]]


async def test_switch_provider_hot_swap(client):
    # no key configured: the switch is refused with a 409 that names the fix, and nothing changes
    body = {"provider": "anthropic", "model": "claude-opus-4-8"}
    r = await client.post(f"{API}/llm_gateway/switch_provider", json=body)
    assert r.status_code == 409 and r.json()["error"]["code"] == "provider_not_configured"
    assert "register_credential" in r.json()["error"]["message"]
    await ask(
        client, "llm_gateway", {"op": "register_credential", "phantom_token": "ant", "api_key": "sk-ant-x1"}
    )
    await ask(
        client,
        "llm_gateway",
        {
            "op": "register_provider",
            "name": "anthropic",
            "kind": "anthropic",
            "model": "claude-sonnet-4-5",
            "credential": "ant",
            "base_url": "http://127.0.0.1:9",
        },
    )
    reply = await ask(client, "llm_gateway", {"op": "switch_provider", **body})
    assert (
        reply["status"] == "ok" and reply["provider"] == "anthropic" and reply["model"] == "claude-opus-4-8"
    )
    # a key but no server: the next call fails over nowhere and says so; no simulated answer is substituted
    r = await client.post(f"{API}/agent/chat", json={"message": "hi", "session_id": "sw"})
    assert r.status_code in (502, 503) and r.json()["error"]["code"] == "llm_unavailable"
    back = await ask(
        client, "llm_gateway", {"op": "switch_provider", "provider": "simulated", "model": "simulated"}
    )
    assert back["provider"] == "simulated"


async def test_deny_policy_refuses_the_tool(client):
    await ask(client, "guardrails", {"op": "set_policy", "tool_name": "delete_file", "decision": "deny"})
    check = await ask(client, "guardrails", {"op": "check_tool", "tool_name": "delete_file", "input": {}})
    assert check["decision"] == "deny"
    await ask(client, "guardrails", {"op": "set_policy", "tool_name": "calculator", "decision": "deny"})
    reply = await ask(client, "agent", {"op": "chat", "message": "calculate 6 * 7", "session_id": "d"})
    assert "42" not in reply["response"]
    history = await ask(client, "agent", {"op": "get_history", "session_id": "d"})
    assert any(m["role"] == "tool" and "denied" in m["content"] for m in history["messages"])


async def test_review_policy_pauses_and_approve_resumes(client):
    await ask(client, "guardrails", {"op": "set_policy", "tool_name": "calculator", "decision": "review"})
    paused = await ask(
        client, "agent", {"op": "chat", "message": "calculate 42 * 17", "session_id": "rv", "user_id": "bob"}
    )
    assert paused["status"] == "paused" and paused["pending_tool"]["name"] == "calculator"
    pending = await ask(client, "guardrails", {"op": "list_approvals"})
    (approval,) = [a for a in pending["approvals"] if a["approval_id"] == paused["approval_id"]]
    assert approval["tool"] == "calculator" and approval["session_id"] == "rv"
    done = await ask(client, "guardrails", {"op": "approve", "approval_id": paused["approval_id"]})
    assert done["decision"] == "approved" and "714" in done["turn"]["response"]
    assert (await ask(client, "guardrails", {"op": "list_approvals"}))["approvals"] == []


async def test_health_and_audit(client):
    await ask(client, "agent", {"op": "chat", "message": "calculate 2 + 2", "session_id": "h"})
    health = await ask(client, "health_monitor", {"op": "get_health"})
    assert health["status"] in ("ok", "degraded") and "group_health" in health
    events = await ask(client, "audit_event", {"op": "query_events", "event_type": "tool_executed"})
    assert events["count"] >= 1 and all(e["event_type"] == "tool_executed" for e in events["events"])


async def test_register_credential_never_echoes_the_key(client):
    r = await client.post(
        f"{API}/llm_gateway/register_credential", json={"phantom_token": "anthropic-main", "api_key": SECRET}
    )
    assert r.status_code == 200 and SECRET not in r.text
    for op, body in [
        ("get_stats", {}),
        ("get_circuit", {}),
        (
            "register_provider",
            {
                "name": "claude",
                "kind": "anthropic",
                "model": "m",
                "credential": "anthropic-main",
                "base_url": "http://127.0.0.1:9",
            },
        ),
    ]:
        r = await client.post(f"{API}/llm_gateway/{op}", json=body)
        assert SECRET not in r.text
    await ask(client, "llm_gateway", {"op": "switch_provider", "provider": "claude"})
    r = await client.post(f"{API}/agent/chat", json={"message": "hi", "session_id": "cred"})
    assert SECRET not in r.text
    events = await client.post(f"{API}/audit_event/query_events", json={"limit": 1000})
    assert SECRET not in events.text
