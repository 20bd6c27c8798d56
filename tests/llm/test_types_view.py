"""MessageView: read-only message dicts the gateway validates once."""

from __future__ import annotations

import pytest

from minihermes.agent import _llm_policy as policy
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
    for _ in range(3):
        request = policy.completion_request([view, {"role": "user", "content": "plain"}], [], 64, None, 0)
        assert [m.content for m in request.messages] == ["hi", "plain"]
    assert calls == [view]  # plain dicts go through the request's own validation each time


def test_a_bad_view_is_reported_with_its_place():
    bad = MessageView({"role": "wizard", "content": "hi"})
    with pytest.raises(InvalidArgument, match=r"messages\.1"):
        policy.completion_request([MessageView({"role": "user", "content": "ok"}), bad], [], 64, None, 0)


def test_view_memo_remembers_read_only_dicts_by_identity_only():
    from minihermes.llm import ViewMemo

    memo: ViewMemo[int] = ViewMemo(2)
    a, b, c = (MessageView({"role": "user", "content": str(i)}) for i in range(3))
    memo.put(a, 1)
    assert memo.get(a) == 1 and memo.get(MessageView(a)) is None  # an equal copy is another dict
    memo.put({"role": "user"}, 9)  # a plain dict may change: never remembered
    assert memo.get({"role": "user"}) is None
    memo.put(b, 2)
    memo.get(a)  # a is now the most recent
    memo.put(c, 3)  # over capacity: b (least recently used) goes
    assert (memo.get(a), memo.get(b), memo.get(c)) == (1, None, 3)
