"""Text analysis for recall: English stop words, a light stemmer, and snippets computed from the original.

The runtime's FTS5 index tokenizes with ``unicode61`` and no stemmer, and treats a query as an OR of its
words, so "What did Caroline paint?" would rank documents by "what" and "did" as much as by "paint". Our
indexes therefore store an analysed form (stop words dropped, words stemmed so "painting", "painted" and
"paints" meet) and queries go through the same analysis. Snippets come from the original text, which is kept
in the document's meta.

Session search analyses with ``search_terms`` / ``search_query_terms`` instead: the same stop words, the
Porter stemmer (``_porter``), possessives dropped ("Gina's" -> "gina"). The memory store keeps ``terms`` /
``analyze``: what it has stored was analysed that way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from ._porter import porter

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)

STOP_WORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before being below
    between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each
    few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself
    him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most
    mustn't my myself no nor not of off on once only or other ought our ours ourselves out over own same shan't
    she she'd she'll she's should shouldn't so some such than that that's the their theirs them themselves then
    there there's these they they'd they'll they're they've this those through to too under until up very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while who who's
    whom why why's will with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves
    also just would like get got really yeah oh s t""".split()
)


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """A light English stemmer: plurals, -ing, -ed, -ly, -ness, -ment, and a trailing e; consistent on both
    sides of a search, which matters more than being linguistically exact."""
    w = word.lower()
    if len(w) <= 3 or not w.isalpha():
        return w
    if w.endswith("'s"):
        w = w[:-2]
    for suffix, repl in (("ies", "y"), ("sses", "ss"), ("ness", ""), ("ments", ""), ("ment", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)] + repl
            break
    else:
        if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
            w = w[:-1]
    for suffix in ("ingly", "edly", "ing", "ed", "ly", "er"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and re.search(r"[aeiouy]", w[: -len(suffix)]):
            w = w[: -len(suffix)]
            if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    if w.endswith("i") and len(w) > 3:
        w = w[:-1] + "y"
    return w


def terms(text: str) -> list[str]:
    """Stemmed content words of ``text``, in order (duplicates kept: they count for BM25)."""
    out = []
    for raw in _WORD.findall(text):
        lower = raw.lower()
        if lower in STOP_WORDS or (len(lower) < 2 and not lower.isdigit()):
            continue
        out.append(stem(lower))
    return out


def analyze(text: str) -> str:
    """The form stored in the index for ``text``."""
    return " ".join(terms(text))


def query_terms(query: str) -> list[str]:
    """Distinct stemmed content words of a query; if every word is a stop word, the words themselves."""
    found = list(dict.fromkeys(terms(query)))
    if found:
        return found
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))


@lru_cache(maxsize=65_536)
def search_stem(word: str) -> str:
    """Session search's stem of a lower-case word: a possessive dropped, then Porter."""
    if word.endswith("'s"):
        word = word[:-2]
    return porter(word)


def search_terms(text: str) -> list[str]:
    """Session search's analysed words of ``text``, in order: stop words out, Porter-stemmed. Words with an
    inner apostrophe are split there, as the full-text index's tokenizer would ("o'clock" -> "o", "clock"),
    keeping pieces of two characters or more."""
    out = []
    for raw in _WORD.findall(text):
        lower = raw.lower()
        if lower in STOP_WORDS or (len(lower) < 2 and not lower.isdigit()):
            continue
        stemmed = search_stem(lower)
        if "'" not in stemmed:
            out.append(stemmed)
            continue
        out.extend(p for p in stemmed.split("'") if len(p) > 1 or p.isdigit())
    return out


def search_query_terms(query: str) -> list[str]:
    """Distinct ``search_terms`` of a query; if every word is a stop word, the words themselves."""
    found = list(dict.fromkeys(search_terms(query)))
    if found:
        return found
    return list(dict.fromkeys(w.lower() for w in re.findall(r"[^\W_]+", query)))


_NONWORD = re.compile(r"\W*")


def _edges(word: str) -> tuple[str, str, str]:
    """(leading punctuation, core, trailing punctuation), as ``^(\\W*)(.*?)(\\W*)$`` splits a word, in
    linear time (that pattern retries the trailing run from each of its positions: quadratic in its length)."""
    lead = _NONWORD.match(word).end()  # type: ignore[union-attr]
    rest = word[lead:]
    core = len(rest) - _NONWORD.match(rest[::-1]).end()  # type: ignore[union-attr]
    return word[:lead], rest[:core], rest[core:]


def snippet(text: str, query: list[str], width: int = 24, stemmer: Callable[[str], str] = stem) -> str:
    """The ``width``-word window of ``text`` with the most query terms, matches in [brackets]; ``query`` holds
    words as ``stemmer`` leaves them."""
    words = text.split()
    if not words:
        return ""
    wanted = set(query)
    parts = [_edges(w) for w in words]
    hits = [1 if core and stemmer(core.lower()) in wanted else 0 for _, core, _ in parts]
    best, best_at = -1, 0
    window = sum(hits[:width])
    for start in range(max(1, len(words) - width + 1)):
        if start:
            window += (hits[start + width - 1] if start + width - 1 < len(words) else 0) - hits[start - 1]
        if window > best:
            best, best_at = window, start
    chosen = []
    for i in range(best_at, min(len(words), best_at + width)):
        lead, core, trail = parts[i]
        chosen.append(f"{lead}[{core}]{trail}" if hits[i] else words[i])
    prefix = "… " if best_at > 0 else ""
    suffix = " …" if best_at + width < len(words) else ""
    return prefix + " ".join(chosen) + suffix
