"""A tool whose input schema would backtrack for hours in Python's ``re`` does not freeze the server that
`minihermes serve` runs (issue 17, item 1): its calls are answered, ``/healthz`` keeps answering, before and
after a restart (the tool is durable).

No timing assertion: on a pinned event loop the requests below never complete and the test fails on its
client timeout."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

API = "/api/v1/actors/tool_executor"
EVIL = {
    "name": "evil",
    "description": "the calculator, behind a pattern that backtracks in a backtracking engine",
    "input_schema": {
        "type": "object",
        "properties": {"expression": {"type": "string", "pattern": "^(a+)+$"}},
        "required": ["expression"],
    },
    "handler_type": "calculator",
}


async def _execute_while_healthz_answers(c: httpx.AsyncClient) -> dict[str, Any]:
    """Execute the tool a few times at once, asking /healthz alongside; every request must be answered."""
    calls = [
        c.post(f"{API}/execute", json={"name": "evil", "input": {"expression": "a" * n + "!"}})
        for n in (24, 40, 4000)
    ]
    health = [c.get("/healthz") for _ in range(3)]
    replies = await asyncio.gather(*calls, *health)
    for r in replies:
        assert r.status_code == 200, r.text
    assert (await c.get("/healthz")).status_code == 200
    return dict(replies[1].json())


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_catastrophic_pattern_neither_freezes_the_server_nor_comes_back_after_a_restart(
    server_factory, tmp_path
):
    data = tmp_path / "srv"
    srv = await server_factory(data)
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as c:
        registered = await c.post(f"{API}/register_tool", json=EVIL)
        assert registered.status_code == 200, registered.text
        reply = await _execute_while_healthz_answers(c)
        assert reply["status"] == "error"
        assert (reply["error"]["code"], reply["error"]["field"]) == ("invalid_input", "expression")
        # A pattern RE2 cannot run is a structured 4xx naming it, not a stored time bomb.
        backref = {**EVIL, "name": "backref"}
        backref["input_schema"] = {
            "type": "object",
            "properties": {"x": {"type": "string", "pattern": r"(a)\1"}},
        }
        refused = await c.post(f"{API}/register_tool", json=backref)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_argument", "input_schema.properties.x.pattern")
    await srv.kill()
    again = await server_factory(data)
    async with httpx.AsyncClient(base_url=again.url, timeout=30) as c:
        reply = await _execute_while_healthz_answers(c)
        assert reply["error"]["code"] == "invalid_input"
