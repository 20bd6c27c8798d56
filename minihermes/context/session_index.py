"""The session-search index: every finished turn's messages, searchable with FTS5 (seed 004's second memory
tier, ``session_search()``).

Two indexes in the tenant's scope hold the same documents: ``transcripts`` (the whole tenant, for admins)
and ``transcripts~u~<user>`` (one user's sessions), so a user's search is a query on their own index and
never sees another user's turns, with no filtering after the fact. The tuple ``["transcript_doc", session,
user, doc_id]`` lists each document for forgetting by session, user or tenant. Documents hold the analysed
text (see ``_text``); the original (secrets redacted) stays in the meta for snippets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any
from urllib.parse import quote

from minihermes.runtime import Host

from ._text import analyze, query_terms, snippet
from .redact import redact_text

INDEX = "transcripts"
MAX_DOC_CHARS = 4_000
"""Text kept per message (tool results are cut there; the turn's history keeps them whole)."""


def user_index(user_id: str) -> str:
    return f"{INDEX}~u~{quote(user_id, safe='')}"


def doc_id(session_id: str, turn_id: str, index: int) -> str:
    return f"{quote(session_id, safe='')}/{turn_id}/{index}"


def _text_of(message: dict[str, Any]) -> str:
    text = str(message.get("content") or "")
    if message.get("role") == "tool":
        text = f"{message.get('name', 'tool')} result: {text}"
    return redact_text(text[:MAX_DOC_CHARS])


def _window_terms(texts: list[str], i: int) -> str:
    """The document for message ``i``: its own words twice (so it outranks its neighbours on its own
    content), then the two messages before it and the one after. A question and its answer are usually in
    neighbouring messages, so a search finds the answer by the question's words (on LoCoMo this window
    lifts turn-level recall@10 from about 0.64 to 0.76)."""
    own = analyze(texts[i])
    parts = [own, own, *(analyze(t) for t in texts[max(0, i - 2) : i])]
    if i + 1 < len(texts):
        parts.append(analyze(texts[i + 1]))
    return " ".join(p for p in parts if p)


async def index_turn(
    host: Host,
    session_id: str,
    user_id: str,
    turn_id: str,
    messages: list[dict[str, Any]],
    at: float,
    first_index: int = 0,
    before: list[dict[str, Any]] | None = None,
) -> int:
    """Index the messages of one finished turn (user, assistant and tool messages with text); ``before``
    are the messages that preceded the turn (the window's context). Returns how many documents were
    written. Writes run concurrently: the store commits them in one group."""
    writes: list[Awaitable[Any]] = []
    count = 0
    context = [m for m in before or [] if m.get("role") in ("user", "assistant", "tool")][-2:]
    texts = [_text_of(m) for m in context] + [_text_of(m) for m in messages]
    for offset, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant", "tool") or message.get("is_summary"):
            continue
        i = len(context) + offset
        if not analyze(texts[i]):
            continue
        text = texts[i]
        did = doc_id(session_id, turn_id, first_index + offset)
        meta = {
            "session_id": session_id,
            "user_id": user_id,
            "turn_id": turn_id,
            "role": message["role"],
            "index": first_index + offset,
            "at": at,
            "text": text,
        }
        fields = {"terms": _window_terms(texts, i)}
        writes.append(host.text.upsert(INDEX, did, fields, meta))
        if user_id:
            writes.append(host.text.upsert(user_index(user_id), did, fields, meta))
        writes.append(host.tuples.write(["transcript_doc", session_id, user_id, did]))
        count += 1
    await asyncio.gather(*writes)
    return count


async def search(
    host: Host, query: str, *, user_id: str, tenant_wide: bool, limit: int = 10, session_id: str = ""
) -> list[dict[str, Any]]:
    """Best hits first: ``{session_id, turn_id, role, message_index, user_id, score, snippet, at}``
    (``message_index``: the message's position in the session's history when it was indexed). ``tenant_wide`` searches every
    user's sessions (admins); otherwise only ``user_id``'s."""
    words = query_terms(query)
    if not words:
        return []
    index = INDEX if tenant_wide else user_index(user_id)
    fetch = min(limit * 5, 500) if session_id else limit
    hits = await host.text.search(index, " ".join(words), limit=fetch)
    out = []
    for hit in hits:
        meta = hit.meta if isinstance(hit.meta, dict) else {}
        if session_id and meta.get("session_id") != session_id:
            continue
        out.append(
            {
                "session_id": meta.get("session_id", ""),
                "turn_id": meta.get("turn_id", ""),
                "role": meta.get("role", ""),
                "message_index": meta.get("index", -1),
                "user_id": meta.get("user_id", ""),
                "score": round(hit.score, 6),
                "snippet": snippet(str(meta.get("text", "")), words),
                "at": meta.get("at"),
            }
        )
        if len(out) == limit:
            break
    return out


async def forget(host: Host, *, session_id: str = "", user_id: str = "") -> tuple[int, set[str]]:
    """Remove the documents of a session, of a user, or (neither given) of the whole tenant. Returns the
    count and the sessions they belonged to."""
    rows = await host.tuples.read_all(["transcript_doc", session_id or None, user_id or None, None])
    sessions: set[str] = set()
    removals: list[Awaitable[Any]] = []
    for row in rows:
        sid, uid, did = str(row[1]), str(row[2]), str(row[3])
        sessions.add(sid)
        removals.append(host.text.remove(INDEX, did))
        if uid:
            removals.append(host.text.remove(user_index(uid), did))
        removals.append(host.tuples.take_all(list(row)))
    await asyncio.gather(*removals)
    return len(rows), sessions
