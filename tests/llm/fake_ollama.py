"""A fake local Ollama on a loopback port, for the tests of ``llm_gateway.detect_local`` and the offers built on
it (doctor, the dashboard): ``GET /api/tags`` lists ``models`` (or answers 404 while ``answering`` is off, as
a server that is not Ollama would), ``POST /api/chat`` answers "OK". ``StubServer`` answers from a queue; this
one answers every request the same way, however often a page asks."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from .support import StubServer


class FakeOllama(StubServer):
    def __init__(self, models: tuple[str, ...] = ("llama3.2:latest", "qwen2.5:0.5b")) -> None:
        super().__init__()
        self.models = list(models)
        self.answering = True
        self.tags_asked = 0

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/api/tags":
            self.tags_asked += 1
            if not self.answering:
                response = Response(b"404 page not found", status_code=404, media_type="text/plain")
            else:
                listed = [{"name": m, "model": m, "size": 1} for m in self.models]
                response = Response(json.dumps({"models": listed}), media_type="application/json")
        elif path == "/api/chat":
            answer = {
                "model": self.models[0] if self.models else "",
                "created_at": "2026-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": "OK"},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 5,
                "eval_count": 1,
            }
            response = Response(json.dumps(answer), media_type="application/json")
        else:
            response = Response(b"404 page not found", status_code=404, media_type="text/plain")
        await response(scope, receive, send)
