"""Credentials are read strictly (issue 23, item 9): a JWT's time claims are integers in range, and a request
carries one credential, never two."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest

from minihermes.api import AuthConfig, create_api_key
from minihermes.api._auth import MAX_NUMERIC_DATE

from .conftest import SECRET, bearer, token

HS = AuthConfig(jwt_secret=SECRET)
WHO = "/api/v1/actors/echo/whoami"


def _signed(**claims: Any) -> str:
    body = {"tenant": "acme", "sub": "alice", "roles": ["admin"], **claims}
    return jwt.encode(body, SECRET, algorithm="HS256")


LATER = int(time.time()) + 3600


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"exp": str(LATER)}, "'exp' claim must be an integer (seconds since 1970), not str"),
        ({"exp": "99999999999999999999"}, "'exp' claim must be an integer"),
        ({"exp": "soon"}, "'exp' claim must be an integer"),
        ({"exp": LATER + 0.5}, "'exp' claim must be an integer (seconds since 1970), not float"),
        ({"exp": float(LATER)}, "'exp' claim must be an integer"),
        ({"exp": True}, "'exp' claim must be an integer (seconds since 1970), not bool"),
        ({"exp": [LATER]}, "'exp' claim must be an integer"),
        ({"exp": {"at": LATER}}, "'exp' claim must be an integer"),
        ({"exp": 10**30}, "'exp' claim must be between 0 and"),
        ({"exp": MAX_NUMERIC_DATE + 1}, "the year 9999"),
        ({"exp": -1}, "'exp' claim must be between 0 and"),
        ({"exp": LATER, "nbf": str(LATER - 7200)}, "'nbf' claim must be an integer"),
        ({"exp": LATER, "nbf": 10**30}, "'nbf' claim must be between"),
        ({"exp": LATER, "iat": 1.5}, "'iat' claim must be an integer"),
        ({"exp": LATER, "iat": False}, "'iat' claim must be an integer"),
        ({"exp": LATER, "nbf": LATER}, "not valid yet"),
        ({"exp": LATER, "iat": LATER}, "issued in the future"),
        ({"exp": int(time.time()) - 3600}, "token expired"),
    ],
)
async def test_time_claims_must_be_integers_in_range(client, claims, reason):
    c = client(HS)
    r = await c.post(WHO, json={}, headers=bearer(_signed(**claims)))
    assert r.status_code == 401, r.text
    error = r.json()["error"]
    assert error["code"] == "unauthenticated" and reason in error["message"], error
    assert r.headers["www-authenticate"].startswith("Bearer")


async def test_integer_time_claims_in_range_pass(client):
    c = client(HS)
    now = int(time.time())
    for claims in (
        {"exp": now + 60},
        {"exp": MAX_NUMERIC_DATE},
        {"exp": now + 60, "nbf": now - 60, "iat": now - 60},
        {"exp": now + 60, "iat": now + 10},  # within the leeway (30 s)
    ):
        r = await c.post(WHO, json={}, headers=bearer(_signed(**claims)))
        assert r.status_code == 200, (claims, r.text)


async def test_two_credentials_in_one_request_are_400(client, node):
    c = client(AuthConfig(jwt_secret=SECRET, api_keys=True))
    new = await create_api_key(node.store, tenant="acme", principal="ci", roles=["viewer"], name="ci")
    jwt_token = token()
    for headers in (
        {"Authorization": f"Bearer {jwt_token}", "X-API-Key": new.key},
        {"Authorization": f"Bearer {new.key}", "X-API-Key": new.key},  # even the same key twice
        {"authorization": f"Bearer {jwt_token}", "x-api-key": ""},
    ):
        r = await c.post(WHO, json={}, headers=headers)
        assert r.status_code == 400, (headers, r.text)
        error = r.json()["error"]
        assert error["code"] == "ambiguous_credentials" and "not both" in error["message"]
    # each alone works
    for headers in (bearer(jwt_token), {"X-API-Key": new.key}, bearer(new.key)):
        r = await c.post(WHO, json={}, headers=headers)
        assert r.status_code == 200, (headers, r.text)


async def test_no_credential_names_the_runtimes_principal(client, node):
    # What the runtime wrote (audit events, work it resumed) is owned by "system": a token or a key naming
    # it would read those as its own.
    c = client(AuthConfig(jwt_secret=SECRET, api_keys=True))
    r = await c.post(WHO, json={}, headers=bearer(token(sub="system", roles=["viewer"])))
    assert r.status_code == 401 and "reserved" in r.json()["error"]["message"]
    with pytest.raises(ValueError, match="reserved"):
        await create_api_key(node.store, tenant="acme", principal="system", roles=["viewer"])
    r = await c.post(
        "/api/v1/api-keys",
        json={"name": "x", "principal": "system", "roles": ["viewer"]},
        headers=bearer(token()),
    )
    assert 400 <= r.status_code < 500 and "reserved" in r.text, r.text
