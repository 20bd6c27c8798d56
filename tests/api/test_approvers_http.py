"""Who could decide on a paused call, as the edge reports it to guardrails (issue 24): with API keys only, an
admin who holds the tenant's only admin key decides on their own paused call; a second admin key (made over
HTTP, or with the CLI while the node was down) brings four eyes back, and its revocation lifts them again;
with JWTs the admins are not known and four eyes stay."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.guardrails import Guardrails
from minihermes.api import AuthConfig
from minihermes.api._keys import create_api_key
from minihermes.runtime import ActorSpec, Node, SupervisorSpec
from minihermes.runtime.store import open_store

from .conftest import SECRET, bearer, token

KEYS_ONLY = AuthConfig(api_keys=True)
BOTH = AuthConfig(jwt_secret=SECRET, api_keys=True)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    tree = SupervisorSpec(
        name="root",
        children=[
            ActorSpec("audit_event", AuditEvent, per_tenant=True),
            ActorSpec("guardrails", Guardrails, per_tenant=True),
        ],
    )
    n = Node(open_store("sqlite", data_dir=str(tmp_path / "data")), tree)
    await n.start()
    yield n
    await n.stop(deadline=5)


async def key(node: Node, principal: str, roles: list[str], tenant: str = "acme") -> str:
    made = await create_api_key(node.store, tenant=tenant, principal=principal, roles=roles)
    return made.key


async def op(c: Any, credential: str, name: str, **args: Any) -> Any:
    r = await c.post(f"/api/v1/actors/guardrails/{name}", json=args, headers=bearer(credential))
    return r


async def pause(c: Any, credential: str, command: str) -> str:
    """A paused call of this caller's turn, as the agent requests it (request_approval runs inside the node
    as the turn's caller; over HTTP it is admin-only, which the admin here is)."""
    r = await op(c, credential, "request_approval", tool_name="terminal", input={"command": command})
    assert r.status_code == 200, r.text
    return str(r.json()["approval_id"])


async def test_the_only_admin_key_decides_on_its_own_call(client: Any, node: Node) -> None:
    alice = await key(node, "alice", ["admin"])
    await key(node, "bob", ["user"])
    c = client(KEYS_ONLY)
    approval = await pause(c, alice, "mine")
    got = (await op(c, alice, "get_approval", approval_id=approval)).json()
    assert (got["requester_may_decide"], got["you_may_decide"]) == (True, True)

    # A second admin (over HTTP): four eyes again, at once.
    r = await c.post("/api/v1/api-keys", json={"name": "carol", "roles": ["admin"]}, headers=bearer(alice))
    assert r.status_code == 201, r.text
    carol, carol_id = r.json()["key"], r.json()["key_id"]
    got = (await op(c, alice, "get_approval", approval_id=approval)).json()
    assert (got["requester_may_decide"], got["you_may_decide"]) == (False, False)
    assert (await op(c, carol, "get_approval", approval_id=approval)).json()["you_may_decide"] is True
    refused = await op(c, alice, "approve", approval_id=approval)
    assert refused.status_code == 403 and "own request" in refused.json()["error"]["message"]

    # Revoked: alice is the only admin again, and her approval goes through.
    assert (await c.delete(f"/api/v1/api-keys/{carol_id}", headers=bearer(alice))).status_code == 200
    approved = await op(c, alice, "approve", approval_id=approval)
    assert approved.status_code == 200 and approved.json()["decision"] == "approved"


async def test_keys_made_while_the_node_was_down_count_from_the_first_request(
    client: Any, node: Node
) -> None:
    alice = await key(node, "alice", ["admin"])
    await key(node, "carol", ["admin"])  # `minihermes keys create` before `serve`: no route saw it
    await key(node, "gary", ["admin"], tenant="globex")  # another tenant's admin is nobody here
    c = client(KEYS_ONLY)
    approval = await pause(c, alice, "mine")
    assert (await op(c, alice, "get_approval", approval_id=approval)).json()["you_may_decide"] is False
    assert (await op(c, alice, "approve", approval_id=approval)).status_code == 403


async def test_with_jwts_the_admins_are_not_known_and_four_eyes_stay(client: Any, node: Node) -> None:
    alice = await key(node, "alice", ["admin"])
    # An earlier keys-only run reported alice as the only admin ...
    first = client(KEYS_ONLY)
    approval = await pause(first, alice, "mine")
    assert (await op(first, alice, "get_approval", approval_id=approval)).json()["you_may_decide"] is True
    # ... a server that also takes JWTs cannot know its admins: the old list does not outlive that run.
    c = client(BOTH)
    jwt_admin = token("acme", "alice", ["admin"])
    got = (await op(c, jwt_admin, "get_approval", approval_id=approval)).json()
    assert (got["requester_may_decide"], got["you_may_decide"]) == (False, False)
    assert (await op(c, alice, "approve", approval_id=approval)).status_code == 403


async def test_only_the_edge_reports_admins(client: Any, node: Node) -> None:
    alice = await key(node, "alice", ["admin"])
    c = client(KEYS_ONLY)
    r = await op(c, alice, "set_approvers", admins={"alice": None})
    assert r.status_code == 403
