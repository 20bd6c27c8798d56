"""One-letter typos in the words the offline model's requests turn on: "remeber", "calcualte", "remnd me",
"fourty". A word one edit away (a letter missing, added, changed, or two swapped) from exactly one keyword is
read as that keyword. The planner tries this only for a clause it did not understand as written, and keeps the
reading only when the whole clause is then understood; the answer says which word it read as which.

Lookups are by deletions (the symmetric-delete method): a word and each of its one-letter deletions are looked
up in a table built once, so a word costs a few dictionary reads, whatever the number of keywords.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

KEYWORDS: frozenset[str] = frozenset(
    {
        # requests
        "remember", "memorize", "memorise", "calculate", "compute", "evaluate", "remind", "reminder",
        "reminders", "forget", "write", "create", "delete", "remove", "search", "recall", "schedule",
        "kanban", "memory", "files", "goals", "board",
        # arithmetic
        "multiply", "multiplied", "divide", "divided", "subtract", "percent", "squared", "minus", "times",
        # times of a reminder
        "every", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "weekday",
        "weekdays", "minutes", "hours", "morning", "evening",
        # number words of five letters or more
        "three", "seven", "eight", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
        "seventeen", "eighteen", "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy",
        "eighty", "ninety", "hundred", "thousand", "million",
    }
)  # fmt: skip
"""Words of five letters or more: shorter ones have too many real neighbours (see ``SHORT``)."""
SHORT: frozenset[str] = frozenset(
    {"list", "read", "show", "what", "plus", "todo", "file", "note", "save", "open"}
)
"""Four-letter keywords, read only from two neighbouring letters swapped ("lsit", "waht", "raed")."""
_NEVER: frozenset[str] = frozenset(
    {
        # real words one edit from a keyword, never read as it
        "rewind", "remand", "forgot", "forge", "forged", "wrote", "white", "writ", "remote", "divine",
        "commute", "crate", "there", "these", "weight", "height", "fifth", "sixth", "eighth", "mines", "hour", "minute", "file", "goal", "boards", "weekend", "weekends", "week", "reminded",
        "creates", "created", "deleted", "removed", "searched", "computer", "seventh", "tines",
    }
)  # fmt: skip
_WORD = re.compile(r"(?<![\w'])[A-Za-z]{4,20}(?![\w'])")
_MAX_WORDS = 200
"""A clause of more words is not corrected: a long text is not a request with a typo in it."""


@dataclass(frozen=True)
class Reading:
    """A clause with its typos read as keywords, and which words were read as which."""

    text: str
    fixes: tuple[tuple[str, str], ...]

    def note(self) -> str:
        read = ", ".join(f'"{typo}" as "{word}"' for typo, word in self.fixes)
        return f"(I read {read}.)"


@functools.cache
def _table() -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for word in KEYWORDS:
        for variant in {word, *_deletions(word)}:
            table.setdefault(variant, set()).add(word)
    return {variant: frozenset(words) for variant, words in table.items()}


def _deletions(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one insertion, deletion, substitution or swap of neighbours."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(diff) == 1:
            return True
        i = diff[0]
        return len(diff) == 2 and diff[1] == i + 1 and a[i] == b[i + 1] and a[i + 1] == b[i]
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1 :] == short for i in range(len(long_)))


def keyword_for(word: str) -> str | None:
    """The one keyword ``word`` is a typo of, or None (no keyword, several, or a real word)."""
    lowered = word.lower()
    if lowered in KEYWORDS or lowered in SHORT or lowered in _NEVER:
        return None
    if len(lowered) == 4:
        # Two letters swapped in a short keyword, or a letter missing from a five-letter one ("evry").
        found = {k for k in SHORT if sorted(k) == sorted(lowered) and _one_edit(lowered, k)}
        found |= {k for k in _table().get(lowered, frozenset()) if len(k) == 5}
        return next(iter(found)) if len(found) == 1 else None
    table = _table()
    candidates: set[str] = set()
    for variant in {lowered, *_deletions(lowered)}:
        candidates |= table.get(variant, frozenset())
    close = [k for k in candidates if _one_edit(lowered, k)]
    return close[0] if len(close) == 1 else None


def read_typos(clause: str) -> Reading | None:
    """``clause`` with each typo of a keyword replaced by the keyword, or None when it has none."""
    if len(clause.split()) > _MAX_WORDS or _WORD.search(clause) is None:
        return None
    fixes: list[tuple[str, str]] = []

    def fix(match: re.Match[str]) -> str:
        word = match.group(0)
        keyword = keyword_for(word)
        if keyword is None:
            return word
        fixes.append((word, keyword))
        return keyword.capitalize() if word[:1].isupper() else keyword

    text = _WORD.sub(fix, clause)
    return Reading(text, tuple(fixes)) if fixes else None
