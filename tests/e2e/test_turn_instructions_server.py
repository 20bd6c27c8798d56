"""``agent.chat``'s ``instructions`` on the server ``minihermes serve`` starts: a caller of the actor API may
give them (``write``, like the message itself); they shape the turn's system prompt and never appear in the
session's transcript; too long is a 422 ``invalid_argument`` naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.agent.agent import MAX_INSTRUCTIONS_CHARS

MARK = "Answer in one short sentence; this line is the door's."


@pytest.mark.slow
async def test_instructions_over_http_stay_out_of_the_transcript(server_factory: Any, tmp_path: Path) -> None:
    srv = await server_factory(tmp_path / "data")
    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
        chat = {"message": "what is 6 * 7?", "session_id": "instr-1", "instructions": MARK}
        r = await c.post("/api/v1/actors/agent/chat", json=chat)
        assert r.status_code == 200 and r.json()["status"] == "ok", r.text
        assert "42" in r.json()["response"] and MARK not in r.json()["response"]
        r = await c.post("/api/v1/actors/agent/get_history", json={"session_id": "instr-1"})
        assert r.status_code == 200, r.text
        messages = r.json()["messages"]
        assert [m["content"] for m in messages if m["role"] == "user"] == ["what is 6 * 7?"]
        assert all(MARK not in str(m.get("content")) for m in messages)
        too_long = {**chat, "instructions": "x" * (MAX_INSTRUCTIONS_CHARS + 1)}
        r = await c.post("/api/v1/actors/agent/chat", json=too_long)
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_argument" and error["field"] == "instructions", error
