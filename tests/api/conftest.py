"""Fixtures: a real node (SQLite, system clock) with test actors and the agent's session, audit, health and FSM
actors, and httpx clients over the ASGI app."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from minihermes.agent.agent_fsm import AgentFSM
from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.health_monitor import HealthMonitor
from minihermes.agent.session_manager import SessionManager
from minihermes.api import DEFAULT_PERMISSIONS, AuthConfig, create_app
from minihermes.runtime import ActorSpec, Node, SupervisorSpec
from minihermes.runtime.store import open_store

from .actors import TEST_PERMISSIONS, Echo, Notebook, StubGateway, StubGuardrails, StubTools

SECRET = "test-secret-that-is-long-enough-for-hs256!"
PERMISSIONS = DEFAULT_PERMISSIONS.extended(TEST_PERMISSIONS)


def tree() -> SupervisorSpec:
    return SupervisorSpec(
        name="root",
        children=[
            ActorSpec("audit_event", AuditEvent, per_tenant=True),
            ActorSpec("session_manager", SessionManager, per_tenant=True),
            ActorSpec("agent_fsm", AgentFSM, virtual=True, key_field="session_id"),
            ActorSpec("health_monitor", HealthMonitor, args={"poll_interval": 60}),
            ActorSpec("echo", Echo, per_tenant=True),
            ActorSpec("notebook", Notebook, virtual=True, key_field="session_id"),
            ActorSpec("guardrails", StubGuardrails, per_tenant=True),
            ActorSpec("llm_gateway", StubGateway, per_tenant=True),
            ActorSpec("tool_executor", StubTools, per_tenant=True),
        ],
    )


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(open_store("sqlite", data_dir=str(tmp_path / "data")), tree())
    await n.start()
    yield n
    await n.stop(deadline=5)


@pytest.fixture(scope="session")
def rsa_keys() -> tuple[Any, str]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public_pem


def token(
    tenant: str = "acme",
    sub: str = "alice",
    roles: Any = ("admin",),
    *,
    key: Any = SECRET,
    alg: str = "HS256",
    exp: float | None = 300,
    **claims: Any,
) -> str:
    body: dict[str, Any] = {
        "tenant": tenant,
        "sub": sub,
        "roles": list(roles) if not isinstance(roles, str) else roles,
    }
    if exp is not None:
        body["exp"] = int(time.time() + exp)
    body.update(claims)
    return jwt.encode(body, key, algorithm=alg)


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


ClientFactory = Callable[..., Any]


@pytest.fixture
async def client(node: Node) -> AsyncIterator[ClientFactory]:
    """client(auth=None, **create_app options) -> httpx.AsyncClient on the app (base http://127.0.0.1)."""
    made: list[httpx.AsyncClient] = []

    def factory(
        auth: AuthConfig | None = None, base_url: str = "http://127.0.0.1", **opts: Any
    ) -> httpx.AsyncClient:
        opts.setdefault("permissions", PERMISSIONS)
        app = create_app(node, auth, **opts)
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url, timeout=30)
        made.append(c)
        return c

    yield factory
    for c in made:
        await c.aclose()
