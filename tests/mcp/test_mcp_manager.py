"""MCP servers per tenant: their tools are registered with the tool executor and run through it (stdio and
streamable HTTP), classified for the guardrails, isolated between tenants, reconnected after a crash."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from minihermes.runtime import Conflict, InvalidArgument, NotFound, PermissionDenied

from .conftest import ACME, ACME_USER, GLOBEX, http_config, stdio_server


async def _tools(node, ctx=ACME) -> dict[str, dict]:
    reply = await node.ask("tool_executor", "list_tools", {}, ctx=ctx)
    return {t["name"]: t for t in reply["tools"]}


async def _run(node, name, input, ctx=ACME):
    return await node.ask(
        "tool_executor", "execute", {"name": name, "input": input, "session_id": "s1"}, ctx=ctx, timeout=60
    )


async def test_stdio_server_tools_are_listed_and_run_through_the_executor(make_node):
    node = await make_node()
    added = await node.ask("mcp_manager", "add_server", stdio_server(), ctx=ACME, timeout=60)
    assert added["status"] == "ok"
    assert {"mcp_t_add", "mcp_t_shout", "mcp_t_fail"} <= set(added["tools"])
    # A name no provider accepts gets a safe name, with a hash so two tools never collide.
    odd = [n for n in added["tools"] if n.startswith("mcp_t_bad_name")]
    assert len(odd) == 1 and len(odd[0]) <= 64

    tools = await _tools(node)
    add = tools["mcp_t_add"]
    assert add["description"] == "[MCP t] Add two integers."
    assert add["input_schema"]["required"] == ["a", "b"]
    # Outside content, and mutating whatever the server claims (readOnlyHint is the server's word).
    assert add["trust"] == "untrusted" and add["effects"] == "mutating"

    out = await _run(node, "mcp_t_add", {"a": 2, "b": 40})
    assert out["status"] == "ok" and out["untrusted"] is True
    assert out["result"]["untrusted_content"] == {"text": "42", "structured": {"result": 42}}

    # The MCP tool's own schema is enforced before anything reaches the server.
    bad = await _run(node, "mcp_t_add", {"a": "two", "b": 1})
    assert (
        bad["status"] == "error" and bad["error"]["code"] == "invalid_input" and bad["error"]["field"] == "a"
    )

    failed = await _run(node, "mcp_t_fail", {"reason": "disk on fire"})
    assert failed["status"] == "error" and failed["error"]["code"] == "mcp_tool_error"
    assert "disk on fire" in failed["error"]["message"]

    # The generic kind reaches only the tools the manager registered.
    direct = await _run(node, "mcp_call", {"mcp_server": "t", "mcp_tool": "shout", "text": "hi"})
    assert direct["status"] == "ok" and direct["result"]["untrusted_content"]["text"] == "HI"
    unknown = await _run(node, "mcp_call", {"mcp_server": "t", "mcp_tool": "nope"})
    assert unknown["error"]["code"] == "not_found"


async def test_streamable_http_server(make_node, http_server):
    node = await make_node()
    added = await node.ask(
        "mcp_manager",
        "add_server",
        {
            "name": "web",
            "transport": "http",
            "url": http_server,
            "headers": {"Authorization": "Bearer web-s3cret"},
            "tools": ["add", "shout"],
        },
        ctx=ACME,
        timeout=60,
    )
    assert added["tools"] == ["mcp_web_add", "mcp_web_shout"]  # only the allowed ones
    out = await _run(node, "mcp_web_shout", {"text": "over http"})
    assert out["status"] == "ok" and out["result"]["untrusted_content"]["text"] == "OVER HTTP"
    listed = await node.ask("mcp_manager", "list_servers", {}, ctx=ACME)
    (srv,) = listed["servers"]
    assert srv["transport"] == "http" and srv["connected"] is True
    assert [t["mcp_tool"] for t in srv["tools"]] == ["add", "shout"]
    assert srv["headers"] == {"Authorization": "***"} and "web-s3cret" not in str(listed)


async def test_guardrails_review_mcp_tools_by_default_and_policies_apply(make_node, http_server):
    node = await make_node()
    await node.ask("mcp_manager", "add_server", http_config(http_server, tools=["add"]), ctx=ACME, timeout=60)
    await node.ask(
        "mcp_manager",
        "add_server",
        http_config(http_server, name="free", tools=["add"], review=False),
        ctx=ACME,
        timeout=60,
    )
    check = {"input": {"a": 1, "b": 2}, "session_id": "s1", "turn_id": "t1"}
    verdict = await node.ask("guardrails", "check_tool", {"tool_name": "mcp_t_add", **check}, ctx=ACME)
    assert verdict["decision"] == "review" and verdict["reason"] == "review_by_default"
    verdict = await node.ask("guardrails", "check_tool", {"tool_name": "mcp_free_add", **check}, ctx=ACME)
    assert verdict["decision"] == "allow"
    after = await node.ask(
        "guardrails", "check_tool", {"tool_name": "mcp_free_add", **check, "after_untrusted": True}, ctx=ACME
    )
    assert after["decision"] == "review"
    await node.ask("guardrails", "set_policy", {"tool_name": "mcp_t_add", "decision": "allow"}, ctx=ACME)
    verdict = await node.ask("guardrails", "check_tool", {"tool_name": "mcp_t_add", **check}, ctx=ACME)
    assert verdict["decision"] == "allow" and verdict["reason"] == "policy"


async def test_tenants_are_isolated_and_only_admins_configure(make_node, http_server):
    node = await make_node()
    await node.ask("mcp_manager", "add_server", http_config(http_server, tools=["add"]), ctx=ACME, timeout=60)
    assert "mcp_t_add" in await _tools(node, ACME)
    assert "mcp_t_add" not in await _tools(node, GLOBEX)
    assert (await node.ask("mcp_manager", "list_servers", {}, ctx=GLOBEX))["servers"] == []
    other = await _run(node, "mcp_call", {"mcp_server": "t", "mcp_tool": "add", "a": 1, "b": 1}, ctx=GLOBEX)
    assert other["status"] == "error" and other["error"]["code"] == "not_found"
    with pytest.raises(PermissionDenied):
        await node.ask("mcp_manager", "add_server", stdio_server(name="u"), ctx=ACME_USER)
    with pytest.raises(PermissionDenied):
        await node.ask("mcp_manager", "remove_server", {"name": "t"}, ctx=ACME_USER)
    # A user's turn may run the tool (the guardrails decide whether it waits for a person).
    out = await _run(node, "mcp_t_add", {"a": 1, "b": 1}, ctx=ACME_USER)
    assert out["status"] == "ok"


async def test_bad_configs_are_refused_and_nothing_is_stored(make_node, http_server):
    node = await make_node(mcp_args={"stdio_commands": [sys.executable]})
    with pytest.raises(InvalidArgument) as e:
        await node.ask(
            "mcp_manager", "add_server", {"name": "9x", "transport": "stdio", "command": "x"}, ctx=ACME
        )
    assert e.value.details["field"] == "name"
    with pytest.raises(InvalidArgument) as e:
        await node.ask(
            "mcp_manager", "add_server", {"name": "w", "transport": "http", "url": "ftp://x"}, ctx=ACME
        )
    assert e.value.details["field"] == "url"
    with pytest.raises(PermissionDenied) as e:  # not on this node's list of commands
        await node.ask("mcp_manager", "add_server", {**stdio_server(), "command": "/bin/sh"}, ctx=ACME)
    with pytest.raises(Exception) as unreachable:
        await node.ask(
            "mcp_manager",
            "add_server",
            {**stdio_server(), "args": ["-c", "import sys; sys.exit(3)"], "timeout": 20},
            ctx=ACME,
            timeout=60,
        )
    assert getattr(unreachable.value, "code", "") in ("mcp_unavailable", "timeout")
    assert (await node.ask("mcp_manager", "list_servers", {}, ctx=ACME))["servers"] == []
    await node.ask("mcp_manager", "add_server", http_config(http_server, tools=["add"]), ctx=ACME, timeout=60)
    with pytest.raises(Conflict):
        await node.ask("mcp_manager", "add_server", stdio_server(), ctx=ACME, timeout=60)


async def test_env_is_passed_and_redacted_and_remove_unregisters(make_node):
    node = await make_node()
    await node.ask(
        "mcp_manager",
        "add_server",
        stdio_server(tools=["whoami"], env={"MCP_TEST_SECRET": "s3cr3t"}),
        ctx=ACME,
        timeout=60,
    )
    out = await _run(node, "mcp_t_whoami", {})
    assert out["result"]["untrusted_content"]["structured"]["secret"] == "s3cr3t"
    pid = out["result"]["untrusted_content"]["structured"]["pid"]
    listed = await node.ask("mcp_manager", "list_servers", {}, ctx=ACME)
    assert listed["servers"][0]["env"] == {"MCP_TEST_SECRET": "***"}
    assert "s3cr3t" not in str(listed)

    removed = await node.ask("mcp_manager", "remove_server", {"name": "t"}, ctx=ACME, timeout=30)
    assert removed["removed_tools"] == ["mcp_t_whoami"]
    assert "mcp_t_whoami" not in await _tools(node)
    assert await _gone(pid)  # removing the server ended its process
    with pytest.raises(NotFound):
        await node.ask("mcp_manager", "remove_server", {"name": "t"}, ctx=ACME)


async def test_stopping_the_node_ends_stdio_server_processes(make_node):
    node = await make_node()
    await node.ask("mcp_manager", "add_server", stdio_server(tools=["whoami"]), ctx=ACME, timeout=60)
    pid = (await _run(node, "mcp_t_whoami", {}))["result"]["untrusted_content"]["structured"]["pid"]
    await node.stop(deadline=15)
    assert await _gone(pid)


async def _gone(pid: int, within: float = 15.0) -> bool:
    """Whether process ``pid`` has exited (polling with a deadline: the SDK ends it asynchronously)."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_killed_server_process_is_restarted_on_the_next_call(make_node):
    node = await make_node()
    await node.ask("mcp_manager", "add_server", stdio_server(tools=["whoami"]), ctx=ACME, timeout=60)
    first = (await _run(node, "mcp_t_whoami", {}))["result"]["untrusted_content"]["structured"]["pid"]
    os.kill(first, signal.SIGKILL)
    # The call that finds the transport dead may fail; the one after it runs on a fresh process.
    outcomes = [await _run(node, "mcp_t_whoami", {}) for _ in range(2)]
    assert outcomes[-1]["status"] == "ok", outcomes
    second = outcomes[-1]["result"]["untrusted_content"]["structured"]["pid"]
    assert second != first


async def test_servers_and_tools_survive_a_node_restart(make_node, tmp_path, http_server):
    data = tmp_path / "restart"
    node = await make_node(data_dir=data)
    await node.ask("mcp_manager", "add_server", http_config(http_server, tools=["add"]), ctx=ACME, timeout=60)
    await node.stop(deadline=10)
    again = await make_node(data_dir=data)
    listed = (await again.ask("mcp_manager", "list_servers", {}, ctx=ACME))["servers"]
    assert listed[0]["url"] == http_server and listed[0]["connected"] is False
    out = await _run(again, "mcp_t_add", {"a": 20, "b": 22})  # connects on first use
    assert out["status"] == "ok" and out["result"]["untrusted_content"]["text"] == "42"


async def test_refresh_registers_what_the_server_offers_now(make_node, tmp_path):
    flag = tmp_path / "extra"
    flag.write_text("on")
    node = await make_node()
    cfg = stdio_server(tools=["add", "extra"], env={"MCP_TEST_EXTRA_FILE": str(flag)})
    added = await node.ask("mcp_manager", "add_server", cfg, ctx=ACME, timeout=60)
    assert added["tools"] == ["mcp_t_add", "mcp_t_extra"]
    assert (await _run(node, "mcp_t_extra", {}))["result"]["untrusted_content"]["text"] == "extra"
    flag.unlink()  # the server offers no "extra" once it starts again
    refreshed = await node.ask("mcp_manager", "refresh_server", {"name": "t"}, ctx=ACME, timeout=60)
    assert refreshed["tools"] == ["mcp_t_add"]
    assert "mcp_t_extra" not in await _tools(node)
    assert (await _run(node, "mcp_t_add", {"a": 1, "b": 2}))["result"]["untrusted_content"]["text"] == "3"


async def test_concurrent_calls_share_a_connection_and_a_slow_call_times_out(make_node, http_server):
    import asyncio

    node = await make_node()
    await node.ask(
        "mcp_manager",
        "add_server",
        http_config(http_server, tools=["add", "sleep", "whoami"], timeout=2),
        ctx=ACME,
        timeout=60,
    )
    first = await _run(node, "mcp_t_whoami", {})
    pid = first["result"]["untrusted_content"]["structured"]["pid"]
    outs = await asyncio.gather(*(_run(node, "mcp_t_add", {"a": i, "b": i}) for i in range(8)))
    assert [o["result"]["untrusted_content"]["structured"]["result"] for o in outs] == [
        2 * i for i in range(8)
    ]
    slow = await _run(node, "mcp_t_sleep", {"seconds": 60})
    assert slow["status"] == "error" and slow["error"]["code"] == "timeout"
    # The connection outlives an abandoned request: still answering.
    again = await _run(node, "mcp_t_whoami", {})
    assert again["result"]["untrusted_content"]["structured"]["pid"] == pid


async def test_env_values_are_encrypted_at_rest(make_node, tmp_path):
    data = tmp_path / "sealed"
    key = {"credential_key": "k" * 44}
    node = await make_node(data_dir=data, mcp_args=key)
    cfg = stdio_server(tools=["whoami"], env={"MCP_TEST_SECRET": "s3cr3t-value-123"})
    await node.ask("mcp_manager", "add_server", cfg, ctx=ACME, timeout=60)
    await node.stop(deadline=15)  # everything flushed to the files
    for f in data.rglob("*"):
        if f.is_file():
            assert b"s3cr3t-value-123" not in f.read_bytes(), f

    again = await make_node(data_dir=data, mcp_args=key)
    out = await _run(again, "mcp_t_whoami", {})  # decrypted to start the server again
    assert out["result"]["untrusted_content"]["structured"]["secret"] == "s3cr3t-value-123"
    await again.stop(deadline=15)

    other_key = await make_node(data_dir=data, mcp_args={"credential_key": "z" * 44})
    failed = await _run(other_key, "mcp_t_whoami", {})
    assert (
        failed["error"]["code"] == "mcp_unavailable" and "cannot be decrypted" in failed["error"]["message"]
    )
