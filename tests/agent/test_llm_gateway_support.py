"""Shared helpers for the llm_gateway tests (this module holds no tests).

- ``gwtest``: a provider kind whose answers a test scripts per provider, with exceptions, hangs and slow
  answers on the node's clock; its call log survives the gateway rebuilding the client.
- ``RecordingClock``: a ManualClock that lets a test wait until the gateway starts a backoff sleep.
- ``AuditSink``: an ``audit_event`` stand-in that keeps every event it is sent.
- ``StampedStub``: the local HTTP server of the provider tests, noting the manual clock at each request.
- autouse guards: loopback-only network, no provider env vars, and no log record with the API key.

Run as ``python -m tests.agent.test_llm_gateway_support sigkill DATA_DIR`` it is the child process of the
SIGKILL test.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.llm_gateway import LLMGateway
from minihermes.llm import (
    Completion,
    CompletionRequest,
    Provider,
    ProviderConfig,
    StreamEvent,
    UnavailableError,
    events_from_completion,
    register_provider,
)
from minihermes.runtime import (
    ActorSpec,
    ManualClock,
    Node,
    NodeOptions,
    RequestContext,
    SupervisorSpec,
    SystemClock,
)
from minihermes.runtime.store._pg_testing import open_test_store

from ..llm.support import FAKE_KEY, StubServer

ACME = RequestContext(tenant="acme", principal="alice", roles=frozenset({"admin"}))
GLOBEX = RequestContext(tenant="globex", principal="gary", roles=frozenset({"admin"}))
ACME_USER = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
ACME_VIEWER = RequestContext(tenant="acme", principal="vic", roles=frozenset({"viewer"}))

# What the app passes from the data dir's credential.key (a Fernet key is 44 characters).
KEY_MATERIAL = "bWluaWhlcm1lcy10ZXN0LWNyZWRlbnRpYWwta2V5LTEyMzQ="

# -- a provider kind the tests script -------------------------------------------------------------------

HANG = "hang"


class Slow:
    """Answer ``item`` after ``seconds`` of the node's clock."""

    def __init__(self, seconds: float, item: Any) -> None:
        self.seconds = seconds
        self.item = item


class Behavior:
    """What one ``gwtest`` provider answers, call by call; ``repeat`` answers every call after the list.

    Items: a completion dict (``{"content": ...}``), a ``ProviderError`` (raised), ``HANG`` (never
    answers), ``Slow(seconds, item)``, or any other exception (a bug). ``calls`` holds the clock's
    monotonic time of each call, ``closed`` how many clients were closed.
    """

    def __init__(self, *items: Any, repeat: Any = None, clock: ManualClock | None = None) -> None:
        self.items = list(items)
        self.repeat = repeat
        self.clock = clock
        self.calls: list[float] = []
        self.requests: list[CompletionRequest] = []
        self.built = 0
        self.closed = 0

    async def answer(self, provider: Provider, request: CompletionRequest) -> Completion:
        self.calls.append(self.clock.monotonic() if self.clock else 0.0)
        self.requests.append(request)
        index = len(self.calls) - 1
        item = self.items[index] if index < len(self.items) else self.repeat
        if item is None:
            raise AssertionError(f"behavior has no answer for call #{index + 1}")
        while True:
            if isinstance(item, Slow):
                assert self.clock is not None
                await ManualClock.sleep(self.clock, item.seconds)  # unrecorded: not a gateway backoff
                item = item.item
            elif item == HANG:
                await asyncio.Event().wait()
            elif isinstance(item, BaseException):
                raise item
            else:
                break
        data = {"usage": {"input_tokens": 10, "output_tokens": 5}, **item}
        data.setdefault("provider", provider.name)
        data.setdefault("model", provider.model_for(request))
        return Completion.model_validate(data)


BEHAVIORS: dict[str, Behavior] = {}
_ids = itertools.count(1)


def behavior(
    *items: Any, repeat: Any = None, clock: ManualClock | None = None
) -> tuple[Behavior, dict[str, Any]]:
    """A new behavior and the ``options`` that make a ``gwtest`` provider use it."""
    made = Behavior(*items, repeat=repeat, clock=clock)
    name = f"b{next(_ids)}"
    BEHAVIORS[name] = made
    return made, {"behavior": name}


class GwTestProvider(Provider):
    kind = "gwtest"

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        self.behavior = BEHAVIORS[str(config.options["behavior"])]
        self.behavior.built += 1

    async def complete(self, request: CompletionRequest) -> Completion:
        return await self.behavior.answer(self, request)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        for event in events_from_completion(await self.complete(request)):
            yield event

    async def aclose(self) -> None:
        self.behavior.closed += 1


register_provider("gwtest", GwTestProvider, replace=True)


def ok(text: str = "fine", **extra: Any) -> dict[str, Any]:
    return {"content": text, **extra}


# -- clock, audit sink, node ----------------------------------------------------------------------------


class RecordingClock(ManualClock):
    """Notes every ``sleep`` (the gateway's backoff) so a test can wait for one before advancing time."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []
        self._slept = asyncio.Condition()

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        async with self._slept:
            self._slept.notify_all()
        await super().sleep(delay)

    async def until_sleeping(self, count: int = 1) -> None:
        """Wait (event-driven, bounded by a real-time safety net) until ``count`` sleeps were requested."""
        async with self._slept:
            await asyncio.wait_for(self._slept.wait_for(lambda: len(self.sleeps) >= count), timeout=10)


def tree(audit: bool = True, **args: Any) -> SupervisorSpec:
    # Usage per user/session is written after every call unless a test asks for the delayed flush, whose
    # sleeps would otherwise mix with the backoff sleeps the tests watch.
    args.setdefault("usage_flush_interval", 0)
    # The tests' servers are on loopback: a node whose operator allows it (a served node's default is public only).
    args.setdefault("allowed_egress", ["*"])
    children: list[ActorSpec | SupervisorSpec] = [
        ActorSpec("llm_gateway", LLMGateway, per_tenant=True, args={"credential_key": KEY_MATERIAL, **args})
    ]
    if audit:
        children.append(ActorSpec("audit_event", AuditEvent, per_tenant=True))
    return SupervisorSpec(name="root", children=children)


async def ask(node: Node, op: str, ctx: RequestContext = ACME, **payload: Any) -> Any:
    # A long timeout: tests move the ManualClock far, and ask deadlines run on it too.
    return await node.ask("llm_gateway", op, payload, timeout=100_000, ctx=ctx)


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]


async def settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


class StampedStub(StubServer):
    """The provider tests' local server; also notes the manual clock's time of every request."""

    def __init__(self) -> None:
        super().__init__()
        self.clock: ManualClock | None = None
        self.stamps: list[float] = []

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.stamps.append(self.clock.monotonic() if self.clock else -1.0)
        await super()._app(scope, receive, send)

    def reset(self) -> None:
        super().reset()
        self.stamps = []


# -- guards ---------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _key_never_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """DEBUG logging captured for every test; any record with the API key fails it, and so does any
    error the runtime logs (a crash, or a structured reply mistaken for a failed background task)."""
    caplog.set_level(logging.DEBUG)
    yield
    formatter = logging.Formatter("%(name)s %(message)s")
    for record in caplog.get_records("setup") + caplog.get_records("call"):
        text = formatter.format(record)
        if record.exc_info:
            text += formatter.formatException(record.exc_info)
        assert FAKE_KEY not in text, f"API key leaked into a log record from {record.name}"
        assert not (record.name == "minihermes.runtime" and record.levelno >= logging.ERROR), text


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network but loopback; no provider settings from the environment."""
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"test tried to reach the network: {address!r}")
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OLLAMA_HOST",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def clock() -> RecordingClock:
    """Overrides the agent conftest's clock: every node in these tests runs on a RecordingClock."""
    return RecordingClock()


def all_text(*values: Any) -> str:
    """Everything a test may want to search for a leaked key, as one string."""
    return "\n".join(repr(v) for v in values)


def db_bytes(data_dir: Path) -> bytes:
    """The raw bytes of every file of the SQLite store (database, WAL, shared memory)."""
    return b"".join(p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file())


# -- the SIGKILL child ----------------------------------------------------------------------------------


async def _sigkill_child(data_dir: str) -> None:
    _, down_options = behavior(repeat=UnavailableError("upstream down", provider="flaky"))
    node = Node(
        await open_test_store(data_dir, clock=SystemClock()),  # SQLite, or PostgreSQL (MINIHERMES_TEST_STORE)
        tree(audit=False, max_retries=0, tick_interval=3600),  # usage per key written after every call
        options=NodeOptions(node_id="gw-crash"),
        clock=SystemClock(),
    )
    await node.start()
    await ask(node, "register_credential", phantom_token="flaky-key", api_key=FAKE_KEY)
    await ask(
        node,
        "register_provider",
        name="flaky",
        kind="gwtest",
        model="m1",
        credential="flaky-key",
        options=down_options,
    )
    await ask(node, "register_provider", name="steady", kind="simulated", model="sim-2")
    await ask(node, "switch_provider", provider="flaky")
    await ask(node, "set_failover", chain=["steady"])
    for i in range(3):
        await ask(node, "completion", messages=user("hello"), session_id=f"s{i}", user_id="bob")
    await ask(node, "switch_provider", provider="steady", model="sim-3")
    print("ready", flush=True)
    await asyncio.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    if sys.argv[1:2] == ["sigkill"]:
        asyncio.run(_sigkill_child(sys.argv[2]))
