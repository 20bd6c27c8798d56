"""``switch_provider`` refuses a provider no call could be sent to (issue 19): no credential where its kind
needs one, a credential token that is not registered, no model. The refusal is a 409 naming the fix, and
nothing changes; once a credential is registered and named, the same switch works."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.runtime import ActorError

from . import test_llm_gateway_support as support
from .test_llm_gateway_support import ACME, ACME_USER, ask, tree

_key_never_logged = support._key_never_logged
_loopback_only = support._loopback_only
clock = support.clock


async def refusal(node: Any, ctx: Any = ACME, **payload: Any) -> ActorError:
    with pytest.raises(ActorError) as caught:
        await ask(node, "switch_provider", ctx=ctx, **payload)
    return caught.value


async def test_the_readme_switch_without_a_credential_is_refused_with_the_fix(make_node: Any) -> None:
    node = await make_node(tree())
    error = await refusal(node, provider="anthropic", model="claude-opus-4-8")
    assert error.http_status == 409 and error.code == "provider_not_configured"
    assert error.details == {"provider": "anthropic", "reason": "no_credential"}
    for fix in ("register_credential", "register_provider", "docs/providers.md"):
        assert fix in error.message
    # Nothing moved: the tenant still answers with the offline model, and no switch was audited.
    listed = await ask(node, "list_providers")
    assert listed["active"] == {"provider": "simulated", "model": ""}
    reply = await ask(node, "completion", messages=[{"role": "user", "content": "calculate 2 + 3"}])
    assert reply["provider"] == "simulated"


async def test_a_session_cannot_be_pinned_to_it_either(make_node: Any) -> None:
    node = await make_node(tree())
    error = await refusal(node, ctx=ACME_USER, provider="openai", model="gpt-4o", session_id="s1")
    assert error.code == "provider_not_configured" and "register_credential" in error.message
    assert (await ask(node, "get_stats"))["session_overrides"] == 0


async def test_no_model_is_refused(make_node: Any) -> None:
    node = await make_node(tree())
    error = await refusal(node, provider="ollama")  # the default entry names no model
    assert error.details["reason"] == "misconfigured" and "pass model" in error.message
    assert (await ask(node, "switch_provider", provider="ollama", model="llama3.2"))["model"] == "llama3.2"


async def test_once_the_credential_is_registered_the_readme_line_works(make_node: Any) -> None:
    node = await make_node(tree())
    await ask(node, "register_credential", phantom_token="anthropic-main", api_key="sk-ant-test-1234")
    await ask(
        node,
        "register_provider",
        name="anthropic",
        kind="anthropic",
        model="claude-sonnet-4-5",
        credential="anthropic-main",
    )
    reply = await ask(node, "switch_provider", provider="anthropic", model="claude-opus-4-8")
    assert (reply["provider"], reply["model"]) == ("anthropic", "claude-opus-4-8")


async def test_a_local_server_without_a_key_may_be_switched_to(make_node: Any) -> None:
    node = await make_node(tree())
    await ask(
        node, "register_provider", name="vllm", kind="openai", model="m", base_url="http://127.0.0.1:9/v1"
    )
    assert (await ask(node, "switch_provider", provider="vllm"))["provider"] == "vllm"
