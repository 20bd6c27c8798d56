"""Dates for session search: a message is indexed with terms for the day and the month it was said, and a
query's absolute dates ("on 9 November, 2022", "March 3rd 2024", "in May 2023") become the same terms.

The terms are plain words the full-text index stores like any other ("on20221109", "in202211"), so "what did
we decide on 9 November 2022" finds that day's messages by their timestamp although no message spells the
date out. Days are UTC. Dates without a year stay ordinary words (the year would be a guess).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d{2})"
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)
_ISO = re.compile(r"\b((?:19|20)\d{2})-(\d{2})-(\d{2})\b")


def day_term(day: date) -> str:
    return f"on{day:%Y%m%d}"


def month_term(year: int, month: int) -> str:
    return f"in{year:04d}{month:02d}"


def date_terms(at: float | None) -> list[str]:
    """The day and month terms of a timestamp (seconds since the epoch); none without one."""
    if not at:
        return []
    moment = datetime.fromtimestamp(at, UTC)
    return [day_term(moment.date()), month_term(moment.year, moment.month)]


def _day(year: str, month: str, day: str) -> list[str]:
    try:
        when = date(int(year), _MONTHS.get(month.lower(), 0) or int(month), int(day))
    except ValueError:
        return []
    return [day_term(when), month_term(when.year, when.month)]


def query_dates(query: str) -> tuple[list[str], str]:
    """The date terms of ``query``'s absolute dates, and the query with those dates cut out (their words
    would otherwise be searched for too: "may", "9", "2022")."""
    found: list[str] = []

    def cut(terms: list[str], text: str) -> str:
        if not terms:
            return text
        found.extend(terms)
        return " "

    query = _ISO.sub(lambda m: cut(_day(m[1], m[2], m[3]), m[0]), query)
    query = _DAY_MONTH_YEAR.sub(lambda m: cut(_day(m[3], m[2], m[1]), m[0]), query)
    query = _MONTH_DAY_YEAR.sub(lambda m: cut(_day(m[3], m[1], m[2]), m[0]), query)
    query = _MONTH_YEAR.sub(lambda m: cut([month_term(int(m[2]), _MONTHS[m[1].lower()])], m[0]), query)
    return list(dict.fromkeys(found)), query
