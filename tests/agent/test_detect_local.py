"""``llm_gateway.detect_local`` (issue 24: an offer, never a silent switch): while the offline
model answers, a local Ollama that answers ``GET /api/tags`` is offered with its models and the registration
that switches to it; nothing is registered or switched by detecting; the address goes through the node's
egress rules (a node whose operator did not allow it asks nothing and offers nothing); only admins ask."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime import ActorError, ConfigError

from ..llm.fake_ollama import FakeOllama
from ..llm.support import closed_port_url
from .test_llm_gateway_support import ACME_USER, ACME_VIEWER, ask, tree


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    server = FakeOllama()
    server.start()
    yield server
    server.stop()


async def test_a_local_ollama_is_offered_and_switching_is_the_callers(
    make_node: Any, ollama: FakeOllama
) -> None:
    node = await make_node(tree(ollama_url=ollama.base_url + "/"))
    found = await ask(node, "detect_local")
    assert found["ollama"] == {
        "url": ollama.base_url,
        "models": ["llama3.2:latest", "qwen2.5:0.5b"],
        "registration": {
            "name": "ollama",
            "kind": "ollama",
            "model": "llama3.2:latest",
            "base_url": ollama.base_url,
        },
    }
    listing = await ask(node, "list_providers")
    assert listing["active"]["provider"] == "simulated"  # detecting changed nothing
    # Taking the offer: the registration as given, then the switch.
    await ask(node, "register_provider", **found["ollama"]["registration"])
    switched = await ask(node, "switch_provider", provider="ollama")
    assert (switched["provider"], switched["model"]) == ("ollama", "llama3.2:latest")
    asked = ollama.tags_asked
    after = await ask(node, "detect_local")  # a real model answers now: nothing to offer, nothing asked
    assert after["ollama"] is None and "real model" in after["reason"]
    assert ollama.tags_asked == asked


async def test_nothing_is_offered_when_no_ollama_answers(
    make_node: Any, ollama: FakeOllama, tmp_path: Path
) -> None:
    closed = await make_node(tree(ollama_url=closed_port_url()))
    nothing = await ask(closed, "detect_local")
    assert nothing["ollama"] is None and "nothing answers" in nothing["reason"]

    ollama.answering = False  # something answers, not Ollama
    other = await make_node(tree(ollama_url=ollama.base_url), data_dir=tmp_path / "other")
    assert (await ask(other, "detect_local"))["ollama"] is None

    ollama.answering, ollama.models = True, []
    empty = await ask(other, "detect_local")
    assert empty["ollama"] is None and "no models" in empty["reason"]


async def test_the_egress_rules_decide_whether_it_is_asked(
    make_node: Any, ollama: FakeOllama, tmp_path: Path
) -> None:
    # A node with auth whose operator listed no internal address: loopback is not asked.
    refused = await make_node(tree(ollama_url=ollama.base_url, allowed_egress=None))
    said = await ask(refused, "detect_local")
    assert said["ollama"] is None and "does not let tenants reach" in said["reason"]
    assert ollama.tags_asked == 0
    # The operator allowed that address: it is asked.
    listed = [f"127.0.0.1:{ollama.port}"]
    allowed = await make_node(
        tree(ollama_url=ollama.base_url, allowed_egress=listed), data_dir=tmp_path / "b"
    )
    assert (await ask(allowed, "detect_local"))["ollama"]["models"] == ollama.models


async def test_only_admins_detect(make_node: Any, ollama: FakeOllama) -> None:
    node = await make_node(tree(ollama_url=ollama.base_url))
    for who in (ACME_USER, ACME_VIEWER):
        with pytest.raises(ActorError) as refused:
            await ask(node, "detect_local", ctx=who)
        assert refused.value.code == "permission_denied"
    assert ollama.tags_asked == 0


async def test_the_address_comes_from_the_environment_or_the_default(
    make_node: Any, ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIHERMES_OLLAMA_URL", ollama.base_url)
    node = await make_node(tree())
    assert (await ask(node, "detect_local"))["ollama"]["url"] == ollama.base_url
    monkeypatch.delenv("MINIHERMES_OLLAMA_URL")
    from minihermes.agent.gateway.local import ollama_url

    assert ollama_url(None) == "http://127.0.0.1:11434"
    with pytest.raises(ConfigError, match="ollama_url"):
        ollama_url("ftp://example")


async def test_a_name_taken_by_another_ollama_is_kept(make_node: Any, ollama: FakeOllama) -> None:
    node = await make_node(tree(ollama_url=ollama.base_url))
    await ask(
        node, "register_provider", name="ollama", kind="ollama", model="big", base_url="http://10.1.2.3:11434"
    )
    found = await ask(node, "detect_local")
    assert found["ollama"]["registration"]["name"] == "ollama-local"
