"""A store short of disk over HTTP: writes are refused with a structured 507 before SQLite fails, reads go on,
``/healthz`` and ``/metrics`` say why, and everything resumes once there is room."""

from __future__ import annotations

from typing import Any

from minihermes.runtime import Node


async def test_a_full_disk_refuses_writes_and_serves_reads(node: Node, client: Any) -> None:
    c = client()
    ok = await c.post("/api/v1/actors/echo/put", json={"key": "a", "value": "1"})
    assert ok.status_code == 200, ok.text
    engine = node.store._engine  # type: ignore[attr-defined]
    engine.min_free_bytes = 1 << 62  # more than any disk has

    refused = await c.post("/api/v1/actors/echo/put", json={"key": "b", "value": "2"})
    assert refused.status_code == 507, refused.text
    error = refused.json()["error"]
    assert error["code"] == "storage_full" and "reads go on" in error["message"]
    assert error["min_free_bytes"] == 1 << 62 and error["free_bytes"] < 1 << 62
    read = await c.post("/api/v1/actors/echo/get", json={"key": "a"})
    assert read.status_code == 200 and read.json()["value"] == "1"
    assert node.status()["echo"]["crashes"] == 0  # a refusal is a reply, not a crash

    health = (await c.get("/healthz")).json()
    assert health["status"] == "degraded" and "min_free_bytes" in health["reason"]
    metrics = (await c.get("/metrics")).text
    assert "minihermes_store_healthy 0.0" in metrics and 'minihermes_store_fault{kind="disk"} 1.0' in metrics

    engine.min_free_bytes = 1  # room again
    again = await c.post("/api/v1/actors/echo/put", json={"key": "b", "value": "2"})
    assert again.status_code == 200, again.text
    assert (await c.get("/healthz")).json() == {"status": "ok"}
    assert "minihermes_store_healthy 1.0" in (await c.get("/metrics")).text
