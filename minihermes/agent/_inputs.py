"""What a session's turns are built from: the identity texts, the tools offered, the prompt contributors'
parts (``minihermes.context.assembly``) and the compressor's threshold, kept for the activation.

The identity (SOUL and project context) is read once per activation, with the session's state
(``Actor.preload``); the contributors are looked up once (the actor types on the node taking
``turn_context``), so a turn's context costs one concurrent round of asks: the catalogue and one
``turn_context`` per contributor.
"""

from __future__ import annotations

import asyncio
from typing import Any

from minihermes.context import prompt
from minihermes.context.assembly import TurnContext, TurnSettings, contributors, gather_turn
from minihermes.context.toolsets import DEFAULT as DEFAULT_TOOLSETS
from minihermes.runtime import Host

from ._args import DEFAULT_TOKEN_BUDGET, identity_reader
from ._compressing import Compression
from ._toolsets import ToolOffer, previous_tools


def settings_of(args: dict[str, Any]) -> TurnSettings:
    """The agent's arguments that shape the prompt."""
    return TurnSettings(
        skills_limit=int(args.get("skills_limit", 3)),
        skills_tokens=int(args.get("skills_tokens", 1_500)),
        memory_top_k=int(args.get("memory_top_k", 5)),
        memory_min_score=float(args.get("memory_min_score", 0.3)),
        context_tokens=int(args.get("context_tokens", 8_000)),
    )


class TurnInputs:
    """A session's identity, tool offer, prompt contributors and compression threshold."""

    __slots__ = ("_args", "_identity", "compression", "contributors", "offer", "session_id", "settings")

    def __init__(self, host: Host, session_id: str, args: dict[str, Any], preloaded: Any) -> None:
        self.session_id = session_id
        self._args = args
        self._identity: tuple[str, str] | None = preloaded if isinstance(preloaded, tuple) else None
        self.settings = settings_of(args)
        self.offer = ToolOffer(
            args.get("toolsets") or DEFAULT_TOOLSETS,
            dict(args.get("tenant_toolsets") or {}),
            bool(args.get("auto_toolsets", True)),
        )
        budget = int(args.get("token_budget", DEFAULT_TOKEN_BUDGET))
        self.compression = Compression(session_id, budget, float(args.get("llm_timeout", 120)))
        self.contributors = contributors(host)
        """The actor types on this node that take ``turn_context``."""

    async def identity(self) -> tuple[str, str]:
        """(SOUL, project context), read once per activation (``preload``, in the trip that reads the
        session's state)."""
        if self._identity is None:
            read = identity_reader(self.session_id, self._args)
            self._identity = await asyncio.to_thread(read)
        return self._identity

    async def fallback_prefix(self) -> str:
        """The stable prefix of a turn saved without one: the identity alone."""
        soul, project = await self.identity()
        return prompt.stable_prefix(soul, project, [])

    async def gather(
        self,
        host: Host,
        message: str,
        user: str,
        history: list[dict[str, Any]],
        session_toolsets: list[str],
        instructions: str = "",
        door: str = "",
    ) -> TurnContext:
        """A new turn's context (``gather_turn``), its offered tools kept for the turn (with ``find_tools``)."""
        soul, project = await self.identity()
        ctx = await gather_turn(
            host,
            message=message,
            session_id=self.session_id,
            user_id=user,
            soul=soul,
            project=project,
            settings=self.settings,
            tool_choice=self.offer.choice(session_toolsets),
            kept_tools=previous_tools(history, len(history)),
            instructions=instructions,
            door=door,
            sources=self.contributors,
        )
        ctx.tools = self.offer.gathered(ctx.catalogue, ctx.toolsets, ctx.tools)
        return ctx
