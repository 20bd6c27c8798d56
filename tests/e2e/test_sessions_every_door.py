"""Sessions from every door (issue 19) on the server `minihermes serve` starts: the README's own examples, an
``agent.chat`` over the actor API and a message to ``POST /api/v1/sessions/{id}/messages`` (streamed), each
register their session with ``session_manager``, so ``list_sessions`` (the Sessions page, the chat picker)
shows both, titled by their first message, the most recently active first."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import ROOT


def _readme_examples() -> tuple[dict[str, Any], tuple[str, dict[str, Any]]]:
    """The README's first ``ask agent chat '...'`` body, and its streamed sessions-API curl (path, body)."""
    text = (ROOT / "README.md").read_text()
    chat = re.search(r"^ask agent chat '(\{.*?\})'", text, re.M)
    stream = re.search(
        r"curl -N -X POST http://127\.0\.0\.1:\d+(/api/v1/sessions/\S+/messages).*?-d '(\{.*?\})'", text, re.S
    )
    assert chat and stream, "README.md has lost its agent.chat or sessions API example"
    return json.loads(chat.group(1)), (stream.group(1), json.loads(stream.group(2)))


@pytest.mark.slow
async def test_the_readme_doors_register_their_sessions_on_a_served_node(
    server_factory: Any, tmp_path: Path
) -> None:
    chat, (path, body) = _readme_examples()
    srv = await server_factory(tmp_path / "data")
    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
        r = await c.post("/api/v1/actors/agent/chat", json=chat)
        assert r.status_code == 200 and r.json()["status"] == "ok", r.text
        r = await c.post(path, json=body)
        assert r.status_code == 200 and "event: final" in r.text, r.text[-2000:]
        r = await c.post("/api/v1/actors/session_manager/list_sessions", json={})
        assert r.status_code == 200, r.text
        sessions = {s["session_id"]: s for s in r.json()["sessions"]}
        streamed = path.split("/")[-2]
        assert list(sessions) == [streamed, chat["session_id"]]  # the most recently active first
        assert sessions[chat["session_id"]]["title"] == chat["message"]
        assert sessions[streamed]["title"] == body["content"]
        for s in sessions.values():
            assert (s["channel"], s["message_count"], s["state"]) == ("api", 1, "active"), s
        # a second turn moves "last active" and the count; the search box finds it by title
        again = {"message": "and what was that number?", "session_id": chat["session_id"]}
        assert (await c.post("/api/v1/actors/agent/chat", json=again)).status_code == 200
        word = next(w for w in chat["message"].split() if w.lower() not in body["content"].lower()).upper()
        r = await c.post("/api/v1/actors/session_manager/list_sessions", json={"query": word})
        [found] = r.json()["sessions"]
        assert found["session_id"] == chat["session_id"] and found["message_count"] == 2
        assert found["last_active_at"] > sessions[chat["session_id"]]["last_active_at"]
