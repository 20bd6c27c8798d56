"""/metrics (Prometheus text), /api/v1/metrics (JSON and history for the charts), who sees which series, and
structured JSON logs."""

from __future__ import annotations

import json
import logging

from prometheus_client.parser import text_string_to_metric_families

from minihermes.api import AuthConfig, JsonFormatter
from minihermes.api._history import MetricsHistory

from .conftest import SECRET, bearer, token

AUTH = AuthConfig(jwt_secret=SECRET)


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def emit(node) -> None:
    """What actors emit through host.incr_counter / set_gauge (the tenant label comes from the context)."""
    node.metrics.incr("llm_calls_total", 3, tenant="acme", provider="simulated", outcome="ok")
    node.metrics.incr("llm_calls_total", 1, tenant="globex", provider="openai", outcome="error")
    node.metrics.incr("agent_tool_calls_total", 2, tenant="acme")
    node.metrics.set_gauge("llm_circuit_open", 1.0, tenant="globex", provider="openai")
    node.metrics.incr("actor_restarts_total", actor="memory")


async def test_every_counter_and_gauge_is_exported(client, node):
    emit(node)
    c = client()
    assert (await c.post("/api/v1/actors/echo/echo", json={"text": "x"})).status_code == 200
    r = await c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    found = families(r.text)
    calls = {(s.labels["tenant"], s.labels["outcome"]): s.value for s in found["minihermes_llm_calls"]}
    assert calls == {("acme", "ok"): 3.0, ("globex", "error"): 1.0}
    assert found["minihermes_llm_circuit_open"][0].value == 1.0
    restarts = [s for s in found["minihermes_actor_restarts"] if s.name.endswith("_total")]
    assert restarts[0].labels == {"actor": "memory"} and restarts[0].value == 1.0
    http = [
        s for s in found["minihermes_http_requests"] if s.labels.get("route") == "/api/v1/actors/{actor}/{op}"
    ]
    assert http and http[0].labels["status"] == "200"
    assert any(s.labels["actor"] == "echo" for s in found["minihermes_actor_instances"])


async def test_with_auth_observers_see_their_tenant_and_node_wide_series(client, node):
    emit(node)
    c = client(AUTH)
    assert (await c.get("/metrics")).status_code == 401
    r = await c.get("/metrics", headers=bearer(token("acme", "bob", ["user"])))
    assert r.status_code == 403
    for roles in (["viewer"], ["admin"]):
        r = await c.get("/metrics", headers=bearer(token("acme", "vic", roles)))
        assert r.status_code == 200
        found = families(r.text)
        assert {s.labels["tenant"] for s in found["minihermes_llm_calls"]} == {"acme"}
        assert "minihermes_llm_circuit_open" not in found  # only globex has that gauge
        assert "minihermes_actor_restarts" in found  # node-wide: no tenant's data
    r = await client(AUTH, public_metrics=True).get("/metrics")
    assert r.status_code == 200 and "globex" in r.text


async def test_without_auth_only_local_requests_get_metrics(client, node):
    c = client()
    r = await c.get("/metrics", headers={"host": "evil.example"})
    assert r.status_code == 403


async def test_json_view_and_history_are_per_tenant(client, node):
    c = client(AUTH)
    history = MetricsHistory(node, interval=60)
    emit(node)
    history.sample()
    node.metrics.incr("agent_tool_calls_total", 5, tenant="acme")
    history.sample()
    acme = history.series("acme")
    assert [v for _, v in acme["agent_tool_calls_total"]] == [2.0, 7.0]
    assert [v for _, v in acme["actor_restarts_total"]] == [1.0, 1.0]  # node-wide, shown to every tenant
    assert "llm_circuit_open" not in acme
    assert [v for _, v in history.series("globex")["llm_circuit_open"]] == [1.0, 1.0]

    r = await c.get("/api/v1/metrics", headers=bearer(token("acme", "bob", ["user"])))
    assert r.status_code == 200
    view = r.json()
    assert view["tenant"] == "acme" and view["interval"] == 10.0
    tenants = {row["labels"].get("tenant") for row in view["counters"] + view["gauges"]}
    assert tenants <= {"acme", None}
    assert view["series"]["agent_tool_calls_total"][-1][1] == 7.0  # the app's own sampler took one at once
    assert "llm_circuit_open" not in view["series"]


def test_history_is_bounded(node):
    history = MetricsHistory(node, interval=1, points=3)
    for _ in range(5):
        node.metrics.incr("x_total", tenant="t")
        history.sample()
    assert [v for _, v in history.series("t")["x_total"]] == [3.0, 4.0, 5.0]


def test_json_logs_carry_extra_fields(caplog):
    record = logging.LogRecord(
        "minihermes.api.access", logging.INFO, __file__, 1, "GET %s %d", ("/x", 200), None
    )
    record.request_id = "abc"
    record.tenant = "acme"
    line = json.loads(JsonFormatter().format(record))
    assert (
        line["message"] == "GET /x 200"
        and line["level"] == "info"
        and line["logger"] == "minihermes.api.access"
    )
    assert line["request_id"] == "abc" and line["tenant"] == "acme" and line["ts"].endswith("+00:00")
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(JsonFormatter().format(record))["exception"]


async def test_every_request_is_logged_with_its_id_and_caller(client, caplog):
    caplog.set_level(logging.INFO, logger="minihermes.api.access")
    c = client(AUTH)
    await c.get(
        "/api/v1/whoami", headers={**bearer(token("acme", "alice", ["admin"])), "x-request-id": "req-1"}
    )
    records = [r for r in caplog.records if r.name == "minihermes.api.access"]
    assert records and records[-1].request_id == "req-1"
    assert records[-1].tenant == "acme" and records[-1].principal == "alice" and records[-1].status == 200
