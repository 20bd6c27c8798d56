"""A provider declares its own facts on its class; the gateway's defaults and checks and ``doctor`` read
them from the registry. Adding a provider is its class plus one registration, and nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from minihermes.agent import gateway
from minihermes.cli import doctor
from minihermes.llm import (
    Completion,
    CompletionRequest,
    Provider,
    StreamEvent,
    Usage,
    events_from_completion,
    network_kinds,
    provider_class,
    register_provider,
)
from minihermes.llm import _provider as registry
from minihermes.runtime import InvalidArgument

from .support import Reply, StubServer


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's registrations vanish with it (every gateway started later would list them)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def tiny_provider(base_url: str) -> type[Provider]:
    class TinyProvider(Provider):
        """A network provider in one class: its facts, and the two calls."""

        kind = "tiny"
        network = True
        needs_model = True
        needs_key_at_default_url = True
        default_base_url = base_url
        probe_path = "/v0/ping"

        async def complete(self, request: CompletionRequest) -> Completion:
            return Completion(content="tiny", stop_reason="end_turn", usage=Usage(), model=self.config.model)

        async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
            for event in events_from_completion(await self.complete(request)):
                yield event

    return TinyProvider


def test_the_built_in_providers_declare_what_the_gateway_and_doctor_used_to_hard_code() -> None:
    assert network_kinds() == ["anthropic", "ollama", "openai"]
    assert sorted(gateway.default_providers()) == ["anthropic", "ollama", "openai", "simulated"]
    assert doctor.probe_paths() == {"anthropic": "/v1/models", "ollama": "/api/tags", "openai": "/models"}
    ollama, openai = provider_class("ollama"), provider_class("openai")
    assert ollama is not None and openai is not None
    assert openai.needs_key_at_default_url and not ollama.needs_key_at_default_url
    assert ollama.default_base_url == "http://localhost:11434" and openai.sdk_modules == ("openai",)
    simulated = provider_class("simulated")
    assert simulated is not None and not simulated.network and not simulated.needs_model


@pytest.mark.usefixtures("fresh_registry")
async def test_a_provider_registered_once_is_seen_by_the_gateway_and_doctor(stub: StubServer) -> None:
    register_provider("tiny", tiny_provider(stub.base_url))

    # The gateway: every tenant starts with an unconfigured entry of it, and its checks apply.
    defaults = gateway.default_providers()
    assert defaults["tiny"]["kind"] == "tiny" and defaults["tiny"]["model"] == ""
    with pytest.raises(InvalidArgument) as refused:
        gateway.provider_entry(
            kind="tiny",
            model="",
            base_url="",
            credential="",
            timeout=5,
            options={},
            pricing={},
            slow_call_seconds=0,
        )
    assert refused.value.details["field"] == "model"
    assert gateway.needs_model("tiny")
    assert gateway.missing_credential({"kind": "tiny", "base_url": "", "credential": ""})
    assert not gateway.missing_credential({"kind": "tiny", "base_url": stub.base_url, "credential": ""})

    # doctor: probed at the path it declares, at its default URL.
    assert doctor.probe_paths()["tiny"] == "/v0/ping"
    assert not doctor._configured({"kind": "tiny", "model": "t-1", "base_url": "", "credential": ""})
    stub.reply(Reply(status=204))
    status, detail = await doctor.probe_provider({"kind": "tiny", "model": "t-1"}, timeout=5)
    assert status == "ok" and "answers (HTTP 204)" in detail
    assert stub.last.path == "/v0/ping"
    assert "authorization" not in stub.last.headers  # no credential is sent


@pytest.mark.usefixtures("fresh_registry")
def test_a_factory_that_is_not_a_provider_class_declares_nothing() -> None:
    register_provider("plain", lambda config: tiny_provider("http://127.0.0.1:9")(config))
    assert provider_class("plain") is None
    assert "plain" not in gateway.default_providers() and "plain" not in doctor.probe_paths()
    assert not gateway.needs_model("plain") and not gateway.needs_model("never-registered")


@pytest.mark.usefixtures("fresh_registry")
async def test_a_provider_reached_another_way_probes_itself() -> None:
    class SocketProvider(tiny_provider("")):  # type: ignore[misc]
        kind = "socket"
        probe_path = ""

        @classmethod
        async def probe(cls, base_url: str | None, timeout: float) -> tuple[bool, str] | None:
            return False, f"{base_url}: no such socket"

    register_provider("socket", SocketProvider)
    status, detail = await doctor.probe_provider({"kind": "socket", "base_url": "unix:/x"}, timeout=1)
    assert (status, detail) == ("fail", "unix:/x: no such socket")
    assert (await doctor.probe_provider({"kind": "simulated"}, timeout=1)) == ("ok", "simulated (in-process)")
