"""Doubles for the context tests: a gateway answering by a function, and stand-ins for skill_store, goals."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from minihermes.runtime import ActorError, GenServer, call, cast
from minihermes.skills import procedure_tools
from minihermes.skills.skill_store import SkillStore
from minihermes.work.goals import Goals

REQUESTS: list[dict[str, Any]] = []
CASTS: list[tuple[str, str, dict[str, Any]]] = []
SKILLS: list[dict[str, Any]] = []
GOALS: list[dict[str, Any]] = []
ANSWER: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
BARRIER: dict[str, Any] = {}


def end(text: str) -> dict[str, Any]:
    return {"content": text, "stop_reason": "end_turn", "tool_calls": []}


def tool_use(*calls: tuple[str, dict[str, Any]], text: str = "") -> dict[str, Any]:
    return {
        "content": text,
        "stop_reason": "tool_use",
        "tool_calls": [{"id": f"c{i}-{n}", "name": n, "input": inp} for i, (n, inp) in enumerate(calls)],
    }


def reset() -> None:
    REQUESTS.clear()
    CASTS.clear()
    SKILLS.clear()
    GOALS.clear()
    ANSWER.clear()
    BARRIER.clear()


class FnGateway(GenServer):
    """``completion`` answered by ``ANSWER["fn"](request)`` (default: end the turn with "ok")."""

    @call
    def completion(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        session_id: str = "",
        user_id: str = "",
        cron_job: str = "",
        cache_prefix_messages: int = 0,
        stream_topic: str = "",
        max_tokens: int = 0,
    ) -> dict[str, Any]:
        request = {
            "messages": messages,
            "tools": tools or [],
            "session_id": session_id,
            "user_id": user_id,
            "cron_job": cron_job,
            "cache_prefix_messages": cache_prefix_messages,
        }
        REQUESTS.append(request)
        fn = ANSWER.get("fn")
        response = fn(request) if fn else end("ok")
        if response.get("fail"):
            raise ActorError("scripted failure", code="llm_unavailable")
        return {"status": "ok", "response": response, "provider": "fn", "model": "test"}


async def _barrier(name: str) -> None:
    """Wait until every party named in BARRIER["parties"] has entered (only when a barrier is set)."""
    parties = BARRIER.get("parties")
    if not parties:
        return
    BARRIER.setdefault("entered", set()).add(name)
    event: asyncio.Event = BARRIER.setdefault("event", asyncio.Event())
    if BARRIER["entered"] >= set(parties):
        event.set()
    await asyncio.wait_for(event.wait(), 5)


class FakeSkills(GenServer):
    @call
    async def match_skills(
        self, query: str, limit: int = 3, user_id: str = "", session_id: str = ""
    ) -> dict[str, Any]:
        CASTS.append(("skill_store", "match_skills", {"query": query, "limit": limit, "user_id": user_id}))
        await _barrier("skill_store")
        return {"status": "ok", "skills": SKILLS[:limit]}

    turn_context = SkillStore.turn_context
    """The skill store's own prompt part: its ``match_skills`` (this one) as ``## Relevant Skills``."""
    turn_completed = SkillStore.turn_completed
    """The skill store's own turn listener: the turn becomes ``record_usage`` and ``evaluate_for_learning``."""
    _turn_step = SkillStore._turn_step
    _followed = SkillStore._followed

    @property
    def _records(self) -> dict[str, dict[str, Any]]:
        """The matched skills as the store's records (what ``_followed`` reads)."""
        return {s["skill_id"]: {**s, "tools": procedure_tools(s.get("procedure", ""))} for s in SKILLS}

    @cast
    async def record_usage(
        self, skill_id: str, session_id: str = "", success: bool = True, followed: bool = True
    ) -> None:
        CASTS.append(
            ("skill_store", "record_usage", {"skill_id": skill_id, "success": success, "followed": followed})
        )

    @cast
    async def evaluate_for_learning(
        self,
        session_id: str,
        turn_id: str,
        user_intent: str,
        user_id: str = "",
        tool_calls: list[dict[str, Any]] | int = 0,
        skill_ids: list[str] | None = None,
        success: bool = True,
    ) -> None:
        CASTS.append(
            (
                "skill_store",
                "evaluate_for_learning",
                {
                    "session_id": session_id,
                    "user_intent": user_intent,
                    "user_id": user_id,
                    "tool_calls": tool_calls,
                },
            )
        )

    async def _consider_for_learning(self, **turn: Any) -> None:
        """The store's own learning step (``turn_completed`` calls it in place of the cast it once sent):
        recorded as ``evaluate_for_learning``, what the tests read."""
        fields = ("session_id", "user_intent", "user_id", "tool_calls")
        CASTS.append(("skill_store", "evaluate_for_learning", {k: turn[k] for k in fields}))

    @cast
    def forget(self, session_id: str = "", user_id: str = "") -> None:
        CASTS.append(("skill_store", "forget", {"session_id": session_id, "user_id": user_id}))

    @call
    def barrier(self) -> int:
        return len(CASTS)


class FakeGoals(GenServer):
    @call
    async def list_goals(self, session_id: str = "", status: str = "active") -> dict[str, Any]:
        await _barrier("goals")
        return {"status": "ok", "goals": [g for g in GOALS if g.get("session_id", session_id) == session_id]}

    turn_context = Goals.turn_context
    """Goals' own prompt part: its ``list_goals`` (this one) as ``## Active goals``."""

    @cast
    def turn_completed(
        self, session_id: str, turn_id: str, user_message: str, response: str, **_record: Any
    ) -> None:
        CASTS.append(("goals", "turn_completed", {"session_id": session_id, "user_message": user_message}))

    @call
    def barrier(self) -> int:
        return len(CASTS)
