"""A scripted LLM gateway for the work actors' tests: answers per session from a function, can fail or wait."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from minihermes.runtime import ActorError, Deferred, GenServer, call, current_context

Answer = Callable[[str, list[dict[str, Any]]], str | dict[str, Any]]


class Script:
    """What the scripted gateway answers: ``answer(session_id, messages)`` -> text or a full response;
    sessions in ``fail`` get ``llm_unavailable``; sessions in ``hold`` wait until released."""

    def __init__(self) -> None:
        self.answer: Answer = lambda session, messages: f"done: {messages[-1]['content'][:60]}"
        self.fail: set[str] = set()
        self.hold: dict[str, asyncio.Event] = {}
        self.entered: dict[str, asyncio.Event] = {}
        self.calls: list[str] = []
        self.tools: dict[str, list[str]] = {}
        self.contexts: dict[str, tuple[str, frozenset[str]]] = {}
        """session -> (principal, roles) of the last completion asked for it: whom the turn acts as."""


SCRIPT = Script()


def reset() -> Script:
    global SCRIPT
    SCRIPT.__init__()  # type: ignore[misc]
    return SCRIPT


class ScriptedGateway(GenServer):
    @call
    def completion(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        session_id: str = "",
        user_id: str = "",
        cron_job: str = "",
        max_tokens: int = 1024,
        stream_topic: str = "",
        **extra: Any,
    ) -> Any:
        SCRIPT.tools[session_id] = sorted(t["name"] for t in tools or [])
        ctx = current_context()
        SCRIPT.contexts[session_id] = (ctx.principal, ctx.roles)
        return Deferred(self.host.spawn(self._answer(messages, session_id)))

    async def _answer(self, messages: list[dict[str, Any]], session_id: str) -> dict[str, Any]:
        SCRIPT.calls.append(session_id)
        if session_id in SCRIPT.entered:
            SCRIPT.entered[session_id].set()
        if session_id in SCRIPT.hold:
            await SCRIPT.hold[session_id].wait()
        if session_id in SCRIPT.fail:
            raise ActorError("scripted failure", code="llm_unavailable")
        got = SCRIPT.answer(session_id, messages)
        response = (
            got if isinstance(got, dict) else {"content": got, "stop_reason": "end_turn", "tool_calls": []}
        )
        return {"status": "ok", "response": response, "provider": "scripted", "model": "test"}

    @call
    def list_providers(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "providers": [{"name": "scripted", "kind": "scripted", "model": "test"}],
            "active": {"provider": "scripted", "model": "test"},
        }
