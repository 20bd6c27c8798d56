"""POST /api/v1/actors/{actor}/{op}: replies, status mapping, hostile bodies, casts, timeouts, discovery."""

from __future__ import annotations

import asyncio
import json

import pytest

ECHO = "/api/v1/actors/echo"


async def test_call_returns_the_actors_reply(client):
    c = client()
    r = await c.post(f"{ECHO}/echo", json={"text": "hé ✓ 🎉", "times": 2})
    assert r.status_code == 200 and r.json() == {"status": "ok", "text": "hé ✓ 🎉hé ✓ 🎉"}
    assert r.headers["content-type"] == "application/json" and r.headers["x-request-id"]


async def test_seed_style_bodies_work_as_written(client):
    """curl -d sends application/x-www-form-urlencoded; scripted clients' bodies also carry "op"."""
    c = client()
    body = '{"op":"echo","text":"hi"}'
    r = await c.post(
        f"{ECHO}/echo", content=body, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 200 and r.json()["text"] == "hi"
    r = await c.post(ECHO, content=body)  # the op only in the body
    assert r.status_code == 200 and r.json()["text"] == "hi"
    r = await c.post(f"{ECHO}/echo", content='{"op":"typed","text":"hi"}')
    assert r.status_code == 422 and r.json()["error"]["field"] == "op"
    r = await c.post(ECHO, content='{"text":"hi"}')
    assert r.status_code == 422 and r.json()["error"]["field"] == "op"


async def test_session_and_health_flows_over_http(client):
    c = client()
    r = await c.post("/api/v1/actors/session_manager/create_session", json={"channel": "web", "user_id": "u"})
    sid = r.json()["session_id"]
    r = await c.post("/api/v1/actors/agent_fsm/transition", json={"session_id": sid, "to": "processing"})
    assert r.status_code == 200 and r.json()["to"] == "processing"
    r = await c.post("/api/v1/actors/agent_fsm/transition", json={"session_id": sid, "to": "processing"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_transition"
    r = await c.post("/api/v1/actors/health_monitor/get_health", content='{"op":"get_health"}')
    assert r.status_code == 200 and r.json()["status"] == "ok"
    r = await c.post(
        "/api/v1/actors/audit_event/query_events",
        content='{"op":"query_events","event_type":"session_started"}',
    )
    assert r.status_code == 200 and [e["session_id"] for e in r.json()["events"]] == [sid]


async def test_unknown_actor_or_op_is_404_with_a_hint(client):
    c = client()
    r = await c.post("/api/v1/actors/ecko/echo", json={})
    assert r.status_code == 404 and r.json()["error"]["code"] == "actor_not_found"
    assert "did you mean 'echo'" in r.json()["error"]["message"]
    r = await c.post(f"{ECHO}/ecoh", json={})
    assert r.status_code == 404 and r.json()["error"] == {
        "code": "unknown_op",
        "message": "echo has no op 'ecoh'; did you mean 'echo'?",
        "actor": "echo",
        "op": "ecoh",
    }
    for path in (
        f"{ECHO}/__resume__",
        f"{ECHO}/__DOWN__",
        "/api/v1/actors/echo%2Fx/echo",
        "/api/v1/actors/%C3%A9cho/echo",
        "/api/v1/actors/echo/%F0%9F%A6%9C",
        f"{ECHO}/{'x' * 5000}",
        "/api/v1/nope",
    ):
        r = await c.post(path, json={})
        assert r.status_code == 404 and r.json()["error"]["code"] in (
            "unknown_op",
            "not_found",
            "actor_not_found",
        )
    r = await c.get(f"{ECHO}/echo")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


async def test_invalid_arguments_are_422_naming_the_field(client):
    c = client()
    cases = [
        ({}, "text"),
        ({"text": 5}, "text"),
        ({"text": "x", "times": "2"}, "times"),
        ({"text": "x", "times": True}, "times"),
        ({"text": "x", "extra": 1}, "extra"),
    ]
    for body, field in cases:
        r = await c.post(f"{ECHO}/echo", json=body)
        assert r.status_code == 422, body
        assert r.json()["error"]["code"] == "invalid_argument" and r.json()["error"]["field"] == field
    r = await c.post(f"{ECHO}/typed", json={"mode": "c"})
    assert r.status_code == 422 and r.json()["error"]["expected"] == ["a", "b"]
    r = await c.post(f"{ECHO}/typed", json={"mode": "a", "tags": ["x", 1]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "tags[1]"
    r = await c.post("/api/v1/actors/notebook/append", json={"text": "no session"})
    assert r.status_code == 422


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"{",
        b'{"text": "x",}',
        b"[1, 2]",
        b'"just a string"',
        b"null",
        b"42",
        b'{"text": NaN}',
        b'{"text": "x", "times": Infinity}',
        b'{"text": "x", "times": 1e999}',
        b'{"text": "x", "times": 99999999999999999999999}',
        b'{"text": "x", "times": ' + b"9" * 5000 + b"}",
        b"\xff\xfe{}",
        b'{"text": "\\ud800"}',
        b'{"\\udfff": 1}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 70 + b"1" + b"}" * 70,
        b"\x00\x01\x02",
    ],
)
async def test_garbage_bodies_are_4xx_never_500(client, body):
    c = client()
    r = await c.post(f"{ECHO}/echo", content=body, headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500, (body[:40], r.status_code, r.text[:200])
    assert r.json()["error"]["code"] in ("invalid_json", "invalid_argument")


async def test_empty_body_means_no_arguments(client):
    c = client()
    r = await c.post("/api/v1/actors/health_monitor/get_health")
    assert r.status_code == 200
    r = await c.post(f"{ECHO}/echo", content=b"  \n")
    assert r.status_code == 422 and r.json()["error"]["field"] == "text"


async def test_bom_and_unicode_round_trip(client):
    c = client()
    text = "ünïcödé — 日本語 — 🦜 — \u200b"
    r = await c.post(f"{ECHO}/echo", content=b"\xef\xbb\xbf" + json.dumps({"text": text}).encode())
    assert r.status_code == 200 and r.json()["text"] == text


async def test_wrong_content_types_are_415(client):
    c = client()
    for ctype in (
        "multipart/form-data; boundary=x",
        "application/xml",
        "image/png",
        "application/octet-stream",
    ):
        r = await c.post(f"{ECHO}/echo", content=b'{"text":"x"}', headers={"content-type": ctype})
        assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type", ctype
    for ctype in ("application/json; charset=utf-8", "text/plain", "application/merge-patch+json", ""):
        r = await c.post(f"{ECHO}/echo", content=b'{"text":"x"}', headers={"content-type": ctype})
        assert r.status_code == 200, ctype


async def test_huge_bodies_are_413(client):
    c = client(max_body_bytes=10_000)
    big = json.dumps({"text": "x" * 20_000})
    r = await c.post(f"{ECHO}/echo", content=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"

    async def chunks():  # no Content-Length: refused while streaming
        for _ in range(100):
            yield b" " * 1000

    r = await c.post(f"{ECHO}/echo", content=chunks())
    assert r.status_code == 413
    r = await c.post(f"{ECHO}/echo", content=b"{}", headers={"content-length": "abc"})
    assert r.status_code == 400
    ok = await c.post(f"{ECHO}/echo", json={"text": "x" * 9000})
    assert ok.status_code == 200


async def test_actor_errors_keep_their_status_and_shape(client):
    c = client()
    r = await c.post(f"{ECHO}/fail", json={"kind": "conflict"})
    assert r.status_code == 409 and r.json() == {
        "error": {"code": "conflict", "message": "already there", "thing": "x"}
    }
    r = await c.post(f"{ECHO}/fail", json={"kind": "payment"})
    assert r.status_code == 402 and r.json()["error"]["code"] == "payment_required"
    r = await c.post(f"{ECHO}/fail", json={"kind": "other"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "weird"
    r = await c.post(f"{ECHO}/get", json={"key": "missing"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_a_crash_is_a_500_without_internals(client):
    c = client()
    r = await c.post(f"{ECHO}/crash", json={})
    assert r.status_code == 500 and r.json()["error"]["code"] == "actor_crashed"
    assert "internal detail" not in r.text and "Traceback" not in r.text
    assert (await c.post(f"{ECHO}/echo", json={"text": "still up"})).status_code == 200


async def test_timeouts_are_504_and_configurable(client):
    c = client()
    r = await c.post(f"{ECHO}/hang?timeout=0.05", json={})
    assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
    for bad in ("0", "1e-45", "0.0009", "-1", "abc", "nan", "inf", "301"):
        r = await c.post(f"{ECHO}/echo?timeout={bad}", json={"text": "x"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "timeout", bad
    fast = client(default_timeout=0.05)
    r = await fast.post("/api/v1/actors/echo/hang", json={})
    assert r.status_code == 504


async def test_casts_are_202_accepted(client):
    c = client()
    r = await c.post(f"{ECHO}/note", json={"text": "a"})
    assert r.status_code == 202 and r.json() == {"status": "accepted"}
    r = await c.post(f"{ECHO}/note", json={"text": 1})  # arguments are still checked before queueing
    assert r.status_code == 422
    for _ in range(100):
        if (await c.post(f"{ECHO}/read_notes", json={})).json()["notes"] == ["a"]:
            break
        await asyncio.sleep(0.01)
    assert (await c.post(f"{ECHO}/read_notes", json={})).json()["notes"] == ["a"]


async def test_replies_that_are_not_json(client):
    c = client()
    assert (await c.post(f"{ECHO}/nothing", json={})).json() == {"status": "ok"}
    assert (await c.post(f"{ECHO}/odd_reply", json={"kind": "set"})).json() == {"items": [3]}
    for kind in ("bytes", "nan"):
        r = await c.post(f"{ECHO}/odd_reply", json={"kind": kind})
        assert r.status_code == 500 and r.json()["error"]["code"] == "reply_not_serializable"


async def test_request_id_is_echoed_or_made(client):
    c = client()
    r = await c.post(f"{ECHO}/whoami", json={}, headers={"x-request-id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123" and r.json()["request_id"] == "abc-123"
    r = await c.post(f"{ECHO}/whoami", json={}, headers={"x-request-id": "bad id\twith spaces"})
    assert r.headers["x-request-id"] != "bad id\twith spaces" and len(r.headers["x-request-id"]) == 32


async def test_without_auth_everyone_is_the_local_owner(client):
    c = client()
    r = await c.post(f"{ECHO}/whoami", json={})
    assert (
        r.json()["tenant"] == "default"
        and r.json()["principal"] == "local"
        and r.json()["roles"] == ["admin"]
    )
    me = await c.get("/api/v1/whoami")
    assert me.json() == {
        "tenant": "default",
        "namespace": "default",
        "principal": "local",
        "roles": ["admin"],
        "authenticated": False,
    }


async def test_without_auth_only_local_requests_are_served(client):
    c = client()
    r = await c.post(f"{ECHO}/echo", json={"text": "x"}, headers={"origin": "https://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied"
    r = await c.post(f"{ECHO}/echo", json={"text": "x"}, headers={"origin": "null"})
    assert r.status_code == 403
    r = await c.post(f"{ECHO}/echo", json={"text": "x"}, headers={"origin": "http://localhost:3000"})
    assert r.status_code == 200
    rebound = client(base_url="http://attacker.example:8091")  # DNS rebinding: Host names another site
    assert (await rebound.post(f"{ECHO}/echo", json={"text": "x"})).status_code == 403
    for base in ("http://localhost:8091", "http://[::1]:8091"):
        assert (await client(base_url=base).post(f"{ECHO}/echo", json={"text": "x"})).status_code == 200
    extra = client(base_url="http://testserver", allowed_hosts={"testserver"})
    assert (await extra.post(f"{ECHO}/echo", json={"text": "x"})).status_code == 200
    # health probes are never refused
    assert (await rebound.get("/healthz")).status_code == 200


async def test_healthz_and_readyz(client, node):
    c = client()
    assert (await c.get("/healthz")).json() == {"status": "ok"}
    r = await c.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready"}
    node.failed.set()
    r = await c.get("/readyz")
    assert r.status_code == 503 and r.json()["reason"] == "root supervisor failed"
    node.failed.clear()
    app_state = c._transport.app.state.minihermes  # the state serve_http flips while shutting down
    app_state.draining = True
    assert (await c.get("/readyz")).status_code == 503
    app_state.draining = False
    await node.stop()
    r = await c.get("/readyz")
    assert r.status_code == 503 and r.json()["reason"] == "store unreachable"


async def test_discovery_lists_actors_ops_and_arguments(client):
    c = client()
    r = await c.get("/api/v1/actors")
    assert r.status_code == 200
    actors = {a["name"]: a for a in r.json()["actors"]}
    assert set(actors) == {
        "audit_event",
        "session_manager",
        "agent_fsm",
        "health_monitor",
        "echo",
        "notebook",
        "guardrails",
        "llm_gateway",
        "tool_executor",
    }
    assert actors["agent_fsm"]["kind"] == "virtual" and actors["agent_fsm"]["key_field"] == "session_id"
    assert actors["health_monitor"]["kind"] == "shared" and actors["echo"]["kind"] == "per_tenant"
    ops = {o["op"]: o for o in actors["echo"]["ops"]}
    assert not any(op.startswith("__") for a in actors.values() for op in (o["op"] for o in a["ops"]))
    assert ops["echo"]["params"] == [
        {"name": "text", "type": "str", "required": True},
        {"name": "times", "type": "int", "required": False, "default": 1},
    ]
    assert ops["echo"]["description"] == "Repeat text." and ops["note"]["kind"] == "cast"
    typed = {p["name"]: p for p in ops["typed"]["params"]}
    assert typed["mode"]["type"] == "Literal['a', 'b']" and typed["tags"]["type"] == "list[str] | None"
    sm = {o["op"]: o for o in actors["session_manager"]["ops"]}
    assert sm["create_session"]["access"] == "write" and sm["create_session"]["allowed"] is True
    one = await c.get("/api/v1/actors/session_manager")
    assert one.json()["name"] == "session_manager"
    assert (await c.get("/api/v1/actors/nope")).status_code == 404


async def test_openapi_has_a_path_per_op(client):
    c = client()
    doc = (await c.get("/openapi.json")).json()
    op = doc["paths"]["/api/v1/actors/echo/echo"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["text"] and schema["properties"]["times"] == {
        "type": "integer",
        "default": 1,
    }
    assert "202" in doc["paths"]["/api/v1/actors/echo/note"]["post"]["responses"]
    assert "/healthz" in doc["paths"] and "Error" in doc["components"]["schemas"]
    assert "/api/v1/actors/echo/__resume__" not in doc["paths"]
