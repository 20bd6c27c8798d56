"""The agent's history as the model sees it, kept up to date step by step (``agent._history``)."""

from __future__ import annotations

from typing import Any

from minihermes.agent._history import HistoryViews
from minihermes.context import tokens
from minihermes.context.tokens import messages_tokens
from minihermes.llm import MessageView


def msg(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "role": "user" if i % 2 else "assistant",
        "content": f"message number {i} " * (i % 5 + 1),
        **extra,
    }


def test_appended_messages_get_views_and_earlier_views_are_reused():
    h = HistoryViews()
    history = [msg(0), msg(1, name="alice", duration_ms=3.0)]
    first = h.views(history)
    assert all(type(v) is MessageView for v in first)
    assert first[1] == {"role": "user", "content": history[1]["content"]}  # the agent's own fields stay out
    history.append(msg(2))
    second = h.views(history)
    assert second[:2] == first and all(a is b for a, b in zip(first, second[:2], strict=False))
    assert second[2]["content"] == history[2]["content"]
    assert second is not h.views(history)  # each call gets its own list


def test_the_token_total_follows_appends_and_replacements():
    h = HistoryViews()
    history = [msg(i) for i in range(5)]
    assert h.tokens(history) == messages_tokens(history)
    for i in range(5, 12):
        history.append(msg(i))
        assert h.tokens(history) == messages_tokens(history)
    kept = history[-3:]
    history = [{"role": "user", "content": "a summary"}, *kept]  # as compression replaces the list
    assert h.tokens(history) == messages_tokens(history)
    views = h.views(history)
    assert len(views) == 4 and views[1]["content"] == kept[0]["content"]


def test_a_replaced_list_or_message_is_viewed_afresh():
    h = HistoryViews()
    history = [msg(i) for i in range(4)]
    old = h.views(history)
    same_list = history
    same_list[-1] = msg(99)  # not what the agent does, but the last seen message is no longer in place
    assert h.views(same_list)[-1]["content"] == same_list[-1]["content"]
    shorter = history[:2]
    assert [v["content"] for v in h.views(shorter)] == [m["content"] for m in shorter]
    assert h.views(shorter)[0] is old[0]  # the view of a message still there is reused
    assert h.views([]) == [] and h.tokens([]) == 0


def test_another_counter_counts_again(monkeypatch):
    class Chars:
        name = "chars"

        def count(self, text: str) -> int:
            return len(text)

    h = HistoryViews()
    history = [msg(i) for i in range(3)]
    before = h.tokens(history)
    monkeypatch.setattr(tokens, "_default", Chars())
    assert h.tokens(history) == messages_tokens(history) != before


def test_system_messages_are_views_made_once_per_text():
    h = HistoryViews()
    a = h.system("You are helpful.")
    assert a == {"role": "system", "content": "You are helpful."} and type(a) is MessageView
    assert h.system("You are helpful.") is a
    for i in range(20):
        h.system(f"prompt {i}")
    assert h.system("You are helpful.") == a
