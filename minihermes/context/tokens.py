"""Token counting for prompt budgets, offline.

``tiktoken`` ships its BPE tables separately and fetches them from the internet on first use, which this
deployment cannot do; so the default counter is a deterministic offline estimate shaped like a BPE
tokenizer (words, numbers and punctuation counted the way cl100k-style vocabularies split them). When
``tiktoken`` is installed *and* its tables are already in its cache (``TIKTOKEN_CACHE_DIR``), ``default_counter``
uses it instead. A provider's own counter can be plugged in with ``set_default_counter``.
"""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Protocol

from minihermes.llm import MessageView, ViewMemo

logger = logging.getLogger("minihermes.context.tokens")

# Common words are one token; long words split into pieces of about four characters; each digit group of
# three is a token; every other non-space character (punctuation, symbols) is one token.
_PIECES = re.compile(r"[A-Za-z]+|\d{1,3}|[^\sA-Za-z\d]")
_MESSAGE_OVERHEAD = 4
"""Role markers and separators each chat message costs (OpenAI documents 3-4 per message)."""


class TokenCounter(Protocol):
    """Counts the tokens of a text."""

    name: str

    def count(self, text: str) -> int: ...


class OfflineCounter:
    """Deterministic estimate close to cl100k for English prose and JSON (within ~10-15%), no downloads."""

    name = "offline"

    def count(self, text: str) -> int:
        if not text:
            return 0
        total = 0
        for piece in _PIECES.findall(text):
            if piece[0].isalpha():
                n = len(piece)
                total += 1 if n <= 6 else (n + 3) // 4
            else:
                total += 1
        # Non-ASCII scripts tokenize much finer than the regex above sees (they match one char at a time
        # already); nothing to add.
        return total


class TiktokenCounter:
    """``tiktoken`` with an encoding that is already cached locally (never downloads)."""

    def __init__(self, encoding: Any, name: str) -> None:
        self._encoding = encoding
        self.name = f"tiktoken:{name}"

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


def _try_tiktoken(encoding_name: str = "cl100k_base") -> TokenCounter | None:
    try:
        import tiktoken  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    import os

    # tiktoken downloads a missing table; only use it when the cache already holds one.
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if not cache or not os.path.isdir(cache) or not os.listdir(cache):
        return None
    try:
        return TiktokenCounter(tiktoken.get_encoding(encoding_name), encoding_name)
    except Exception as e:  # any failure (no table, no network) means: use the offline counter
        logger.info("tiktoken unavailable offline (%s); using the offline token counter", e)
        return None


_default: TokenCounter | None = None


def default_counter() -> TokenCounter:
    """The process-wide counter: cached tiktoken when usable offline, else ``OfflineCounter``."""
    global _default
    if _default is None:
        _default = _try_tiktoken() or OfflineCounter()
    return _default


def set_default_counter(counter: TokenCounter | None) -> None:
    """Use ``counter`` (e.g. a provider's) for every count in this process; None restores the default."""
    global _default
    _default = counter


_MEMO: OrderedDict[tuple[str, str], int] = OrderedDict()
_MEMO_MAX = 16_384
_MEMO_MIN_CHARS = 48
"""Texts shorter than this are counted afresh (cheaper than a lookup); longer ones are remembered, since a
session's history is counted again at every turn (compression checks, budgets) and its texts do not change."""


def _count(c: TokenCounter, text: str) -> int:
    if len(text) < _MEMO_MIN_CHARS:
        return c.count(text)
    key = (c.name, text)
    n = _MEMO.get(key)
    if n is None:
        n = _MEMO[key] = c.count(text)
        if len(_MEMO) > _MEMO_MAX:
            _MEMO.popitem(last=False)
    return n


def count_tokens(text: str, counter: TokenCounter | None = None) -> int:
    return _count(counter or default_counter(), text)


_VIEW_MEMO: dict[str, ViewMemo[int]] = {}
"""Per counter: token counts of read-only messages (``MessageView``), counted once."""


def message_tokens(message: dict[str, Any], counter: TokenCounter | None = None) -> int:
    """Tokens of one chat message: its text, its tool calls' names and inputs, plus per-message overhead.
    A read-only ``MessageView`` is counted once."""
    c = counter or default_counter()
    if type(message) is not MessageView:
        return _message_tokens(message, c)
    memo = _VIEW_MEMO.get(c.name)
    if memo is None:
        memo = _VIEW_MEMO[c.name] = ViewMemo()
    n = memo.get(message)
    if n is None:
        n = _message_tokens(message, c)
        memo.put(message, n)
    return n


def _message_tokens(message: dict[str, Any], c: TokenCounter) -> int:
    total = _MESSAGE_OVERHEAD + _count(c, str(message.get("content") or ""))
    for call_ in message.get("tool_calls") or []:
        total += _count(c, str(call_.get("name", ""))) + _count(c, json.dumps(call_.get("input") or {}))
    return total


def messages_tokens(messages: Iterable[dict[str, Any]], counter: TokenCounter | None = None) -> int:
    return sum(message_tokens(m, counter) for m in messages)


_TOOL_MEMO: dict[str, ViewMemo[int]] = {}
"""Per counter: token counts of read-only tool specs (``ToolView``: the agent's tool list), counted once."""


def tools_tokens(tools: Iterable[dict[str, Any]], counter: TokenCounter | None = None) -> int:
    """Tokens of tool specs as JSON. A read-only ``ToolView`` is counted once."""
    c = counter or default_counter()
    memo = _TOOL_MEMO.get(c.name)
    if memo is None:
        memo = _TOOL_MEMO[c.name] = ViewMemo()
    total = 0
    for t in tools:
        n = memo.get(t)
        if n is None:
            n = _count(c, json.dumps(t, sort_keys=True))
            memo.put(t, n)  # kept only on a read-only spec
        total += n
    return total
