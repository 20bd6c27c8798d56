"""The ``llm_gateway``'s mechanisms, kept apart from the actor (``agent/llm_gateway.py``): they own no
state of their own and send no messages.

- ``calls``: the gateway's errors, whom a call is counted for, why a provider failed, and the
  ``completion`` op's request and reply;
- ``settings``: ``GatewaySettings`` (breaker thresholds, retries, backoff), a pydantic model;
- ``providers``: registrations validated into the JSON entries kept in state, read with the facts each
  provider class declares (``minihermes.llm.Provider``);
- ``circuit``: ``Circuit``, the breaker per provider (closed -> open -> half_open -> closed) over its
  durable JSON object;
- ``retry``: one timed provider call, retry delays, and streaming progress;
- ``pool``: ``ProviderPool``, provider clients built lazily, shared, and closed once retired and idle;
- ``usage``: usage buckets, provider stats, costs, budgets, and ``UsageLedger`` (usage per user, session
  and cron job in the tenant's KV);
- ``spend``: spend caps (tokens and money, per day, month or in total, in a time zone, with soft alert
  thresholds), the price table, and the refusal of a call that would cross a cap.
"""

from .calls import (
    BudgetExceeded,
    Caller,
    Failure,
    LLMInternalError,
    LLMUnavailable,
    completion_reply,
    completion_request,
    unavailable,
)
from .circuit import CLOSED, HALF_OPEN, OPEN, Circuit
from .pool import BuildFailed, Lease, ProviderPool, import_adapter
from .providers import (
    MAX_TIMEOUT,
    OFFLINE_KIND,
    PRICE_FIELDS,
    check_name,
    check_pricing,
    declared,
    default_providers,
    missing_credential,
    needs_model,
    provider_entry,
    unusable,
)
from .retry import StreamProgress, call_with_timeout, redact, retry_delay, stream_completion
from .settings import GatewaySettings
from .spend import Cap, PriceUnknown
from .usage import (
    BUDGET_SCOPES,
    KVStore,
    UsageLedger,
    add_failure,
    add_success,
    add_usage,
    budget_limit,
    cost_of,
    empty_provider_stats,
    empty_usage,
    spent_budget,
    stats_view,
)

__all__ = [
    "BUDGET_SCOPES",
    "CLOSED",
    "HALF_OPEN",
    "MAX_TIMEOUT",
    "OFFLINE_KIND",
    "OPEN",
    "PRICE_FIELDS",
    "BudgetExceeded",
    "BuildFailed",
    "Caller",
    "Cap",
    "Circuit",
    "Failure",
    "GatewaySettings",
    "KVStore",
    "LLMInternalError",
    "LLMUnavailable",
    "Lease",
    "PriceUnknown",
    "ProviderPool",
    "StreamProgress",
    "UsageLedger",
    "add_failure",
    "add_success",
    "add_usage",
    "budget_limit",
    "call_with_timeout",
    "check_name",
    "check_pricing",
    "completion_reply",
    "completion_request",
    "cost_of",
    "declared",
    "default_providers",
    "empty_provider_stats",
    "empty_usage",
    "import_adapter",
    "missing_credential",
    "needs_model",
    "provider_entry",
    "redact",
    "retry_delay",
    "spent_budget",
    "stats_view",
    "stream_completion",
    "unavailable",
    "unusable",
]
