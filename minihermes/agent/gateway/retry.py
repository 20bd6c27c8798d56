"""One timed provider call, and what the gateway does when it fails: retry delays (jittered exponential
backoff, ``retry_after`` honoured), and ``StreamProgress``, which ends retries once watchers saw text."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from minihermes.llm import (
    BadResponseError,
    Completion,
    CompletionRequest,
    Done,
    ErrorKind,
    Provider,
    ProviderError,
    ProviderTimeoutError,
    TextDelta,
)
from minihermes.runtime import Clock

from .calls import LLMInternalError
from .settings import GatewaySettings

# A timeout has used the provider's whole time budget already, and auth/bad_request will not change on a
# second try: those fail over at once. The rest may pass on the same provider a moment later.
_RETRY_SAME = frozenset({ErrorKind.RATE_LIMITED, ErrorKind.UNAVAILABLE, ErrorKind.BAD_RESPONSE})


def retry_delay(
    kind: str, retry_after: float | None, attempt: int, settings: GatewaySettings, rng: random.Random
) -> float | None:
    """Seconds to wait before retry number ``attempt + 1`` on the same provider, or None to fail over."""
    if kind not in _RETRY_SAME or attempt >= settings.max_retries:
        return None
    if retry_after is not None:
        # The server said when; waiting longer than the caller would tolerate is worse than failing over.
        return retry_after if retry_after <= settings.max_retry_wait else None
    # "Equal jitter": at least half the exponential step, so concurrent callers spread out but still back off.
    step = min(settings.backoff_max, settings.backoff_base * 2.0**attempt)
    return step / 2 + rng.random() * step / 2


class StreamProgress:
    """What a streamed attempt has shown so far: once a delta reached watchers, the call cannot be retried
    or failed over transparently (they would see the answer start twice)."""

    __slots__ = ("deltas", "publish")

    def __init__(self, publish: Callable[[str], None]) -> None:
        self.publish = publish
        self.deltas = 0


async def stream_completion(
    provider: Provider, request: CompletionRequest, progress: StreamProgress
) -> Completion:
    """Run ``provider.stream``, publishing each text delta as it arrives; the final ``Completion``."""
    events = provider.stream(request)
    try:
        async for event in events:
            if isinstance(event, TextDelta):
                if event.text:
                    progress.deltas += 1
                    progress.publish(event.text)
            elif isinstance(event, Done):
                return event.completion
    finally:
        # Adapters stream from async generators: closing one releases its connection at once.
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
    raise BadResponseError("the stream ended without a final event", provider=provider.name)


async def call_with_timeout(
    provider: Provider,
    request: CompletionRequest,
    timeout: float,
    clock: Clock,
    progress: StreamProgress | None = None,
) -> Completion | ProviderError:
    """One attempt under ``timeout`` seconds of ``clock`` (the node's, so tests drive it). Provider errors
    come back as values; anything else a provider raises is a bug and raises ``LLMInternalError``. With
    ``progress`` the provider streams and each text delta is published as it arrives.

    Like ``asyncio.timeout`` (a timer that cancels the running task), but on the node's clock; no extra
    task per call, which matters when the provider itself answers in microseconds.
    """
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    handle = clock.call_later(timeout, expire)
    result: Completion | ProviderError | None = None
    bug: Exception | None = None
    try:
        if progress is None:
            result = await provider.complete(request)
        else:
            result = await stream_completion(provider, request, progress)
    except asyncio.CancelledError:
        if not expired or task.uncancel() > 0:
            raise  # the gateway itself is being stopped
        expired = False  # our own cancellation, consumed: a timeout
        result = None
    except ProviderError as error:
        result = error
    except Exception as exc:
        bug = exc
    finally:
        handle.cancel()
    if expired:
        task.uncancel()  # the provider swallowed the cancellation; the deadline passed all the same
        result = None
    if bug is not None:
        # Failing over would hide the bug (or a test script that ran out of answers).
        text = redact(f"{type(bug).__name__}: {bug}", provider.config.secret())
        raise LLMInternalError(
            f"provider {provider.name!r} failed unexpectedly: {text}", provider=provider.name
        )
    if result is None:
        # Built outside the except block, so no exception context rides along.
        return ProviderTimeoutError(f"no answer within {timeout:g}s", provider=provider.name)
    return result


def redact(text: str, secret: str | None) -> str:
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[REDACTED]")
    return text[:500]
