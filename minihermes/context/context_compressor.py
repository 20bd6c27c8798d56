"""``context_compressor`` (one per tenant): long conversations without truncation:
the middle is summarized, the head and the tail stay as they were.

``check_and_compress(messages, token_budget)`` measures the history in tokens; above ``threshold`` of the
budget (default 75%) it keeps the head and a token-budgeted tail verbatim, keeps load-bearing tool results
the tail refers to, and replaces the rest with a structured summary (goal, progress, decisions, facts, next
steps) written by the LLM through ``llm_gateway``, or by a deterministic summarizer when the LLM fails or
does not follow the template. The full original (secrets redacted) is archived first, as a blob
``full_history_archive/<session>/<n>.json``, so nothing the summary drops is lost.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from minihermes.llm.protocol import CompletionReply
from minihermes.runtime import (
    ActorArgs,
    ActorError,
    GenServer,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    call,
    current_context,
    state,
)

from . import _compress
from .redact import redact
from .tokens import default_counter, messages_tokens

ARCHIVE_PREFIX = "full_history_archive/"
DEFAULT_THRESHOLD = 0.75
DEFAULT_TAIL_SHARE = 0.35
"""Share of the budget the verbatim tail may use."""
DEFAULT_KEEP_SHARE = 0.15
"""Share of the budget load-bearing tool results from the middle may use."""
MAX_MESSAGES = 20_000
_ADMIN = frozenset({"admin", "system"})


def archive_name(session_id: str, seq: int) -> str:
    return f"{ARCHIVE_PREFIX}{quote(session_id, safe='')}/{seq:08d}.json"


class ContextCompressor(GenServer):
    """Per-tenant compressor. Args: ``threshold`` (share of the budget), ``tail_share``, ``keep_share``,
    ``summary_timeout`` (seconds for the LLM summary), ``summary_max_tokens``."""

    class Args(ActorArgs):
        threshold: float = DEFAULT_THRESHOLD
        tail_share: float = DEFAULT_TAIL_SHARE
        keep_share: float = DEFAULT_KEEP_SHARE
        summary_timeout: float = 60
        summary_max_tokens: int = 1024

    state_version = 1
    compress_count: int = state(default=0)
    tokens_saved: int = state(default=0)
    fallback_count: int = state(default=0)
    archive_seq: int = state(default=0)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.threshold = float(args.get("threshold", DEFAULT_THRESHOLD))
        self.tail_share = float(args.get("tail_share", DEFAULT_TAIL_SHARE))
        self.keep_share = float(args.get("keep_share", DEFAULT_KEEP_SHARE))
        self.summary_timeout = float(args.get("summary_timeout", 60))
        self.summary_max_tokens = int(args.get("summary_max_tokens", 1024))
        self.counter = default_counter()
        self.host.join("svc:context_compressor")

    @call
    async def check_and_compress(
        self,
        messages: list[dict[str, Any]],
        token_budget: int = 4096,
        session_id: str = "",
        user_id: str = "",
        threshold: float = 0.0,
    ) -> dict[str, Any]:
        """``{compressed, messages, tokens_before, tokens_after, ...}``. Uncompressed replies return the
        messages as given. ``threshold`` (0 < t <= 1) overrides the configured one for this call."""
        op = "check_and_compress"
        if token_budget < 64:
            raise InvalidArgument(f"{op}: token_budget must be at least 64", op=op, field="token_budget")
        if not 0 <= threshold <= 1:
            raise InvalidArgument(f"{op}: threshold must be within 0..1", op=op, field="threshold")
        if len(messages) > MAX_MESSAGES:
            raise InvalidArgument(f"{op}: more than {MAX_MESSAGES} messages", op=op, field="messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
                raise InvalidArgument(f"{op}: messages[{i}] has no valid role", op=op, field="messages")
        before = messages_tokens(messages, self.counter)
        share = threshold or self.threshold
        limit = int(token_budget * share)
        reply: dict[str, Any] = {
            "status": "ok",
            "compressed": False,
            "tokens_before": before,
            "threshold": share,
            "limit": limit,
        }
        if before <= limit:
            return {**reply, "messages": messages, "tokens_after": before}
        plan = _compress.split(
            messages,
            int(token_budget * self.tail_share),
            self.counter,
            int(token_budget * self.keep_share),
        )
        if plan is None:
            return {**reply, "messages": messages, "tokens_after": before, "reason": "nothing_to_summarize"}
        archive = await self._archive(messages, session_id, user_id)
        summary, source = await self._summarize(plan, session_id, user_id)
        out = _compress.assemble(plan, summary)
        _compress.check_pairs(out)  # a broken pairing is a bug here, not a caller error: crash loudly
        after = messages_tokens(out, self.counter)
        self.compress_count += 1
        self.tokens_saved += max(0, before - after)
        self.host.incr_counter("context_compressions_total", summary=source)
        return {
            **reply,
            "compressed": True,
            "messages": out,
            "tokens_after": after,
            "original_count": len(messages),
            "compressed_count": len(out),
            "summarized": len(plan.middle),
            "kept_verbatim": sum(len(g) - 1 for g in plan.keep),
            "summary_source": source,
            "archive": archive,
        }

    @call
    async def get_archive(self, session_id: str, limit: int = 10) -> dict[str, Any]:
        """The archived originals of a session, newest first: ``archives: [{name, messages}]``."""
        if not session_id:
            raise InvalidArgument("get_archive: session_id is required", field="session_id")
        rows = await self.host.tuples.read_all(["history_archive", session_id, None, None])
        ctx = current_context()
        if rows and not ctx.roles & _ADMIN and any(str(r[2]) not in ("", ctx.principal) for r in rows):
            raise PermissionDenied("get_archive: another user's session", op="get_archive")
        names = sorted((str(r[3]) for r in rows), reverse=True)[: max(1, limit)]
        archives = []
        for name in names:
            data = await self.host.blobs.get(name)
            if data is not None:
                archives.append({"name": name, "messages": json.loads(data)})
        if not archives:
            raise NotFound(f"no archived history for session {session_id!r}", session_id=session_id)
        return {"status": "ok", "session_id": session_id, "archives": archives}

    @call
    async def forget(
        self, session_id: str = "", user_id: str = "", everything: bool = False
    ) -> dict[str, Any]:
        """Delete the archives of a session, of a user's sessions, or (``everything``) of the tenant."""
        if not (session_id or user_id or everything):
            raise InvalidArgument("forget: give session_id, user_id or everything", field="session_id")
        pattern: list[Any] = ["history_archive", session_id or None, user_id or None, None]
        deleted = 0
        for row in await self.host.tuples.read_all(pattern):
            await self.host.blobs.delete(str(row[3]))
            await self.host.tuples.take_all(list(row))
            deleted += 1
        return {"status": "ok", "deleted": deleted}

    @call
    def get_stats(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "compress_count": self.compress_count,
            "tokens_saved": self.tokens_saved,
            "fallback_count": self.fallback_count,
            "token_counter": self.counter.name,
        }

    # -- helpers ------------------------------------------------------------------------------------------

    async def _archive(self, messages: list[dict[str, Any]], session_id: str, user_id: str) -> str:
        self.archive_seq += 1
        name = archive_name(session_id or "_", self.archive_seq)
        data = json.dumps(redact(messages), ensure_ascii=False, default=str).encode()
        await self.host.blobs.put(name, data, "application/json")
        await self.host.tuples.write(["history_archive", session_id, user_id, name])
        return name

    async def _summarize(self, plan: _compress.Plan, session_id: str, user_id: str) -> tuple[str, str]:
        if self.host.has_actor("llm_gateway"):
            request = {
                "messages": [
                    {"role": "system", "content": _compress.SUMMARY_INSTRUCTIONS},
                    {"role": "user", "content": _compress.transcript(plan.middle)},
                ],
                "tools": [],
                "session_id": session_id,
                "user_id": user_id,
            }
            try:
                reply: CompletionReply = await self.host.ask(
                    "llm_gateway", "completion", request, timeout=self.summary_timeout
                )
                text = str(((reply or {}).get("response") or {}).get("content") or "").strip()
            except (ActorError, TimeoutError) as e:
                self.host.log.info("summary by the LLM failed (%s); using the deterministic summary", e)
                text = ""
            if text and _compress.looks_structured(text):
                return redact(text), "llm"
        self.fallback_count += 1
        summary = _compress.fallback_summary(plan.head, plan.middle, self.counter, self.summary_max_tokens)
        return redact(summary), "fallback"
