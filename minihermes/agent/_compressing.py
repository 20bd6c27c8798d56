"""The agent's "compress if needed" hook: ask ``context_compressor`` only when the history may be over its
threshold.

The history gets the token budget left after the prompt and the tools. The agent counts its history's tokens
itself (``HistoryViews``, kept up to date message by message), so a turn below the compressor's threshold (half
the budget until the compressor's first reply told it) costs no hop and no recount.
"""

from __future__ import annotations

from typing import Any

from minihermes.context.tokens import count_tokens, tools_tokens
from minihermes.runtime import ActorError, Host

from ._history import HistoryViews


class Compression:
    """A session's view of the compressor's threshold, from its last reply."""

    __slots__ = ("budget", "session_id", "share", "timeout")

    def __init__(self, session_id: str, budget: int, timeout: float) -> None:
        self.session_id = session_id
        self.budget = budget
        """The session's ``token_budget``: the prompt, the tools and the history together."""
        self.timeout = timeout
        self.share: float | None = None
        """The compressor's threshold (share of the budget), from its last reply: below it, no hop."""

    async def check(
        self,
        host: Host,
        views: HistoryViews,
        history: list[dict[str, Any]],
        fixed: tuple[str, str, list[dict[str, Any]]],
        user: str,
    ) -> dict[str, Any] | None:
        """The compressor's reply when it compressed ``history`` (``fixed``: the turn's prefix, section and
        tools, which the budget must hold besides it), else None (below the threshold, no compressor, a
        failure: the history is kept)."""
        if not host.has_actor("context_compressor") or len(history) < 4:
            return None
        prefix, section, tools = fixed
        left = max(256, self.budget - count_tokens(prefix) - count_tokens(section) - tools_tokens(tools))
        share = self.share
        if views.tokens(history) <= (left // 2 if share is None else int(left * share)):
            return None  # below the compressor's threshold (half the budget until it said): no hop
        session_id = self.session_id
        payload = {"messages": history, "token_budget": left, "session_id": session_id, "user_id": user}
        try:
            reply = await host.ask("context_compressor", "check_and_compress", payload, timeout=self.timeout)
        except ActorError as e:
            host.log.warning("compression of %s failed, history kept: %s", session_id, e.message)
            return None
        threshold = reply.get("threshold")
        if isinstance(threshold, float | int) and 0 < threshold <= 1:
            self.share = float(threshold)
        return reply if reply.get("compressed") else None
