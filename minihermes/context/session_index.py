"""The session-search index: every finished turn's messages, searchable with FTS5 (seed 004's second memory
tier, ``session_search()``).

Two indexes in the tenant's scope hold the same documents: ``transcripts`` (the whole tenant, for admins)
and ``transcripts~u~<user>`` (one user's sessions), so a user's search is a query on their own index and
never sees another user's turns, with no filtering after the fact. The tuple ``["transcript_doc", session,
user, doc_id]`` lists each document for forgetting by session, user or tenant. Documents hold the analysed
text (see ``_text.search_terms``); the original (secrets redacted) stays in the meta for snippets.

A document is a conversation window (the message twice, the two messages before it and the one after), its
speaker's name and the day and month it was said (``_dates``). A search takes the index's best
``CANDIDATES`` windows by BM25 and re-ranks them (``rerank``) with three signals measured on LoCoMo
(docs/benchmarks.md): how much of the candidate list falls in the same session, whether the query names the
message's speaker, and the message's own length (a substantive message over a "thanks!").
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import Any
from urllib.parse import quote

from minihermes.runtime import Host

from ._dates import date_terms, query_dates
from ._text import search_query_terms, search_stem, search_terms, snippet
from .redact import redact_text

INDEX = "transcripts"
MAX_DOC_CHARS = 4_000
"""Text kept per message (tool results are cut there; the turn's history keeps them whole)."""
WINDOW_BEFORE = 2
WINDOW_AFTER = 1
OWN_REPEAT = 2
"""A window holds its own message's words this many times, so it outranks its neighbours on its own words."""
CANDIDATES = 50
"""Windows taken from the full-text index per search and re-ranked (500 when one session is asked for)."""
SESSION_WEIGHT = 0.2
SPEAKER_WEIGHT = 0.05
LENGTH_WEIGHT = 0.1
LENGTH_CAP = 30
"""Re-ranking weights, fitted on LoCoMo conversations 0-4 and checked on 5-9 (docs/benchmarks.md)."""


def user_index(user_id: str) -> str:
    return f"{INDEX}~u~{quote(user_id, safe='')}"


def doc_id(session_id: str, turn_id: str, index: int) -> str:
    return f"{quote(session_id, safe='')}/{turn_id}/{index}"


def _text_of(message: dict[str, Any]) -> str:
    text = str(message.get("content") or "")
    if message.get("role") == "tool":
        text = f"{message.get('name', 'tool')} result: {text}"
    return redact_text(text[:MAX_DOC_CHARS])


def speaker_of(message: dict[str, Any], user_id: str) -> str:
    """Who said it: the message's participant ``name`` when it has one, else the turn's user for a user
    message; tool results and unnamed assistant messages have none."""
    role = message.get("role")
    if role not in ("user", "assistant"):
        return ""
    name = message.get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()[:200]
    return user_id if role == "user" else ""


def window_terms(own: list[list[str]], i: int, dates: list[str]) -> str:
    """The document for message ``i`` (``own``: each message's analysed words, speaker included): its words
    ``OWN_REPEAT`` times, the ``WINDOW_BEFORE`` messages before it, the ``WINDOW_AFTER`` after, its date
    terms. A question and its answer are usually neighbours, so a search finds the answer by the question's
    words (on LoCoMo the window lifts turn-level recall@10 from about 0.64 to 0.77)."""
    parts = [w for _ in range(OWN_REPEAT) for w in own[i]]
    for j in range(max(0, i - WINDOW_BEFORE), min(len(own), i + WINDOW_AFTER + 1)):
        if j != i:
            parts.extend(own[j])
    parts.extend(dates)
    return " ".join(parts)


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
    context = [m for m in before or [] if m.get("role") in ("user", "assistant", "tool")][-WINDOW_BEFORE:]
    everything = context + messages
    texts = [_text_of(m) for m in everything]
    speakers = [speaker_of(m, user_id) for m in everything]
    words = [search_terms(t) for t in texts]
    own = [search_terms(s) + w if w else [] for s, w in zip(speakers, words, strict=True)]
    dates = date_terms(at)
    for offset, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant", "tool") or message.get("is_summary"):
            continue
        i = len(context) + offset
        if not words[i]:
            continue
        did = doc_id(session_id, turn_id, first_index + offset)
        meta = {
            "session_id": session_id,
            "user_id": user_id,
            "turn_id": turn_id,
            "role": message["role"],
            "index": first_index + offset,
            "at": at,
            "text": texts[i],
            "speaker": speakers[i],
            "words": len(words[i]),
        }
        fields = {"terms": window_terms(own, i, dates)}
        writes.append(host.text.upsert(INDEX, did, fields, meta))
        if user_id:
            writes.append(host.text.upsert(user_index(user_id), did, fields, meta))
        writes.append(host.tuples.write(["transcript_doc", session_id, user_id, did]))
        count += 1
    await asyncio.gather(*writes)
    return count


def query_of(query: str) -> tuple[list[str], list[str]]:
    """A query's analysed words and its date terms (``_dates.query_dates``)."""
    dates, rest = query_dates(query)
    words = search_query_terms(rest) if rest.strip() else []
    return words, dates


def rerank(query_words: list[str], candidates: list[tuple[float, dict[str, Any]]]) -> list[float]:
    """Final scores of full-text candidates (``(bm25, meta)``, best first): the BM25 relative to the best,
    plus ``SESSION_WEIGHT`` x the share of the candidates' relative BM25 that falls in the candidate's
    session (relative to the best session: a session that keeps coming up is where the topic was
    discussed), plus ``SPEAKER_WEIGHT`` when the query names the message's speaker (minus when it names
    another), plus ``LENGTH_WEIGHT`` x log(1 + the message's words, capped at ``LENGTH_CAP``)."""
    if not candidates:
        return []
    best = max(score for score, _ in candidates) or 1.0
    relative = [max(score, 0.0) / best for score, _ in candidates]
    by_session: dict[str, float] = {}
    for rel, (_, meta) in zip(relative, candidates, strict=True):
        sid = str(meta.get("session_id", ""))
        by_session[sid] = by_session.get(sid, 0.0) + rel
    top_session = max(by_session.values()) or 1.0
    wanted = set(query_words)
    speakers: dict[str, str] = {}
    for _, meta in candidates:
        name = str(meta.get("speaker") or "")
        if name and name not in speakers:
            key = " ".join(search_terms(name))
            speakers[name] = key if key and set(key.split()) <= wanted else ""
    named = {key for key in speakers.values() if key}
    out = []
    for rel, (_, meta) in zip(relative, candidates, strict=True):
        speaker = str(meta.get("speaker") or "")
        match = 0.0
        if len(named) == 1 and speaker:
            match = 1.0 if speakers[speaker] in named else -1.0
        n = meta.get("words")
        if not isinstance(n, int):
            n = len(search_terms(str(meta.get("text", ""))))
        out.append(
            rel
            + SESSION_WEIGHT * by_session[str(meta.get("session_id", ""))] / top_session
            + SPEAKER_WEIGHT * match
            + LENGTH_WEIGHT * math.log1p(min(n, LENGTH_CAP))
        )
    return out


async def search(
    host: Host, query: str, *, user_id: str, tenant_wide: bool, limit: int = 10, session_id: str = ""
) -> list[dict[str, Any]]:
    """Best hits first: ``{session_id, turn_id, role, message_index, user_id, speaker, score, snippet, at}``
    (``message_index``: the message's position in the session's history when it was indexed). ``tenant_wide``
    searches every user's sessions (admins); otherwise only ``user_id``'s. ``session_id`` keeps one
    session's hits."""
    words, dates = query_of(query)
    terms = list(dict.fromkeys(words + dates))
    if not terms:
        return []
    index = INDEX if tenant_wide else user_index(user_id)
    fetch = 500 if session_id else max(CANDIDATES, limit)
    hits = await host.text.search(index, " ".join(terms), limit=fetch)
    candidates = []
    for hit in hits:
        meta = hit.meta if isinstance(hit.meta, dict) else {}
        if session_id and meta.get("session_id") != session_id:
            continue
        candidates.append((hit.score, meta))
    scores = rerank(words, candidates)
    order = sorted(range(len(candidates)), key=lambda k: -scores[k])[:limit]
    out = []
    for k in order:
        meta = candidates[k][1]
        out.append(
            {
                "session_id": meta.get("session_id", ""),
                "turn_id": meta.get("turn_id", ""),
                "role": meta.get("role", ""),
                "message_index": meta.get("index", -1),
                "user_id": meta.get("user_id", ""),
                "speaker": meta.get("speaker", ""),
                "score": round(scores[k], 6),
                "snippet": snippet(str(meta.get("text", "")), words, stemmer=search_stem),
                "at": meta.get("at"),
            }
        )
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
