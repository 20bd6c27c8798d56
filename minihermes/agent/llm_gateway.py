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
from typing import Any, Literal

from pydantic import ValidationInfo, field_validator

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
    Clock,
    ConfigError,
    Conflict,
    Deferred,
    GenServer,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    call,
    cast,
    current_context,
    state,
)

from . import gateway as policy
from .audit_event import fire_audit
from .credentials import CredentialVault, check_api_key, check_phantom_token
from .gateway import BudgetExceeded, Caller, Circuit, Failure, LLMInternalError, LLMUnavailable, local
from .gateway import probe as connection

__all__ = ["BudgetExceeded", "LLMGateway", "LLMInternalError", "LLMUnavailable"]

ADMIN_ROLES = frozenset({"admin", "system"})
SESSION_ROLES = ADMIN_ROLES | {"user"}
"""A user may pin their session to another registered provider; changing the tenant's needs an admin."""
DEFAULT_PROVIDER = policy.OFFLINE_KIND
_NOT_SETTINGS = frozenset({"credential_key", "allowed_egress", "ollama_url"})
"""The args that are not ``GatewaySettings`` fields."""
EGRESS_SETTING = (
    f"the llm_gateway arg allowed_egress (or {egress.ENV_VAR} for the whole node; docs/configuration.md)"
)

BudgetScope = Literal["tenant", "user", "session", "cron_job"]


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
    budgets: dict[str, dict[str, int]] = state(default_factory=dict)
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

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self._settings = policy.GatewaySettings.from_args(args, extra=_NOT_SETTINGS)
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
    ) -> Deferred:
        """One LLM completion over the neutral message shape; replies a ``CompletionReply``
        (``minihermes.llm.protocol``; docs/agent.md). With
        ``stream_topic``, text deltas are published on that topic as they arrive (``text_delta`` events)."""
        request = policy.completion_request(
            messages, tools or [], max_tokens, temperature, cache_prefix_messages
        )
        progress = self._stream_progress(stream_topic)
        _check_usage_keys("completion", session_id=session_id, user_id=user_id, cron_job=cron_job)
        caller = Caller(user_id or current_context().principal, session_id, cron_job)
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
        self._ledger.prefetch(caller.keys())
        await self._check_budgets(caller)
        failures: list[Failure] = []
        for name, model in route:
            outcome = await self._try_provider(name, model, request, caller, progress)
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
        caller: Caller,
        progress: policy.StreamProgress | None,
    ) -> CompletionReply | Failure:
        entry = self.providers.get(name)
        if entry is None:
            return Failure(name, "not_registered")
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
                return await self._attempts(name, entry, lease.provider, model, request, caller, progress)
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
        caller: Caller,
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
                return await self._settle_success(name, entry, result, elapsed, retries, caller)
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
        caller: Caller,
    ) -> CompletionReply:
        usage = completion.usage
        cost = policy.cost_of(usage, entry["pricing"])
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
        await self._ledger.add(caller.keys(), usage, cost)
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

    async def _check_budgets(self, caller: Caller) -> None:
        if not self.budgets:
            return
        usage: list[tuple[str, str, dict[str, Any]]] = [("tenant", "", self.usage)]
        for scope, key in caller.keys():
            if policy.budget_limit(self.budgets, scope, key) is not None:
                usage.append((scope, key, await self._ledger.get(scope, key)))
        spent = policy.spent_budget(self.budgets, usage)
        if spent is not None:
            self._bump("budget_exceeded")
            await self._commit()
            self.host.incr_counter("llm_budget_exceeded_total", scope=str(spent.details["scope"]))
            raise spent

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

    @call(access="admin")
    async def set_budget(self, scope: BudgetScope, key: str, max_tokens: int | None) -> dict[str, Any]:
        """Cap total tokens (input + output) for the tenant or one user/session/cron job (``"*"``: each one).
        ``max_tokens=None`` removes the budget. Calls are refused once usage reaches the cap."""
        _require(ADMIN_ROLES, "set_budget")
        if scope == "tenant":
            key = ""
        elif not key:
            raise InvalidArgument(f"a {scope} budget needs a key ('*' for every {scope})", field="key")
        _check_usage_keys("set_budget", key=key)
        if max_tokens is not None and max_tokens < 0:
            raise InvalidArgument("max_tokens must be >= 0 (null removes the budget)", field="max_tokens")
        if scope == "tenant" or key == "*":
            used = int(self.usage["total_tokens"]) if scope == "tenant" else None
        else:
            used = int((await self._ledger.get(scope, key))["total_tokens"])
        if max_tokens is None:
            self.budgets.get(scope, {}).pop(key, None)
            if not self.budgets.get(scope, True):
                del self.budgets[scope]
        else:
            self.budgets.setdefault(scope, {})[key] = max_tokens
        self._audit(
            "budget_set", f"{scope} budget set", {"scope": scope, "key": key, "max_tokens": max_tokens}
        )
        return {"status": "ok", "scope": scope, "key": key, "max_tokens": max_tokens, "used": used}

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
