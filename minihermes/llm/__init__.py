"""LLM providers behind one neutral interface. Pure library: no actors, no runtime.

The ``llm_gateway`` actor builds providers by kind and calls them::

    from minihermes.llm import CompletionRequest, ProviderConfig, ProviderError, create_provider

    provider = create_provider("anthropic", ProviderConfig(model="claude-...", api_key=key, timeout=30))
    try:
        completion = await provider.complete(CompletionRequest(messages=[...], tools=[...]))
    except ProviderError as error:
        ...  # error.kind: rate_limited (error.retry_after), timeout, unavailable, auth, bad_request, bad_response

Kinds: "simulated" (offline default), "scripted" (tests), "openai" (any Chat Completions server),
"anthropic", "ollama" (native API). The adapters for real providers import their SDKs on first use.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    AuthError,
    BadRequestError,
    BadResponseError,
    ErrorKind,
    ProviderError,
    ProviderTimeoutError,
    RateLimitedError,
    UnavailableError,
    parse_retry_after,
)
from ._provider import (
    _BUILTIN,
    Provider,
    ProviderConfig,
    ProviderFactory,
    UnknownProviderError,
    create_provider,
    network_kinds,
    provider_class,
    provider_factory,
    provider_kinds,
    register_provider,
)
from ._scripted import ScriptedProvider, ScriptExhaustedError
from ._streaming import collect_stream, events_from_completion
from ._types import (
    Completion,
    CompletionRequest,
    Done,
    Message,
    MessageView,
    ReadOnlyDict,
    Role,
    StopReason,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    ToolView,
    Usage,
    ViewMemo,
)
from .simulated import SimulatedProvider

if TYPE_CHECKING:
    from ._anthropic import AnthropicProvider
    from ._ollama import OllamaProvider
    from ._openai import OpenAIProvider

# The built-in adapters' classes, by name, imported when first touched (from the registry's "module:class").
_LAZY = {attr: module for module, _, attr in (path.partition(":") for path in _BUILTIN.values())}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AnthropicProvider",
    "AuthError",
    "BadRequestError",
    "BadResponseError",
    "Completion",
    "CompletionRequest",
    "Done",
    "ErrorKind",
    "Message",
    "MessageView",
    "OllamaProvider",
    "OpenAIProvider",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "ProviderFactory",
    "ProviderTimeoutError",
    "RateLimitedError",
    "ReadOnlyDict",
    "Role",
    "ScriptExhaustedError",
    "ScriptedProvider",
    "SimulatedProvider",
    "StopReason",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolSpec",
    "ToolView",
    "UnavailableError",
    "UnknownProviderError",
    "Usage",
    "ViewMemo",
    "collect_stream",
    "create_provider",
    "events_from_completion",
    "network_kinds",
    "parse_retry_after",
    "provider_class",
    "provider_factory",
    "provider_kinds",
    "register_provider",
]
