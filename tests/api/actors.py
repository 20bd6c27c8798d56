"""Small actors for the HTTP API tests."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from minihermes.runtime import ActorError, Conflict, GenServer, NotFound, call, cast, current_context, state


class PaymentRequired(ActorError):
    code = "payment_required"
    http_status = 402


class Echo(GenServer):
    """Echoes, stores and fails on request."""

    notes: list[str] = state(default_factory=list)

    @call
    def echo(self, text: str, times: int = 1) -> dict[str, Any]:
        """Repeat text."""
        return {"status": "ok", "text": text * times}

    @call
    def typed(
        self,
        mode: Literal["a", "b"],
        tags: list[str] | None = None,
        meta: dict[str, Any] | None = None,
        ratio: float = 1.0,
    ) -> dict[str, Any]:
        return {"mode": mode, "tags": tags, "meta": meta, "ratio": ratio}

    @call
    def whoami(self) -> dict[str, Any]:
        return current_context().to_dict()

    @call
    async def put(self, key: str, value: str) -> dict[str, Any]:
        await self.host.kv.put(f"k:{key}", value)
        return {"status": "ok"}

    @call
    async def get(self, key: str) -> dict[str, Any]:
        value = await self.host.kv.get(f"k:{key}")
        if value is None:
            raise NotFound(f"no key {key!r}", key=key)
        return {"status": "ok", "value": value}

    @cast
    def note(self, text: str) -> None:
        self.notes.append(text)

    @call
    def read_notes(self) -> dict[str, Any]:
        return {"notes": list(self.notes)}

    @call
    def fail(self, kind: str = "conflict") -> None:
        if kind == "conflict":
            raise Conflict("already there", thing="x")
        if kind == "payment":
            raise PaymentRequired("pay first")
        raise ActorError("odd status", code="weird")

    @call
    def crash(self) -> None:
        raise RuntimeError("internal detail that must not leak")

    @call
    async def hang(self, seconds: float = 0.3) -> None:
        await asyncio.sleep(seconds)  # longer than the test's timeout, short enough for teardown

    @call
    def nothing(self) -> None:
        return None

    @call
    def odd_reply(self, kind: str) -> Any:
        if kind == "set":
            return {"items": {3}}
        if kind == "bytes":
            return {"raw": b"\x00"}
        return {"nan": float("nan")}


class Notebook(GenServer):
    """Per-session notes (keyed by session_id, like the agent)."""

    notes: list[str] = state(default_factory=list)

    @call
    def append(self, session_id: str, text: str, user_id: str = "") -> dict[str, Any]:
        self.notes.append(text)
        return {"status": "ok", "notes": len(self.notes), "user_id": user_id}

    @call
    def read(self, session_id: str) -> dict[str, Any]:
        return {"status": "ok", "notes": list(self.notes)}


TEST_PERMISSIONS = {
    ("echo", "echo"): "read",
    ("echo", "typed"): "read",
    ("echo", "whoami"): "read",
    ("echo", "get"): "read",
    ("echo", "put"): "write",
    ("echo", "note"): "write",
    ("echo", "read_notes"): "read",
    ("echo", "fail"): "read",
    ("echo", "crash"): "read",
    ("echo", "hang"): "read",
    ("echo", "nothing"): "read",
    ("echo", "odd_reply"): "read",
    ("notebook", "append"): "write",
    ("notebook", "read"): "read",
}


CALLS: list[tuple[str, str]] = []
"""(actor, op) of every stub op that actually ran: a refused request must never reach the actor."""


class StubGuardrails(GenServer):
    """Stands in for guardrails: the permission layer is what is under test. Its ops declare the access
    classes of the real ones (``tests/api/test_declared_access.py`` keeps them equal)."""

    @call(access="admin")
    def set_policy(self, tool_name: str, decision: str) -> dict[str, Any]:
        CALLS.append(("guardrails", "set_policy"))
        return {"status": "ok"}

    @call(access="read")
    def get_policies(self) -> dict[str, Any]:
        return {"policies": {}}

    @call(access="write")
    def approve(self, approval_id: str) -> dict[str, Any]:
        CALLS.append(("guardrails", "approve"))
        return {"status": "ok"}

    @call(access="read")
    def list_approvals(self, status: str = "pending") -> dict[str, Any]:
        return {"approvals": []}


class StubGateway(GenServer):
    """Stands in for llm_gateway, declaring the real ops' access classes like ``StubGuardrails``."""

    @call(access="admin")
    def register_credential(self, phantom_token: str, api_key: str) -> dict[str, Any]:
        CALLS.append(("llm_gateway", "register_credential"))
        return {"status": "ok", "phantom_token": phantom_token}

    @call(access="admin")
    def register_provider(self, name: str, kind: str, model: str, credential: str = "") -> dict[str, Any]:
        CALLS.append(("llm_gateway", "register_provider"))
        return {"status": "ok"}

    @call(access="admin")
    def switch_provider(self, provider: str, model: str = "", session_id: str = "") -> dict[str, Any]:
        CALLS.append(("llm_gateway", "switch_provider"))
        return {"status": "ok"}

    @call(access="read")
    def get_stats(self) -> dict[str, Any]:
        return {"status": "ok"}

    @call
    def secret_backdoor(self) -> dict[str, Any]:
        """An op nobody classified: admin-only by default."""
        CALLS.append(("llm_gateway", "secret_backdoor"))
        return {"status": "ok"}


class StubTools(GenServer):
    """Stands in for tool_executor, declaring the real ops' access classes like ``StubGuardrails``."""

    @call(access="admin")
    def register_tool(
        self,
        name: str,
        description: str,
        input_schema: dict[str, Any],
        handler_type: str,
        handler_config: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        CALLS.append(("tool_executor", "register_tool"))
        return {"status": "ok"}

    @call(access="admin")
    def execute(
        self, name: str, input: dict[str, Any], session_id: str = "", turn: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        CALLS.append(("tool_executor", "execute"))
        return {"status": "ok"}

    @call(access="read")
    def list_tools(self) -> dict[str, Any]:
        return {"tools": []}
