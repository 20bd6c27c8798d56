"""Provider failures as one exception hierarchy whose ``kind`` tells the gateway what to do.

Adapters never retry (the official clients run with ``max_retries=0``): the ``llm_gateway`` owns retries,
backoff, failover and the circuit breaker, and decides from ``kind`` and ``retry_after`` alone.

Errors are built from scratch, never chained to the client exception: that exception holds the request,
whose headers hold the API key. Every message passes through ``redact`` with the key the adapter knows,
because servers do echo keys back ("Incorrect API key provided: sk-...").
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from typing import TypeVar

T = TypeVar("T")

_MAX_MESSAGE = 500


class ErrorKind(StrEnum):
    """What went wrong, in the terms the gateway acts on."""

    RATE_LIMITED = "rate_limited"
    """429 or a provider's quota signal; wait ``retry_after`` seconds if given, or fail over."""
    TIMEOUT = "timeout"
    """No (complete) answer within the configured timeout."""
    UNAVAILABLE = "unavailable"
    """5xx, overloaded, connection refused or dropped: the provider is down for now."""
    AUTH = "auth"
    """401/403: the credential is wrong or lacks permission. Retrying will not help."""
    BAD_REQUEST = "bad_request"
    """The provider rejected the request itself (4xx): retrying the same request will not help."""
    BAD_RESPONSE = "bad_response"
    """The provider answered with something unusable: not JSON, wrong shape, invalid tool arguments."""


_RETRYABLE = frozenset(
    {ErrorKind.RATE_LIMITED, ErrorKind.TIMEOUT, ErrorKind.UNAVAILABLE, ErrorKind.BAD_RESPONSE}
)


class ProviderError(Exception):
    """A provider call failed. Safe to log: the message never contains the API key."""

    kind: ErrorKind = ErrorKind.UNAVAILABLE

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.status_code = status_code
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later (or on another provider) without changes."""
        return self.kind in _RETRYABLE

    def to_dict(self) -> dict[str, object]:
        """The structured form an actor replies with: ``{"code", "message", ...}``."""
        return {
            "code": str(self.kind),
            "message": self.message,
            "provider": self.provider,
            "status_code": self.status_code,
            "retry_after": self.retry_after,
        }

    @staticmethod
    def from_dict(data: Mapping[str, object]) -> ProviderError:
        """Rebuild an error from ``to_dict`` output (e.g. a gateway reply crossing an actor boundary)."""
        kind = ErrorKind(str(data["code"]))
        status, retry_after = data.get("status_code"), data.get("retry_after")
        return _BY_KIND[kind](
            str(data.get("message", "")),
            provider=str(data.get("provider") or ""),
            status_code=status if isinstance(status, int) else None,
            retry_after=float(retry_after) if isinstance(retry_after, int | float) else None,
        )

    def __str__(self) -> str:
        where = f"{self.provider}: " if self.provider else ""
        status = f" (HTTP {self.status_code})" if self.status_code is not None else ""
        return f"{where}{self.kind}{status}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(kind={str(self.kind)!r}, provider={self.provider!r}, "
            f"status_code={self.status_code!r}, retry_after={self.retry_after!r}, message={self.message!r})"
        )


class RateLimitedError(ProviderError):
    kind = ErrorKind.RATE_LIMITED


class ProviderTimeoutError(ProviderError):
    kind = ErrorKind.TIMEOUT


class UnavailableError(ProviderError):
    kind = ErrorKind.UNAVAILABLE


class AuthError(ProviderError):
    kind = ErrorKind.AUTH


class BadRequestError(ProviderError):
    kind = ErrorKind.BAD_REQUEST


class BadResponseError(ProviderError):
    kind = ErrorKind.BAD_RESPONSE


_BY_KIND: dict[ErrorKind, type[ProviderError]] = {
    cls.kind: cls
    for cls in (
        RateLimitedError,
        ProviderTimeoutError,
        UnavailableError,
        AuthError,
        BadRequestError,
        BadResponseError,
    )
}


def error_for(
    kind: ErrorKind,
    message: str,
    *,
    provider: str,
    secret: str | None,
    status_code: int | None = None,
    retry_after: float | None = None,
) -> ProviderError:
    """Build the error class for ``kind`` with ``secret`` scrubbed from the message."""
    return _BY_KIND[kind](
        redact(message, secret), provider=provider, status_code=status_code, retry_after=retry_after
    )


def kind_for_status(status: int) -> ErrorKind:
    """Map an HTTP status to an error kind (the same table for every adapter)."""
    if status == 429:
        return ErrorKind.RATE_LIMITED
    if status in (401, 403):
        return ErrorKind.AUTH
    if status == 408:
        return ErrorKind.TIMEOUT
    # 409 is how OpenAI reports a transient lock conflict; its client retries it, so it is transient.
    if status == 409 or status >= 500:
        return ErrorKind.UNAVAILABLE
    return ErrorKind.BAD_REQUEST


def redact(text: str, secret: str | None) -> str:
    """Remove ``secret`` from ``text`` and cap the length (bodies can be large)."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[REDACTED]")
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + "..."
    return text


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` (OpenAI, Anthropic) or ``retry-after`` (seconds or HTTP date).

    ``headers`` must look keys up case-insensitively (httpx headers do). Returns None when absent or
    unparseable, never a negative number.
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


async def guarded(
    call: Callable[[], Awaitable[T]],
    catch: tuple[type[BaseException], ...],
    to_error: Callable[[BaseException], ProviderError],
) -> T:
    """Await ``call``, turning the ``catch`` exceptions into the ``ProviderError`` ``to_error`` builds.

    The error is raised outside the ``except`` block on purpose, so it carries no ``__context__``: client
    exceptions reference the request, and the request's headers carry the API key.
    """
    try:
        return await call()
    except catch as exc:
        failure = to_error(exc)
    raise failure
