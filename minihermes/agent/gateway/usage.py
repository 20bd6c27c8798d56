"""Usage, cost and budgets: usage buckets, per-provider stats, the cost of a call from its provider's
pricing, budget checks, and ``UsageLedger``, which keeps usage per user, session and cron job in the
tenant's KV (those key sets grow without bound, so they stay out of the actor's state, which is
serialized after every message)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from minihermes.llm import Usage

from .calls import BudgetExceeded
from .spend import add_model

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

    def prefetch_names(self, names: Sequence[str]) -> None:
        """``prefetch`` by bucket name (``spend.bucket_suffix`` names period buckets)."""
        for name in names:
            full = self.PREFIX + name
            if full not in self._cache and full not in self._loading:
                self._loading[full] = self._spawn(self._bucket(full))

    async def get_named(self, name: str) -> dict[str, Any]:
        """The live bucket ``name`` (``<scope>/<key>[@<period>:<label>[~<zone>]]``)."""
        return await self._bucket(self.PREFIX + name)

    def cached(self, name: str) -> dict[str, Any] | None:
        """The bucket if it is in memory (no store read): the hot path's view of a caller's buckets."""
        return self._cache.get(self.PREFIX + name)

    def touch(self, name: str) -> None:
        """A bucket changed by hand (its ``alerts``): written with the next flush."""
        self._dirty.add(self.PREFIX + name)
        if self._flushing is None or self._flushing.done():
            self._flushing = self._spawn(self._flush_later())

    async def add_named(self, names: Sequence[str], usage: Usage, cost: float | None, model: str) -> None:
        """Count one call into each bucket of ``names``; period buckets (``@`` in the name) per model too,
        and a call of unknown price as such (``unknown_cost_calls``), never as free."""
        cache = self._cache
        for short in names:
            name = self.PREFIX + short
            bucket = cache.get(name)
            if bucket is None:
                bucket = await self._bucket(name)  # not in memory yet: loaded (or being loaded) first
            else:
                cache.move_to_end(name)  # as ``_bucket`` does, without a coroutine per bucket of every call
            add_usage(bucket, usage, cost)
            if cost is None:
                bucket["unknown_cost_calls"] = int(bucket.get("unknown_cost_calls") or 0) + 1
            if "@" in short:
                add_model(bucket, model, usage.input_tokens, usage.output_tokens, cost)
            self._dirty.add(name)
        if self._dirty and (self._flushing is None or self._flushing.done()):
            self._flushing = self._spawn(self._flush_later())

    async def list_named(self, prefix: str, kv_list: Callable[[str], Awaitable[Any]]) -> dict[str, Any]:
        """Buckets whose names start with ``prefix``: what is stored, overlaid with what is in memory (the
        counts not written yet)."""
        full = self.PREFIX + prefix
        out = {
            key[len(self.PREFIX) :]: value for key, value in await kv_list(full) if isinstance(value, dict)
        }
        for name, bucket in self._cache.items():
            if name.startswith(full):
                out[name[len(self.PREFIX) :]] = bucket
        return out

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
