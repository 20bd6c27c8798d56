"""Telegram through python-telegram-bot against a fake Bot API on loopback: pairing, allow-lists, topics,
redelivery, rate limits, 429s and the bot token canary."""

from __future__ import annotations

import logging

import pytest

from .conftest import CANARY, ask, connect_telegram, counters, until
from .fakes import FakeTelegram

DANA = 111
STRANGER = 222


async def _usage(node) -> dict:
    return dict((await ask(node, "llm_gateway", "get_stats"))["usage"])


async def test_pairing_then_answered_as_linked_principal(app_node, telegram: FakeTelegram, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    node = await app_node()
    reply = await connect_telegram(node, telegram)
    assert reply == {"name": "tg", "status": "running"}
    before = await _usage(node)

    telegram.message(DANA, "hello, who are you?")
    await until(lambda: telegram.texts(DANA), what="the pairing code")
    [pairing_text] = telegram.texts(DANA)
    pending = (await ask(node, "platform_gateway", "list_pairings", {"name": "tg"}))["pairings"]
    assert len(pending) == 1 and pending[0]["platform_user_id"] == str(DANA)
    code = pending[0]["code"]
    assert code in pairing_text
    assert await _usage(node) == before  # no model call for a stranger

    telegram.message(DANA, "hello again?")  # a second message in the window: no second code
    await until(lambda: counters(node), what="stats")
    await until(lambda: _refused(node, 2), what="second refusal")
    assert telegram.texts(DANA) == [pairing_text]

    linked = await ask(
        node, "platform_gateway", "approve_pairing", {"code": code, "user_id": "dana", "roles": ["user"]}
    )
    assert linked["user_id"] == "dana" and linked["roles"] == ["user"]
    telegram.message(DANA, "What is 2 + 2?")
    await until(lambda: len(telegram.texts(DANA)) == 2, what="the agent's answer")
    answer = telegram.texts(DANA)[1]
    assert answer and "pairing" not in answer.lower()
    assert await _usage(node) != before  # the model answered this one

    sessions = (await ask(node, "session_manager", "list_sessions", {"channel": "telegram"}))["sessions"]
    assert [(s["channel"], s["user_id"], s["owner"] if "owner" in s else s["user_id"]) for s in sessions] == [
        ("telegram", "dana", "dana")
    ]

    # the canary: nowhere in replies, logs, the registry or errors
    listing = await ask(node, "platform_gateway", "list_platforms")
    shown = await ask(node, "platform_gateway", "get_platform", {"name": "tg"})
    events = await ask(node, "audit_event", "query_events", {"limit": 500})
    for text in (*telegram.texts(DANA), caplog.text, repr(listing), repr(shown), repr(events)):
        assert CANARY not in text


async def _refused(node, n: int) -> bool:
    return (await counters(node)).get("refused", 0) >= n


async def test_allow_list_strangers_get_nothing(app_node, telegram: FakeTelegram) -> None:
    node = await app_node()
    await connect_telegram(node, telegram, allowed_users=[str(DANA)])
    before = await _usage(node)
    telegram.message(STRANGER, "let me in")
    await until(lambda: _refused(node, 1), what="the refusal")
    telegram.message(DANA, "hi")  # on the list, not linked yet: a pairing code
    await until(lambda: telegram.texts(DANA), what="dana's code")
    assert telegram.texts(STRANGER) == []
    pending = (await ask(node, "platform_gateway", "list_pairings"))["pairings"]
    assert [p["platform_user_id"] for p in pending] == [str(DANA)]
    assert await _usage(node) == before


async def _linked(node, telegram: FakeTelegram, **extra) -> None:
    await connect_telegram(node, telegram, **extra)
    await ask(
        node,
        "platform_gateway",
        "link_user",
        {"name": "tg", "platform_user_id": str(DANA), "user_id": "dana"},
    )


async def test_redelivered_update_starts_no_second_turn(app_node, telegram: FakeTelegram) -> None:
    node = await app_node()
    await _linked(node, telegram)
    telegram.redeliver_once = True
    telegram.message(DANA, "count me once")
    await until(lambda: _count(node, "duplicates", 1), what="the duplicate dropped")
    await until(lambda: telegram.texts(DANA), what="the answer")
    telegram.message(DANA, "and a second message")
    await until(lambda: len(telegram.texts(DANA)) == 2, what="the second answer")
    c = await counters(node)
    assert c["turns"] == 2 and c["in"] == 2 and c["duplicates"] >= 1
    assert len(telegram.texts(DANA)) == 2


async def _count(node, key: str, n: int) -> bool:
    return (await counters(node)).get(key, 0) >= n


async def test_topics_and_new_are_independent_sessions(app_node, telegram: FakeTelegram) -> None:
    node = await app_node()
    await _linked(node, telegram, rate_limit={"burst": 20})
    script = [
        "first in main",
        "/topic create work",
        "about work",
        "/topic create home",
        "about home",
        "/topic switch work",
        "/topic list",
        "/topic off",
        "/new",
        "fresh main",
    ]
    for i, text in enumerate(script, 1):
        telegram.message(DANA, text)
        await until(lambda i=i: len(telegram.texts(DANA)) >= i, what=f"reply {i} ({text})")
    texts = telegram.texts(DANA)
    assert texts[1].startswith("Created topic work") and texts[5] == "Switched to topic work."
    assert texts[6] == "Topics: home, work (current)"
    sessions = (
        await ask(node, "session_manager", "list_sessions", {"channel": "telegram", "user_id": "dana"})
    )["sessions"]
    assert len(sessions) == 4  # main, work, home, and main after /new
    assert {s["channel"] for s in sessions} == {"telegram"}
    titles = {s["metadata"].get("topic", "") if isinstance(s.get("metadata"), dict) else "" for s in sessions}
    assert {"work", "home", ""} <= titles


async def test_burst_rate_limited_without_model_calls(app_node, telegram: FakeTelegram) -> None:
    node = await app_node()
    await _linked(node, telegram, rate_limit={"burst": 2, "per_minute": 0.01})
    for i in range(5):
        telegram.message(DANA, f"message {i}")
    await until(lambda: _count(node, "rate_limited", 3), what="three refused")
    await until(lambda: len(telegram.texts(DANA)) == 3, what="two answers and one 'slow down'")
    c = await counters(node)
    assert c["turns"] == 2
    assert sum("faster than I can answer" in t for t in telegram.texts(DANA)) == 1


async def test_platform_429_is_waited_out(app_node, telegram: FakeTelegram) -> None:
    node = await app_node()
    await _linked(node, telegram)
    telegram.throttle_next = 1
    telegram.message(DANA, "hello")
    await until(lambda: telegram.texts(DANA), timeout=30, what="the answer after the 429")
    c = await counters(node)
    assert c["throttled"] == 1 and c["out"] == 1 and len(telegram.texts(DANA)) == 1


async def test_bad_token_is_an_error_without_the_token(app_node, telegram: FakeTelegram) -> None:
    node = await app_node()
    await ask(
        node, "llm_gateway", "register_credential", {"phantom_token": "tg-token", "api_key": CANARY + "x"}
    )
    url = f"http://127.0.0.1:{telegram.http.port}"
    await ask(
        node,
        "platform_gateway",
        "register_platform",
        {"platform": "telegram", "name": "tg", "credential": "tg-token", "base_url": url},
    )
    shown = await until(lambda: _errored(node), what="the connection error")
    assert CANARY not in repr(shown)


async def _errored(node):
    shown = await ask(node, "platform_gateway", "get_platform", {"name": "tg"})
    return shown if shown.get("last_error") else None


async def test_register_refuses_unknown_credentials_and_platforms(app_node) -> None:
    from minihermes.runtime import InvalidArgument

    node = await app_node()
    with pytest.raises(InvalidArgument, match="not registered"):
        await ask(
            node,
            "platform_gateway",
            "register_platform",
            {"platform": "telegram", "name": "tg", "credential": "nope"},
        )
    with pytest.raises(InvalidArgument, match="known: telegram, webhook"):
        await ask(
            node,
            "platform_gateway",
            "register_platform",
            {"platform": "telegrm", "name": "tg", "credential": "nope"},
        )
