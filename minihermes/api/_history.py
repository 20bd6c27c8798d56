"""A bounded, in-memory history of the node's metrics, for the dashboard's charts.

Every ``interval`` seconds of the node's clock the sampler sums each counter and gauge per tenant (over
their other labels) and keeps the last ``points`` samples. Series without a tenant label are node-wide
(HTTP requests, actor restarts) and shown to every tenant: they hold no tenant's data. Nothing here is
durable: a restart starts a new history (Prometheus, scraping ``/metrics``, is the long-term store).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable
from typing import Any

from minihermes.runtime import Node

log = logging.getLogger("minihermes.api")

NODE_WIDE = ""
"""The tenant key of series without a tenant label."""


class MetricsHistory:
    """Samples ``node.metrics`` on a timer (started by the first request that needs it)."""

    def __init__(self, node: Node, *, interval: float = 10.0, points: int = 360) -> None:
        if interval <= 0 or points < 2:
            raise ValueError("metrics history: interval must be > 0 and points >= 2")
        self.node = node
        self.interval = interval
        self._samples: deque[tuple[float, dict[str, dict[str, float]]]] = deque(maxlen=points)
        self._task: asyncio.Task[Any] | None = None

    def ensure_started(self) -> None:
        if self._task is None or self._task.done():
            self.sample()
            self._task = self.node.spawn(self._run())

    async def _run(self) -> None:
        while True:
            await self.node.clock.sleep(self.interval)
            self.sample()

    def sample(self) -> None:
        """Take one sample now (the timer's job; tests call it directly)."""
        snap = self.node.metrics.snapshot()
        totals: dict[str, dict[str, float]] = {}
        for kind in ("counters", "gauges"):
            for row in snap[kind]:
                labels = row["labels"]
                tenant = str(labels.get("tenant", NODE_WIDE))
                per = totals.setdefault(tenant, {})
                per[row["name"]] = per.get(row["name"], 0.0) + float(row["value"])
        self._samples.append((self.node.clock.time(), totals))

    def series(self, tenant: str) -> dict[str, list[tuple[float, float]]]:
        """``name -> [(time, value), ...]`` for one tenant plus the node-wide series, oldest first."""
        out: dict[str, list[tuple[float, float]]] = {}
        for ts, totals in self._samples:
            for scope in (NODE_WIDE, tenant):
                for name, value in totals.get(scope, {}).items():
                    out.setdefault(name, []).append((round(ts, 3), value))
        return out


def visible_rows(rows: Iterable[dict[str, Any]], tenant: str | None) -> list[dict[str, Any]]:
    """Metric rows a caller may see: node-wide ones and their own tenant's (all with ``tenant=None``)."""
    return [r for r in rows if tenant is None or r["labels"].get("tenant", tenant) == tenant]
