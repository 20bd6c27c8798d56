"""MCP server output is scrubbed: a server that prints its token (passed in its env) on stderr, on stdout and
in its error messages leaves no trace of it in the log records, the server's log file, the replies or the
audit trail."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from minihermes.agent.audit_event import AuditEvent
from minihermes.runtime import ActorSpec, Node, NodeOptions, SupervisorSpec
from minihermes.runtime.store import open_store

from .conftest import ACME, specs

LEAKY = str(Path(__file__).with_name("leaky_mcp_server.py"))
TOKEN = "zq7-leaky-7f3a9c2e1b5d"
SHAPED = "sk-ant-" + "Q" * 32


async def test_a_server_that_prints_its_token_leaves_it_nowhere(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    log_dir = tmp_path / "mcp-logs"
    tree = SupervisorSpec(
        name="root",
        children=[
            *specs({"log_dir": str(log_dir)}),
            ActorSpec("audit_event", AuditEvent, per_tenant=True),
        ],
    )
    node = Node(open_store("sqlite", data_dir=str(tmp_path / "data")), tree, options=NodeOptions())
    await node.start()
    try:
        config = {
            "name": "leaky",
            "transport": "stdio",
            "command": sys.executable,
            "args": [LEAKY],
            "env": {"LEAKY_TOKEN": TOKEN, "DEBUG": "1"},
        }
        replies = [await node.ask("mcp_manager", "add_server", config, ctx=ACME, timeout=60)]
        for tool in ("mcp_leaky_leak", "mcp_leaky_protocol"):
            replies.append(
                await node.ask(
                    "tool_executor",
                    "execute",
                    {"name": tool, "input": {}, "session_id": "s1"},
                    ctx=ACME,
                    timeout=60,
                )
            )
        leak, protocol = replies[1:]
        assert leak["error"]["code"] == "mcp_tool_error" and "upstream refused token ***" in str(leak)
        assert protocol["error"]["code"] == "mcp_tool_error" and "bad credentials: ***" in str(protocol)
        replies.append(await node.ask("mcp_manager", "list_servers", {}, ctx=ACME))
        # Removing the server ends its process: its stderr is read to the end.
        replies.append(
            await node.ask("mcp_manager", "remove_server", {"name": "leaky"}, ctx=ACME, timeout=30)
        )
        audit = await node.ask("audit_event", "query_events", {"limit": 1000}, ctx=ACME)
    finally:
        await node.stop(deadline=15)

    # The server did leak: its stderr lines and its stdout noise were seen, scrubbed.
    logged = (log_dir / "acme" / "leaky.log").read_text()
    assert "stderr: starting with token *** and" in logged and "[REDACTED]" in logged
    parse_errors = [r for r in caplog.records if r.name == "mcp.client.stdio" and r.exc_info]
    assert parse_errors, "the SDK logged no parse error for the stdout noise"
    assert audit["events"], audit

    formatter = logging.Formatter()
    seen = [formatter.format(r) for r in caplog.records] + [logged, json.dumps(replies), json.dumps(audit)]
    for text in seen:
        assert TOKEN not in text and SHAPED not in text, text
        # Nor a piece of it (a validation error quotes its input cut in the middle).
        assert "7f3a9c2e" not in text and "QQQQQQQQ" not in text, text
