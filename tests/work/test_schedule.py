"""Schedule parsing: every accepted form, time zones, and a structured error naming the schedule."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from minihermes.runtime import InvalidArgument
from minihermes.work.schedule import parse_schedule

T0 = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("every_1m", 60),
        ("every_5m", 300),
        ("every_1h", 3600),
        ("every_24h", 86400),
        ("every 2h", 7200),
        ("30m", 1800),
        ("every 90 s", 90),
        ("EVERY_2D", 172800),
    ],
)
def test_intervals(text, seconds):
    s = parse_schedule(text)
    assert s.kind == "interval" and s.interval == seconds
    assert s.first_fire(T0) == T0 + seconds
    assert s.following(T0, T0 + 0.5) == T0 + seconds


def test_a_cron_expression_fires_in_its_time_zone():
    s = parse_schedule("0 9 * * *", tz="Europe/Paris")
    start = datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("UTC")).timestamp()
    nxt = s.first_fire(start)
    assert datetime.fromtimestamp(nxt, ZoneInfo("Europe/Paris")).strftime("%m-%d %H:%M") == "07-02 09:00"
    utc = parse_schedule("0 9 * * *").first_fire(start)
    assert utc - nxt == 2 * 3600  # Paris is UTC+2 in July


def test_a_one_shot_iso_time():
    s = parse_schedule("2027-01-01T10:00:00Z")
    assert (
        s.kind == "once" and s.first_fire(T0) == datetime(2027, 1, 1, 10, tzinfo=ZoneInfo("UTC")).timestamp()
    )
    assert s.following(s.at, s.at + 10) is None and s.advance(s.at, s.at + 1000) == []
    naive = parse_schedule("2027-01-01 10:00", tz="Asia/Tokyo")
    assert naive.at == datetime(2027, 1, 1, 10, tzinfo=ZoneInfo("Asia/Tokyo")).timestamp()


def test_missed_fires_after_downtime_are_listed_and_the_next_is_on_the_grid():
    s = parse_schedule("every_1m")
    assert s.advance(T0, T0 + 185) == [T0 + 60, T0 + 120, T0 + 180]
    assert s.following(T0, T0 + 185) == T0 + 240
    c = parse_schedule("*/15 * * * *")
    fired = 1_800_000_000.0 - (1_800_000_000 % 900)
    assert c.advance(fired, fired + 3600) == [fired + 900 * k for k in range(1, 5)]


@pytest.mark.parametrize(
    "text", ["", "every_0m", "sometimes", "61 * * * *", "every 2 weeks", "2026-13-40T00:00"]
)
def test_invalid_schedules_are_structured_errors_naming_them(text):
    with pytest.raises(InvalidArgument) as e:
        parse_schedule(text)
    assert e.value.details["field"] == "schedule"
    assert text in e.value.message or not text


def test_an_unknown_time_zone_is_named():
    with pytest.raises(InvalidArgument) as e:
        parse_schedule("every_1m", tz="Mars/Olympus")
    assert e.value.details["field"] == "tz"
