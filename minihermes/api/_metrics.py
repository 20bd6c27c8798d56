"""``GET /metrics`` (Prometheus text format) and ``GET /api/v1/metrics`` (JSON, with history for charts).

Every counter and gauge actors bump through ``host.incr_counter`` / ``host.set_gauge`` (the runtime's
``Metrics``) is exported as ``minihermes_<name>``, with its labels; each actor type's state from
``node.status()`` is added as ``minihermes_actor_up`` / ``minihermes_actor_instances``. Who sees what:

- without auth (loopback only): everything;
- with auth: admins and viewers see their own tenant's series and the node-wide ones (those without a
  tenant label); users get 403. ``create_app(public_metrics=True)`` serves everything without credentials
  to a scraper on a trusted network.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from minihermes.runtime import Node, RequestContext

from ._core import (
    API_PREFIX,
    ApiState,
    authenticate,
    error_response,
    guarded,
    json_response,
    observe,
    request_id_of,
)
from ._errors import ApiError, forbidden
from ._history import MetricsHistory, visible_rows

PREFIX = "minihermes_"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_OBSERVERS = frozenset({"admin", "viewer"})
_BAD_NAME = re.compile(r"[^a-zA-Z0-9_]")


def history_of(state: ApiState) -> MetricsHistory:
    history = state.extras.get("metrics_history")
    if history is None:
        history = state.extras["metrics_history"] = MetricsHistory(
            state.node, interval=float(state.extras.get("metrics_interval", 10.0))
        )
    assert isinstance(history, MetricsHistory)
    return history


def add_metrics_routes(app: FastAPI, state: ApiState) -> None:
    state.extras["start_history"] = lambda: history_of(state).ensure_started()

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics", operation_id="metrics")
    async def metrics(request: Request) -> Response:
        return await _prometheus(state, request)

    @app.get(
        f"{API_PREFIX}/metrics",
        tags=["health"],
        summary="The caller's tenant's metrics and their recent history",
        operation_id="metrics_json",
    )
    async def metrics_json(request: Request) -> Response:
        return await guarded(state, request, _metrics_view)


async def _prometheus(state: ApiState, request: Request) -> Response:
    request_id = request_id_of(request)
    started = time.perf_counter()
    ctx: RequestContext | None = None
    tenant: str | None = None
    try:
        if state.auth.enabled and not state.public_metrics:
            ctx = await authenticate(state, request, request_id)
            _require_observer(ctx)
            tenant = ctx.tenant
        elif not state.auth.enabled:
            ctx = await authenticate(state, request, request_id)  # the loopback checks
        history_of(state).ensure_started()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(NodeCollector(state.node, tenant))
        response = Response(generate_latest(registry), media_type=CONTENT_TYPE)
    except ApiError as e:
        response = error_response(e, request_id)
    response.headers["x-request-id"] = request_id
    observe(state, request, response.status_code, started, request_id, ctx)
    return response


async def _metrics_view(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    history = history_of(state)
    history.ensure_started()
    snap = state.node.metrics.snapshot()
    tenant = ctx.tenant
    return json_response(
        {
            "tenant": tenant,
            "interval": history.interval,
            "counters": visible_rows(snap["counters"], tenant),
            "gauges": visible_rows(snap["gauges"], tenant),
            "series": history.series(tenant),
        }
    )


def _require_observer(ctx: RequestContext) -> None:
    if ctx.roles.isdisjoint(_OBSERVERS):
        raise forbidden("metrics are for admins and viewers", required=sorted(_OBSERVERS))


class NodeCollector(Collector):
    """The node's metrics as Prometheus families, read fresh at every scrape; ``tenant`` limits what is
    shown to one tenant's series and the node-wide ones (None: everything)."""

    def __init__(self, node: Node, tenant: str | None) -> None:
        self.node = node
        self.tenant = tenant

    def collect(self) -> Iterator[Metric]:
        snap = self.node.metrics.snapshot()
        yield from _families(visible_rows(snap["counters"], self.tenant), counter=True)
        yield from _families(visible_rows(snap["gauges"], self.tenant), counter=False)
        up = GaugeMetricFamily(f"{PREFIX}actor_up", "1 when the shared actor is running", labels=["actor"])
        instances = GaugeMetricFamily(
            f"{PREFIX}actor_instances", "Running instances of the actor type (all tenants)", labels=["actor"]
        )
        for name, status in sorted(self.node.status().items()):
            if status.get("kind") == "shared":  # per-tenant and virtual types start on demand
                up.add_metric([name], 1.0 if status.get("up") else 0.0)
            instances.add_metric([name], float(status.get("instances", 0)))
        yield up
        yield instances
        yield from _store_families(store_health(self.node))


def store_health(node: Node) -> dict[str, Any] | None:
    """The store's report on itself (``{"status": "ok" | "degraded", "reason", "faults", ...}``: storage
    faults met, the open-time integrity check, writes refused for lack of disk), or None for a backend that
    keeps none."""
    report = getattr(node.store, "health", None)
    if not callable(report):
        return None
    health: dict[str, Any] = report()
    return health


def _store_families(health: dict[str, Any] | None) -> Iterator[Metric]:
    if health is None:
        return
    healthy = GaugeMetricFamily(
        f"{PREFIX}store_healthy",
        "1 while the store has met no storage fault; 0: degraded (/healthz says why)",
    )
    healthy.add_metric([], 1.0 if health["status"] == "ok" else 0.0)
    yield healthy
    errors = CounterMetricFamily(
        f"{PREFIX}store_errors", "Storage faults met (a corrupt page, an I/O error, a full disk)"
    )
    errors.add_metric([], float(health.get("errors", 0)))
    yield errors
    faults = GaugeMetricFamily(f"{PREFIX}store_fault", "1 for each current storage fault", labels=["kind"])
    for fault in health.get("faults", []):
        faults.add_metric([str(fault["kind"])], 1.0)
    yield faults


def _families(rows: list[dict[str, Any]], *, counter: bool) -> Iterator[Metric]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    for name, group in sorted(by_name.items()):
        label_names = sorted({_label(k) for row in group for k in row["labels"]})
        full = PREFIX + _BAD_NAME.sub("_", name)
        family: CounterMetricFamily | GaugeMetricFamily
        if counter:
            family = CounterMetricFamily(full, f"MiniHermes counter {name}", labels=label_names)
        else:
            family = GaugeMetricFamily(full, f"MiniHermes gauge {name}", labels=label_names)
        for row in group:
            labels = {_label(k): str(v) for k, v in row["labels"].items()}
            family.add_metric([labels.get(n, "") for n in label_names], float(row["value"]))
        yield family


def _label(name: str) -> str:
    clean = _BAD_NAME.sub("_", name)
    return clean if not clean[:1].isdigit() else f"_{clean}"
