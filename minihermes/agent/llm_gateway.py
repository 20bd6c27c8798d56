"""The ``llm_gateway`` actor: one instance per tenant, and the only way the agent reaches an LLM.

A ``completion`` goes to the session's override or the tenant's active provider, then down the failover
chain, skipping providers whose circuit is open. On one provider, transient failures (rate limits, 5xx,
unusable answers) are retried with jittered exponential backoff that honours ``retry_after``; timeouts,
auth errors and rejected requests fail over at once. When every provider failed the reply is the
structured ``llm_unavailable`` error: the simulated model is never slipped in for a configured provider.

How it runs. An LLM call takes seconds and a tenant has many sessions, so ``completion`` only validates and
returns ``Deferred`` of a task spawned on the host (which inherits the request's context): the mailbox
stays free and calls run concurrently. The task writes its outcome (circuit, stats, usage) into the
durable state and saves it: a circuit move with ``host.checkpoint()`` before replying (as the runtime's
``Workflow`` does), an answer that only moved counters with ``host.save_soon()``, committed behind the reply.
Checkpoints commit in the order they are registered (one writer on SQLite, one batch at a time on
PostgreSQL), so the caller's next checkpoint (the agent saves the answer before acting on it) commits with
or after these counters; a caller that keeps no state can lose the last call's counts to a SIGKILL within
the commit's few milliseconds. Two rules keep that safe next to handlers that may roll back: the task mutates state and
checkpoints without an ``await`` in between (the checkpoint snapshots synchronously), and no handler here
awaits after it started mutating state and then raises. Usage per user, session and cron job lives in the
tenant's KV instead (unbounded key sets), written behind by ``UsageLedger``.

Credentials are phantom tokens resolved by ``CredentialVault`` only when a provider client is built;
provider clients are cached per provider (not durable) and rebuilt when the registration, the active
provider or the credential changes.

Where a ``base_url`` may point is the node operator's (``allowed_egress``, ``minihermes.llm.egress``): unset,
a tenant reaches public addresses only; loopback, private, link-local and other internal addresses are
refused at ``register_provider``, again before a client is built (and by ``test_provider``), and at every
connection the adapters' guarded transports make. A one-owner node (no auth) allows everything.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import random
import typing
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationInfo, field_validator

from minihermes.credentials import CredentialVault, check_api_key, check_phantom_token
from minihermes.llm import (
    Completion,
    CompletionRequest,
    ErrorKind,
    Provider,
    ProviderConfig,
    UnknownProviderError,
    create_provider,
    egress,
)
from minihermes.llm.protocol import CompletionReply
from minihermes.runtime import (
    ActorError,
    Clock,
    ConfigError,
    Conflict,
    Deferred,
    GenServer,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RequestContext,
    call,
    cast,
    current_context,
    reset_context,
    set_context,
    state,
)

from . import gateway as policy
from .audit_event import fire_audit
from .gateway import (
    BudgetExceeded,
    Caller,
    Cap,
    Circuit,
    Failure,
    LLMInternalError,
    LLMUnavailable,
    PriceUnknown,
    local,
    spend,
)
from .gateway import probe as connection

__all__ = ["BudgetExceeded", "LLMGateway", "LLMInternalError", "LLMUnavailable", "PriceUnknown"]

ADMIN_ROLES = frozenset({"admin", "system"})
SESSION_ROLES = ADMIN_ROLES | {"user"}
"""A user may pin their session to another registered provider; changing the tenant's needs an admin."""
DEFAULT_PROVIDER = policy.OFFLINE_KIND
_NOT_SETTINGS = frozenset({"credential_key", "allowed_egress", "ollama_url", "prices"})
"""The args that are not ``GatewaySettings`` fields."""
EGRESS_SETTING = (
    f"the llm_gateway arg allowed_egress (or {egress.ENV_VAR} for the whole node; docs/configuration.md)"
)

BudgetScope = Literal["tenant", "user", "session", "cron_job", "kanban_worker"]
Period = Literal["day", "month", "total"]
MAX_USAGE_PERIODS = 400
"""At most this many past days (or months) in one ``get_usage`` reply."""


class LLMGateway(GenServer):
    """Provider registry, routing, retries, failover, circuit breakers, usage and budgets for one tenant.

    Args (all optional): ``credential_key`` (see ``credentials``) and the ``GatewaySettings`` fields.
    """

    class Args(policy.GatewaySettings):
        """The ``GatewaySettings`` fields and the vault's ``credential_key``."""

        credential_key: str | None = None
        allowed_egress: list[str] | None = None
        """Internal addresses a provider's ``base_url`` may reach (``minihermes.llm.egress``): None only
        public ones, ``["*"]`` any (a one-owner node), else ``"host:port"``, ``"host"``, CIDR networks."""
        ollama_url: str | None = None
        """Where ``detect_local`` looks for a local Ollama (default ``MINIHERMES_OLLAMA_URL``, else
        http://127.0.0.1:11434)."""
        prices: dict[str, Any] | None = None
        """The price table: ``{provider: {model: {input, output, cached?, cache_write?}}}`` in USD per
        million tokens; provider a registered name or a kind, model ``"*"`` for any (``gateway.spend``)."""

        @field_validator("prices")
        @classmethod
        def _price_table(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
            spend.check_price_table(value)  # a bad price fails when the config loads
            return value

        @field_validator("*", mode="before")
        @classmethod
        def _a_number(cls, value: Any, info: ValidationInfo) -> Any:  # type: ignore[override]
            # Replaces the settings' check of the same name (pydantic: by name; it needs ``info`` to tell
            # the fields apart): the key is a string, the settings numbers.
            if info.field_name in _NOT_SETTINGS:
                return value
            return policy.GatewaySettings._a_number(value)

        @field_validator("allowed_egress")
        @classmethod
        def _egress_entries(cls, value: list[str] | None) -> list[str] | None:
            egress.EgressPolicy.parse(value, EGRESS_SETTING)  # a bad entry fails when the config loads
            return value

    state_version = 1
    # Every session of the tenant calls through this one instance, and a completion holds the mailbox only
    # while it is validated (the call itself runs in a task): a deep mailbox absorbs bursts of new turns.
    mailbox_capacity = 10_000

    providers: dict[str, dict[str, Any]] = state(default_factory=policy.default_providers)
    active: dict[str, str] = state(default_factory=lambda: {"provider": DEFAULT_PROVIDER, "model": ""})
    session_overrides: dict[str, dict[str, str]] = state(default_factory=dict)
    failover: list[str] = state(default_factory=list)
    circuits: dict[str, dict[str, Any]] = state(default_factory=dict)
    provider_stats: dict[str, dict[str, Any]] = state(default_factory=dict)
    usage: dict[str, Any] = state(default_factory=policy.empty_usage)
    """The tenant's total; per user, session and cron job in ``UsageLedger`` (KV)."""
    budgets: dict[str, dict[str, Any]] = state(default_factory=dict)
    """Caps: scope -> key -> period -> ``spend.cap_entry`` (a bare int, saved before periods: tokens, total)."""
    credentials: dict[str, dict[str, Any]] = state(default_factory=dict)
    """Phantom token -> {version, registered_at}. The keys themselves live only in the vault."""
    counters: dict[str, int] = state(default_factory=dict)

    _settings: policy.GatewaySettings
    _ollama_url: str
    _egress: egress.EgressPolicy
    _vault: CredentialVault
    _ledger: policy.UsageLedger
    _pool: policy.ProviderPool
    _trials: set[str]
    _fingerprints: dict[str, tuple[dict[str, Any], int, str]]
    _rng: random.Random
    _tick_timer: str
    _tick_token: str
    _tick_due: float
    _prices: dict[str, dict[str, dict[str, float]]]
    _paused: set[str]
    """Cron jobs asked to pause in this period (``job@label``): asked once, not at every refused call."""
    _last_counted: tuple[Caller, int, list[str]] | None
    """Without caps: the last caller, the minute and the buckets its calls count into (``_spending``)."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self._settings = policy.GatewaySettings.from_args(args, extra=_NOT_SETTINGS)
        try:
            self._prices = spend.check_price_table(args.get("prices"))
        except ValueError as e:
            raise ConfigError("llm_gateway.args.prices", str(e)) from None
        self._paused = set()
        self._last_counted = None
        self._ollama_url = local.ollama_url(args.get("ollama_url"))
        try:
            self._egress = egress.EgressPolicy.parse(args.get("allowed_egress"), EGRESS_SETTING)
        except ValueError as e:
            raise ConfigError("llm_gateway.args.allowed_egress", str(e)) from None
        key = args.get("credential_key")
        if key is not None and not isinstance(key, str | bytes):
            raise ConfigError("llm_gateway.args.credential_key", "must be a string")
        self._vault = CredentialVault(self.host.private_kv, current_context().tenant, key)
        self._ledger = policy.UsageLedger(
            self.host.kv,
            spawn=self.host.spawn,
            sleep=self._clock.sleep,
            delay=self._settings.usage_flush_interval,
        )
        self._pool = policy.ProviderPool(self._build_provider, self.host.spawn)
        self._trials = set()  # half-open providers whose one trial call is in flight
        self._fingerprints = {}
        self._rng = random.Random()
        self._tick_timer = ""
        self._arm_tick()

    async def on_stop(self, reason: str) -> None:
        await self._ledger.flush()
        await self._pool.close_all()

    @property
    def _clock(self) -> Clock:
        # The node's clock (ManualClock in tests) drives backoff sleeps and timeouts. The host offers now()
        # but no sleep or call_later; the runtime's own Workflow reaches the clock the same way.
        return self.host.clock

    # -- completion -------------------------------------------------------------------------------------

    @call(access="admin")
    def completion(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        session_id: str = "",
        user_id: str = "",
        cron_job: str = "",
        max_tokens: int = 1024,
        temperature: float | None = None,
        cache_prefix_messages: int = 0,
        stream_topic: str = "",
        kanban_worker: str = "",
    ) -> Deferred:
        """One LLM completion over the neutral message shape; replies a ``CompletionReply``
        (``minihermes.llm.protocol``; docs/agent.md). With
        ``stream_topic``, text deltas are published on that topic as they arrive (``text_delta`` events).
        ``kanban_worker`` (``"kanban_worker"``): the call is the kanban worker's turn's, counted for that
        scope too; the agent passes it for a turn whose session holds a card's claim, never from a session's
        name."""
        request = policy.completion_request(
            messages, tools or [], max_tokens, temperature, cache_prefix_messages
        )
        progress = self._stream_progress(stream_topic)
        _check_usage_keys("completion", session_id=session_id, user_id=user_id, cron_job=cron_job)
        if kanban_worker not in ("", spend.KANBAN_WORKER):
            raise InvalidArgument(
                f"completion: kanban_worker is {spend.KANBAN_WORKER!r} or empty",
                op="completion",
                field="kanban_worker",
            )
        caller = Caller(user_id or current_context().principal, session_id, cron_job, kanban_worker)
        if self._clock.monotonic() > self._tick_due + self._settings.tick_interval:
            self._arm_tick()  # a tick was dropped (full mailbox): recovery must not stop for good
        # Spawned here, inside the handler, so the task runs in this request's tenant context.
        return Deferred(self.host.spawn(self._complete(request, self._route(session_id), caller, progress)))

    def _stream_progress(self, topic: str) -> policy.StreamProgress | None:
        """Text deltas go to ``topic`` (in the caller's tenant) as the provider streams them."""
        if not topic:
            return None
        if len(topic) > 256:
            raise InvalidArgument("stream_topic must be at most 256 characters", field="stream_topic")
        host = self.host

        def publish(text: str) -> None:
            host.publish(topic, {"type": "text_delta", "text": text})

        return policy.StreamProgress(publish)

    def _route(self, session_id: str) -> list[tuple[str, str]]:
        primary = (self.session_overrides.get(session_id) if session_id else None) or self.active
        first = primary["provider"]
        return [(first, primary.get("model", ""))] + [(n, "") for n in self.failover if n != first]

    async def _complete(
        self,
        request: CompletionRequest,
        route: list[tuple[str, str]],
        caller: Caller,
        progress: policy.StreamProgress | None,
    ) -> CompletionReply:
        spending = self._spending(caller)
        failures: list[Failure] = []
        for name, model in route:
            outcome = await self._try_provider(name, model, request, spending, progress)
            if isinstance(outcome, Failure):
                failures.append(outcome)
                if outcome.streamed:
                    # Watchers saw this answer begin: another provider's answer cannot replace it unseen.
                    self.host.incr_counter("llm_stream_aborted_total", provider=name, error=outcome.error)
                    break
                self.host.incr_counter("llm_failovers_total", provider=name, error=outcome.error)
                continue
            outcome["attempts"] = [{"provider": f.provider, "error": f.error} for f in failures]
            return outcome
        self._bump("unavailable")
        await self._commit()
        self.host.incr_counter("llm_unavailable_total")
        raise policy.unavailable(failures)

    async def _try_provider(
        self,
        name: str,
        model: str,
        request: CompletionRequest,
        spending: _Spending,
        progress: policy.StreamProgress | None,
    ) -> CompletionReply | Failure:
        entry = self.providers.get(name)
        if entry is None:
            return Failure(name, "not_registered")
        await self._check_budgets(spending, name, entry, model or entry["model"], request)
        circuit_state = self.circuits.get(name, {}).get("state", policy.CLOSED)
        if circuit_state == policy.OPEN or (circuit_state == policy.HALF_OPEN and name in self._trials):
            return Failure(name, "circuit_open")
        if not (model or entry["model"]) and policy.needs_model(entry["kind"]):
            # Registered without a model and switched to without one: there is nothing to ask for.
            await self._settle_failure(name, "misconfigured", retries=0)
            return Failure(name, "misconfigured")
        trial = circuit_state == policy.HALF_OPEN
        if trial:
            self._trials.add(name)
        try:
            try:
                lease = await self._pool.acquire(name, entry, self._fingerprint(name, entry))
            except policy.BuildFailed as failed:
                await self._settle_failure(name, failed.kind, retries=0)
                return Failure(name, failed.kind)
            try:
                return await self._attempts(name, entry, lease.provider, model, request, spending, progress)
            finally:
                self._pool.release(lease)
        finally:
            if trial:
                self._trials.discard(name)

    async def _attempts(
        self,
        name: str,
        entry: dict[str, Any],
        provider: Provider,
        model: str,
        request: CompletionRequest,
        spending: _Spending,
        progress: policy.StreamProgress | None,
    ) -> CompletionReply | Failure:
        clock = self._clock
        if model:
            request = request.model_copy(update={"model": model})
        retries = 0
        while True:
            started = clock.monotonic()
            try:
                result = await policy.call_with_timeout(
                    provider, request, float(entry["timeout"]), clock, progress
                )
            except LLMInternalError as bug:
                self.host.log.error("llm_gateway: %s", bug.message)
                raise
            if isinstance(result, Completion):
                elapsed = clock.monotonic() - started
                if progress is not None:
                    self.host.incr_counter("llm_streamed_calls_total", provider=name)
                priced = model or entry["model"]  # the name the price table knows (the reply may add a date)
                return await self._settle_success(name, entry, result, elapsed, retries, spending, priced)
            kind = str(result.kind)
            if progress is not None and progress.deltas:
                # Failing after text was streamed: neither a retry nor failover may start it over.
                await self._settle_failure(name, kind, retries=retries)
                return Failure(name, kind, result.retry_after, streamed=True)
            delay = policy.retry_delay(kind, result.retry_after, retries, self._settings, self._rng)
            if delay is None:
                await self._settle_failure(name, kind, retries=retries)
                return Failure(name, kind, result.retry_after)
            retries += 1
            self.host.incr_counter("llm_retries_total", provider=name, error=kind)
            self.host.log.debug(
                "llm_gateway: %s failed (%s, HTTP %s); retry %d in %.2fs",
                name,
                kind,
                result.status_code,
                retries,
                delay,
            )
            if delay > 0:
                await clock.sleep(delay)

    # -- outcomes: state first (saved at once), then metrics and audit ---------------------------------

    async def _settle_success(
        self,
        name: str,
        entry: dict[str, Any],
        completion: Completion,
        elapsed: float,
        retries: int,
        spending: _Spending,
        model: str,
    ) -> CompletionReply:
        usage = completion.usage
        price = spend.price_of(self._prices, name, entry, model)
        if price is None and completion.model and completion.model != model:  # the reply's name, if another
            price = spend.price_of(self._prices, name, entry, completion.model)
        cost = policy.cost_of(usage, price) if price is not None else None
        slow = elapsed > (entry["slow_call_seconds"] or self._settings.slow_call_seconds)
        policy.add_success(self._stats(name), usage, cost, elapsed, slow)
        policy.add_usage(self.usage, usage, cost)
        # A slow answer is still an answer for the caller, but a provider that drags counts against it.
        change = self._record(name, ok=not slow, error="slow" if slow else None, retries=retries)
        if change is None:
            # Counters only: registered now, committed behind the reply. Checkpoints commit in the order they
            # are registered, so the caller's next checkpoint (the agent saves the answer it got) holds them.
            self.host.save_soon()
        else:
            await self._commit()  # a circuit move is durable before anyone acts on the answer
        await self._ledger.add_named(spending.counted, usage, cost, f"{name}/{model}")
        self._alert(spending)
        self._announce(name, change)
        host = self.host
        host.incr_counter("llm_calls_total", provider=name, outcome="ok")
        host.incr_counter("llm_tokens_total", usage.input_tokens, provider=name, direction="input")
        host.incr_counter("llm_tokens_total", usage.output_tokens, provider=name, direction="output")
        if usage.cached_tokens:
            host.incr_counter("llm_cached_tokens_total", usage.cached_tokens, provider=name)
        if cost:
            host.incr_counter("llm_cost_usd_total", cost, provider=name)
        if slow:
            host.incr_counter("llm_slow_calls_total", provider=name)
        return policy.completion_reply(name, entry["model"], completion, cost)

    async def _settle_failure(self, name: str, kind: str, *, retries: int) -> None:
        policy.add_failure(self._stats(name), kind)
        # A rejected request is the request's fault, not the provider's: it must not open the circuit.
        ok = None if kind == ErrorKind.BAD_REQUEST else False
        change = self._record(name, ok=ok, error=kind, retries=retries)
        await self._commit()
        self._announce(name, change)
        self.host.incr_counter("llm_calls_total", provider=name, outcome="error")

    def _record(self, name: str, *, ok: bool | None, error: str | None, retries: int) -> str | None:
        stats = self._stats(name)
        stats["calls"] += 1
        stats["retries"] += retries
        if ok is None:
            return None
        data = self.circuits.get(name)
        if data is None:
            data = self.circuits[name] = Circuit().to_dict()
        circuit = Circuit.from_dict(data)  # changes the state's object in place
        return circuit.record(ok=ok, error=error, now=self.host.now(), settings=self._settings)

    def _stats(self, name: str) -> dict[str, Any]:
        return self.provider_stats.setdefault(name, policy.empty_provider_stats())

    async def _commit(self) -> None:
        # Snapshots synchronously before it awaits the write: see the module docstring.
        await self.host.checkpoint()

    def _bump(self, counter: str) -> None:
        self.counters[counter] = self.counters.get(counter, 0) + 1

    def _spending(self, caller: Caller) -> _Spending:
        """The caps over a call of ``caller`` and the buckets it counts into, at the clock's now, their loads
        begun. Without caps, the buckets depend only on the caller and the minute (a UTC day starts on one):
        the same caller's next calls in that minute (the rest of its turn) reuse them, loaded or loading."""
        now = self.host.now()
        minute = int(now // 60)
        last = self._last_counted
        if not self.budgets and last is not None and last[1] == minute and last[0] == caller:
            return _Spending(caller, now, [], last[2])
        caps: list[tuple[Cap, str]] = []
        counted: list[str] = []
        for scope, key in [("tenant", ""), *caller.keys()]:
            mine = spend.caps_for(self.budgets, scope, key) if self.budgets else []
            for suffix in spend.counted_suffixes(scope, mine, now):
                counted.append(f"{scope}/{key}{suffix}")
            caps += [
                (cap, f"{scope}/{key}{spend.bucket_suffix(cap.period, cap.time_zone, now)}") for cap in mine
            ]
        self._ledger.prefetch_names(counted)
        self._last_counted = None if self.budgets else (caller, minute, counted)
        return _Spending(caller, now, caps, counted)

    def _amounts(self, cap: Cap, bucket_name: str, bucket: dict[str, Any]) -> dict[str, Any]:
        # The tenant's lifetime is its state's total (counted since before the ledger had a tenant bucket).
        return self.usage if cap.scope == "tenant" and cap.period == "total" else bucket

    async def _check_budgets(
        self, spending: _Spending, name: str, entry: dict[str, Any], model: str, request: CompletionRequest
    ) -> None:
        """Before a call is sent to ``name``: refuse it when it would cross a hard cap (its prompt's tokens
        priced by the table), or when a money cap applies and its price is unknown."""
        if not spending.caps:
            return
        price = spend.price_of(self._prices, name, entry, model)
        if spending.est_tokens is None:
            spending.est_tokens = spend.prompt_tokens(request)
        est_tokens = spending.est_tokens
        est_usd = None if price is None else est_tokens * price["input"] / 1_000_000
        refused: ActorError | None = None
        for cap, bucket_name in spending.caps:
            if cap.max_usd is not None and price is None:
                refused = PriceUnknown(
                    f"the {cap.period} money budget for {cap.who()} cannot be checked: the price of "
                    f"{name}/{model} is unknown; set it in the llm_gateway arg prices or register_provider "
                    f"pricing (docs/configuration.md)",
                    scope=cap.scope,
                    key=cap.key,
                    provider=name,
                    model=model,
                )
                break
            bucket = self._amounts(cap, bucket_name, await self._ledger.get_named(bucket_name))
            refused = spend.refusal(cap, bucket, est_tokens, est_usd, spending.now)
            if refused is not None:
                if cap.scope == "cron_job":
                    await self._pause_cron_job(cap, refused)
                break
        if refused is None:
            return
        self._alert(spending)  # a cap set over spend already past a threshold: announced at its first refusal
        self._bump("budget_exceeded")
        await self._commit()
        self.host.incr_counter("llm_budget_exceeded_total", scope=str(refused.details["scope"]))
        raise refused

    async def _pause_cron_job(self, cap: Cap, refused: ActorError) -> None:
        """A cron job at its cap is paused with the reason, to resume when the period rolls over (the
        scheduler does that; a pause or resume by a person overrides it)."""
        resets = spend.period_end(cap.period, cap.time_zone, self.host.now())
        marker = f"{cap.key}@{resets}"
        if marker in self._paused or not self.host.has_actor("cron_scheduler"):
            return
        ctx = current_context()
        system = RequestContext(
            tenant=ctx.tenant, namespace=ctx.namespace, principal="llm_gateway", roles=frozenset({"system"})
        )
        token = set_context(system)
        try:
            await self.host.ask(
                "cron_scheduler",
                "budget_pause",
                {"job_id": cap.key, "reason": refused.message, "resume_at": resets},
            )
            self._paused.add(marker)
        except ActorError as e:  # the refusal stands either way; the next refused run asks again
            self.host.log.warning("llm_gateway: pausing cron job %s failed: %s", cap.key, e.message)
        finally:
            reset_context(token)

    def _alert(self, spending: _Spending) -> None:
        """Soft thresholds: an audit event once per cap, period and threshold, kept on the period's bucket."""
        for cap, bucket_name in spending.caps:
            if not cap.alerts:
                continue
            bucket = self._ledger.cached(bucket_name)
            if bucket is None:
                continue
            share = spend.used_share(cap, self._amounts(cap, bucket_name, bucket))
            sent = bucket.setdefault("alerts", {}).setdefault(cap.cap_id, [])
            for threshold in spend.crossed(cap, share, sent):
                sent.append(threshold)
                self._ledger.touch(bucket_name)
                self.host.incr_counter("llm_budget_alerts_total", scope=cap.scope)
                self._audit(
                    "budget_alert",
                    f"{cap.who()} used {threshold:g}% of the {cap.period} budget",
                    {
                        "scope": cap.scope,
                        "key": cap.key,
                        "period": cap.period,
                        "time_zone": cap.time_zone,
                        "threshold": threshold,
                        "percent": round(share, 2),
                        "label": spend.period_label(cap.period, cap.time_zone, spending.now),
                        "max_usd": cap.max_usd,
                        "max_tokens": cap.max_tokens,
                    },
                )

    def _announce(self, name: str, change: str | None, reason: str = "") -> None:
        if change is None:
            return
        circuit = self.circuits[name]
        self.host.incr_counter("llm_circuit_transitions_total", provider=name, state=change)
        self.host.set_gauge("llm_circuit_open", 1.0 if change == policy.OPEN else 0.0, provider=name)
        self.host.log.info("llm_gateway: circuit of %s is now %s", name, change)
        self._audit(
            "circuit_changed",
            f"circuit of provider {name} is {change}" + (f" ({reason})" if reason else ""),
            {"provider": name, "state": change, "last_error": circuit["last_error"]},
        )

    def _audit(self, event_type: str, detail: str, data: dict[str, Any], session_id: str = "") -> None:
        # Best effort: an app without an audit trail has none, and an audit failure never fails an LLM call.
        fire_audit(self.host, event_type, detail, session_id=session_id, data=data)

    # -- provider clients -------------------------------------------------------------------------------

    def _fingerprint(self, name: str, entry: dict[str, Any]) -> str:
        """What the cached client was built from: the registration and its credential's version."""
        token = entry["credential"]
        version = self.credentials.get(token, {}).get("version", 0) if token else 0
        cached = self._fingerprints.get(name)
        # Entries are replaced, never edited, so the same object with the same version means no change.
        if cached is not None and cached[0] is entry and cached[1] == version:
            return cached[2]
        fingerprint = json.dumps([entry, version], sort_keys=True)
        self._fingerprints[name] = (entry, version, fingerprint)
        return fingerprint

    async def _build_provider(self, name: str, entry: dict[str, Any]) -> Provider:
        if policy.missing_credential(entry):
            self.host.log.warning("llm_gateway: provider %s has no credential; register one", name)
            raise policy.BuildFailed(ErrorKind.AUTH)
        api_key = None
        if entry["credential"]:
            api_key = await self._vault.resolve(entry["credential"])
            if api_key is None:
                self.host.log.warning(
                    "llm_gateway: the credential of %s is missing or does not decrypt", name
                )
                raise policy.BuildFailed(ErrorKind.AUTH)
        refused = await self._egress_refusal(name, entry)
        if refused is not None:
            self.host.log.warning("llm_gateway: %s", refused)
            raise policy.BuildFailed("misconfigured")
        config = ProviderConfig(
            model=entry["model"],
            base_url=entry["base_url"] or None,
            api_key=api_key,
            timeout=entry["timeout"],
            name=name,
            options=entry["options"],
            egress=None if self._egress.allow_all else self._egress,
        )
        try:
            await policy.import_adapter(entry["kind"])
            return create_provider(entry["kind"], config)
        except (UnknownProviderError, ValueError, TypeError, ImportError) as exc:
            # The type only: a constructor's message may quote its config.
            self.host.log.warning("llm_gateway: cannot build provider %s (%s)", name, type(exc).__name__)
        raise policy.BuildFailed("misconfigured")

    async def _egress_refusal(self, name: str, entry: dict[str, Any]) -> str | None:
        """Why the registration's ``base_url`` may not be reached now (a registration older than the
        operator's setting, a name that resolves elsewhere since), or None. The adapters' transports check
        every connection too; this names the setting where a person reads it."""
        if not entry["base_url"] or self._egress.allow_all:
            return None
        try:
            await egress.check_url(entry["base_url"], self._egress, op=f"provider {name}", field="base_url")
        except PermissionDenied as refused:
            return refused.message
        return None

    # -- recovery ticks ---------------------------------------------------------------------------------

    def _arm_tick(self) -> None:
        if self._tick_timer:
            self.host.cancel_timer(self._tick_timer)
        self._tick_token = uuid.uuid4().hex
        interval = self._settings.tick_interval
        self._tick_due = self._clock.monotonic() + interval
        self._tick_timer = self.host.send_after(interval, "timer_tick", {"timer": self._tick_token})

    @cast(access="admin")
    def timer_tick(self, timer: str = "") -> None:
        """Circuit recovery: each tick lowers every open circuit's failure count; at zero it goes half_open.
        Sent by the gateway's own timer; an admin may also send one by hand to speed recovery up."""
        if timer and timer == self._tick_token:
            # Our own timer (the token proves it, whatever context re-armed it); only it re-arms, so
            # ticks sent by hand never multiply the timers.
            self._arm_tick()
        else:
            _require(ADMIN_ROLES, "timer_tick")
        for name, data in self.circuits.items():
            self._announce(name, Circuit.from_dict(data).tick(), reason="recovery tick")

    # -- administration ---------------------------------------------------------------------------------

    @call(access="admin")
    async def register_provider(
        self,
        name: str,
        kind: str,
        model: str,
        base_url: str = "",
        credential: str = "",
        timeout: float = 60,
        options: dict[str, Any] | None = None,
        pricing: dict[str, Any] | None = None,
        slow_call_seconds: float = 0,
        test: bool = False,
    ) -> dict[str, Any] | Deferred:
        """Add or replace a provider. ``credential`` is a phantom token from ``register_credential``.
        With ``test``, the reply also carries ``test``: what ``test_provider`` answers for it. A ``base_url``
        that is, or resolves to, an internal address this node does not allow is ``permission_denied``."""
        _require(ADMIN_ROLES, "register_provider")
        policy.check_name(name, "name")
        if credential:
            check_phantom_token(credential, field="credential")
            if credential not in self.credentials:
                # Not echoed: a real key pasted here by mistake must not come back in the error.
                raise NotFound(
                    "credential is not registered; call register_credential first", field="credential"
                )
        entry = policy.provider_entry(
            kind=kind,
            model=model,
            base_url=base_url,
            credential=credential,
            timeout=timeout,
            options=options or {},
            pricing=pricing or {},
            slow_call_seconds=slow_call_seconds,
        )
        if base_url:  # before any state changes: nothing awaits after this
            await egress.check_url(base_url, self._egress, op="register_provider", field="base_url")
        replaced = name in self.providers
        self.providers[name] = typing.cast(
            "dict[str, Any]", entry
        )  # state is plain JSON (restored unchecked)
        # A new registration (new URL, key, model) is judged afresh, not by the old one's failures.
        self.circuits.pop(name, None)
        self._pool.retire(name)
        self._audit(
            "provider_registered",
            f"provider {name} ({kind}) registered",
            {"provider": name, "kind": kind, "model": model, "replaced": replaced},
        )
        reply = {"status": "ok", "provider": name, "kind": kind, "model": model, "replaced": replaced}
        if not test:
            return reply
        return Deferred(self.host.spawn(self._tested(reply, name, dict(entry), "", nested=True)))

    @call(access="admin")
    def switch_provider(self, provider: str, model: str = "", session_id: str = "") -> dict[str, Any]:
        """Hot swap for the tenant, or only for ``session_id`` (``provider=""`` drops the session's override).
        A provider no call could be sent to (no credential where its kind needs one, no model) is refused
        with ``provider_not_configured`` (409) naming the fix."""
        if session_id:
            _require(SESSION_ROLES, "switch_provider")
            previous = self.session_overrides.get(session_id) or self.active
            if provider:
                self._usable(provider, model)
                self.session_overrides[session_id] = {"provider": provider, "model": model}
            else:
                self.session_overrides.pop(session_id, None)
            now = self.session_overrides.get(session_id) or self.active
            scope = "session"
        else:
            _require(ADMIN_ROLES, "switch_provider")
            self._usable(provider, model)
            previous = dict(self.active)
            now = self.active = {"provider": provider, "model": model}
            if previous["provider"] != provider:
                self._pool.retire(previous["provider"])  # release its connections; rebuilt if used again
            scope = "tenant"
        self._audit(
            "provider_switched",
            f"{scope} provider switched from {previous['provider']} to {now['provider']}",
            {"scope": scope, "from": previous, "to": now},
            session_id=session_id,
        )
        return {
            "status": "ok",
            "scope": scope,
            "session_id": session_id,
            "provider": now["provider"],
            "model": now["model"] or self.providers[now["provider"]]["model"],
            "previous": previous,
        }

    @call(access="admin")
    def set_failover(self, chain: list[str]) -> dict[str, Any]:
        """Providers tried, in order, after the active one (or the session's)."""
        _require(ADMIN_ROLES, "set_failover")
        for name in chain:
            self._known(name)
        if len(set(chain)) != len(chain):
            raise InvalidArgument("chain names a provider twice", field="chain")
        previous, self.failover = self.failover, list(chain)
        self._audit("failover_set", "failover chain set", {"from": previous, "to": self.failover})
        return {"status": "ok", "chain": self.failover}

    @call(access="admin")
    def test_provider(self, provider: str, model: str = "") -> Deferred:
        """Test the connection: one tiny real completion (a few tokens) to ``provider`` (with ``model``, else
        its registered one). Replies ``{ok, provider, model, latency_ms, error?}``; ``error`` is
        ``{kind, message, hint, status_code?}`` with ``kind`` one of no_credential, misconfigured, auth,
        unreachable, server_error, not_found, bad_request, rate_limited, timeout, bad_response. The key
        never appears; circuits and usage are not touched (a test is not traffic)."""
        _require(ADMIN_ROLES, "test_provider")
        self._known(provider)
        reply = {"status": "ok", "provider": provider}
        entry = dict(self.providers[provider])
        return Deferred(self.host.spawn(self._tested(reply, provider, entry, model)))

    async def _tested(
        self, reply: dict[str, Any], name: str, entry: dict[str, Any], model: str, nested: bool = False
    ) -> dict[str, Any]:
        result = await self._probe(name, entry, model or entry["model"])
        error = result.get("error")
        self._audit(
            "provider_tested",
            f"provider {name} tested: " + (f"failed ({error['kind']})" if error else "ok"),
            {"provider": name, "ok": result["ok"], "error": error["kind"] if error else None},
        )
        return {**reply, "test": result} if nested else {**reply, **result}

    async def _probe(self, name: str, entry: dict[str, Any], model: str) -> dict[str, Any]:
        """One probe completion on a client of its own (the pooled one stays with the traffic)."""
        out: dict[str, Any] = {"ok": False, "model": model, "latency_ms": None}
        unusable = policy.unusable(name, entry, model, self.credentials)
        if unusable is not None:
            return {**out, "error": connection.failure(*unusable)}
        refused = await self._egress_refusal(name, entry)
        if refused is not None:
            return {**out, "error": connection.failure("misconfigured", refused)}
        try:
            client = await self._build_provider(name, entry)
        except policy.BuildFailed as failed:
            kind = "no_credential" if failed.kind == "auth" else "misconfigured"
            return {**out, "error": connection.failure(kind, f"provider {name!r}: cannot build a client")}
        clock = self._clock
        try:
            started = clock.monotonic()
            timeout = min(float(entry["timeout"]), connection.PROBE_TIMEOUT)
            result = await policy.call_with_timeout(client, connection.probe_request(model), timeout, clock)
            latency_ms = round((clock.monotonic() - started) * 1000, 1)
        except LLMInternalError as bug:
            self.host.log.warning("llm_gateway: testing %s: %s", name, bug.message)
            return {**out, "error": connection.failure("bad_response", "the provider failed unexpectedly")}
        finally:
            secret = client.config.secret()
            with contextlib.suppress(Exception):  # a client that fails to close has answered already
                await client.aclose()
        out["latency_ms"] = latency_ms
        if isinstance(result, Completion):
            return {**out, "ok": True, "model": result.model or model}
        return {**out, "error": connection.classify(result, secret)}

    @call(access="admin")
    def detect_local(self) -> dict[str, Any] | Deferred:
        """A local Ollama to offer while the offline model answers (an offer, never a silent switch):
        ``{ollama: {url, models, registration}}`` when one answers at ``ollama_url`` with its models
        (``registration``: ``register_provider``'s arguments for its first model, then ``switch_provider``
        with its name), else ``{ollama: null, reason}``. Nothing is registered or switched here. The address
        goes through this node's egress rules as a provider's ``base_url`` does: where tenants may not reach
        it, nothing is asked (``reason`` says so)."""
        _require(ADMIN_ROLES, "detect_local")
        entry = self.providers.get(self.active["provider"]) or {}
        if entry.get("kind", self.active["provider"]) != policy.OFFLINE_KIND:
            return {"status": "ok", "ollama": None, "reason": "a real model is the active provider"}
        return Deferred(self.host.spawn(self._detected()))

    async def _detected(self) -> dict[str, Any]:
        found = await local.detect_ollama(self._ollama_url, self._egress)
        if not found.models:
            reason = found.reason or f"the Ollama at {found.url} has no models (ollama pull <model>)"
            return {"status": "ok", "ollama": None, "reason": reason, "url": found.url}
        offer = local.registration(found.url, found.models[0], self.providers)
        return {
            "status": "ok",
            "ollama": {"url": found.url, "models": found.models, "registration": offer},
        }

    @call(access="admin")
    async def register_credential(self, phantom_token: str, api_key: str) -> dict[str, Any]:
        """Store an API key, encrypted, under a phantom token. The key is never echoed, logged or audited."""
        _require(ADMIN_ROLES, "register_credential")
        check_phantom_token(phantom_token)
        check_api_key(api_key)
        await self._vault.put(phantom_token, api_key)
        previous = self.credentials.get(phantom_token)
        # A new version changes the fingerprint of every provider using the token: rebuilt on next use.
        self.credentials[phantom_token] = {
            "version": (previous["version"] + 1) if previous else 1,
            "registered_at": self.host.now(),
        }
        self._audit(
            "credential_registered",
            f"credential {phantom_token} registered",
            {"phantom_token": phantom_token, "replaced": previous is not None},
        )
        return {"status": "ok", "phantom_token": phantom_token, "replaced": previous is not None}

    @call(name="__resolve_credential")
    async def resolve_credential(self, phantom_token: str) -> dict[str, Any]:
        """The secret behind a phantom token, for another actor of the node that connects with it (the
        platform gateway's bot tokens and signing secrets). ``system`` only: a ``__`` op is in no HTTP
        catalog, and no credential grants ``system``. The secret is returned, never logged or audited."""
        if "system" not in current_context().roles:
            raise PermissionDenied("__resolve_credential is for the runtime's own actors", op="resolve")
        check_phantom_token(phantom_token)
        secret = await self._vault.resolve(phantom_token) if phantom_token in self.credentials else None
        if secret is None:
            raise NotFound(f"credential {phantom_token} is not registered", phantom_token=phantom_token)
        return {"status": "ok", "secret": secret.get_secret_value()}

    @call(access="admin")
    async def set_budget(
        self,
        scope: BudgetScope,
        key: str,
        max_tokens: int | None = None,
        max_usd: float | None = None,
        period: Period = "total",
        time_zone: str = "UTC",
        alerts: list[float] | None = None,
    ) -> dict[str, Any]:
        """Cap tokens (input + output) and/or money (USD, priced by the price table) for the tenant or one
        user / session / cron job / kanban worker (``"*"``: each one), per ``period`` (``day``, ``month`` in
        ``time_zone``, or ``total``). ``alerts``: soft thresholds in percent (default 50, 80, 100), each an
        audit event once per period. Neither limit given removes the cap of that period. A call that would
        cross a cap is refused before it is sent (``budget_exceeded``). Admins only."""
        _require(ADMIN_ROLES, "set_budget")
        if scope == "tenant":
            key = ""
        elif not key:
            raise InvalidArgument(f"a {scope} budget needs a key ('*' for every {scope})", field="key")
        _check_usage_keys("set_budget", key=key)
        if scope == "kanban_worker" and key not in ("*", spend.KANBAN_WORKER):
            raise InvalidArgument(
                f"the kanban worker's key is {spend.KANBAN_WORKER!r}",
                field="key",
            )
        entry = spend.cap_entry(max_tokens, max_usd, period, time_zone, alerts)
        now = self.host.now()
        if scope == "tenant" and period == "total":
            used = dict(self.usage)
        elif key == "*":
            used = None
        else:
            used = dict(
                await self._ledger.get_named(f"{scope}/{key}{spend.bucket_suffix(period, time_zone, now)}")
            )
        per_scope = self.budgets.get(scope, {})
        periods = spend.entries_of(per_scope.get(key))
        if max_tokens is None and max_usd is None:
            periods.pop(period, None)
        else:
            periods[period] = entry
        if periods:
            self.budgets.setdefault(scope, {})[key] = periods
        else:
            per_scope.pop(key, None)
            if not per_scope:
                self.budgets.pop(scope, None)
        removed = max_tokens is None and max_usd is None
        self._audit(
            "budget_set",
            f"{scope} budget {'removed' if removed else 'set'} ({period})",
            {"scope": scope, "key": key, **entry, "removed": removed},
        )
        resets = spend.period_end(period, time_zone, now)
        return {
            "status": "ok",
            "scope": scope,
            "key": key,
            **entry,
            "used": None if used is None else int(used["total_tokens"]),
            "used_usd": None if used is None else float(used["cost_usd"]),
            "resets_at": resets,
        }

    @call(access="read")
    async def get_usage(
        self, scope: str = "", key: str = "", period: Period = "day", limit: int = 31
    ) -> dict[str, Any]:
        """Spend per scope and period: ``current`` (this period: calls, tokens, USD, calls of unknown price,
        ``models``), ``history`` (the last ``limit`` days or months, newest first; ``total``: the lifetime),
        and ``caps`` (each cap over this scope and key: its limits, what is used, percent, ``resets_at``,
        the thresholds announced). A user sees their own usage only (scope ``user``, their own name, the
        default for them); admins any scope (default the tenant)."""
        ctx = current_context()
        admin = bool(ctx.roles & ADMIN_ROLES)
        scope = scope or ("tenant" if admin else "user")
        if scope not in spend.SCOPES:
            raise InvalidArgument(f"scope must be one of {', '.join(spend.SCOPES)}", field="scope")
        if period not in spend.PERIODS:
            raise InvalidArgument(f"period must be one of {', '.join(spend.PERIODS)}", field="period")
        if not 1 <= limit <= MAX_USAGE_PERIODS:
            raise InvalidArgument(f"limit must be within 1..{MAX_USAGE_PERIODS}", field="limit")
        if scope == "tenant":
            key = ""
        elif scope == "user" and not key and not admin:
            key = ctx.principal
        elif scope == "kanban_worker" and not key:
            key = spend.KANBAN_WORKER
        _check_usage_keys("get_usage", key=key)
        if not admin and not (scope == "user" and key == ctx.principal):
            raise PermissionDenied(
                "get_usage: a user sees their own usage only (scope user, their own name)",
                op="get_usage",
                field="scope",
            )
        if scope != "tenant" and not key:
            raise InvalidArgument(f"get_usage: a {scope} needs a key", field="key")
        now = self.host.now()
        base = f"{scope}/{key}"
        if period == "total":
            lifetime = dict(self.usage) if scope == "tenant" else dict(await self._ledger.get_named(base))
            history = [{"label": "total", **_usage_view(lifetime)}]
        else:
            found = await self._ledger.list_named(f"{base}@{period}:", self.host.kv.list)
            rows = sorted(
                ((name.split(":", 1)[1], bucket) for name, bucket in found.items() if "~" not in name),
                reverse=True,
            )[:limit]
            history = [{"label": label, **_usage_view(bucket)} for label, bucket in rows]
        label = spend.period_label(period, "UTC", now)
        current = next((h for h in history if h["label"] == label), {"label": label, **_usage_view({})})
        caps = []
        for cap in spend.caps_for(self.budgets, scope, key) if key != "*" else []:
            name = f"{base}{spend.bucket_suffix(cap.period, cap.time_zone, now)}"
            bucket = await self._ledger.get_named(name)
            amounts = self._amounts(cap, name, bucket)
            caps.append(
                {
                    "period": cap.period,
                    "time_zone": cap.time_zone,
                    "rule": cap.rule,
                    "max_tokens": cap.max_tokens,
                    "max_usd": cap.max_usd,
                    "alerts": list(cap.alerts),
                    "label": spend.period_label(cap.period, cap.time_zone, now),
                    "used_tokens": int(amounts.get("total_tokens") or 0),
                    "used_usd": round(float(amounts.get("cost_usd") or 0.0), 9),
                    "percent": round(spend.used_share(cap, amounts), 2),
                    "alerts_sent": list((bucket.get("alerts") or {}).get(cap.cap_id, [])),
                    "resets_at": spend.period_end(cap.period, cap.time_zone, now),
                }
            )
        return {
            "status": "ok",
            "scope": scope,
            "key": key,
            "period": period,
            "time_zone": "UTC",
            "now": now,
            "current": current,
            "history": history,
            "caps": caps,
        }

    # -- inspection -------------------------------------------------------------------------------------

    @call(access="read")
    async def get_stats(self, session_id: str = "", user_id: str = "", cron_job: str = "") -> dict[str, Any]:
        """Usage (tenant, and the given user/session/cron job), per-provider stats and circuits."""
        _check_usage_keys("get_stats", session_id=session_id, user_id=user_id, cron_job=cron_job)
        usage_by = {
            scope: dict(await self._ledger.get(scope, key))
            for scope, key in Caller(user_id, session_id, cron_job).keys()
        }
        return {
            "status": "ok",
            "active": dict(self.active),
            "failover": list(self.failover),
            "usage": dict(self.usage),
            "usage_by": usage_by,
            "providers": {name: policy.stats_view(stats) for name, stats in self.provider_stats.items()},
            "circuits": self._circuit_views(),
            "budgets": {scope: dict(keys) for scope, keys in self.budgets.items()},
            "counters": dict(self.counters),
            "session_overrides": len(self.session_overrides),
        }

    @call(access="read")
    def get_circuit(self, provider: str = "") -> dict[str, Any]:
        """One provider's circuit (flat), or every registered provider's under ``circuits``."""
        if provider:
            self._known(provider)
            return {"status": "ok", "provider": provider, **self._circuit_views()[provider]}
        return {"status": "ok", "circuits": self._circuit_views()}

    @call(access="read")
    def list_providers(self) -> dict[str, Any]:
        """Registered providers (credentials as their phantom tokens), the active one and the chain."""
        views = self._circuit_views()
        return {
            "status": "ok",
            "providers": [
                {
                    "name": name,
                    **entry,
                    "active": name == self.active["provider"],
                    "circuit": views[name]["state"],
                }
                for name, entry in sorted(self.providers.items())
            ],
            "active": dict(self.active),
            "failover": list(self.failover),
        }

    def _circuit_views(self) -> dict[str, dict[str, Any]]:
        return {
            name: Circuit.from_dict(self.circuits.get(name) or Circuit().to_dict()).view()
            for name in sorted(self.providers)
        }

    def _known(self, provider: str) -> None:
        if provider in self.providers:
            return
        known = sorted(self.providers)
        close = difflib.get_close_matches(provider, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise NotFound(
            f"unknown provider {provider!r}{hint} Known providers: {', '.join(known)}",
            provider=provider,
            known=known,
        )

    def _usable(self, provider: str, model: str) -> None:
        """``_known``, and refused (409 ``provider_not_configured``) when no call to it could be sent."""
        self._known(provider)
        unusable = policy.unusable(provider, self.providers[provider], model, self.credentials)
        if unusable is not None:
            raise Conflict(
                f"cannot switch to provider {provider!r}: {unusable[1]}",
                code="provider_not_configured",
                provider=provider,
                reason=unusable[0],
            )


@dataclass(slots=True)
class _Spending:
    """One completion's spend plan: the caps over it (each with the bucket its period reads) and every
    bucket it counts into; ``est_tokens``, the prompt's estimate, made once when a cap needs it."""

    caller: Caller
    now: float
    caps: list[tuple[Cap, str]]
    counted: list[str]
    est_tokens: int | None = None


def _usage_view(bucket: dict[str, Any]) -> dict[str, Any]:
    """A usage bucket as ``get_usage`` shows it."""
    return {
        "calls": int(bucket.get("calls") or 0),
        "input_tokens": int(bucket.get("input_tokens") or 0),
        "output_tokens": int(bucket.get("output_tokens") or 0),
        "total_tokens": int(bucket.get("total_tokens") or 0),
        "cost_usd": round(float(bucket.get("cost_usd") or 0.0), 9),
        "unknown_cost_calls": int(bucket.get("unknown_cost_calls") or 0),
        "models": {name: dict(row) for name, row in sorted((bucket.get("models") or {}).items())},
    }


def _require(roles: frozenset[str], op: str) -> None:
    if not current_context().roles & roles:
        raise PermissionDenied(f"{op} needs one of the roles: {', '.join(sorted(roles))}", op=op)


MAX_USAGE_KEY = 256


def _check_usage_keys(op: str, **keys: str) -> None:
    """Users, sessions and cron jobs usage is counted for name KV keys: printable, at most 256 characters
    (a NUL or an overlong one reached the store's own checks, a crash and a 500)."""
    for field, key in keys.items():
        if len(key) > MAX_USAGE_KEY or not key.isprintable():
            raise InvalidArgument(
                f"{op}: {field} must be at most {MAX_USAGE_KEY} printable characters", op=op, field=field
            )
