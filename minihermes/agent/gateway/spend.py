"""Spend caps: budgets in tokens and in money, per period (``day``, ``month``, ``total``) in a time zone, with
soft alert thresholds; the price table a call's cost is estimated and counted with; and the refusal a call
that would cross a hard cap gets before it is sent.

A cap is kept in the gateway's state as ``budgets[scope][key][period]`` (a JSON object, ``cap_entry``); a
budget saved before periods existed (a bare token count) reads as the ``total`` cap it was. Usage per period
lives in the ``UsageLedger`` under the bucket name ``period_bucket`` gives: UTC days and months are always
counted (the usage page reads them), a cap in another time zone counts its own periods from when it is set.

Prices are USD per million tokens (``input``, ``output``, optional ``cached``, ``cache_write``). A call's
price is looked up in order: the price table's entry for the provider (its registered name, then its kind)
and the exact model; the registration's own ``pricing``; the table's ``"*"`` model for the provider. The
offline simulated model costs nothing. Any other call has an unknown price: it is counted as such
(``unknown_cost_calls``), and a call with a money cap over it is refused (``price_unknown``), never
assumed free.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import zoneinfo
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from minihermes.llm import CompletionRequest
from minihermes.runtime import ActorError, InvalidArgument

from .calls import BudgetExceeded
from .providers import OFFLINE_KIND, check_pricing

PERIODS = ("day", "month", "total")
DEFAULT_ALERTS = (50.0, 80.0, 100.0)
MAX_ALERTS = 10
SCOPES = ("tenant", "user", "session", "cron_job", "kanban_worker")
KANBAN_WORKER = "kanban_worker"
"""The key of the scope ``kanban_worker``: calls of the kanban worker's turns (the agent says so for a turn
whose session holds a card's claim; a session's name alone is not enough) are counted for it too."""
_WORD = {"day": "daily", "month": "monthly", "total": "total"}
PERIODIC_SCOPES = ("tenant", "user", "cron_job", "kanban_worker")
"""Scopes whose UTC days and months are always counted; sessions only when a periodic cap names them."""


class PriceUnknown(ActorError):
    """A money cap applies to a call whose provider and model have no price: refused, not assumed free."""

    code = "price_unknown"
    http_status = 409


@dataclass(frozen=True, slots=True)
class Cap:
    """One cap as it applies to one call: whose (``scope``, ``key``; ``rule`` the key it was set under,
    ``"*"`` for a default), its limits, period, time zone and soft thresholds (percent)."""

    scope: str
    key: str
    rule: str
    period: str
    time_zone: str
    max_tokens: int | None
    max_usd: float | None
    alerts: tuple[float, ...]

    @property
    def cap_id(self) -> str:
        return f"{self.scope}/{self.rule}/{self.period}/{self.time_zone}"

    def who(self) -> str:
        if self.scope == "tenant":
            return "the tenant"
        return f"{self.scope.replace('_', ' ')} {self.key}"


# -- caps ---------------------------------------------------------------------------------------------------


def check_time_zone(time_zone: str) -> str:
    try:
        if len(time_zone) > 64:  # no IANA name is this long; the lookup would fail on the path (OSError)
            raise ValueError(time_zone)
        zoneinfo.ZoneInfo(time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise InvalidArgument(
            f"unknown time zone {time_zone[:64]!r} (an IANA name such as 'UTC' or 'Europe/Paris')",
            field="time_zone",
        ) from None
    return time_zone


def cap_entry(
    max_tokens: int | None,
    max_usd: float | None,
    period: str,
    time_zone: str,
    alerts: Sequence[float] | None,
) -> dict[str, Any]:
    """Validate ``set_budget``'s limits into the JSON entry kept in state (``InvalidArgument`` naming the field)."""
    if period not in PERIODS:
        raise InvalidArgument(f"period must be one of {', '.join(PERIODS)}", field="period")
    check_time_zone(time_zone)
    if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 0):
        raise InvalidArgument("max_tokens must be >= 0 (null removes the budget)", field="max_tokens")
    if max_usd is not None and (
        isinstance(max_usd, bool) or not math.isfinite(max_usd) or not 0 <= max_usd < 1e9
    ):
        raise InvalidArgument("max_usd must be a number >= 0 (null: no money cap)", field="max_usd")
    thresholds = list(DEFAULT_ALERTS if alerts is None else alerts)
    if len(thresholds) > MAX_ALERTS:
        raise InvalidArgument(f"at most {MAX_ALERTS} alert thresholds", field="alerts")
    for value in thresholds:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 100:
            raise InvalidArgument("an alert threshold is a percent in (0, 100]", field="alerts")
    return {
        "max_tokens": max_tokens,
        "max_usd": None if max_usd is None else float(max_usd),
        "period": period,
        "time_zone": time_zone,
        "alerts": sorted({float(v) for v in thresholds}),
    }


def entries_of(value: Any) -> dict[str, dict[str, Any]]:
    """A key's caps by period; a budget saved as a bare token count is the ``total`` cap it was."""
    if isinstance(value, int):
        return {"total": cap_entry(value, None, "total", "UTC", ())}
    return dict(value) if isinstance(value, dict) else {}


def caps_for(budgets: Mapping[str, Mapping[str, Any]], scope: str, key: str) -> list[Cap]:
    """The caps that apply to (scope, key): the key's own periods, else (per period) the scope's ``"*"``."""
    per_scope = budgets.get(scope) or {}
    own = entries_of(per_scope.get(key)) if key in per_scope else {}
    default = entries_of(per_scope.get("*")) if scope != "tenant" else {}
    out = []
    for period in PERIODS:
        entry, rule = (own.get(period), key) if period in own else (default.get(period), "*")
        if entry is None:
            continue
        out.append(
            Cap(
                scope=scope,
                key=key,
                rule=rule,
                period=period,
                time_zone=str(entry.get("time_zone") or "UTC"),
                max_tokens=entry.get("max_tokens"),
                max_usd=entry.get("max_usd"),
                alerts=tuple(entry.get("alerts") or ()),
            )
        )
    return out


# -- periods ------------------------------------------------------------------------------------------------


def _zone(time_zone: str) -> dt.tzinfo:
    return dt.UTC if time_zone == "UTC" else zoneinfo.ZoneInfo(time_zone)


def period_label(period: str, time_zone: str, now: float) -> str:
    """``2026-11-27`` (day), ``2026-11`` (month) or ``total``, in ``time_zone``."""
    if period == "total":
        return "total"
    local = dt.datetime.fromtimestamp(now, _zone(time_zone))
    return local.strftime("%Y-%m-%d" if period == "day" else "%Y-%m")


def period_end(period: str, time_zone: str, now: float) -> float | None:
    """When the period holding ``now`` ends (the next one starts), or None for ``total``."""
    if period == "total":
        return None
    zone = _zone(time_zone)
    local = dt.datetime.fromtimestamp(now, zone)
    if period == "day":
        nxt = (local + dt.timedelta(days=1)).date()
    else:
        nxt = dt.date(local.year + local.month // 12, local.month % 12 + 1, 1)
    return dt.datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone).timestamp()


def when(ts: float, time_zone: str) -> str:
    """``2026-11-28 00:00 UTC``: a reset time as people read it, in the cap's zone."""
    return dt.datetime.fromtimestamp(ts, _zone(time_zone)).strftime("%Y-%m-%d %H:%M ") + time_zone


def bucket_suffix(period: str, time_zone: str, now: float) -> str:
    """The ledger bucket's suffix for (period, zone) at ``now``: ``""`` for the lifetime bucket."""
    if period == "total":
        return ""
    label = f"@{period}:{period_label(period, time_zone, now)}"
    return label if time_zone == "UTC" else f"{label}~{time_zone}"


_utc: list[Any] = [None, "", ""]
"""The UTC day and month suffixes of the current minute (a UTC day starts on a minute): every call counts
into them, and formatting dates costs more than the rest of the bookkeeping."""


def _utc_suffixes(now: float) -> tuple[str, str]:
    minute = int(now // 60)
    if _utc[0] != minute:
        _utc[:] = [minute, bucket_suffix("day", "UTC", now), bucket_suffix("month", "UTC", now)]
    return _utc[1], _utc[2]


def counted_suffixes(scope: str, caps: Iterable[Cap], now: float) -> list[str]:
    """Every bucket one call of (scope, key) counts into: lifetime, UTC day and month (sessions: only when
    capped per period), and each cap's own periods in another zone."""
    out = [""]
    if scope in PERIODIC_SCOPES:
        out += _utc_suffixes(now)
    for cap in caps:
        suffix = bucket_suffix(cap.period, cap.time_zone, now)
        if suffix not in out:
            out.append(suffix)
    return out


# -- prices -------------------------------------------------------------------------------------------------


def check_price_table(table: Any) -> dict[str, dict[str, dict[str, float]]]:
    """``{provider: {model: pricing}}`` (provider: a registered name or a kind; model ``"*"``: any);
    ``ValueError`` naming the entry."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ValueError("must be a table of providers, each a table of models to prices")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for provider, models in table.items():
        if not isinstance(models, dict):
            raise ValueError(f"{provider}: must be a table of models to prices")
        for model, pricing in models.items():
            if not isinstance(pricing, dict):
                raise ValueError(f"{provider}.{model}: must be a table of prices")
            try:
                out.setdefault(str(provider), {})[str(model)] = check_pricing(pricing)
            except InvalidArgument as e:
                raise ValueError(f"{provider}.{model}: {e.message}") from None
    return out


def price_of(
    table: Mapping[str, Mapping[str, Mapping[str, float]]],
    name: str,
    entry: Mapping[str, Any],
    model: str,
) -> dict[str, float] | None:
    """USD per million tokens for a call to provider ``name`` with ``model``; None when nobody said."""
    kind = str(entry.get("kind") or name)
    for provider in (name, kind):
        found = (table.get(provider) or {}).get(model)
        if found:
            return dict(found)
    if entry.get("pricing"):
        return dict(entry["pricing"])
    for provider in (name, kind):
        found = (table.get(provider) or {}).get("*")
        if found:
            return dict(found)
    if kind == OFFLINE_KIND:
        return {"input": 0.0, "output": 0.0}
    return None


def prompt_tokens(request: CompletionRequest) -> int:
    """The prompt's tokens before sending, about four characters each (messages, tool calls, tools)."""
    chars = 0
    for message in request.messages:
        chars += len(message.content)
        for call in message.tool_calls:
            chars += len(call.name) + len(json.dumps(call.input))
    if request.tools:
        chars += sum(
            len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) for t in request.tools
        )
    return (chars + 3) // 4


# -- checks -------------------------------------------------------------------------------------------------


def money(usd: float) -> str:
    """``$5.00``; amounts finer than cents with up to four decimals (``$0.005``, ``$0.0045``)."""
    if round(usd, 2) == usd or usd >= 100:
        return f"${usd:.2f}"
    return "$" + f"{usd:.4f}".rstrip("0")


def used_share(cap: Cap, bucket: Mapping[str, Any]) -> float:
    """How much of the cap is used, in percent (the larger of its money and token shares)."""
    shares = [0.0]
    if cap.max_usd is not None:
        used = float(bucket.get("cost_usd") or 0.0)
        shares.append(100.0 if cap.max_usd == 0 else 100.0 * used / cap.max_usd)
    if cap.max_tokens is not None:
        used_t = int(bucket.get("total_tokens") or 0)
        shares.append(100.0 if cap.max_tokens == 0 else 100.0 * used_t / cap.max_tokens)
    return max(shares)


def refusal(
    cap: Cap, bucket: Mapping[str, Any], est_tokens: int, est_usd: float | None, now: float
) -> BudgetExceeded | None:
    """The error for a call that would cross ``cap`` (or finds it spent), else None. ``est_usd`` None: the
    price is unknown (the caller refuses a money cap for that before asking here)."""
    legacy = cap.period == "total" and cap.max_usd is None
    used_t = int(bucket.get("total_tokens") or 0)
    if cap.max_tokens is not None and (used_t >= cap.max_tokens or used_t + est_tokens > cap.max_tokens):
        if legacy:  # the shape a total token budget has always had
            who = f"{cap.scope} {cap.key!r}" if cap.key else "the tenant"
            return BudgetExceeded(
                f"the token budget of {who} is spent ({used_t} of {cap.max_tokens} tokens)",
                scope=cap.scope,
                key=cap.key,
                used=used_t,
                limit=cap.max_tokens,
            )
        return _spent(cap, "tokens", used_t, cap.max_tokens, est_tokens, now)
    used_usd = float(bucket.get("cost_usd") or 0.0)
    if cap.max_usd is not None and (used_usd >= cap.max_usd or used_usd + (est_usd or 0.0) > cap.max_usd):
        return _spent(cap, "usd", used_usd, cap.max_usd, est_usd or 0.0, now)
    return None


def _spent(cap: Cap, unit: str, used: float, limit: float, estimate: float, now: float) -> BudgetExceeded:
    resets = period_end(cap.period, cap.time_zone, now)
    amount = money(limit) if unit == "usd" else f"{int(limit)} tokens"
    spent = money(used) if unit == "usd" else f"{int(used)} tokens"
    more = money(estimate) if unit == "usd" else f"{int(estimate)} tokens"
    why = f"{spent} used" if used >= limit else f"{spent} used, and this call would take about {more} more"
    tail = f"it resets at {when(resets, cap.time_zone)}" if resets is not None else "it does not reset"
    return BudgetExceeded(
        f"the {_WORD[cap.period]} budget of {amount} for {cap.who()} is spent ({why}); {tail}",
        scope=cap.scope,
        key=cap.key,
        used=round(used, 9) if unit == "usd" else int(used),
        limit=limit,
        unit=unit,
        period=cap.period,
        time_zone=cap.time_zone,
        estimate=round(estimate, 9) if unit == "usd" else int(estimate),
        resets_at=resets,
    )


def crossed(cap: Cap, share: float, sent: Sequence[float]) -> list[float]:
    """The cap's thresholds reached at ``share`` percent and not yet announced this period."""
    return [t for t in cap.alerts if share >= t and t not in sent]


def add_model(
    bucket: dict[str, Any], label: str, tokens_in: int, tokens_out: int, cost: float | None
) -> None:
    """Per-model counts in a period bucket (``models``: calls, tokens, USD, calls of unknown price)."""
    models = bucket.setdefault("models", {})
    row = models.get(label)
    if row is None:
        row = models[label] = {
            "calls": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
            "unknown_cost_calls": 0,
        }
    row["calls"] += 1
    row["input_tokens"] += tokens_in
    row["output_tokens"] += tokens_out
    if cost is None:
        row["unknown_cost_calls"] += 1
    else:
        row["cost_usd"] = round(row["cost_usd"] + cost, 9)
