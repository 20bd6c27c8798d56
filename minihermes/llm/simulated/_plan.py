"""The simulated model's plan: tool steps it intends to take for the current request, and their outcomes."""

from __future__ import annotations

import itertools
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._types import ToolCall
from ._text import Toolbox, as_text

_VALUE_KEYS = ("result", "value", "output", "content", "text", "answer", "data")


@dataclass(frozen=True)
class Ref:
    """An argument filled from the result of the step with key ``step`` ("remember the result")."""

    step: str
    template: str = ""
    """How the value is used: ``"{} + 100"`` ("add 100 to it"); empty: the value as it is."""

    def fill(self, value: str, shown: str | None = None) -> str:
        """The argument: arithmetic on the exact ``value``; the value alone as it is ``shown`` to a person
        (a stored "remember the result" keeps 7.35, not 7.3500000000000005)."""
        if not self.template:
            return value if shown is None else shown
        # A negative number is one operand: "(-5) ** 2", not "-5 ** 2".
        return self.template.format(f"({value})" if value.startswith("-") else value)


@dataclass(frozen=True)
class Step:
    """One intended tool call.

    ``intent`` names the ``Intent`` that made it and will describe its outcome; ``subject``/``owner`` are
    what the step is about, for that description; ``prediction`` is the result the model can foresee
    (arithmetic), which lets it pass the value on without waiting when a procedure says what comes next.
    """

    key: str
    intent: str
    tool: str
    args: dict[str, Any]
    subject: str = ""
    owner: str = ""
    prediction: str | None = None
    produces: bool = False
    """Whether later steps may refer to this step's result ("... and remember the result")."""
    form: str = ""
    """Intent-specific detail for the description (e.g. which phrasing a memory fact had)."""
    alone: bool = False
    """A reading that holds only when its clause is the whole request ("what is the office code" as a
    memory lookup): in a longer request the clause counts as not understood."""

    def refs(self) -> list[Ref]:
        return [value for value in self.args.values() if isinstance(value, Ref)]


@dataclass(frozen=True)
class Note:
    """A sentence of the final answer that needs no tool (e.g. the requested tool is not offered).

    ``value`` is what "the result" means if a later clause refers to this one.
    """

    text: str
    value: str = ""
    cannot: bool = False
    """The request (or this part of it) cannot be done here: the turn does nothing and says so."""
    standalone: bool = False
    """A "cannot" that says why and what to do instead: no list of what the model understands follows it."""


Item = Step | Note


@dataclass
class Plan:
    """The ordered steps and notes for one request. ``batch``: emit every ready step in one response."""

    items: list[Item] = field(default_factory=list)
    batch: bool = False
    procedure: str | None = None
    """The name of the procedure (skill) that shaped this plan, if any."""
    unknown: list[str] = field(default_factory=list)
    """Clauses of the request no intent understood: the model does none of it and says so."""

    @property
    def steps(self) -> list[Step]:
        return [item for item in self.items if isinstance(item, Step)]

    def step(self, key: str) -> Step | None:
        return next((s for s in self.steps if s.key == key), None)


@dataclass(frozen=True)
class Outcome:
    """A tool call the conversation already holds, with its result."""

    call: ToolCall
    content: str
    error: str | None = None
    data: Any = None
    untrusted: bool = False
    """The result came wrapped as outside content (``{"untrusted_content": ...}``): ``data`` is what was
    inside, shown to the person as quoted data, never the wrapper."""

    @classmethod
    def of(cls, call: ToolCall, content: str | None, is_error: bool) -> Outcome:
        if content is None:
            return cls(call, "", error="the tool returned no result")
        data = _json_or_text(content)
        untrusted = isinstance(data, dict) and "untrusted_content" in data
        if untrusted:
            data = data["untrusted_content"]
            if isinstance(data, str):
                data = _json_or_text(data) if data.lstrip().startswith(("{", "[")) else data
        error = _error_in(data)
        if is_error and not error:
            # A failed call's words, not its JSON: {"error": {"code", "message"}} is said as its message.
            error = content if not untrusted else as_text(data)
        return cls(call, content, error=error or None, data=data, untrusted=untrusted)

    @property
    def code(self) -> str:
        """The error code of a failed call (``{"error": {"code": ...}}``), or ""."""
        data = self.data
        error = data.get("error") if isinstance(data, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        return code if isinstance(code, str) else ""

    @property
    def text(self) -> str:
        """The result as text for the answer: the value, else the (unwrapped) data."""
        return self.value or (as_text(self.data) if self.data is not None else self.content)

    @property
    def shown(self) -> str:
        """The value as a person reads it: the tool's own ``display`` rendering when it gives one (the
        calculator's "7.35" for 7.3500000000000005), else ``value``."""
        data = self.data
        if isinstance(data, dict) and isinstance(data.get("display"), str) and data["display"]:
            return str(data["display"])
        return self.value

    @property
    def value(self) -> str:
        """The main value of the result: ``result``/``value``/... of a JSON object, or the text."""
        data = self.data
        if isinstance(data, dict):
            for key in _VALUE_KEYS:
                if data.get(key) is not None:
                    return as_text(data[key])
            return ""
        return as_text(data) if data is not None else self.content


def _json_or_text(content: str) -> Any:
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        return content


def _error_in(data: Any) -> str | None:
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            error = error.get("message") or json.dumps(error)
        if error:
            return str(error)
        if data.get("ok") is False or data.get("status") in ("error", "failed"):
            return str(data.get("message") or data.get("detail") or "the tool reported a failure")
    if isinstance(data, str):
        text = data.strip()
        # The agent's guardrail writes "[denied: tool]"; plain-text tools often start with "Error".
        if text.lower().startswith(("[denied", "error:", "error -", "traceback")):
            return text
    return None


@dataclass
class ParseContext:
    """What intents see while a request is parsed: the tools, and the items parsed so far."""

    toolbox: Toolbox
    items: list[Item] = field(default_factory=list)
    earlier_result: str | None = None
    """The last calculator result of this conversation before the current request, as shown."""
    _keys: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def key(self) -> str:
        return f"s{next(self._keys)}"

    def last_result(self) -> Step | Note | None:
        """The latest item whose result "the result" would mean."""
        for item in reversed(self.items):
            if (isinstance(item, Step) and item.produces) or (isinstance(item, Note) and item.value):
                return item
        return None


class Intent(ABC):
    """A kind of request the simulated model understands."""

    name: ClassVar[str]

    @abstractmethod
    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        """Plan items for ``clause``, or None if the clause is not this kind of request."""

    @abstractmethod
    def describe(self, step: Step, outcome: Outcome) -> str:
        """A sentence of the final answer for a step whose (successful) result is ``outcome``."""

    def explain(self, step: Step, outcome: Outcome) -> str | None:
        """The answer for a step whose call failed, when this intent knows better words for the failure
        than the tool's error (it must say that it could not: "I can't ..."); None: the generic answer."""
        return None
