"""The ``llm_gateway``'s mechanisms, kept apart from the actor: they own no state and send no messages.

- the gateway's errors, settings (breaker thresholds, retries, backoff) and request validation;
- provider registrations validated into the JSON entries the gateway keeps in state;
- the circuit breaker per provider (closed -> open -> half_open -> closed), as transitions of a dict;
- retry delays (jittered exponential backoff, ``retry_after`` honoured) and one timed provider call;
- ``ProviderPool``: provider clients built lazily, shared, and closed once retired and idle;
- usage buckets, provider stats, costs and budgets, and ``UsageLedger``, which keeps usage per user,
  session and cron job in the tenant's KV (those key sets grow without bound, so they stay out of the
  actor's state, which is serialized after every message).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import math
import operator
import random
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import compress, repeat
from typing import Any, Protocol
from urllib.parse import urlsplit

from pydantic import ValidationError

from minihermes.llm import (
    BadResponseError,
    Completion,
    CompletionRequest,
    Done,
    ErrorKind,
    Message,
    MessageView,
    Provider,
    ProviderError,
    ProviderTimeoutError,
    ReadOnlyDict,
    TextDelta,
    ToolSpec,
    ToolView,
    UnknownProviderError,
    Usage,
    ViewMemo,
    provider_kinds,
)
from minihermes.runtime import ActorError, Clock, ConfigError, InvalidArgument

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

# Kinds that talk to a server: they need a model name, and may take a base_url and a credential.
NETWORK_KINDS = frozenset({"openai", "anthropic", "ollama"})
MAX_TIMEOUT = 600.0
_MAX_OPTIONS_BYTES = 16_384
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
PRICE_FIELDS = ("input", "output", "cached", "cache_write")


# -- errors and the shapes of one call --------------------------------------------------------------------


class LLMUnavailable(ActorError):
    """Every provider in the chain failed or was skipped. The message names providers and error kinds only."""

    code = "llm_unavailable"
    http_status = 503


class BudgetExceeded(ActorError):
    """A token budget (tenant, user, session or cron job) is spent; no provider was called."""

    code = "budget_exceeded"
    http_status = 429


class LLMInternalError(ActorError):
    """A provider raised something other than ``ProviderError``: a bug, reported instead of failed over."""

    code = "llm_internal_error"
    http_status = 500


@dataclass(frozen=True, slots=True)
class Caller:
    """Whom a call's usage is counted for (besides the tenant)."""

    user: str
    session: str
    cron_job: str

    def keys(self) -> list[tuple[str, str]]:
        pairs = (("user", self.user), ("session", self.session), ("cron_job", self.cron_job))
        return [(scope, key) for scope, key in pairs if key]


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one provider of the chain gave no answer: an ``ErrorKind``, ``circuit_open`` or ``misconfigured``."""

    provider: str
    error: str
    retry_after: float | None = None
    streamed: bool = False
    """The provider failed after text had been streamed to watchers: the chain stops here."""


def unavailable(failures: Sequence[Failure]) -> LLMUnavailable:
    why = "; ".join(f"{f.provider}: {f.error}{' mid-stream' if f.streamed else ''}" for f in failures)
    waits = [f.retry_after for f in failures if f.retry_after is not None]
    return LLMUnavailable(
        f"no LLM provider could answer ({why})",
        providers=[{"provider": f.provider, "error": f.error} for f in failures],
        # Only when every provider said when to come back is there a time worth passing on.
        retry_after=min(waits) if waits and len(waits) == len(failures) else None,
    )


_VALIDATED: ViewMemo[Message | ToolSpec] = ViewMemo()
"""Read-only messages and tool specs already validated: a session's history is validated once per message,
not once per LLM call."""


_TOOL_LISTS: OrderedDict[tuple[int, ...], tuple[list[Any], list[Any]]] = OrderedDict()
"""Whole tool lists already validated, by the identities of their (read-only) specs: a turn offers the same
list on every LLM call. Each entry keeps its specs alive, so the ids in its key are not reused."""
_TOOL_LISTS_MAX = 256


def _validated_tools(tools: list[dict[str, Any]]) -> tuple[list[Any], bool]:
    if not all(type(t) is ToolView for t in tools):
        return _validated(tools, ToolView, ToolSpec)
    key = tuple(map(id, tools))
    hit = _TOOL_LISTS.get(key)
    if hit is not None:
        _TOOL_LISTS.move_to_end(key)
        return hit[1], True
    checked, complete = _validated(tools, ToolView, ToolSpec)
    if complete:
        _TOOL_LISTS[key] = (list(tools), checked)
        if len(_TOOL_LISTS) > _TOOL_LISTS_MAX:
            _TOOL_LISTS.popitem(last=False)
    return checked, complete


def _validated(
    items: list[dict[str, Any]], view: type[ReadOnlyDict], model: type[Message | ToolSpec]
) -> tuple[list[Any], bool]:
    """Each item as its model (a read-only item's remembered, anything else validated afresh), an invalid
    one as given; and whether every item came out a model."""
    out: list[Any] = []
    complete = True
    for raw in items:
        checked = _VALIDATED.get(raw) if type(raw) is view else None
        if checked is None:
            try:
                checked = model.model_validate(raw)
            except ValidationError:
                out.append(raw)  # validated again with the request, for an error that names its place
                complete = False
                continue
            _VALIDATED.put(raw, checked)  # kept only on a read-only item
        out.append(checked)
    return out, complete


def _validated_messages(messages: list[dict[str, Any]]) -> tuple[list[Any], bool]:
    """``_validated`` for messages. A message view keeps its model on itself (``MessageView._checked``), so
    a session's history (every message but the newest validated at an earlier step) is found in passes
    that run in C, and only what is new is validated."""
    out = list(map(getattr, messages, repeat("_checked"), repeat(None)))
    complete = True
    for i in compress(range(len(out)), map(operator.is_, out, repeat(None))):
        raw = messages[i]
        try:
            checked = Message.model_validate(raw)
        except ValidationError:
            out[i] = raw  # validated again with the request, for an error that names its place
            complete = False
            continue
        if type(raw) is MessageView:
            raw._checked = checked
        out[i] = checked
    return out, complete


def completion_request(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    max_tokens: int,
    temperature: float | None,
    cache_prefix_messages: int,
) -> CompletionRequest:
    """The op's arguments as a ``CompletionRequest``; ``InvalidArgument`` naming the first bad field."""
    if not messages:
        raise InvalidArgument("completion: messages must not be empty", field="messages")
    checked_messages, messages_done = _validated_messages(messages)
    checked_tools, tools_done = _validated_tools(tools)
    scalars = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "cache_prefix_messages": cache_prefix_messages,
    }
    try:
        if messages_done and tools_done:
            # Every message and tool is a validated model already: check the scalars alone and put the
            # lists in as they are (pydantic would run each message's own checks again: O(history) a call).
            base = CompletionRequest.model_validate({"messages": [], "tools": [], **scalars})
            return base.model_copy(update={"messages": checked_messages, "tools": checked_tools})
        return CompletionRequest.model_validate(
            {"messages": checked_messages, "tools": checked_tools, **scalars}
        )
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        message = f"completion: argument '{where}': {first.get('msg')}"
    raise InvalidArgument(message, field=where)


def completion_reply(name: str, model: str, completion: Completion, cost: float | None) -> dict[str, Any]:
    return {
        "status": "ok",
        "response": {
            "content": completion.content,
            "stop_reason": completion.stop_reason,
            "tool_calls": [c.model_dump() for c in completion.tool_calls],
            "usage": completion.usage.model_dump(),
        },
        "provider": name,
        "model": completion.model or model,
        "cost_usd": cost,
    }


# -- settings ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Tunables, from the actor spec's args (all optional). Bad values fail the actor's start-up."""

    failure_threshold: int = 3
    """Consecutive failed calls that open a provider's circuit; also the recovery ticks it then needs."""
    error_rate_threshold: float = 0.5
    """The circuit also opens when the failure share of the last ``error_window`` calls exceeds this..."""
    error_window: int = 20
    min_samples: int = 5
    """...once the window holds at least this many calls."""
    tick_interval: float = 10.0
    """Seconds between recovery ticks (each lowers an open circuit's failure count by one)."""
    max_retries: int = 2
    """Further attempts on the same provider after a transient failure, before failing over."""
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    max_retry_wait: float = 30.0
    """A ``retry_after`` longer than this fails over at once instead of waiting."""
    slow_call_seconds: float = 20.0
    """Calls slower than this count as failures for the breaker (the answer is still returned)."""
    usage_flush_interval: float = 1.0
    """Seconds usage per user/session/cron job may wait before it is written (0: after every call)."""

    @classmethod
    def from_args(cls, args: Mapping[str, Any], *, extra: frozenset[str] = frozenset()) -> GatewaySettings:
        known = {f.name: f for f in fields(cls)}
        unknown = set(args) - set(known) - extra
        if unknown:
            raise ConfigError(
                "llm_gateway.args", f"unknown settings {sorted(unknown)}; known: {sorted(known)}"
            )
        values: dict[str, Any] = {}
        for name, value in args.items():
            if name not in known:
                continue
            kind = int if known[name].type in (int, "int") else float
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or (kind is int and value != int(value))
            ):
                raise ConfigError(
                    f"llm_gateway.args.{name}", f"must be {'an integer' if kind is int else 'a number'}"
                )
            values[name] = kind(value)
        settings = cls(**values)
        settings._check()
        return settings

    def _check(self) -> None:
        positive = ("failure_threshold", "error_window", "min_samples", "tick_interval", "slow_call_seconds")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"llm_gateway.args.{name}", "must be > 0")
        for name in ("max_retries", "backoff_base", "backoff_max", "max_retry_wait", "usage_flush_interval"):
            if getattr(self, name) < 0:
                raise ConfigError(f"llm_gateway.args.{name}", "must be >= 0")
        if not 0.0 < self.error_rate_threshold <= 1.0:
            raise ConfigError("llm_gateway.args.error_rate_threshold", "must be in (0, 1]")
        if self.min_samples > self.error_window:
            raise ConfigError("llm_gateway.args.min_samples", "must not exceed error_window")


# -- provider registrations -------------------------------------------------------------------------------


def check_name(value: str, field: str, what: str = "provider name") -> str:
    if not _NAME.match(value):
        raise InvalidArgument(
            f"{what} must be 1-64 characters of letters, digits, '_', '.', '-'", field=field, value=value[:64]
        )
    return value


def provider_entry(
    *,
    kind: str,
    model: str,
    base_url: str,
    credential: str,
    timeout: float,
    options: dict[str, Any],
    pricing: dict[str, Any],
    slow_call_seconds: float,
) -> dict[str, Any]:
    """Validate a registration into the JSON entry kept in state; raises ``InvalidArgument`` naming the field."""
    known = provider_kinds()
    if kind not in known:
        # Built from the registry's own error so the message carries its "did you mean" hint.
        raise InvalidArgument(str(UnknownProviderError(kind, known)), field="kind", known=known)
    if kind in NETWORK_KINDS and not model.strip():
        raise InvalidArgument(f"a {kind} provider needs a model name", field="model")
    if base_url:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidArgument("base_url must be an http(s) URL with a host", field="base_url")
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise InvalidArgument(f"timeout must be > 0 and <= {MAX_TIMEOUT:g} seconds", field="timeout")
    if not (math.isfinite(slow_call_seconds) and slow_call_seconds >= 0):
        raise InvalidArgument(
            "slow_call_seconds must be >= 0 (0: the gateway default)", field="slow_call_seconds"
        )
    try:
        encoded = json.dumps(options)
    except (TypeError, ValueError):
        raise InvalidArgument("options must be a JSON object", field="options") from None
    if len(encoded) > _MAX_OPTIONS_BYTES:
        raise InvalidArgument(f"options must be at most {_MAX_OPTIONS_BYTES} bytes of JSON", field="options")
    return {
        "kind": kind,
        "model": model,
        "base_url": base_url,
        "credential": credential,
        "timeout": float(timeout),
        "options": json.loads(encoded),
        "pricing": check_pricing(pricing),
        "slow_call_seconds": float(slow_call_seconds),
    }


def default_providers() -> dict[str, dict[str, Any]]:
    """What a tenant starts with: the offline model, active, and the well-known names unconfigured.

    The names exist so that ``switch_provider("anthropic", model=...)`` works as the seed's examples send
    it; until a credential is registered for them, calling them fails with ``auth`` (no request is sent)
    and the caller gets ``llm_unavailable``, never the simulated model in their place.
    """
    entries = {"simulated": "simulated", "openai": "", "anthropic": "", "ollama": ""}
    return {
        kind: {
            "kind": kind,
            "model": model,
            "base_url": "",
            "credential": "",
            "timeout": 60.0,
            "options": {},
            "pricing": {},
            "slow_call_seconds": 0.0,
        }
        for kind, model in entries.items()
    }


def missing_credential(entry: Mapping[str, Any]) -> bool:
    """A hosted API (OpenAI, Anthropic at their own endpoints) called without a key: fail before sending.
    A ``base_url`` may be a local server (vLLM, Ollama's ``/v1``, a proxy) that needs none."""
    return entry["kind"] in ("openai", "anthropic") and not entry["base_url"] and not entry["credential"]


def check_pricing(pricing: Mapping[str, Any]) -> dict[str, float]:
    """USD per million tokens by kind: input, output, cached, cache_write (the last two default to input)."""
    out: dict[str, float] = {}
    for name, value in pricing.items():
        if name not in PRICE_FIELDS:
            raise InvalidArgument(f"pricing keys are {', '.join(PRICE_FIELDS)}", field=f"pricing.{name}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e6:
            raise InvalidArgument(
                "a price must be a number >= 0 (USD per million tokens)", field=f"pricing.{name}"
            )
        out[name] = float(value)
    if out and ("input" not in out or "output" not in out):
        raise InvalidArgument("pricing needs at least input and output", field="pricing")
    return out


# -- the circuit breaker ----------------------------------------------------------------------------------


def new_circuit() -> dict[str, Any]:
    return {
        "state": CLOSED,
        "consecutive_failures": 0,
        "window": [],  # 1 = failure, 0 = success; the newest last
        "opened_at": None,
        "opens": 0,
        "last_error": None,
    }


def record_outcome(
    circuit: dict[str, Any], *, ok: bool, error: str | None, now: float, settings: GatewaySettings
) -> str | None:
    """Apply one call's outcome; returns the new state when the circuit changed state."""
    if not ok:
        circuit["last_error"] = error
    state = circuit["state"]
    if state == HALF_OPEN:
        # The trial call decides alone: a success closes with a clean slate (old failures would otherwise
        # push the error rate over the threshold again at once), a failure reopens for a full recovery.
        if ok:
            circuit.update(state=CLOSED, consecutive_failures=0, window=[], opened_at=None)
            return CLOSED
        return _open(circuit, now, settings)
    if state == OPEN:
        return None  # a call that started before the circuit opened; the recovery is the ticks' job
    window: list[int] = circuit["window"]
    window.append(0 if ok else 1)
    del window[: -settings.error_window]
    if ok:
        circuit["consecutive_failures"] = 0
        return None
    circuit["consecutive_failures"] += 1
    rate = sum(window) / len(window)
    if circuit["consecutive_failures"] >= settings.failure_threshold or (
        len(window) >= settings.min_samples and rate > settings.error_rate_threshold
    ):
        return _open(circuit, now, settings)
    return None


def _open(circuit: dict[str, Any], now: float, settings: GatewaySettings) -> str:
    # The failure count is what the recovery ticks count down, so an opening by error rate (with fewer
    # consecutive failures) recovers as slowly as one by consecutive failures.
    circuit.update(
        state=OPEN,
        consecutive_failures=max(circuit["consecutive_failures"], settings.failure_threshold),
        opened_at=now,
        opens=circuit["opens"] + 1,
    )
    return OPEN


def tick(circuit: dict[str, Any]) -> str | None:
    """One recovery tick: an open circuit's failure count drops by one; at zero it goes half_open."""
    if circuit["state"] != OPEN:
        return None
    circuit["consecutive_failures"] = max(0, circuit["consecutive_failures"] - 1)
    if circuit["consecutive_failures"] == 0:
        circuit["state"] = HALF_OPEN
        return HALF_OPEN
    return None


def circuit_view(circuit: Mapping[str, Any]) -> dict[str, Any]:
    window: list[int] = circuit["window"]
    return {
        "state": circuit["state"],
        "consecutive_failures": circuit["consecutive_failures"],
        "error_rate": round(sum(window) / len(window), 4) if window else 0.0,
        "samples": len(window),
        "opened_at": circuit["opened_at"],
        "opens": circuit["opens"],
        "last_error": circuit["last_error"],
    }


# -- retries ----------------------------------------------------------------------------------------------

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


# -- provider clients -------------------------------------------------------------------------------------


# The official SDKs take seconds to import (the adapters import them on first use). Imported on the event
# loop that would stall every actor of the node, so the gateway imports them in a worker thread first.
_SDK_ADAPTERS = {"openai": "minihermes.llm._openai", "anthropic": "minihermes.llm._anthropic"}


async def import_adapter(kind: str) -> None:
    module = _SDK_ADAPTERS.get(kind)
    if module is not None:
        await asyncio.to_thread(importlib.import_module, module)


class BuildFailed(Exception):
    """A provider client could not be built (``kind``: auth for a missing credential, or misconfigured)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(eq=False, slots=True)
class Lease:
    fingerprint: str
    provider: Provider
    refs: int = 0
    retired: bool = False


class ProviderPool:
    """Provider clients built lazily, shared by concurrent calls, closed once retired and no longer in use.

    A client is cached under its provider name with a fingerprint of what it was built from (registration
    and credential version): a call that finds another fingerprint builds afresh and retires the old one.
    """

    def __init__(
        self, build: Callable[[str, dict[str, Any]], Awaitable[Provider]], spawn: Callable[[Any], Any]
    ) -> None:
        self._build = build
        self._spawn = spawn
        self._leases: dict[str, Lease] = {}

    async def acquire(self, name: str, entry: dict[str, Any], fingerprint: str) -> Lease:
        lease = self._leases.get(name)
        if lease is None or lease.fingerprint != fingerprint:
            built = await self._build(name, entry)
            lease = self._leases.get(name)
            if lease is None:
                lease = self._leases[name] = Lease(fingerprint, built)
            elif lease.fingerprint == fingerprint:
                self._close(built)  # a concurrent call built the same one first
            elif lease.refs == 0:
                self.retire(name)
                lease = self._leases[name] = Lease(fingerprint, built)
            else:
                # The registration changed while this call was building: serve it once, cache nothing.
                lease = Lease(fingerprint, built, retired=True)
        lease.refs += 1
        return lease

    def release(self, lease: Lease) -> None:
        lease.refs -= 1
        if lease.retired and lease.refs == 0:
            self._close(lease.provider)

    def retire(self, name: str) -> None:
        lease = self._leases.pop(name, None)
        if lease is not None:
            lease.retired = True
            if lease.refs == 0:
                self._close(lease.provider)

    async def close_all(self) -> None:
        leases, self._leases = list(self._leases.values()), {}
        await asyncio.gather(*(_close_quietly(lease.provider) for lease in leases))

    def _close(self, provider: Provider) -> None:
        self._spawn(_close_quietly(provider))


async def _close_quietly(provider: Provider) -> None:
    # A retired client that fails to close has nothing left to serve; it must not crash the gateway.
    with contextlib.suppress(Exception):
        await provider.aclose()


# -- usage, cost and budgets ------------------------------------------------------------------------------

BUDGET_SCOPES = ("tenant", "user", "session", "cron_job")


def empty_usage() -> dict[str, Any]:
    return {
        "calls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_tokens": 0,
        "cache_write_tokens": 0,
        "total_tokens": 0,
        "cost_usd": 0.0,
    }


def add_usage(bucket: dict[str, Any], usage: Usage, cost: float | None) -> None:
    bucket["calls"] += 1
    bucket["input_tokens"] += usage.input_tokens
    bucket["output_tokens"] += usage.output_tokens
    bucket["cached_tokens"] += usage.cached_tokens
    bucket["cache_write_tokens"] += usage.cache_write_tokens
    bucket["total_tokens"] += usage.input_tokens + usage.output_tokens
    if cost:
        bucket["cost_usd"] = round(bucket["cost_usd"] + cost, 9)


def cost_of(usage: Usage, pricing: Mapping[str, float]) -> float | None:
    """USD for one call, or None when the provider has no pricing registered."""
    if not pricing:
        return None
    base = pricing["input"]
    cached = min(usage.cached_tokens, usage.input_tokens)
    written = min(usage.cache_write_tokens, usage.input_tokens - cached)
    fresh = usage.input_tokens - cached - written
    total = (
        fresh * base
        + cached * pricing.get("cached", base)
        + written * pricing.get("cache_write", base)
        + usage.output_tokens * pricing["output"]
    )
    return round(total / 1_000_000, 9)


def budget_limit(budgets: Mapping[str, Mapping[str, int]], scope: str, key: str) -> int | None:
    """The token budget for one key: its own, else the scope's ``"*"`` default (not for the tenant)."""
    per_scope = budgets.get(scope) or {}
    if key in per_scope:
        return per_scope[key]
    return per_scope.get("*") if scope != "tenant" else None


def spent_budget(
    budgets: Mapping[str, Mapping[str, int]], usage: Sequence[tuple[str, str, Mapping[str, Any]]]
) -> BudgetExceeded | None:
    """The error for the first (scope, key, usage bucket) whose budget is used up, if any."""
    for scope, key, bucket in usage:
        limit = budget_limit(budgets, scope, key)
        used = int(bucket["total_tokens"])
        if limit is not None and used >= limit:
            who = f"{scope} {key!r}" if key else "the tenant"
            return BudgetExceeded(
                f"the token budget of {who} is spent ({used} of {limit} tokens)",
                scope=scope,
                key=key,
                used=used,
                limit=limit,
            )
    return None


def empty_provider_stats() -> dict[str, Any]:
    return {
        "calls": 0,
        "successes": 0,
        "failures": 0,
        "retries": 0,
        "slow_calls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_tokens": 0,
        "cache_write_tokens": 0,
        "cache_hits": 0,
        "cost_usd": 0.0,
        "latency_total_s": 0.0,
        "errors": {},
    }


def add_success(stats: dict[str, Any], usage: Usage, cost: float | None, elapsed: float, slow: bool) -> None:
    stats["successes"] += 1
    stats["slow_calls"] += int(slow)
    stats["latency_total_s"] = round(stats["latency_total_s"] + elapsed, 6)
    for field in ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens"):
        stats[field] += getattr(usage, field)
    stats["cache_hits"] += int(usage.cached_tokens > 0)
    if cost:
        stats["cost_usd"] = round(stats["cost_usd"] + cost, 9)


def add_failure(stats: dict[str, Any], kind: str) -> None:
    stats["failures"] += 1
    stats["errors"][kind] = stats["errors"].get(kind, 0) + 1


def stats_view(stats: Mapping[str, Any]) -> dict[str, Any]:
    successes = stats["successes"]
    return {
        **stats,
        "errors": dict(stats["errors"]),
        "cache_hit_rate": round(stats["cache_hits"] / successes, 4) if successes else 0.0,
        "avg_latency_s": round(stats["latency_total_s"] / successes, 6) if successes else 0.0,
    }


class KVStore(Protocol):
    async def get(self, key: str) -> Any: ...
    async def put(self, key: str, value: Any, ttl: float | None = None) -> int: ...


class UsageLedger:
    """Token usage per user, session and cron job, one KV entry each, with an in-memory LRU in front.

    The gateway instance is the only writer of its tenant's entries, so the cache is authoritative once
    loaded. Writes are behind and coalesced: changed entries are written together ``delay`` seconds after
    the first change (each hot entry once per flush, not once per call, and no reply waits for them).
    A killed process loses at most the last ``delay`` seconds of these counts; the tenant's totals, in the
    actor's state, are saved before every reply, and a graceful stop flushes.
    """

    PREFIX = "llm_usage/"

    def __init__(
        self,
        kv: KVStore,
        *,
        spawn: Callable[[Any], Any],
        sleep: Callable[[float], Awaitable[None]],
        delay: float,
        capacity: int = 4096,
    ) -> None:
        self._kv = kv
        self._spawn = spawn
        self._sleep = sleep
        self._delay = delay
        self._capacity = capacity
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._dirty: set[str] = set()
        self._flushing: asyncio.Future[None] | None = None
        self._loading: dict[str, asyncio.Future[Any]] = {}
        """Buckets being read from the KV (``prefetch``, or a ``get`` that missed), by name."""

    def prefetch(self, keys: Sequence[tuple[str, str]]) -> None:
        """Start loading the buckets a call will count into while the call runs (a session's first call
        would otherwise wait for the read when it is counted)."""
        for scope, key in keys:
            name = f"{self.PREFIX}{scope}/{key}"
            if name not in self._cache and name not in self._loading:
                self._loading[name] = self._spawn(self._bucket(name))

    async def get(self, scope: str, key: str) -> dict[str, Any]:
        """The live bucket for (scope, key); callers must not hold it across awaits they do not control."""
        return await self._bucket(f"{self.PREFIX}{scope}/{key}")

    async def _bucket(self, name: str) -> dict[str, Any]:
        bucket = self._cache.get(name)
        if bucket is None:
            loading = self._loading.get(name)
            if loading is not None and loading is not asyncio.current_task():
                await asyncio.shield(loading)
                bucket = self._cache.get(name)
        if bucket is None:
            try:
                stored = await self._kv.get(name)
            finally:
                if self._loading.get(name) is asyncio.current_task():
                    del self._loading[name]
            # Another call may have loaded it while this one waited: keep the first, it may hold increments.
            bucket = self._cache.get(name)
            if bucket is None:
                bucket = {**empty_usage(), **stored} if isinstance(stored, dict) else empty_usage()
                self._cache[name] = bucket
                self._evict(keep=name)
        self._cache.move_to_end(name)
        return bucket

    async def add(self, keys: Sequence[tuple[str, str]], usage: Usage, cost: float | None) -> None:
        """Count one call; spawned in the caller's context, the flush writes to the caller's tenant."""
        for scope, key in keys:
            name = f"{self.PREFIX}{scope}/{key}"
            add_usage(await self._bucket(name), usage, cost)
            self._dirty.add(name)
        if self._dirty and (self._flushing is None or self._flushing.done()):
            self._flushing = self._spawn(self._flush_later())

    async def flush(self) -> None:
        """Write everything pending now (a graceful stop)."""
        pending = self._flushing
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await self._flush()

    async def _flush_later(self) -> None:
        if self._delay > 0:
            await self._sleep(self._delay)
        await self._flush()

    async def _flush(self) -> None:
        while self._dirty:
            names, self._dirty = self._dirty, set()
            try:
                # Copies taken now: increments made while these writes run go out with the next round.
                await asyncio.gather(*(self._kv.put(name, dict(self._cache[name])) for name in names))
            except BaseException:
                self._dirty |= names  # not known to be written: the next flush (or the stop) retries them
                raise

    def _evict(self, keep: str) -> None:
        # Oldest first; entries not yet written stay until they are, and so does the one being handed out
        # (with every older entry dirty it would otherwise evict itself, and its increments would be lost).
        if len(self._cache) <= self._capacity:
            return  # the usual case: no copy of the whole cache for each bucket loaded
        for name in list(self._cache):
            if len(self._cache) <= self._capacity:
                return
            if name not in self._dirty and name != keep:
                del self._cache[name]
