"""The tools a session's turn offers the model: its toolset selection of the tool executor's catalogue.

A turn offers the toolsets configured for it (the agent's ``toolsets``, its tenant's ``tenant_toolsets``, the
session's ``set_toolsets``), those its message calls for and those of the tools the previous turn called
(``minihermes.context.toolsets``), plus the ones its ``find_tools`` calls added (``turn["found"]``, saved with
the turn). An explicit allow-list (a delegated child, a cron job) offers exactly the allowed tools of the
whole catalogue instead. ``ToolOffer`` keeps the running turn's catalogue and offered views for the
activation; a turn resumed in a new activation lists again with the same selection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minihermes.context import find_tools as finder
from minihermes.context.assembly import Catalogue, catalogue, offered
from minihermes.context.toolsets import ToolChoice, check_names
from minihermes.runtime import Host, InvalidArgument, current_context


def previous_tools(history: list[dict[str, Any]], end: int) -> list[str]:
    """The tools the session's previous turn called (the history before ``end``, back to its user
    message): their toolsets stay offered for a follow-up."""
    names: list[str] = []
    for i in range(min(end, len(history)) - 1, -1, -1):
        m = history[i]
        names.extend(str(c.get("name")) for c in m.get("tool_calls") or [])
        if m.get("role") == "user":
            break
    return names


class ToolOffer:
    """A session's toolset configuration and its running turn's catalogue and offered tools."""

    __slots__ = ("auto", "catalogue", "tenant_toolsets", "tools", "toolsets")

    def __init__(self, toolsets: Sequence[str], tenant_toolsets: dict[str, Any], auto: bool) -> None:
        self.toolsets = tuple(toolsets)
        self.tenant_toolsets = {t: tuple(n) for t, n in tenant_toolsets.items()}
        self.auto = auto
        self.catalogue: Catalogue | None = None
        self.tools: list[dict[str, Any]] | None = None
        """The running turn's offered tools (its toolset selection of ``catalogue``)."""

    def choice(self, session_toolsets: Sequence[str]) -> ToolChoice:
        """The toolsets configured for a turn: the agent's, its tenant's, then the session's own."""
        tenant = self.tenant_toolsets.get(current_context().tenant, ())
        return ToolChoice((*self.toolsets, *tenant, *session_toolsets), self.auto)

    def gathered(
        self, cat: Catalogue | None, selection: frozenset[str] | None, tools: list[Any]
    ) -> list[Any]:
        """Keep a new turn's catalogue and offered tools (from ``gather_turn``), ``find_tools`` added when
        the turn answers it."""
        if self.auto and cat is not None:
            tools = finder.offer(tools, finder.view(cat, selection))
        self.tools, self.catalogue = tools, cat
        return tools

    async def offer(
        self,
        host: Host,
        timeout: float,
        turn: dict[str, Any],
        history: list[dict[str, Any]],
        session: Sequence[str],
    ) -> list[dict[str, Any]]:
        """The running turn's offered tools: listed when its context was gathered, again (with the same
        selection) when the turn resumes in a new activation, and after ``find_tools`` added toolsets."""
        if self.tools is None:
            cat = self.catalogue
            if cat is None:
                cat = self.catalogue = await catalogue(host, timeout)
            selection = self.selection(cat, turn, history, session)
            found = finder.view(cat, selection) if self.auto else None
            self.tools = finder.offer(offered(cat, selection), found)
        return self.tools

    def selection(
        self, cat: Catalogue, turn: dict[str, Any], history: list[dict[str, Any]], session: Sequence[str]
    ) -> frozenset[str] | None:
        """The running turn's toolsets: its configuration and request (as when it started), and what its
        ``find_tools`` calls added (``turn["found"]``)."""
        start = int(turn.get("start", len(history)))
        kept = cat.toolset_of(previous_tools(history, start))
        chosen = self.choice(session).select(str(turn.get("message", "")), kept, cat.offering)
        return finder.widen(chosen, turn.get("found"))

    async def known(self, host: Host, timeout: float, toolsets: list[str]) -> tuple[str, ...]:
        """``toolsets`` checked against the catalogue's (``set_toolsets``): an unknown name is an
        ``invalid_argument``."""
        cat = await catalogue(host, timeout)
        try:
            return check_names(toolsets, cat.toolset_names())
        except ValueError as e:
            raise InvalidArgument(f"set_toolsets: {e}", op="set_toolsets", field="toolsets") from None

    def allowed(self, tools: list[dict[str, Any]], allowed: list[str] | None) -> list[dict[str, Any]]:
        """The turn's offered ``tools``, or with an explicit allow-list exactly the allowed tools of the
        whole catalogue, whatever the toolset selection."""
        if allowed is None:
            return tools
        names = set(allowed)
        every = self.catalogue.views if self.catalogue is not None else tools
        return [t for t in every if t["name"] in names]

    async def find_tools(
        self,
        host: Host,
        timeout: float,
        turn: dict[str, Any],
        history: list[dict[str, Any]],
        session: Sequence[str],
        args: dict[str, Any],
    ) -> tuple[dict[str, Any], tuple[str, ...]] | None:
        """Answer a ``find_tools`` call (``minihermes.context.find_tools``): its reply and the toolsets it
        names, the added ones joining the rest of the turn (``turn["found"]``, durable with it). None when
        the turn does not answer it (``auto_toolsets`` off, a tool allow-list, every tool offered): the call
        then goes as any other. Raises ``ToolFailure`` for a call the model got wrong."""
        await self.offer(host, timeout, turn, history, session)
        cat = self.catalogue
        assert cat is not None
        selection = self.selection(cat, turn, history, session)
        if not self.auto or turn.get("allowed_tools") is not None or not finder.answers(cat, selection):
            return None
        reply, names = finder.answer(cat, selection, args)
        if reply["added"]:
            turn["found"] = [*(turn.get("found") or ()), *reply["added"]]
            self.tools = None  # offered from the next LLM call of this turn on
        return reply, names
