"""Counters and gauges every actor can bump; read as a snapshot (exported to Prometheus by the API)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

LabelKey = tuple[tuple[str, str], ...]


class Metrics:
    """In-process metric registry. Keys are (name, sorted labels)."""

    def __init__(self) -> None:
        self._counters: defaultdict[tuple[str, LabelKey], float] = defaultdict(float)
        self._gauges: dict[tuple[str, LabelKey], float] = {}

    def incr(self, name: str, value: float = 1.0, **labels: str) -> None:
        self._counters[(name, tuple(sorted(labels.items())) if labels else ())] += value

    def set_gauge(self, name: str, value: float, **labels: str) -> None:
        self._gauges[(name, tuple(sorted(labels.items())) if labels else ())] = value

    def counter(self, name: str, **labels: str) -> float:
        """Sum of a counter over all label sets that include the given labels."""
        want = set(labels.items())
        return sum(v for (n, lk), v in self._counters.items() if n == name and want <= set(lk))

    def gauge(self, name: str, **labels: str) -> float | None:
        return self._gauges.get((name, tuple(sorted(labels.items()))))

    def snapshot(self) -> dict[str, Any]:
        def rows(src: dict[tuple[str, LabelKey], float]) -> list[dict[str, Any]]:
            return [{"name": n, "labels": dict(lk), "value": v} for (n, lk), v in sorted(src.items())]

        return {"counters": rows(self._counters), "gauges": rows(self._gauges)}
