"""Self-written tools on the server `minihermes serve` starts (issue 17, item 5): the example of docs/skills.md
is created, tested in the sandbox and then used, through the HTTP API of a real server process.

The server runs on the loop of the test (uvloop, what `serve` runs, and asyncio's: tests/conftest.py). On
uvloop, ``create_tool`` used to crash its actor (``actor_crashed``): the sandbox asserted that the stdin pipe
was an ``asyncio.WriteTransport``, which uvloop's pipe transports are not."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import ROOT

API = "/api/v1/actors"


def _docs_example() -> dict[str, Any]:
    """The ``skill_manage`` create call shown in docs/skills.md, as written there."""
    text = (ROOT / "docs" / "skills.md").read_text()
    section = text.split("## Self-written tools", 1)[1]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block is not None, "docs/skills.md has no JSON example under 'Self-written tools'"
    example: dict[str, Any] = json.loads(block.group(1))
    assert example.pop("action") == "create"
    return example


async def _call(c: httpx.AsyncClient, actor: str, op: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await c.post(f"{API}/{actor}/{op}", json=body)
    assert r.status_code == 200, (actor, op, r.status_code, r.text)
    reply: dict[str, Any] = r.json()
    return reply


def _output(reply: dict[str, Any]) -> Any:
    """A tool's result, whether or not the executor wrapped it as untrusted data."""
    result = reply["result"]
    return result["untrusted_content"] if reply.get("untrusted") else result


@pytest.mark.slow
async def test_the_documented_self_written_tool_is_created_and_used_on_a_served_node(
    server_factory: Any, tmp_path: Path
) -> None:
    example = _docs_example()
    srv = await server_factory(tmp_path / "data")
    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
        created = await _call(c, "skill_tools", "create_tool", example)
        assert created["status"] == "ok" and created["version"] == 1, created

        ran = await _call(c, "skill_tools", "run_tool", {"name": example["name"], "input": {"a": 2, "b": 3}})
        assert ran["status"] == "ok" and ran["result"] == {"sum": 5}, ran

        # As the agent uses it: a tool of the executor, run in the sandbox.
        listed = await _call(c, "tool_executor", "list_tools", {})
        assert example["name"] in [t["name"] for t in listed["tools"]]
        executed = await _call(
            c, "tool_executor", "execute", {"name": example["name"], "input": {"a": 4, "b": 5}}
        )
        assert executed["status"] == "ok" and _output(executed) == {"sum": 9}, executed

        # The agent's own route: skill_manage with the example exactly as documented makes version 2.
        managed = await _call(
            c, "tool_executor", "execute", {"name": "skill_manage", "input": {"action": "create", **example}}
        )
        assert managed["status"] == "ok" and _output(managed)["version"] == 2, managed
    assert await srv.terminate() == 0  # a clean stop: no actor is left crashed or hanging
