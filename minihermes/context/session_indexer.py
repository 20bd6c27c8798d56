"""One session's feed of ``session_search``: the object the agent owns to index each finished turn and embed it.

A finished turn's messages are indexed for full-text search before the turn's end is saved
(``session_index.index_docs``), so a crash in between re-finishes the turn and re-indexes the same ids. With
the semantic extra, the turn's vectors are computed afterwards in the background (``session_index.embed_turn``,
the model in a worker thread), one turn after the other. The turns not embedded yet are kept in the owner's
durable state (the agent's ``unembedded`` field, saved with the turn's end) until their vectors are in, with
the session marked for resumption meanwhile: an embedding a crash or a stop cut off runs again when the
session starts (``resume``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from minihermes.runtime import Host

from . import session_index
from .embeddings import Embedder, embedder_if_known, load_embedder


class PendingTurns(Protocol):
    """Where the turns waiting for their vectors are kept: a durable state field of the owner."""

    unembedded: list[dict[str, Any]]


class SessionIndexer:
    """Indexing and embedding of one session's finished turns.

    ``semantic``: ``"auto"`` (embed when the semantic extra is installed), ``"on"`` (the same, warning when it
    is not) or ``"off"``; ``embedder``: a model object (tests). ``drained`` is awaited when the last pending
    turn's vectors are written (the agent then saves, and unmarks the session unless a turn runs)."""

    def __init__(
        self,
        host: Host,
        session_id: str,
        pending: PendingTurns,
        drained: Callable[[], Awaitable[None]],
        *,
        semantic: str = "auto",
        embedder: Embedder | None = None,
    ) -> None:
        self.host = host
        self.session_id = session_id
        self.semantic = semantic
        self.embedder = embedder
        self.task: asyncio.Task[Any] | None = None
        """The last turn's embedding, while it runs in the background."""
        self._pending = pending
        self._drained = drained

    def resume(self) -> None:
        """Embed the turns a crash or a stop left without vectors (at the session's start)."""
        if self._pending.unembedded:
            docs = [self._turn_docs(entry) for entry in self._pending.unembedded]
            self.task = self.host.spawn(self._embed_turns(docs))

    async def index_turn(self, turn_id: str, user_id: str, history: list[dict[str, Any]], start: int) -> None:
        """Index the turn whose messages are ``history[start:]``, and keep it for embedding (in the pending
        field, saved with the turn's end) when a model may embed here."""
        entry = {
            "turn_id": turn_id,
            "user_id": user_id,
            "at": self.host.now(),
            "first_index": start,
            "messages": history[start:],
            "before": history[max(0, start - session_index.WINDOW_BEFORE) : start],
        }
        docs = self._turn_docs(entry)
        await session_index.index_docs(self.host, docs)
        if docs.docs and self._may_embed():
            self._pending.unembedded.append(entry)
            self.task = self.host.spawn(self._embed_turns([docs], after=self.task))

    async def wait(self) -> None:
        """Until the last turn's vectors are written (a search of this session then finds it by meaning)."""
        task = self.task
        if task is not None and not task.done():
            await asyncio.wait({task})

    def _turn_docs(self, entry: dict[str, Any]) -> session_index.TurnDocs:
        return session_index.TurnDocs(
            self.session_id,
            entry["user_id"],
            entry["turn_id"],
            entry["messages"],
            entry["at"],
            entry["first_index"],
            entry["before"],
        )

    async def _embed_turns(
        self, pending: list[session_index.TurnDocs], after: asyncio.Task[Any] | None = None
    ) -> None:
        """Finished turns' vectors, once ``after`` (the embedding before) is done. Each turn embedded leaves
        the pending field; when none is left, ``drained``. A failed embedding stays, to be tried again when
        the session next starts."""
        if after is not None and not after.done():
            await asyncio.wait({after})
        embedder = await self._semantic_model()
        if embedder is None:
            self._pending.unembedded = []  # nothing embeds here: the turns stay with BM25
        else:
            for docs in pending:
                try:
                    await session_index.embed_turn(self.host, embedder, docs)
                except Exception:
                    self.host.log.exception(
                        "agent %s: embedding turn %s failed", self.session_id, docs.turn_id
                    )
                    return
                self._pending.unembedded = [
                    e for e in self._pending.unembedded if e["turn_id"] != docs.turn_id
                ]
        if not self._pending.unembedded:
            await self._drained()

    def _may_embed(self) -> bool:
        """False once it is known that no model embeds here (``semantic`` off, or the extra not installed):
        a check without a thread trip, so a turn keeps nothing for embedding it will never get."""
        if self.semantic == "off":
            return False
        if self.embedder is None:
            known, self.embedder = embedder_if_known()
            if known and self.embedder is None:
                self._no_model()
                return False
        return True

    def _no_model(self) -> None:
        if self.semantic == "on":
            self.host.log.warning("agent: semantic = 'on' but the semantic extra is not installed")
        self.semantic = "off"

    async def _semantic_model(self) -> Embedder | None:
        if not self._may_embed():
            return None
        if self.embedder is None:
            self.embedder = await asyncio.to_thread(load_embedder)  # the first time in this process
            if self.embedder is None:
                self._no_model()
        return self.embedder


__all__ = ["PendingTurns", "SessionIndexer"]
