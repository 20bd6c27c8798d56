"""The connection test (``llm_gateway.test_provider``): one tiny real completion, and its failure told in
the terms a person fixes it by. Nothing here sees the key: provider errors are redacted by the adapters,
and ``redact`` runs once more with the key the client was built with."""

from __future__ import annotations

from typing import Any

from minihermes.llm import CompletionRequest, ErrorKind, ProviderError

from .calls import completion_request
from .retry import redact

PROBE_MAX_TOKENS = 8
PROBE_TIMEOUT = 30.0
"""At most this many seconds (or the registration's shorter timeout): a test answers while someone waits."""

ERROR_KINDS = (
    "no_credential",
    "misconfigured",
    "auth",
    "unreachable",
    "server_error",
    "not_found",
    "bad_request",
    "rate_limited",
    "timeout",
    "bad_response",
)
_HINTS = {
    "no_credential": "register a credential and name it in register_provider (docs/providers.md)",
    "misconfigured": "the registration cannot build a client: check kind, model, base_url and options",
    "auth": "the server refused the API key: register the right one again under the same phantom token",
    "unreachable": "nothing answered at the base URL: check base_url and that the server is running",
    "server_error": "the server answered with an error of its own (5xx): try again later",
    "not_found": "the server does not know this model or path: check model and base_url (OpenAI-compatible "
    "servers want the URL ending in /v1)",
    "bad_request": "the server rejected the request: check model and options",
    "rate_limited": "the key is rate limited or out of quota",
    "timeout": "no answer in time: check the server, or raise the registration's timeout",
    "bad_response": "the server's answer was not a usable completion: is it the protocol of this kind?",
}


def probe_request(model: str) -> CompletionRequest:
    """The smallest completion that proves the key, the URL and the model."""
    request = completion_request(
        [{"role": "user", "content": "Reply with OK."}], [], PROBE_MAX_TOKENS, None, 0
    )
    return request.model_copy(update={"model": model}) if model else request


def failure(kind: str, message: str, status_code: int | None = None) -> dict[str, Any]:
    """The ``error`` of a failed test: ``{kind, message, hint, status_code?}``."""
    out: dict[str, Any] = {"kind": kind, "message": message, "hint": _HINTS[kind]}
    if status_code is not None:
        out["status_code"] = status_code
    return out


def classify(error: ProviderError, secret: str | None) -> dict[str, Any]:
    """A provider's failure as the test reports it (kinds in ``ERROR_KINDS``)."""
    status = error.status_code
    match error.kind:
        case ErrorKind.UNAVAILABLE:
            kind = "unreachable" if status is None else "server_error"
        case ErrorKind.BAD_REQUEST:
            kind = "not_found" if status == 404 else "bad_request"
        case ErrorKind.AUTH | ErrorKind.RATE_LIMITED | ErrorKind.TIMEOUT | ErrorKind.BAD_RESPONSE:
            kind = str(error.kind)
        case _:
            kind = "bad_response"
    return failure(kind, redact(error.message, secret), status)
