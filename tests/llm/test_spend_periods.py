"""Spend caps' pieces without a node: periods in time zones, the price table's lookup order, the refusal."""

from __future__ import annotations

import datetime as dt

import pytest

from minihermes.agent.gateway import spend
from minihermes.runtime import InvalidArgument


def ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def test_periods_end_at_the_next_local_midnight_or_month() -> None:
    late = ts("2026-11-27T23:30:00+00:00")
    assert spend.period_label("day", "UTC", late) == "2026-11-27"
    assert spend.period_end("day", "UTC", late) == ts("2026-11-28T00:00:00+00:00")
    # 23:30 UTC is 18:30 in New York: its day ends at 05:00 UTC.
    assert spend.period_end("day", "America/New_York", late) == ts("2026-11-28T00:00:00-05:00")
    assert spend.period_label("day", "Asia/Tokyo", late) == "2026-11-28"
    december = ts("2026-12-31T12:00:00+00:00")
    assert spend.period_label("month", "UTC", december) == "2026-12"
    assert spend.period_end("month", "UTC", december) == ts("2027-01-01T00:00:00+00:00")
    assert spend.period_end("total", "UTC", december) is None
    assert spend.bucket_suffix("day", "UTC", late) == "@day:2026-11-27"
    assert spend.bucket_suffix("month", "Europe/Paris", late) == "@month:2026-11~Europe/Paris"
    assert spend.when(ts("2026-11-28T00:00:00+00:00"), "UTC") == "2026-11-28 00:00 UTC"


def test_the_price_table_lookup_order_and_unknown_prices() -> None:
    table = spend.check_price_table(
        {
            "openai": {"gpt-a": {"input": 1, "output": 2}, "*": {"input": 9, "output": 9}},
            "work": {"gpt-b": {"input": 3, "output": 4}},
        }
    )
    openai = {"kind": "openai", "pricing": {}}
    priced = {"kind": "openai", "pricing": {"input": 5.0, "output": 6.0}}
    assert spend.price_of(table, "openai", openai, "gpt-a") == {"input": 1.0, "output": 2.0}  # kind, model
    assert spend.price_of(table, "work", openai, "gpt-b") == {"input": 3.0, "output": 4.0}  # name, model
    assert spend.price_of(table, "work", priced, "gpt-c") == {"input": 5.0, "output": 6.0}  # registration
    assert spend.price_of(table, "work", openai, "gpt-c") == {"input": 9.0, "output": 9.0}  # the kind's "*"
    assert spend.price_of({}, "x", {"kind": "anthropic", "pricing": {}}, "m") is None  # unknown: not $0
    assert spend.price_of({}, "simulated", {"kind": "simulated", "pricing": {}}, "") == {
        "input": 0.0,
        "output": 0.0,
    }
    with pytest.raises(ValueError, match=r"openai\.gpt-a"):
        spend.check_price_table({"openai": {"gpt-a": {"input": 1}}})  # output missing


def test_a_refusal_names_the_cap_and_when_it_resets() -> None:
    now = ts("2026-11-27T15:00:00+00:00")
    cap = spend.Cap("user", "alice", "alice", "day", "UTC", None, 5.0, (50.0, 80.0, 100.0))
    assert spend.refusal(cap, {"cost_usd": 4.0, "total_tokens": 10}, 100, 0.5, now) is None
    crossing = spend.refusal(cap, {"cost_usd": 4.8, "total_tokens": 10}, 100, 0.5, now)
    assert crossing is not None and crossing.code == "budget_exceeded"
    assert crossing.message == (
        "the daily budget of $5.00 for user alice is spent ($4.80 used, and this call would take about $0.50 more);"
        " it resets at 2026-11-28 00:00 UTC"
    )
    spent = spend.refusal(cap, {"cost_usd": 5.0, "total_tokens": 10}, 0, 0.0, now)
    assert spent is not None and "($5.00 used); it resets at" in spent.message
    assert spend.crossed(cap, spend.used_share(cap, {"cost_usd": 4.2}), [50.0]) == [80.0]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((None, 1.0, "week", "UTC", None), "period"),
        ((None, 1.0, "day", "Nowhere/Else", None), "time_zone"),
        ((-1, None, "day", "UTC", None), "max_tokens"),
        ((None, float("nan"), "day", "UTC", None), "max_usd"),
        ((None, 1.0, "day", "UTC", [150]), "alerts"),
    ],
)
def test_bad_caps_name_their_field(args: tuple, field: str) -> None:
    with pytest.raises(InvalidArgument) as bad:
        spend.cap_entry(*args)
    assert bad.value.details["field"] == field
