"""API keys over HTTP (issue 19): admins create (the key shown once), list (never a secret) and revoke their
own tenant's keys; audited without the key; users, viewers and other tenants get nothing."""

from __future__ import annotations

import json
from typing import Any

from minihermes.api import AuthConfig
from minihermes.runtime import Node, RequestContext

from .conftest import SECRET, bearer, token

AUTH = AuthConfig(jwt_secret=SECRET, api_keys=True)
KEYS = "/api/v1/api-keys"
ACME_ADMIN = bearer(token("acme", "alice", ["admin"]))
GLOBEX_ADMIN = bearer(token("globex", "gary", ["admin"]))
ACME_USER = bearer(token("acme", "bob", ["user"]))


async def audit(node: Node, tenant: str) -> list[dict[str, Any]]:
    ctx = RequestContext(tenant=tenant, principal="t", roles=frozenset({"admin"}))
    reply = await node.ask("audit_event", "query_events", {"limit": 1000}, ctx=ctx)
    return [e for e in reply["events"] if e["event_type"].startswith("api_key_")]


async def test_create_use_list_and_revoke(client: Any, node: Node) -> None:
    c = client(AUTH)
    r = await c.post(KEYS, json={"name": "ci-bot", "roles": ["user"], "expires_in": 3600}, headers=ACME_ADMIN)
    assert r.status_code == 201, r.text
    made = r.json()
    key, key_id = made["key"], made["key_id"]
    assert key.startswith(f"mh_{key_id}_") and made["tenant"] == "acme" and made["principal"] == "ci-bot"
    assert made["roles"] == ["user"] and made["expires_at"] == made["created_at"] + 3600
    # The key works, as what it was made for.
    me = await c.get("/api/v1/whoami", headers=bearer(key))
    assert me.status_code == 200 and (me.json()["tenant"], me.json()["principal"]) == ("acme", "ci-bot")
    assert me.json()["roles"] == ["user"]
    # Listed without any secret; shown once means never again.
    listed = await c.get(KEYS, headers=ACME_ADMIN)
    assert listed.status_code == 200 and listed.json()["count"] == 1
    assert listed.json()["keys"][0]["key_id"] == key_id and key.split("_")[-1] not in listed.text
    assert "hash" not in listed.text and "salt" not in listed.text
    # Revoked: the key stops working at once; a second revoke is a conflict.
    gone = await c.delete(f"{KEYS}/{key_id}", headers=ACME_ADMIN)
    assert gone.status_code == 200 and gone.json()["key_id"] == key_id
    assert (await c.get("/api/v1/whoami", headers=bearer(key))).status_code == 401
    again = await c.delete(f"{KEYS}/{key_id}", headers=ACME_ADMIN)
    assert again.status_code == 409
    assert (await c.get(KEYS, headers=ACME_ADMIN)).json()["keys"][0]["revoked_at"] is not None
    # Audited in the tenant's trail, never with the key.
    events = await audit(node, "acme")
    assert [e["event_type"] for e in events] == ["api_key_created", "api_key_revoked"]
    assert all(e["data"]["key_id"] == key_id for e in events)
    assert key.split("_")[-1] not in json.dumps(events)


async def test_tenants_never_see_each_others_keys(client: Any, node: Node) -> None:
    c = client(AUTH)
    r = await c.post(KEYS, json={"name": "acme-key", "roles": ["admin"]}, headers=ACME_ADMIN)
    key_id = r.json()["key_id"]
    theirs = await c.get(KEYS, headers=GLOBEX_ADMIN)
    assert theirs.json() == {"keys": [], "count": 0}
    refused = await c.delete(f"{KEYS}/{key_id}", headers=GLOBEX_ADMIN)
    assert refused.status_code == 404  # as unknown as a key that never existed
    assert (await c.get("/api/v1/whoami", headers=bearer(r.json()["key"]))).status_code == 200
    # A globex key is made in globex whatever the body says: there is no tenant field to name.
    bad = await c.post(KEYS, json={"name": "x", "roles": ["user"], "tenant": "acme"}, headers=GLOBEX_ADMIN)
    assert bad.status_code == 422
    assert await audit(node, "globex") == []


async def test_only_admins(client: Any) -> None:
    c = client(AUTH)
    for method, path in (("POST", KEYS), ("GET", KEYS), ("DELETE", f"{KEYS}/0123456789ab")):
        r = await c.request(method, path, json={"name": "x", "roles": ["admin"]}, headers=ACME_USER)
        assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied"
    assert (await c.get(KEYS)).status_code == 401


async def test_bad_bodies_are_422(client: Any) -> None:
    c = client(AUTH)
    for body in (
        {"roles": ["user"]},
        {"name": "ok", "roles": []},
        {"name": "ok", "roles": ["system"]},
        {"name": "ok", "roles": ["user"], "expires_in": 0},
        {"name": "ok", "roles": ["user"], "expires_in": "3600"},
        {"name": "no spaces", "roles": ["user"]},
        {"name": "ok", "roles": ["user"], "principal": "a\x00b"},
    ):
        r = await c.post(KEYS, json=body, headers=ACME_ADMIN)
        assert r.status_code == 422, body
    assert (await c.delete(f"{KEYS}/not-a-key-id", headers=ACME_ADMIN)).status_code == 404


async def test_the_openapi_document_describes_them(client: Any) -> None:
    doc = (await client(AUTH).get("/openapi.json")).json()
    assert set(doc["paths"][KEYS]) == {"get", "post"}
    assert "201" in doc["paths"][KEYS]["post"]["responses"]
    assert "delete" in doc["paths"][KEYS + "/{key_id}"]
