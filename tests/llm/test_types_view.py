"""MessageView: read-only message dicts the gateway validates once."""

from __future__ import annotations

import pytest

from minihermes.agent import gateway as policy
from minihermes.llm import Message, MessageView
from minihermes.runtime import InvalidArgument


def test_a_view_cannot_be_changed():
    view = MessageView({"role": "user", "content": "hi"})
    for change in (
        lambda: view.__setitem__("content", "x"),
        lambda: view.__delitem__("content"),
        lambda: view.update(content="x"),
        lambda: view.pop("content"),
        view.clear,
    ):
        with pytest.raises(TypeError):
            change()
    assert view == {"role": "user", "content": "hi"}


def test_a_view_is_validated_once_and_a_plain_dict_every_time(monkeypatch):
    calls = []
    real = Message.model_validate

    def counting(value, *args, **kwargs):
        calls.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(Message, "model_validate", counting)
    view = MessageView({"role": "user", "content": "hi"})
    plain = {"role": "user", "content": "plain"}
    for _ in range(3):
        request = policy.completion_request([view, plain], [], 64, None, 0)
        assert [m.content for m in request.messages] == ["hi", "plain"]
    assert calls == [view, plain, plain, plain]  # a plain dict may have changed: validated every time


def test_a_bad_view_is_reported_with_its_place():
    bad = MessageView({"role": "wizard", "content": "hi"})
    with pytest.raises(InvalidArgument, match=r"messages\.1"):
        policy.completion_request([MessageView({"role": "user", "content": "ok"}), bad], [], 64, None, 0)


def test_view_memo_remembers_read_only_dicts_by_identity_only():
    from minihermes.llm import ViewMemo

    memo: ViewMemo[int] = ViewMemo()
    other: ViewMemo[str] = ViewMemo()
    a, b = (MessageView({"role": "user", "content": str(i)}) for i in range(2))
    memo.put(a, 1)
    assert memo.get(a) == 1 and memo.get(MessageView(a)) is None  # an equal copy is another dict
    memo.put({"role": "user"}, 9)  # a plain dict may change: never remembered
    assert memo.get({"role": "user"}) is None
    assert memo.get(b) is None and other.get(a) is None  # each memo keeps its own values
    other.put(a, "x")
    memo.put(a, 2)
    assert (memo.get(a), other.get(a), memo.get(b)) == (2, "x", None)


def test_a_request_of_validated_views_still_checks_its_other_arguments():
    views = [MessageView({"role": "user", "content": "hi"})]
    policy.completion_request(views, [], 64, None, 0)  # the view is validated now
    request = policy.completion_request(views, [], 64, 0.5, 1)
    assert (request.max_tokens, request.temperature, request.cache_prefix_messages) == (64, 0.5, 1)
    assert [m.content for m in request.messages] == ["hi"]
    for bad in ({"max_tokens": 0}, {"temperature": 3.0}, {"cache_prefix_messages": -1}):
        args = {"max_tokens": 64, "temperature": None, "cache_prefix_messages": 0, **bad}
        with pytest.raises(InvalidArgument, match=next(iter(bad))):
            policy.completion_request(views, [], **args)
