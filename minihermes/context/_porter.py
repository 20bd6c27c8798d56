"""The Porter stemmer (M. F. Porter, "An algorithm for suffix stripping", 1980), the original algorithm.

Session search stems with it rather than with ``_text.stem``: it conflates derivations the light stemmer keeps
apart ("collaborate" / "collaboration", "promote" / "promotion", "relaxing" / "relaxation"), which lifts
LoCoMo evidence recall by about a point. Lower-case ASCII words only; anything else comes back unchanged.
"""

from __future__ import annotations

from functools import lru_cache

_VOWELS = frozenset("aeiou")


def _consonant(w: str, i: int) -> bool:
    ch = w[i]
    if ch in _VOWELS:
        return False
    if ch == "y":
        return i == 0 or not _consonant(w, i - 1)
    return True


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: how many vowel-consonant sequences ``stem`` has."""
    m = 0
    after_vowel = False
    for i in range(len(stem)):
        cons = _consonant(stem, i)
        if cons and after_vowel:
            m += 1
        after_vowel = not cons
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(w: str) -> bool:
    return len(w) >= 2 and w[-1] == w[-2] and _consonant(w, len(w) - 1)


def _cvc(w: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (as in "hop", "fil")."""
    n = len(w)
    return (
        n >= 3
        and _consonant(w, n - 3)
        and not _consonant(w, n - 2)
        and _consonant(w, n - 1)
        and w[-1] not in "wxy"
    )


_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("abli", "able"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
)
_STEP3 = (
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
)
_STEP4 = (
    "al",
    "ance",
    "ence",
    "er",
    "ic",
    "able",
    "ible",
    "ant",
    "ement",
    "ment",
    "ent",
    "ion",
    "ou",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
)


def _step1(w: str) -> str:
    if w.endswith("sses") or w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    stripped = False
    if w.endswith("eed"):
        if _measure(w[:-3]) > 0:
            w = w[:-1]
    elif w.endswith("ed") and _has_vowel(w[:-2]):
        w, stripped = w[:-2], True
    elif w.endswith("ing") and _has_vowel(w[:-3]):
        w, stripped = w[:-3], True
    if stripped:
        if w.endswith(("at", "bl", "iz")):
            w += "e"
        elif _double_consonant(w) and w[-1] not in "lsz":
            w = w[:-1]
        elif _measure(w) == 1 and _cvc(w):
            w += "e"
    if w.endswith("y") and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    return w


def _replace(w: str, rules: tuple[tuple[str, str], ...]) -> str:
    for suffix, repl in rules:
        if w.endswith(suffix):
            if _measure(w[: -len(suffix)]) > 0:
                return w[: -len(suffix)] + repl
            return w
    return w


def _step4(w: str) -> str:
    for suffix in _STEP4:
        if w.endswith(suffix):
            stem = w[: -len(suffix)]
            if _measure(stem) > 1 and (suffix != "ion" or stem.endswith(("s", "t"))):
                return stem
            return w
    return w


def _step5(w: str) -> str:
    if w.endswith("e"):
        stem = w[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            w = stem
    if w.endswith("ll") and _measure(w) > 1:
        w = w[:-1]
    return w


@lru_cache(maxsize=65_536)
def porter(word: str) -> str:
    """The Porter stem of a lower-case word ("relational" -> "relat", "ponies" -> "poni")."""
    if len(word) <= 2 or not word.isascii() or not word.isalpha():
        return word
    return _step5(_step4(_replace(_replace(_step1(word), _STEP2), _STEP3)))
