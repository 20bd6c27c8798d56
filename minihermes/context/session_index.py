"""The session-search index: every finished turn's messages, searchable with FTS5 (the memory
tier of past transcripts, read by ``session_search``).

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

With the semantic extra installed (``minihermes[semantic]``: all-MiniLM-L6-v2, loaded by
``minihermes.context.embeddings.load_embedder``), each indexed message also gets two sentence embeddings in the
store's vector index (``embed_turn``, from the same ``TurnDocs`` as the text side, run off the event loop
after the turn is indexed): the message as ``"<speaker>: <text>"`` and its window as lines of the same form.
A search then embeds the query and fuses (``fuse_dense``): the union of the re-ranked BM25 candidates and the ``DENSE_CANDIDATES`` nearest messages,
scored by the re-ranked BM25 score relative to the best (``DENSE_FLOOR`` for a message BM25 did not find)
plus ``TURN_WEIGHT`` x the message's cosine plus ``WINDOW_WEIGHT`` x its window's cosine. A tenant whose
transcripts were never embedded (the kv key ``SEMANTIC_MARKER`` is absent) is searched lexically, without
loading the model.
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
from .embeddings import Embedder, embedder_if_known, load_embedder
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
TURN_WEIGHT = 0.5
WINDOW_WEIGHT = 1.0
DENSE_FLOOR = 0.2
DENSE_CANDIDATES = 50
"""Semantic fusion (``fuse_dense``), fitted on LoCoMo conversations 0-4 and checked on 5-9."""
VECTOR_FETCH = 500
"""Nearest messages read per vector index and search: the cosines of the BM25 candidates come from them (a
candidate outside them gets the lowest cosine read)."""
SEMANTIC_MARKER = "transcripts_semantic"
"""kv key (tenant scope) written once a transcript has been embedded: searches embed the query only then."""
EMBED_OWN_CHARS = 1_000
EMBED_NEIGHBOUR_CHARS = 300
"""Text per message given to the embedding model (it reads 256 word pieces): the message, and each
neighbour in its window."""


def user_index(user_id: str) -> str:
    return f"{INDEX}~u~{quote(user_id, safe='')}"


def vector_indexes(text_index: str) -> tuple[str, str]:
    """The vector indexes beside a text index: one vector per message, one per window."""
    return f"{text_index}.turn", f"{text_index}.window"


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


class TurnDocs:
    """The documents of one finished turn, analysed once for both sides of the index (``index_docs`` and
    ``embed_turn``): each indexed message's position, doc id and meta. ``before`` are the messages that
    preceded the turn (the window's context)."""

    def __init__(
        self,
        session_id: str,
        user_id: str,
        turn_id: str,
        messages: list[dict[str, Any]],
        at: float,
        first_index: int = 0,
        before: list[dict[str, Any]] | None = None,
    ) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self.turn_id = turn_id
        self.at = at
        context = [m for m in before or [] if m.get("role") in ("user", "assistant", "tool")][-WINDOW_BEFORE:]
        everything = context + messages
        self.texts = [_text_of(m) for m in everything]
        self.speakers = [speaker_of(m, user_id) for m in everything]
        words = [search_terms(t) for t in self.texts]
        self.own = [search_terms(s) + w if w else [] for s, w in zip(self.speakers, words, strict=True)]
        self.docs: list[tuple[int, str, dict[str, Any]]] = []
        """(position in ``texts``, doc id, meta) of each message indexed."""
        for offset, message in enumerate(messages):
            if message.get("role") not in ("user", "assistant", "tool") or message.get("is_summary"):
                continue
            i = len(context) + offset
            if not words[i]:
                continue
            meta = {
                "session_id": session_id,
                "user_id": user_id,
                "turn_id": turn_id,
                "role": message["role"],
                "index": first_index + offset,
                "at": at,
                "text": self.texts[i],
                "speaker": self.speakers[i],
                "words": len(words[i]),
            }
            self.docs.append((i, doc_id(session_id, turn_id, first_index + offset), meta))

    def line(self, i: int, chars: int) -> str:
        text = self.texts[i][:chars]
        return f"{self.speakers[i]}: {text}" if self.speakers[i] else text

    def embed_texts(self, i: int) -> tuple[str, str]:
        """What message ``i``'s two vectors are computed from: the message, and its window (the same
        neighbours as the full-text window, one ``speaker: text`` line each)."""
        lines = [
            self.line(j, EMBED_OWN_CHARS if j == i else EMBED_NEIGHBOUR_CHARS)
            for j in range(max(0, i - WINDOW_BEFORE), min(len(self.texts), i + WINDOW_AFTER + 1))
            if self.texts[j]
        ]
        return self.line(i, EMBED_OWN_CHARS), "\n".join(lines)


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
    written."""
    return await index_docs(host, TurnDocs(session_id, user_id, turn_id, messages, at, first_index, before))


async def index_docs(host: Host, turn: TurnDocs) -> int:
    """``index_turn`` for an analysed turn: one batch per index and one for the forgetting tuples, written
    concurrently so that the store commits them in one group."""
    if not turn.docs:
        return 0
    session_id, user_id = turn.session_id, turn.user_id
    dates = date_terms(turn.at)
    docs = [(did, {"terms": window_terms(turn.own, i, dates)}, meta) for i, did, meta in turn.docs]
    writes: list[Awaitable[Any]] = [host.text.upsert_many(INDEX, docs)]
    if user_id:
        writes.append(host.text.upsert_many(user_index(user_id), docs))
    writes.append(
        host.tuples.write_many([["transcript_doc", session_id, user_id, did] for _, did, _ in turn.docs])
    )
    await asyncio.gather(*writes)
    return len(turn.docs)


async def embed_turn(host: Host, embedder: Embedder, turn: TurnDocs) -> int:
    """The semantic side of ``index_docs`` (the same analysed turn, plus the model): each indexed message's
    two vectors, computed in a worker thread and written to the vector indexes beside the tenant's and the
    user's text index. Returns how many messages were embedded."""
    session_id, user_id = turn.session_id, turn.user_id
    if not turn.docs:
        return 0
    texts = [text for i, _, _ in turn.docs for text in turn.embed_texts(i)]
    vectors = await asyncio.to_thread(embedder.encode, texts)
    # The marker first and the documents checked last: a ``forget`` that ran meanwhile (it takes the
    # documents' tuples, then reads the marker, then deletes vectors) either deletes these vectors or
    # leaves the tuples gone for the check below, which deletes them.
    if await host.kv.get(SEMANTIC_MARKER) is None:
        await host.kv.put(SEMANTIC_MARKER, True)
    writes: list[Awaitable[Any]] = []
    indexes = [INDEX] + ([user_index(user_id)] if user_id else [])
    for k, (_, did, meta) in enumerate(turn.docs):
        own, window = vectors[2 * k].tolist(), vectors[2 * k + 1].tolist()
        for index in indexes:
            turn_index, window_index = vector_indexes(index)
            writes.append(host.vectors.upsert(turn_index, did, own, meta))
            writes.append(host.vectors.upsert(window_index, did, window, meta))
    await asyncio.gather(*writes)
    live = {str(row[3]) for row in await host.tuples.read_all(["transcript_doc", session_id, user_id, None])}
    gone = [did for _, did, _ in turn.docs if did not in live]
    if gone:
        await asyncio.gather(
            *(
                host.vectors.delete(vindex, did)
                for did in gone
                for index in indexes
                for vindex in vector_indexes(index)
            )
        )
    return len(turn.docs) - len(gone)


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


def fuse_dense(
    lexical: list[tuple[str, float, dict[str, Any]]],
    turn: dict[str, tuple[float, dict[str, Any]]],
    window: dict[str, tuple[float, dict[str, Any]]],
) -> list[tuple[str, float, dict[str, Any]]]:
    """Hybrid scores, best first: ``lexical`` holds the re-ranked BM25 candidates ``(doc_id, score, meta)``,
    ``turn`` and ``window`` the cosines read from the two vector indexes (``doc_id -> (cosine, meta)``).
    Candidates: the lexical ones and the ``DENSE_CANDIDATES`` best by cosine alone. Score: the lexical score
    relative to the best (``DENSE_FLOOR`` when BM25 did not find the message) + ``TURN_WEIGHT`` x the
    message's cosine + ``WINDOW_WEIGHT`` x its window's cosine; a cosine not read counts as the lowest read."""
    low_turn = min((c for c, _ in turn.values()), default=0.0)
    low_window = min((c for c, _ in window.values()), default=0.0)

    def dense(did: str) -> float:
        return (
            TURN_WEIGHT * turn.get(did, (low_turn, None))[0]
            + WINDOW_WEIGHT * (window.get(did, (low_window, None))[0])
        )

    best = max((score for _, score, _ in lexical), default=0.0)
    relative = {did: (score / best if best > 0 else 0.0, meta) for did, score, meta in lexical}
    metas = {did: meta for source in (window, turn) for did, (_, meta) in source.items()}
    nearest = sorted(metas, key=lambda did: (-dense(did), did))[:DENSE_CANDIDATES]
    out = [(did, rel + dense(did), meta) for did, (rel, meta) in relative.items()]
    out.extend((did, DENSE_FLOOR + dense(did), metas[did]) for did in nearest if did not in relative)
    out.sort(key=lambda hit: (-hit[1], hit[0]))
    return out


async def query_vector(host: Host, query: str, embedder: Embedder | None = None) -> list[float] | None:
    """The query's embedding when this tenant's transcripts have vectors (``SEMANTIC_MARKER``) and a model
    is at hand (``embedder``, else the semantic extra's, loaded once per process); else None."""
    if await host.kv.get(SEMANTIC_MARKER) is None:
        return None
    known, model = (True, embedder) if embedder is not None else embedder_if_known()
    if not known:
        model = await asyncio.to_thread(load_embedder)
    if model is None:
        return None
    vectors = await asyncio.to_thread(model.encode, [query])
    values: list[float] = vectors[0].tolist()
    return values


async def search(
    host: Host,
    query: str,
    *,
    user_id: str,
    tenant_wide: bool,
    limit: int = 10,
    session_id: str = "",
    semantic: bool = True,
    embedder: Embedder | None = None,
) -> list[dict[str, Any]]:
    """Best hits first: ``{session_id, turn_id, role, message_index, user_id, speaker, score, snippet, at}``
    (``message_index``: the message's position in the session's history when it was indexed). ``tenant_wide``
    searches every user's sessions (admins); otherwise only ``user_id``'s. ``session_id`` keeps one
    session's hits. ``semantic``: fuse embeddings when the transcripts have them (``query_vector``)."""
    words, dates = query_of(query)
    terms = list(dict.fromkeys(words + dates))
    if not terms:
        return []
    index = INDEX if tenant_wide else user_index(user_id)
    fetch = 500 if session_id else max(CANDIDATES, limit)
    qvec = await query_vector(host, query, embedder) if semantic else None
    hits = await host.text.search(index, " ".join(terms), limit=fetch)
    candidates = []
    ids = []
    for hit in hits:
        meta = hit.meta if isinstance(hit.meta, dict) else {}
        if session_id and meta.get("session_id") != session_id:
            continue
        candidates.append((hit.score, meta))
        ids.append(hit.doc_id)
    scores = rerank(words, candidates)
    ranked = [(did, score, meta) for did, score, (_, meta) in zip(ids, scores, candidates, strict=True)]
    if qvec is not None:
        found = await asyncio.gather(
            *(host.vectors.search(vindex, qvec, VECTOR_FETCH) for vindex in vector_indexes(index))
        )
        cosines = [
            {
                h.doc_id: (h.score, h.meta)
                for h in vhits
                if isinstance(h.meta, dict) and (not session_id or h.meta.get("session_id") == session_id)
            }
            for vhits in found
        ]
        if cosines[0] or cosines[1]:
            ranked = fuse_dense(ranked, cosines[0], cosines[1])
    ranked.sort(key=lambda hit: -hit[1])
    out = []
    for _, score, meta in ranked[:limit]:
        out.append(
            {
                "session_id": meta.get("session_id", ""),
                "turn_id": meta.get("turn_id", ""),
                "role": meta.get("role", ""),
                "message_index": meta.get("index", -1),
                "user_id": meta.get("user_id", ""),
                "speaker": meta.get("speaker", ""),
                "score": round(score, 6),
                "snippet": snippet(str(meta.get("text", "")), words, stemmer=search_stem),
                "at": meta.get("at"),
            }
        )
    return out


async def forget(host: Host, *, session_id: str = "", user_id: str = "") -> tuple[int, set[str], list[str]]:
    """Remove the documents of a session, of a user, or (neither given) of the whole tenant. Returns the
    count, the sessions they belonged to and the text indexes that lost documents (for the caller to
    ``compact``: until then FTS5 keeps their words in old segments). The documents' tuples go first, then
    their vectors (see ``embed_turn`` for why that order)."""
    rows = await host.tuples.read_all(["transcript_doc", session_id or None, user_id or None, None])
    sessions: set[str] = set()
    touched: dict[str, None] = {}
    removals: list[Awaitable[Any]] = []
    for row in rows:
        sid, uid, did = str(row[1]), str(row[2]), str(row[3])
        sessions.add(sid)
        removals.append(host.tuples.take_all(list(row)))
        for index in [INDEX] + ([user_index(uid)] if uid else []):
            touched[index] = None
            removals.append(host.text.remove(index, did))
    await asyncio.gather(*removals)
    if rows and await host.kv.get(SEMANTIC_MARKER) is not None:
        await asyncio.gather(
            *(
                host.vectors.delete(vindex, str(row[3]))
                for row in rows
                for index in [INDEX] + ([user_index(str(row[2]))] if row[2] else [])
                for vindex in vector_indexes(index)
            )
        )
    return len(rows), sessions, list(touched)
