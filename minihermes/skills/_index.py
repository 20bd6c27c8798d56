"""The in-memory skill index: BM25 over a skill's fields, combined with usage and recency.

A store query per match cannot meet the latency target at 100k skills, so each tenant's ``skill_store``
keeps this index in memory, rebuilt from the stored records on activation and updated on every write. The
records stay the source of truth; the index is a cache of them.

Layout: one slot per indexed skill text. Per term a posting list of (slot, weighted term frequency) in
growable numpy arrays; per slot its length and the signals the ranking uses (usable, owner, usage,
reliability, last use, stale, pinned). A query adds each query term's BM25 weight into a score vector in
one vectorized step per term, keeps the usable slots the caller may see, multiplies in the usage and
recency factors for those candidates only, and takes the top ``limit``. Changing a skill's text retires
its slot and appends a new one; retired slots are compacted away once they are a quarter of the index.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ._text import kind_terms, tokens

FIELD_WEIGHTS = {"name": 3.0, "triggers": 3.0, "description": 2.0, "procedure": 1.0}
"""Words in a skill's name or triggers say more about what it is for than words in its steps."""
STRONG = 3.0
"""A weighted term frequency at which a skill has a term fully (a word of its name or triggers)."""
DAY = 86_400.0
TEMPLATE = re.compile(
    r"\bhandle requests like\b|\(\d+ tool calls? when learned\)|\bthe request\b|\{[a-z_]+\}", re.I
)
"""What the learned-skill extraction writes into every skill (``_extract.fallback_name`` and
``fallback_procedure``: 'Handle requests like "..." (3 tool calls when learned)', "from the request",
``{key}``): not what a skill is for, so not matched (a request "called notes.txt" is no calculator skill's)."""

_ARRAYS = ("_len", "_alive", "_usable", "_owner", "_uses", "_succ", "_last", "_stale", "_pinned", "_has_vec")
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]


@dataclass(slots=True)
class IndexDoc:
    """What the index needs of one skill."""

    skill_id: str
    terms: dict[str, float]
    """Weighted term frequencies (see ``weighted_terms``)."""
    owner: str = ""
    """The user it serves; empty when it serves the whole tenant."""
    usable: bool = True
    stale: bool = False
    pinned: bool = False
    uses: int = 0
    successes: int = 0
    last_used_at: float = 0.0


def weighted_terms(fields: dict[str, str], extra: Counter[str] | None = None) -> dict[str, float]:
    """Term frequencies over a skill's fields, each field's words counted with its weight, without the
    wording every learned skill shares (``TEMPLATE``). ``extra``: counts already made (e.g. stored
    procedure terms) added with the procedure weight."""
    out: dict[str, float] = {}
    for name, text in fields.items():
        weight = FIELD_WEIGHTS.get(name, 1.0)
        for term in tokens(TEMPLATE.sub(" ", text)):
            out[term] = out.get(term, 0.0) + weight
    for term, count in (extra or {}).items():
        out[term] = out.get(term, 0.0) + FIELD_WEIGHTS["procedure"] * count
    return out


@dataclass(slots=True)
class _Postings:
    slots: I32 = field(default_factory=lambda: np.empty(4, np.int32))
    tfs: F32 = field(default_factory=lambda: np.empty(4, np.float32))
    size: int = 0
    weights: F32 | None = None
    """BM25 term weights without idf, cached: valid while size is unchanged and the average length drifts
    less than 2% (a slot's length never changes)."""
    weights_avg: float = 0.0
    weights_size: int = 0
    strengths: F32 | None = None
    """How strongly each slot has the term, for coverage (``SkillIndex.match``): cached while size holds."""
    strengths_size: int = 0

    def strength(self) -> F32:
        s = self.strengths
        if s is None or self.strengths_size != self.size:
            s = np.minimum(self.tfs[: self.size] / STRONG, 1.0).astype(np.float32)
            self.strengths, self.strengths_size = s, self.size
        return s

    def bm25(self, lengths: F32, avg: float, k1: float, b: float) -> F32:
        w = self.weights
        if w is None or self.weights_size != self.size or abs(self.weights_avg - avg) > 0.02 * avg:
            slots, tfs = self.slots[: self.size], self.tfs[: self.size]
            norm = k1 * (1.0 - b + b * lengths[slots] / avg)
            w = (tfs * (k1 + 1.0) / (tfs + norm)).astype(np.float32)
            self.weights, self.weights_avg, self.weights_size = w, avg, self.size
        return w

    def add(self, slot: int, tf: float) -> None:
        if self.size == len(self.slots):
            self.slots = np.resize(self.slots, self.size * 2)
            self.tfs = np.resize(self.tfs, self.size * 2)
        self.slots[self.size] = slot
        self.tfs[self.size] = tf
        self.size += 1


class SkillIndex:
    """BM25 (k1, b) over weighted fields; see the module docstring."""

    def __init__(self, *, k1: float = 1.2, b: float = 0.75, half_life_days: float = 30.0) -> None:
        self.k1, self.b = k1, b
        self.half_life = half_life_days * DAY
        self._postings: dict[str, _Postings] = {}
        self._slot_of: dict[str, int] = {}
        self._ids: list[str | None] = []
        self._owners: dict[str, int] = {"": 0}
        self._total_len = 0.0
        self._retired = 0
        cap = 16
        self._len = np.zeros(cap, np.float32)
        self._alive = np.zeros(cap, bool)
        self._usable = np.zeros(cap, bool)
        self._owner = np.zeros(cap, np.int32)
        self._uses = np.zeros(cap, np.float32)
        self._succ = np.zeros(cap, np.float32)
        self._last = np.zeros(cap, np.float64)
        self._stale = np.zeros(cap, bool)
        self._pinned = np.zeros(cap, bool)
        self._has_vec = np.zeros(cap, bool)
        self._vec: npt.NDArray[np.float32] | None = None
        """Unit vectors per slot (semantic matching), allocated with the first one set."""

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, skill_id: object) -> bool:
        return skill_id in self._slot_of

    # -- writes -------------------------------------------------------------------------------------------

    def upsert(self, doc: IndexDoc) -> None:
        """Index (or re-index) a skill's text and signals."""
        self.remove(doc.skill_id)
        slot = len(self._ids)
        if slot == len(self._len):
            self._grow()
        self._ids.append(doc.skill_id)
        self._slot_of[doc.skill_id] = slot
        length = float(sum(doc.terms.values()))
        self._len[slot] = length
        self._total_len += length
        self._alive[slot] = True
        for term, tf in doc.terms.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = _Postings()
            postings.add(slot, tf)
        self._set_signals(slot, doc)

    def update_signals(self, doc: IndexDoc) -> None:
        """Status, owner or usage changed, the text did not (``doc.terms`` is ignored)."""
        slot = self._slot_of.get(doc.skill_id)
        if slot is not None:
            self._set_signals(slot, doc)

    def remove(self, skill_id: str) -> None:
        slot = self._slot_of.pop(skill_id, None)
        if slot is None:
            return
        self._alive[slot] = self._usable[slot] = self._has_vec[slot] = False
        self._total_len -= float(self._len[slot])
        self._ids[slot] = None
        self._retired += 1
        if self._retired > max(1024, len(self._ids) // 4):
            self._compact()

    def set_vector(self, skill_id: str, vector: F32) -> None:
        """A skill's unit vector for semantic matching (kept until its text is re-indexed)."""
        slot = self._slot_of.get(skill_id)
        if slot is None:
            return
        if self._vec is None:
            self._vec = np.zeros((len(self._len), len(vector)), np.float32)
        self._vec[slot] = vector
        self._has_vec[slot] = True

    def vector_count(self) -> int:
        return int(self._has_vec[: len(self._ids)].sum())

    def has_vector(self, skill_id: str) -> bool:
        slot = self._slot_of.get(skill_id)
        return slot is not None and bool(self._has_vec[slot])

    def semantic_search(
        self, query_vec: F32, limit: int, *, user_id: str = "", min_similarity: float = 0.3
    ) -> list[tuple[str, float]]:
        """The usable skills ``user_id`` may see, by cosine similarity to ``query_vec`` (best first)."""
        if self._vec is None:
            return []
        n = len(self._ids)
        mask = self._usable[:n] & self._has_vec[:n] & self._visible(np.arange(n), user_id)
        slots = np.flatnonzero(mask)
        if not len(slots):
            return []
        sims = self._vec[slots] @ query_vec.astype(np.float32)
        keep = sims >= min_similarity
        slots, sims = slots[keep], sims[keep]
        top = np.argsort(-sims, kind="stable")[:limit]
        return [(str(self._ids[int(slots[i])]), round(float(sims[i]), 6)) for i in top]

    def _visible(self, slots: npt.NDArray[Any], user_id: str) -> npt.NDArray[np.bool_]:
        owner = self._owners.get(user_id) if user_id else None
        visible: npt.NDArray[np.bool_] = self._owner[slots] == 0
        if owner is not None:
            visible |= self._owner[slots] == owner
        return visible

    def _set_signals(self, slot: int, doc: IndexDoc) -> None:
        owner = self._owners.setdefault(doc.owner, len(self._owners))
        self._owner[slot] = owner
        self._usable[slot] = doc.usable
        self._stale[slot] = doc.stale
        self._pinned[slot] = doc.pinned
        self._uses[slot] = doc.uses
        self._succ[slot] = doc.successes
        self._last[slot] = doc.last_used_at

    def _grow(self) -> None:
        cap = len(self._len) * 2
        for name in _ARRAYS:
            old = getattr(self, name)
            new = np.zeros(cap, old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        if self._vec is not None:
            vec = np.zeros((cap, self._vec.shape[1]), np.float32)
            vec[: len(self._vec)] = self._vec
            self._vec = vec

    def _compact(self) -> None:
        n = len(self._ids)
        keep = np.flatnonzero(self._alive[:n])
        remap = np.full(n, -1, np.int64)
        remap[keep] = np.arange(len(keep))
        for term in list(self._postings):
            p = self._postings[term]
            slots, tfs = p.slots[: p.size], p.tfs[: p.size]
            live = remap[slots] >= 0
            if not live.any():
                del self._postings[term]
                continue
            new_slots = remap[slots[live]].astype(np.int32)
            p.slots, p.tfs, p.size = new_slots, tfs[live].copy(), len(new_slots)
            p.weights = p.strengths = None
        cap = max(16, len(keep) * 2)
        for name in _ARRAYS:
            old = getattr(self, name)
            new = np.zeros(cap, old.dtype)
            new[: len(keep)] = old[keep]
            setattr(self, name, new)
        if self._vec is not None:
            vec = np.zeros((cap, self._vec.shape[1]), np.float32)
            vec[: len(keep)] = self._vec[keep]
            self._vec = vec
        self._ids = [self._ids[i] for i in keep.tolist()]
        self._slot_of = {sid: i for i, sid in enumerate(self._ids) if sid is not None}
        self._retired = 0

    # -- reads --------------------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int = 3,
        *,
        user_id: str = "",
        now: float = 0.0,
        usable_only: bool = True,
        min_coverage: float = 0.0,
    ) -> list[tuple[str, float]]:
        """The best ``limit`` skills for ``query`` that ``user_id`` may use: (skill_id, score), best first.
        Tenant-wide skills are visible to everyone; a user's own skills only to that user. ``min_coverage``:
        see ``match``."""
        hits = self.match(
            query, limit, user_id=user_id, now=now, usable_only=usable_only, min_coverage=min_coverage
        )
        return [(sid, score) for sid, score, _coverage in hits]

    def match(
        self,
        query: str,
        limit: int = 3,
        *,
        user_id: str = "",
        now: float = 0.0,
        usable_only: bool = True,
        min_coverage: float = 0.0,
    ) -> list[tuple[str, float, float]]:
        """``search`` with each hit's coverage: (skill_id, score, coverage), best score first.

        Coverage is how much of what the request asks for the skill speaks to: over the request's kind
        terms (``kind_terms``: its words without quoted text, file names and numbers), the share the skill
        has, each counted by how strongly the skill has it (``min(1, weighted tf / 3)``: a word of its name
        or triggers counts 1, one in its description 2/3, one only in its steps 1/3). A skill below
        ``min_coverage`` is not a match, however it ranks: BM25 alone ranks whatever shares a word with
        the request, and with few skills (a user's first learned one) every shared word looks rare."""
        terms = set(tokens(query))
        kind = kind_terms(query)
        n = len(self._ids)
        live = len(self._slot_of)
        if not terms or not live:
            return []
        scores = np.zeros(n, np.float32)
        cover = np.zeros(n, np.float32)
        avg = max(self._total_len / live, 1e-6)
        k1, b = self.k1, self.b
        for term in terms:
            p = self._postings.get(term)
            if p is None:
                continue
            idf = math.log(1.0 + (live - p.size + 0.5) / (p.size + 0.5))
            scores[p.slots[: p.size]] += np.float32(idf) * p.bm25(self._len, avg, k1, b)
            if term in kind:
                cover[p.slots[: p.size]] += p.strength()
        cand = np.flatnonzero(scores)
        if not len(cand):
            return []
        keep = self._alive[cand] if not usable_only else self._usable[cand]
        cand = cand[keep & self._visible(cand, user_id)]
        coverage = cover[cand] / max(len(kind), 1)
        if min_coverage > 0:
            cand, coverage = cand[coverage >= min_coverage], coverage[coverage >= min_coverage]
        if not len(cand):
            return []
        # The usage and recency factors stay within about 4x of each other, so the best `limit` after them
        # are among the best few hundred by text relevance: only those get them.
        shortlist = max(200, limit * 20)
        if len(cand) > shortlist:
            best = np.argpartition(-scores[cand], shortlist - 1)[:shortlist]
            cand, coverage = cand[best], coverage[best]
        final = scores[cand].astype(np.float64) * self._boost(cand, now)
        if len(cand) > limit:
            top = np.argpartition(-final, limit - 1)[:limit]
        else:
            top = np.arange(len(cand))
        order = top[np.argsort(-final[top], kind="stable")]
        return [
            (str(self._ids[int(cand[i])]), round(float(final[i]), 6), round(float(coverage[i]), 4))
            for i in order
        ]

    def _boost(self, cand: npt.NDArray[Any], now: float) -> npt.NDArray[np.float64]:
        """Usage and recency as gentle multipliers, so text relevance still decides."""
        uses = self._uses[cand].astype(np.float64)
        succ = self._succ[cand].astype(np.float64)
        reliability = 0.6 + 0.4 * (succ + 1.0) / (uses + 2.0)
        usage = 1.0 + 0.1 * np.log1p(succ)
        age = np.maximum(now - self._last[cand], 0.0) if now else np.zeros(len(cand))
        recency = 0.8 + 0.2 * np.power(0.5, age / self.half_life)
        status = np.where(self._stale[cand], 0.85, 1.0) * np.where(self._pinned[cand], 1.15, 1.0)
        out: npt.NDArray[np.float64] = reliability * usage * recency * status
        return out
