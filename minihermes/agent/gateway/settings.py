"""``GatewaySettings``: the gateway's tunables (breaker thresholds, retries, backoff, flushing), from the
actor spec's args. A pydantic model declares each field's type and bounds; ``from_args`` turns what it
rejects into the ``ConfigError`` that fails the actor's start-up, naming the setting."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from minihermes.runtime import ConfigError

_WHERE = "llm_gateway.args"
_BOUNDS = {"greater_than": "must be > 0", "greater_than_equal": "must be >= 0"}


class GatewaySettings(BaseModel):
    """Tunables, from the actor spec's args (all optional). Bad values fail the actor's start-up."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    failure_threshold: int = Field(default=3, gt=0)
    """Consecutive failed calls that open a provider's circuit; also the recovery ticks it then needs."""
    error_rate_threshold: float = Field(default=0.5, gt=0, le=1)
    """The circuit also opens when the failure share of the last ``error_window`` calls exceeds this..."""
    error_window: int = Field(default=20, gt=0)
    min_samples: int = Field(default=5, gt=0)
    """...once the window holds at least this many calls."""
    tick_interval: float = Field(default=10.0, gt=0)
    """Seconds between recovery ticks (each lowers an open circuit's failure count by one)."""
    max_retries: int = Field(default=2, ge=0)
    """Further attempts on the same provider after a transient failure, before failing over."""
    backoff_base: float = Field(default=0.5, ge=0)
    backoff_max: float = Field(default=8.0, ge=0)
    max_retry_wait: float = Field(default=30.0, ge=0)
    """A ``retry_after`` longer than this fails over at once instead of waiting."""
    slow_call_seconds: float = Field(default=20.0, gt=0)
    """Calls slower than this count as failures for the breaker (the answer is still returned)."""
    usage_flush_interval: float = Field(default=1.0, ge=0)
    """Seconds usage per user/session/cron job may wait before it is written (0: after every call)."""

    @field_validator("*", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        # JSON numbers only: no booleans, and no strings that pydantic would otherwise parse.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("not a number")
        return value

    @model_validator(mode="after")
    def _samples_fit_the_window(self) -> GatewaySettings:
        if self.min_samples > self.error_window:
            raise ValueError("must not exceed error_window")
        return self

    @classmethod
    def from_args(cls, args: Mapping[str, Any], *, extra: frozenset[str] = frozenset()) -> GatewaySettings:
        """The settings in ``args`` (keys in ``extra`` belong to someone else); ``ConfigError`` naming the
        first bad or unknown setting."""
        known = sorted(cls.model_fields)
        unknown = set(args) - set(known) - extra
        if unknown:
            raise ConfigError(_WHERE, f"unknown settings {sorted(unknown)}; known: {known}")
        try:
            return cls.model_validate({k: v for k, v in args.items() if k not in extra})
        except ValidationError as error:
            first = error.errors()[0]
        raise _config_error(first["loc"], first["type"])


def _config_error(loc: tuple[int | str, ...], kind: str) -> ConfigError:
    if not loc:  # the only check across fields
        return ConfigError(f"{_WHERE}.min_samples", "must not exceed error_window")
    name = str(loc[0])
    if name == "error_rate_threshold" and kind in ("greater_than", "less_than_equal"):
        return ConfigError(f"{_WHERE}.{name}", "must be in (0, 1]")
    if kind in _BOUNDS:
        return ConfigError(f"{_WHERE}.{name}", _BOUNDS[kind])
    integer = GatewaySettings.model_fields[name].annotation in (int, "int")
    return ConfigError(f"{_WHERE}.{name}", "must be an integer" if integer else "must be a number")
