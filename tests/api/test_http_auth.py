"""Auth over HTTP: JWTs (HS256, RS256), API keys, tenancy from the credential, roles and the permission table."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from minihermes.api import (
    KEY_SCOPE,
    AuthConfig,
    create_api_key,
    list_api_keys,
    revoke_api_key,
)
from minihermes.permissions import MUTATING

from .actors import CALLS
from .conftest import PERMISSIONS, SECRET, bearer, token

HS = AuthConfig(jwt_secret=SECRET)
WHO = "/api/v1/actors/echo/whoami"


async def test_jwt_claims_become_the_request_context(client):
    c = client(HS)
    r = await c.post(
        WHO, json={}, headers=bearer(token("acme", "alice", ["user", "viewer"], namespace="prod"))
    )
    assert r.status_code == 200
    assert r.json() | {"request_id": ""} == {
        "tenant": "acme",
        "namespace": "prod",
        "principal": "alice",
        "roles": ["user", "viewer"],
        "request_id": "",
    }
    r = await c.post(WHO, json={}, headers=bearer(token(roles="admin viewer")))
    assert r.json()["roles"] == ["admin", "viewer"]
    me = await c.get("/api/v1/whoami", headers=bearer(token()))
    assert me.json()["authenticated"] is True and me.json()["tenant"] == "acme"


def _tamper(tok: str) -> str:
    head, body, sig = tok.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["tenant"] = "globex"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{forged}.{sig}"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: token(exp=-120), "token expired"),
        (lambda: token(exp=None), "token lacks the 'exp' claim"),
        (lambda: token(key="another-secret-that-is-also-long-enough"), "invalid token"),
        (lambda: _tamper(token()), "invalid token"),
        (lambda: token()[:-4] + "AAAA", "invalid token"),
        (
            lambda: jwt.encode(
                {"tenant": "acme", "sub": "a", "exp": time.time() + 60}, None, algorithm="none"
            ),
            "none",
        ),
        (lambda: jwt.encode({"sub": "a", "exp": time.time() + 60}, SECRET, algorithm="HS256"), "tenant"),
        (lambda: jwt.encode({"tenant": "acme", "exp": time.time() + 60}, SECRET, algorithm="HS256"), "sub"),
        (lambda: token(tenant="acme\n"), "tenant"),
        (lambda: token(tenant="../etc"), "tenant"),
        (lambda: token(tenant=""), "tenant"),
        (lambda: token(sub=""), "principal"),
        (lambda: token(roles=[1, 2]), "roles"),
        (lambda: token(aud="someone-else"), "invalid token"),
        (lambda: token(nbf=time.time() + 3600), "invalid token"),
        (lambda: "not.a.jwt", "malformed token"),
        (lambda: "garbage", "malformed token"),
    ],
)
async def test_bad_tokens_are_401(client, make, message):
    c = client(HS)
    r = await c.post(WHO, json={}, headers=bearer(make()))
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthenticated" and message in r.json()["error"]["message"]
    assert r.headers["www-authenticate"].startswith("Bearer")


async def test_leeway_tolerates_small_clock_skew(client):
    c = client(HS)
    assert (await c.post(WHO, json={}, headers=bearer(token(exp=-10)))).status_code == 200
    strict = client(AuthConfig(jwt_secret=SECRET, leeway=0))
    assert (await strict.post(WHO, json={}, headers=bearer(token(exp=-10)))).status_code == 401


async def test_missing_or_malformed_credentials_are_401(client):
    c = client(HS)
    for headers in (
        {},
        {"Authorization": "Basic YWxpY2U6cHc="},
        {"Authorization": "Bearer "},
        {"Authorization": "x"},
    ):
        r = await c.post(WHO, json={}, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated", headers
    assert (await c.get("/api/v1/actors")).status_code == 401
    assert (await c.get("/healthz")).status_code == 200 and (await c.get("/readyz")).status_code == 200


async def test_issuer_and_audience(client):
    c = client(AuthConfig(jwt_secret=SECRET, issuer="https://idp", audience="minihermes"))
    good = token(iss="https://idp", aud="minihermes")
    assert (await c.post(WHO, json={}, headers=bearer(good))).status_code == 200
    for bad in (
        token(iss="https://idp"),
        token(aud="minihermes"),
        token(iss="https://evil", aud="minihermes"),
    ):
        assert (await c.post(WHO, json={}, headers=bearer(bad))).status_code == 401


def _hs256_by_hand(claims: dict, secret: str) -> str:
    """PyJWT refuses to HMAC with a PEM key; an attacker would not."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = json.dumps({"alg": "HS256", "typ": "JWT"}).encode()
    signing_input = f"{b64(header)}.{b64(json.dumps(claims).encode())}"
    sig = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(sig)}"


async def test_rs256_and_algorithm_confusion(client, rsa_keys):
    private, public_pem = rsa_keys
    c = client(AuthConfig(jwt_public_key=public_pem, api_keys=False))
    r = await c.post(WHO, json={}, headers=bearer(token(key=private, alg="RS256")))
    assert r.status_code == 200 and r.json()["principal"] == "alice"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert (await c.post(WHO, json={}, headers=bearer(token(key=other, alg="RS256")))).status_code == 401
    # HS256 "signed" with the public key as the secret must not pass (the classic confusion attack)
    confused = _hs256_by_hand(
        {"tenant": "acme", "sub": "mallory", "roles": ["admin"], "exp": int(time.time()) + 60}, public_pem
    )
    r = await c.post(WHO, json={}, headers=bearer(confused))
    assert r.status_code == 401 and "HS256" in r.json()["error"]["message"]
    # with both configured, each algorithm uses its own key
    both = client(AuthConfig(jwt_secret=SECRET, jwt_public_key=public_pem))
    assert (await both.post(WHO, json={}, headers=bearer(token()))).status_code == 200
    assert (await both.post(WHO, json={}, headers=bearer(token(key=private, alg="RS256")))).status_code == 200


async def test_nobody_gets_the_system_role_over_http(client):
    c = client(HS)
    r = await c.post(WHO, json={}, headers=bearer(token(roles=["system", "admin", "root"])))
    assert r.json()["roles"] == ["admin"]
    r = await c.post(WHO, json={}, headers=bearer(token(roles=["system"])))
    assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied"


# -- API keys ----------------------------------------------------------------------------------------------


async def test_api_keys_create_use_list_revoke(client, node):
    c = client(AuthConfig(api_keys=True))
    new = await create_api_key(node.store, tenant="acme", principal="ci-bot", roles=["user"], name="ci")
    assert new.key.startswith("mh_") and new.key not in repr(new)
    r = await c.post(WHO, json={}, headers=bearer(new.key))
    assert r.status_code == 200 and (r.json()["tenant"], r.json()["principal"], r.json()["roles"]) == (
        "acme",
        "ci-bot",
        ["user"],
    )
    assert (await c.post(WHO, json={}, headers={"X-API-Key": new.key})).status_code == 200
    other = await create_api_key(node.store, tenant="globex", principal="g", roles=["viewer"])
    listed = await list_api_keys(node.store, tenant="acme")
    assert [k.key_id for k in listed] == [new.info.key_id] and listed[0].name == "ci"
    assert {k.key_id for k in await list_api_keys(node.store)} == {new.info.key_id, other.info.key_id}
    # stored hashed: the secret is nowhere in the store
    records = await node.store.kv.list(KEY_SCOPE, "")
    assert new.key.split("_", 2)[2] not in json.dumps(records) and "hash" in records[0][1]
    assert await revoke_api_key(node.store, new.info.key_id) is True
    assert await revoke_api_key(node.store, new.info.key_id) is False
    r = await c.post(WHO, json={}, headers=bearer(new.key))
    assert r.status_code == 401 and r.json()["error"]["message"] == "API key revoked"
    assert (await list_api_keys(node.store, include_revoked=False))[0].key_id == other.info.key_id
    assert await revoke_api_key(node.store, other.key) is True  # the full key works too


async def test_wrong_unknown_expired_and_disabled_keys_are_401(client, node):
    c = client(AuthConfig(api_keys=True))
    new = await create_api_key(node.store, tenant="acme", principal="p", roles=["admin"], ttl=60)
    key_id = new.info.key_id
    for bad in (
        f"mh_{key_id}_" + "A" * 43,  # right id, wrong secret
        "mh_000000000000_" + "A" * 43,
        "mh_short",
        new.key + "x",
    ):
        r = await c.post(WHO, json={}, headers=bearer(bad))
        assert r.status_code == 401, bad
    later = await create_api_key(
        node.store, tenant="acme", principal="p", roles=["admin"], ttl=1, now=time.time() - 10
    )
    r = await c.post(WHO, json={}, headers=bearer(later.key))
    assert r.status_code == 401 and r.json()["error"]["message"] == "API key expired"
    jwt_only = client(AuthConfig(jwt_secret=SECRET, api_keys=False))
    assert (await jwt_only.post(WHO, json={}, headers=bearer(new.key))).status_code == 401
    assert (await c.post(WHO, json={}, headers=bearer(token()))).status_code == 401  # no JWT configured


async def test_key_creation_validates(node):
    for kwargs in (
        {"tenant": "a b", "principal": "p", "roles": ["user"]},
        {"tenant": "acme", "principal": "", "roles": ["user"]},
        {"tenant": "acme", "principal": "p", "roles": []},
        {"tenant": "acme", "principal": "p", "roles": ["system"]},
        {"tenant": "acme", "principal": "p", "roles": ["user"], "ttl": 0},
    ):
        with pytest.raises(ValueError):
            await create_api_key(node.store, **kwargs)


# -- tenancy -----------------------------------------------------------------------------------------------


async def test_tokens_for_one_tenant_never_see_anothers_data(client, node):
    c = client(HS)
    a, b = bearer(token("acme", "alice")), bearer(token("globex", "gary"))
    assert (
        await c.post("/api/v1/actors/echo/put", json={"key": "k", "value": "acme's"}, headers=a)
    ).status_code == 200
    r = await c.post("/api/v1/actors/echo/get", json={"key": "k"}, headers=b)
    assert r.status_code == 404
    sid = (await c.post("/api/v1/actors/session_manager/create_session", json={}, headers=a)).json()[
        "session_id"
    ]
    r = await c.post("/api/v1/actors/session_manager/get_session", json={"session_id": sid}, headers=b)
    assert r.status_code == 404
    assert (await c.post("/api/v1/actors/session_manager/list_sessions", json={}, headers=b)).json()[
        "sessions"
    ] == []
    r = await c.post("/api/v1/actors/audit_event/query_events", json={}, headers=b)
    assert r.json()["events"] == []
    r = await c.post("/api/v1/actors/audit_event/query_events", json={}, headers=a)
    assert [e["event_type"] for e in r.json()["events"]] == ["session_started"]
    r = await c.post(
        "/api/v1/actors/agent_fsm/transition", json={"session_id": sid, "to": "processing"}, headers=a
    )
    assert r.status_code == 200
    r = await c.post("/api/v1/actors/agent_fsm/get_state", json={"session_id": sid}, headers=b)
    assert r.json()["state"] == "idle"  # globex's FSM for that id is a different actor
    # the body cannot pick a tenant: the credential does
    r = await c.post(WHO, json={"tenant": "acme"}, headers=b)
    assert r.status_code == 422


# -- roles and the permission table ------------------------------------------------------------------------


async def test_viewer_cannot_call_any_mutating_op(client, node):
    c = client(HS)
    viewer = bearer(token(roles=["viewer"]))
    catalog = (await c.get("/api/v1/actors", headers=viewer)).json()["actors"]
    checked = 0
    before = list(CALLS)
    for actor in catalog:
        for op in actor["ops"]:
            if op["access"] not in MUTATING:
                continue
            checked += 1
            r = await c.post(f"/api/v1/actors/{actor['name']}/{op['op']}", json={}, headers=viewer)
            assert r.status_code == 403, (actor["name"], op["op"], r.text)
            err = r.json()["error"]
            assert (
                err["code"] == "permission_denied" and err["actor"] == actor["name"] and err["op"] == op["op"]
            )
            assert "viewer" not in err["required"] and op["allowed"] is False
    assert checked >= 15 and CALLS == before
    ok = await c.post("/api/v1/actors/health_monitor/get_health", json={}, headers=viewer)
    assert ok.status_code == 200


ADMIN_OPS = [
    ("guardrails", "set_policy", {"tool_name": "terminal", "decision": "allow"}),
    ("llm_gateway", "register_credential", {"phantom_token": "ph", "api_key": "sk-x"}),
    ("llm_gateway", "register_provider", {"name": "p", "kind": "openai", "model": "m"}),
    ("llm_gateway", "switch_provider", {"provider": "openai"}),
    ("llm_gateway", "secret_backdoor", {}),
    (
        "tool_executor",
        "register_tool",
        {"name": "t", "description": "", "input_schema": {}, "handler_type": "x"},
    ),
    ("tool_executor", "execute", {"name": "terminal", "input": {}}),
    ("audit_event", "log_event", {"event_type": "forged"}),
    ("agent_fsm", "transition", {"session_id": "s", "to": "processing"}),
    ("health_monitor", "poll_tick", {}),
]


@pytest.mark.parametrize(("actor", "op", "body"), ADMIN_OPS)
async def test_users_cannot_call_admin_ops(client, actor, op, body):
    c = client(HS)
    before = list(CALLS)
    r = await c.post(f"/api/v1/actors/{actor}/{op}", json=body, headers=bearer(token(roles=["user"])))
    assert r.status_code == 403 and r.json()["error"]["required"] == ["admin"]
    assert CALLS == before
    r = await c.post(f"/api/v1/actors/{actor}/{op}", json=body, headers=bearer(token(roles=["admin"])))
    assert r.status_code in (200, 202), r.text


async def test_users_read_tools_and_stats_but_viewers_cannot_write(client):
    c = client(HS)
    user, viewer = bearer(token(roles=["user"])), bearer(token(roles=["viewer"]))
    for path in ("tool_executor/list_tools", "llm_gateway/get_stats", "guardrails/get_policies"):
        assert (await c.post(f"/api/v1/actors/{path}", json={}, headers=user)).status_code == 200
        assert (await c.post(f"/api/v1/actors/{path}", json={}, headers=viewer)).status_code == 200
    # approvals: viewers and users reach them (guardrails narrows a user to their own requests)
    assert (
        await c.post("/api/v1/actors/guardrails/list_approvals", json={}, headers=viewer)
    ).status_code == 200
    assert (
        await c.post("/api/v1/actors/guardrails/list_approvals", json={}, headers=user)
    ).status_code == 200
    assert (
        await c.post("/api/v1/actors/session_manager/create_session", json={}, headers=user)
    ).status_code == 200
    assert (
        await c.post("/api/v1/actors/session_manager/create_session", json={}, headers=viewer)
    ).status_code == 403


async def test_refused_callers_do_not_get_to_upload(client):
    c = client(HS, max_body_bytes=100)
    r = await c.post(
        "/api/v1/actors/guardrails/set_policy", content=b"x" * 1000, headers=bearer(token(roles=["viewer"]))
    )
    assert r.status_code == 403


async def test_users_act_only_as_themselves_and_in_their_own_sessions(client):
    c = client(HS)
    bob, carol = bearer(token(sub="bob", roles=["user"])), bearer(token(sub="carol", roles=["user"]))
    admin, viewer = bearer(token(sub="alice")), bearer(token(sub="vic", roles=["viewer"]))
    r = await c.post("/api/v1/actors/session_manager/create_session", json={"channel": "web"}, headers=bob)
    assert r.json()["user_id"] == "bob"
    sid = r.json()["session_id"]
    r = await c.post("/api/v1/actors/session_manager/create_session", json={"user_id": "carol"}, headers=bob)
    assert r.status_code == 403
    # user_id defaults to the caller; naming someone else is refused
    r = await c.post("/api/v1/actors/notebook/append", json={"session_id": sid, "text": "hi"}, headers=bob)
    assert r.status_code == 200 and r.json()["user_id"] == "bob"
    r = await c.post(
        "/api/v1/actors/notebook/append",
        json={"session_id": sid, "text": "x", "user_id": "carol"},
        headers=bob,
    )
    assert r.status_code == 403 and r.json()["error"]["field"] == "user_id"
    # someone else's session, or one that was never created, is not found
    for who in (carol,):
        r = await c.post("/api/v1/actors/notebook/append", json={"session_id": sid, "text": "x"}, headers=who)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await c.post(
        "/api/v1/actors/notebook/append", json={"session_id": "made-up", "text": "x"}, headers=bob
    )
    assert r.status_code == 404
    r = await c.post("/api/v1/actors/agent_fsm/get_state", json={"session_id": sid}, headers=carol)
    assert r.status_code == 404
    # admins act anywhere in the tenant; viewers, like users, do not see other people's sessions
    r = await c.post(
        "/api/v1/actors/notebook/append", json={"session_id": "made-up", "text": "x"}, headers=admin
    )
    assert r.status_code == 200
    r = await c.post("/api/v1/actors/notebook/read", json={"session_id": sid}, headers=admin)
    assert r.json()["notes"] == ["hi"]
    r = await c.post("/api/v1/actors/notebook/read", json={"session_id": sid}, headers=viewer)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await c.post("/api/v1/actors/notebook/append", json={"session_id": sid, "text": "x"}, headers=viewer)
    assert r.status_code == 403


async def test_discovery_tells_each_caller_what_it_may_call(client):
    c = client(HS)
    for roles, expect in ((["viewer"], False), (["user"], True), (["admin"], True)):
        actors = (await c.get("/api/v1/actors", headers=bearer(token(roles=roles)))).json()["actors"]
        sm = next(a for a in actors if a["name"] == "session_manager")
        create = next(o for o in sm["ops"] if o["op"] == "create_session")
        assert create["allowed"] is expect and create["roles"] == ["admin", "user"]


def test_auth_config_validation(rsa_keys):
    with pytest.raises(ValueError, match="at least 32 bytes"):
        AuthConfig(jwt_secret="short")
    with pytest.raises(ValueError, match="configure"):
        AuthConfig(api_keys=False)
    with pytest.raises(ValueError, match="PEM"):
        AuthConfig(jwt_public_key="not a key")
    private = rsa_keys[0]
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    with pytest.raises(ValueError):
        AuthConfig(jwt_public_key=pem)  # a private key is not a public key
    assert SECRET not in repr(AuthConfig(jwt_secret=SECRET))


def test_auth_config_from_env(tmp_path, rsa_keys):
    assert AuthConfig.from_env({}) is None
    cfg = AuthConfig.from_env({"MINIHERMES_JWT_SECRET": SECRET, "MINIHERMES_JWT_AUDIENCE": "mh"})
    assert cfg is not None and cfg.jwt_secret == SECRET and cfg.audience == "mh" and cfg.api_keys is False
    key_file = tmp_path / "pub.pem"
    key_file.write_text(rsa_keys[1])
    cfg = AuthConfig.from_env({"MINIHERMES_JWT_PUBLIC_KEY_FILE": str(key_file), "MINIHERMES_API_KEYS": "1"})
    assert cfg is not None and cfg.jwt_public_key == rsa_keys[1] and cfg.api_keys is True


def test_permission_table_defaults_to_admin():
    assert PERMISSIONS.access("llm_gateway", "anything_new") == "admin"
    assert PERMISSIONS.access("made_up", "op") == "admin"
    from minihermes.agent.memory import Memory

    # an op's access is declared on its handler; the table holds overrides on top
    assert PERMISSIONS.with_declared({"memory": Memory}).roles_for("memory", "store_memory") == {
        "user",
        "admin",
    }
    with pytest.raises(ValueError):
        PERMISSIONS.extended({("x", "y"): "superuser"})


async def test_refusals_are_audited_in_the_callers_tenant(client, node):
    c = client(HS)
    r = await c.post(
        "/api/v1/actors/guardrails/set_policy", json={}, headers=bearer(token(sub="vic", roles=["viewer"]))
    )
    assert r.status_code == 403
    r = await c.post(
        "/api/v1/actors/audit_event/query_events",
        json={"event_type": "permission_denied"},
        headers=bearer(token()),
    )
    events = r.json()["events"]
    assert len(events) == 1 and events[0]["principal"] == "vic"
    assert events[0]["data"] == {"actor": "guardrails", "op": "set_policy", "roles": ["viewer"]}


async def test_a_failing_key_store_is_503_not_401(client, node):
    c = client(AuthConfig(api_keys=True))
    new = await create_api_key(node.store, tenant="acme", principal="p", roles=["admin"])
    await node.stop()
    r = await c.post(WHO, json={}, headers=bearer(new.key))
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
