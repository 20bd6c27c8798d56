"""Words for matching skills: one tokenizer for the index, the queries and near-duplicate checks."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import re2  # type: ignore[import-untyped]

_WORD = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in into is it its me my of on or our please "
    "so than that the their them then there these this to up us was we what when where which while who "
    "will with you your s t".split()
)
# On RE2 (linear time): with Python's re a long run of digits is rescanned from each of its positions
# (quadratic). \d and \s are spelled as Python's (Unicode) classes, not RE2's ASCII ones.
_D, _S = r"\p{Nd}", r"[\t-\r\x{1c}-\x{1f}\x{85}\p{Z}]"
_EXPRESSION = re2.compile(rf"{_D}[\p{{Nd}}.,]*{_S}*(?:\*\*|[-+*/x\x{{d7}}^%]){_S}*\(?{_S}*{_D}")
ARITHMETIC = "arithmetic"
_SUFFIXES = (
    ("ations", "at"),
    ("ation", "at"),
    ("ings", ""),
    ("ing", ""),
    ("ies", "y"),
    ("ors", ""),
    ("or", ""),
    ("ed", ""),
    ("es", ""),
    ("s", ""),
)


def stem(word: str) -> str:
    """A light suffix stripper: enough to make "calculate", "calculates", "calculating", "calculation" and
    "calculator" meet."""
    for suffix, repl in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            word = word[: -len(suffix)] + repl
            break
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """Normalized terms of ``text``: lower case, stop words and bare numbers dropped, stemmed; each
    arithmetic expression counts as the word "arithmetic". A snake_case word (a tool name) counts whole
    and by its parts, so "memory_store" matches "store it in memory"."""
    lowered = text.lower()
    # Skills generalize over values: a number says nothing about which skill fits, but the shape of an
    # arithmetic expression does ("what is 7*6" and "evaluate each arithmetic expression").
    try:
        expressions = len(_EXPRESSION.findall(lowered))
    except UnicodeEncodeError:  # a lone surrogate: RE2 reads UTF-8; "?" matches nothing a surrogate would
        expressions = len(_EXPRESSION.findall(lowered.encode("utf-8", "replace").decode("utf-8")))
    out: list[str] = [ARITHMETIC] * expressions
    for word in _WORD.findall(lowered):
        if word.isdigit():
            continue
        if "_" in word:
            out.append(word)
            parts: Iterable[str] = word.split("_")
        else:
            parts = (word,)
        for part in parts:
            if part and part not in STOPWORDS:
                out.append(stem(part))
    return out


_QUOTED = re.compile(
    r"(?<!\w)'[^'\n]{1,200}'(?!\w)|\"[^\"\n]{1,200}\"|\u201c[^\u201d\n]{1,200}\u201d|\u2018[^\u2019\n]{1,200}\u2019"
)
_FILE_NAME = re.compile(r"(?<![\w.])[\w-]+(?:\.(?=[A-Za-z0-9]{0,7}[A-Za-z])[A-Za-z0-9]{1,8})+(?![\w.])")
"""A word with an extension that has a letter (``todo.txt``, ``a.tar.gz``; not ``3.5``)."""


def kind_terms(text: str) -> set[str]:
    """The terms of a request that say what kind of request it is: ``tokens`` without what varies from one
    request of a kind to the next, i.e. quoted text (``'buy milk'``, an apostrophe inside a word is not a
    quote) and file names (``todo.txt``); numbers are never terms. Skill matching's coverage counts these."""
    return set(tokens(_FILE_NAME.sub(" ", _QUOTED.sub(" ", text))))


def term_counts(text: str) -> Counter[str]:
    return Counter(tokens(text))


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def slug(text: str, max_len: int = 64) -> str:
    """A kebab-case name: letters, digits and single hyphens."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    out = "-".join(words)[:max_len].strip("-")
    return out or "skill"
