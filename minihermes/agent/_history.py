"""The agent's history as the model sees it, kept up to date step by step.

A session's history is sent to the gateway at every LLM call and its tokens are counted before every turn (the
compression threshold). Done from scratch, both cost O(history) per step, so a long session slows down as it
grows. ``HistoryViews`` makes each message's read-only view once (the gateway validates a view once and keeps
the result on it, ``llm.ViewMemo``) and keeps a running token total, so a step pays for what was appended
since the last one.

It relies on how the agent changes its history: messages are appended, or the whole list is replaced
(compression, clearing, a restore from the checkpoint). A list it has not seen, a shorter one, or one whose
first or last seen message is no longer in place is taken as replaced and viewed afresh (views of messages
still present are reused).
"""

from __future__ import annotations

from typing import Any

from minihermes.context.tokens import default_counter, message_tokens
from minihermes.llm import MessageView

AGENT_ONLY = frozenset({"name", "duration_ms", "is_summary", "kept_verbatim"})
"""History fields for the agent's own bookkeeping, never sent to a model."""


def view_of(message: dict[str, Any]) -> MessageView:
    return MessageView({k: v for k, v in message.items() if k not in AGENT_ONLY})


class HistoryViews:
    __slots__ = ("_counter", "_of", "_src", "_system", "_tokens", "_views")

    def __init__(self) -> None:
        self._of: list[dict[str, Any]] | None = None
        self._src: list[dict[str, Any]] = []
        self._views: list[MessageView] = []
        self._tokens = 0
        self._counter = ""
        self._system: dict[str, MessageView] = {}

    def system(self, text: str) -> MessageView:
        """A system message of ``text`` as a view: the turn's prompt is sent at each of its LLM calls."""
        view = self._system.get(text)
        if view is None:
            if len(self._system) >= 8:  # the prompt of an earlier turn
                self._system.clear()
            view = self._system[text] = MessageView({"role": "system", "content": text})
        return view

    def views(self, history: list[dict[str, Any]]) -> list[MessageView]:
        """One read-only view per message of ``history``, in order (a new list: the caller may keep it)."""
        self._sync(history)
        return list(self._views)

    def tokens(self, history: list[dict[str, Any]]) -> int:
        """The tokens of ``history`` as the model sees it, by the process's default counter."""
        self._sync(history)
        counter = default_counter()
        if counter.name != self._counter:  # another counter was plugged in: count everything again
            self._counter = counter.name
            self._tokens = sum(message_tokens(v, counter) for v in self._views)
        return self._tokens

    def _sync(self, history: list[dict[str, Any]]) -> None:
        src = self._src
        n = len(src)
        if (
            history is not self._of
            or len(history) < n
            or (n and (history[0] is not src[0] or history[n - 1] is not src[-1]))
        ):
            self._rebuild(history)
            return
        if len(history) == n:
            return
        counted = bool(self._counter)
        counter = default_counter()
        for m in history[n:]:
            view = view_of(m)
            src.append(m)
            self._views.append(view)
            if counted:
                self._tokens += message_tokens(view, counter)

    def _rebuild(self, history: list[dict[str, Any]]) -> None:
        known = {id(m): v for m, v in zip(self._src, self._views, strict=True)}
        views = []
        for m in history:
            view = known.get(id(m))
            views.append(view if view is not None else view_of(m))
        self._of = history
        self._src = list(history)
        self._views = views
        self._counter = ""  # counted again when asked
