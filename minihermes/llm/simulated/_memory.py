"""Memory intents: remember a fact or a result, recall it, search for it."""

from __future__ import annotations

import re
from typing import Any

from .._types import ToolSpec
from ._plan import Intent, Item, Note, Outcome, ParseContext, Ref, Step
from ._text import as_text, memory_key, second_person, strip_quotes

_KEY_PARAMS = ("key", "name", "id", "topic")
_VALUE_PARAMS = ("value", "content", "text", "fact", "memory")
_QUERY_PARAMS = ("query", "q", "search", "text", "key")
RESULT_KEY = "last_calc"
"""Where "remember the result" stores, as in the README's example."""

# Linear time on any text: a whitespace run is taken whole (``\s+(?!\s)``), never split between two
# quantifiers, and a group after one starts with a non-space, so a failed match does not retry every split
# of a long run (which is quadratic, or worse, in its length).
_REMEMBER = re.compile(
    r"^(?P<verb>remember|memori[sz]e|note(?:\s+down)?|store|save|keep\s+in\s+mind|don't\s+forget|do\s+not\s+forget"
    r"|make\s+a\s+note(?:\s+of)?)\b(?:\s+that\b)?\s*(?:[:,]\s*)?(?P<rest>(?:\S.*)?)$",
    re.I,
)
_RESULT_WORDS = re.compile(
    r"^(?:(?:the|that|this|it|its)\s+(?!\s))?(?:result|answer|value|total|number|output|it|that|this|them)?"
    r"\s*(?!\s)(?:(?:as|under|in)\s+(?!\s)(?:the\s+(?!\s))?(?:key\s+(?!\s)|name\s+(?!\s))?(?P<key>.+))?$",
    re.I,
)
_COPULA = re.compile(r"^(?P<key>.*?\S)\s+(?P<verb>is|are|was|were|=|equals)\s+(?!\s)(?P<value>.+)$", re.I)
_COLON = re.compile(r"^(?P<key>[^:]{1,60}):\s*(?!\s)(?P<value>.+)$")


class Remember(Intent):
    """'remember that my X is Y' stores key X, value Y; 'remember the result' stores an earlier result."""

    name = "remember"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = _REMEMBER.match(clause)
        if match is None:
            return None
        rest = re.sub(r"^(?:this|the following)\s*:\s*", "", match.group("rest").strip(), flags=re.I)
        tool = ctx.toolbox.find("memory_store")
        ref = _RESULT_WORDS.match(rest)
        if ref is not None:
            source = ctx.last_result()
            if source is None:
                return [Note("I can't tell what you would like me to remember.", cannot=True)]
            key = strip_quotes(ref.group("key") or RESULT_KEY)
            value: str | Ref = Ref(source.key) if isinstance(source, Step) else source.value
            return [self._step(ctx, tool, key, value, owner="", form="result")]
        # Neither pattern matches across a line break; without one, a failed match is not retried at
        # each "is" of the first line, to its end each time.
        fact = None if "\n" in rest else (_COPULA.match(rest) or _COLON.match(rest))
        if fact is not None:
            owner, subject = memory_key(fact.group("key"))
            if subject:
                value_text = strip_quotes(fact.group("value").strip())
                plural = (fact.groupdict().get("verb") or "").lower() in ("are", "were")
                form = "fact-plural" if plural else "fact"
                return [self._step(ctx, tool, subject, value_text, owner=owner, form=form)]
        if not rest:
            return [Note("I can't tell what you would like me to remember.", cannot=True)]
        if match.group("verb").lower() in ("store", "save"):
            return None  # "save my work", "store the file": not a fact to remember
        if re.match(r"to\s", rest, re.I):
            return [
                Note(
                    f'I can\'t remind you "{rest}" without a time: say e.g. "remind me every day at 9am {rest}".',
                    cannot=True,
                )
            ]
        _, key = memory_key(rest)
        return [self._step(ctx, tool, key, strip_quotes(rest), owner="", form="note")]

    def _step(
        self, ctx: ParseContext, tool: ToolSpec | None, key: str, value: str | Ref, *, owner: str, form: str
    ) -> Item:
        if tool is None:
            return Note("I can't save that: no memory tool is available here.", cannot=True)
        key_param = ctx.toolbox.param(tool, _KEY_PARAMS)
        value_param = ctx.toolbox.param(tool, _VALUE_PARAMS)
        args: dict[str, Any] = {key_param: key, value_param: value}
        if key_param == value_param:
            # A store that takes one text field gets the fact as a sentence.
            args = {value_param: f"{key}: {value}" if isinstance(value, str) else value}
        return Step(ctx.key(), self.name, tool.name, args, subject=key, owner=owner, form=form)

    def describe(self, step: Step, outcome: Outcome) -> str:
        stored = _stored_value(step, outcome)
        if step.form == "result":
            return f"I've stored the result ({stored}) in your memory as '{step.subject}'."
        if step.form.startswith("fact"):
            verb = "are" if step.form == "fact-plural" else "is"
            return f"Got it. I'll remember that {step.owner} {step.subject} {verb} {stored}."
        return f"Got it. I'll remember that {second_person(stored)}."


def _stored_value(step: Step, outcome: Outcome) -> str:
    for name in _VALUE_PARAMS:
        if name in outcome.call.input:
            return as_text(outcome.call.input[name])
    return step.subject


_RECALL = re.compile(
    r"^(?:(?:what|who)(?:'s|\s+is|\s+are|\s+was|\s+were)|tell\s+me(?:\s+what)?|remind\s+me(?:\s+of|\s+what)?"
    r"|do\s+you\s+(?:remember|know|recall)|recall|what\s+did\s+i\s+(?:say|tell\s+you)(?:\s+about)?)"
    r"\s+(?!\s)(?P<phrase>(?:my|our)\s+(?!\s).*?\S)(?:\s+(?:is|are|was|were))?$",
    re.I,
)
_LAST_RESULT = re.compile(
    r"^what(?:'s|\s+is|\s+was)\s+(?:the\s+|my\s+)?(?:last|previous|stored)\s+(?:result|answer|calculation)$",
    re.I,
)


_ARITHMETIC = re.compile(
    r"[+*/^%=]|\b(?:plus|minus|times|divided|multiplied|percent|squared|cubed|over|and|then)\b", re.I
)
"""A recall of a phrase with arithmetic or a second request in it ("my number times 6") is not one."""


class Recall(Intent):
    """'what is my X' recalls key X (by memory_recall, else memory_search)."""

    name = "recall"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        if _LAST_RESULT.match(clause):
            # This conversation's, from its history: a memory may hold another session's result.
            if (value := ctx.earlier_result) is None:
                return [Note("I don't have an earlier result in this conversation.")]
            return [Note(f"The last result was {value}.", value=value)]
        if (match := _RECALL.match(clause)) and not _ARITHMETIC.search(match.group("phrase")):
            owner, subject = memory_key(match.group("phrase"))
        else:
            return None
        recall, search = ctx.toolbox.find("memory_recall"), ctx.toolbox.find("memory_search")
        if recall is not None:
            args = {ctx.toolbox.param(recall, _KEY_PARAMS): subject}
            return [
                Step(ctx.key(), self.name, recall.name, args, subject=subject, owner=owner, produces=True)
            ]
        if search is not None:
            args = {ctx.toolbox.param(search, _QUERY_PARAMS): subject}
            return [
                Step(ctx.key(), self.name, search.name, args, subject=subject, owner=owner, produces=True)
            ]
        return [
            Note(f"I can't look up {_phrase(owner, subject)}: no memory tool is available here.", cannot=True)
        ]

    def describe(self, step: Step, outcome: Outcome) -> str:
        value = _recalled(step.subject, outcome)
        if step.subject == RESULT_KEY:
            return f"The last result was {value}." if value else "I don't have a stored result yet."
        phrase = _phrase(step.owner, step.subject)
        if not value:
            return f"I don't have {phrase} stored yet."
        verb = "are" if step.subject.endswith("s") and not step.subject.endswith("ss") else "is"
        return f"{phrase[0].upper()}{phrase[1:]} {verb} {value}."


_RECALL_THE = re.compile(
    r"^(?:(?:what|who)(?:'s|\s+is|\s+are|\s+was|\s+were)|tell\s+me|remind\s+me\s+of"
    r"|do\s+you\s+(?:remember|know|recall)|recall)\s+(?!\s)the\s+(?!\s)(?P<key>[\w' -]{1,60}?)$",
    re.I,
)
_NOT_A_KEY = re.compile(
    r"\b(?:of|in|on|at|for|to|from|with|about|between|and|or|than|weather|time|date|day|news|meaning)\b|\d",
    re.I,
)
"""A phrase that reads as a question about the world ("the capital of France", "the time"), not a key."""


class RecallThe(Recall):
    """'what is the office code' recalls key "office code", as 'note that the office code is 4711' stored
    it. Tried after every other intent, for a short phrase that is the whole request only ("what's 2+2 and
    who is the president" is not half done): a miss is an honest "I can't answer"."""

    name = "recall-the"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = _RECALL_THE.match(clause)
        if match is None or len(match.group("key").split()) > 4 or _NOT_A_KEY.search(match.group("key")):
            return None
        _, subject = memory_key(match.group("key"))
        tool = ctx.toolbox.find("memory_recall")
        if not subject or tool is None:
            return None
        args = {ctx.toolbox.param(tool, _KEY_PARAMS): subject}
        step = Step(
            ctx.key(), self.name, tool.name, args, subject=subject, owner="the", produces=True, alone=True
        )
        return [step]

    def describe(self, step: Step, outcome: Outcome) -> str:
        if _recalled(step.subject, outcome):
            return super().describe(step, outcome)
        return f"I can't answer that: nothing is stored as '{step.subject}' in your memory."


def _phrase(owner: str, subject: str) -> str:
    return f"{owner} {subject}".strip()


def _recalled(key: str, outcome: Outcome) -> str:
    data = outcome.data
    if isinstance(data, dict) and data.get("found") is False:
        return ""
    entries = _entries(data)
    if entries:
        exact = [v for k, v in entries if k.lower() == key.lower()]
        return exact[0] if exact else entries[0][1]
    value = outcome.value
    return "" if value in ("", "null", "None") else value


def _entries(data: Any) -> list[tuple[str, str]]:
    """(key, value) pairs from a search-like result: a list, or a dict holding one."""
    items: Any = data
    if isinstance(data, dict):
        items = next(
            (data[k] for k in ("results", "memories", "matches", "items", "entries") if k in data), None
        )
    if not isinstance(items, list):
        return []
    pairs = []
    for item in items:
        if isinstance(item, dict):
            key = as_text(item.get("key") or item.get("name") or item.get("id") or "")
            value = item.get("value", item.get("content", item.get("text", "")))
            pairs.append((key, as_text(value)))
        else:
            pairs.append(("", as_text(item)))
    return pairs


_SEARCH = [
    re.compile(
        r"^(?:search|look|check|find)\s+(?:in\s+|through\s+)?(?:my\s+|your\s+|the\s+)?(?:memory|memories)"
        r"\s+(?:for|about)\s+(?!\s)(?P<q>.+)$",
        re.I,
    ),
    re.compile(
        r"^(?:search\s+for|look\s+up|find)\s+(?!\s)(?P<q>.*?\S)\s+in\s+(?:my\s+|your\s+|the\s+)?memor(?:y|ies)$",
        re.I,
    ),
    re.compile(r"^what\s+do\s+you\s+(?:know|remember)\s+about\s+(?!\s)(?P<q>.+)$", re.I),
]


class Search(Intent):
    """'search my memory for X' / 'what do you know about X' searches memory."""

    name = "search"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = next((m for p in _SEARCH if (m := p.match(clause))), None)
        if match is None:
            return None
        query = strip_quotes(match.group("q").strip())
        search, recall = ctx.toolbox.find("memory_search"), ctx.toolbox.find("memory_recall")
        tool, params = (search, _QUERY_PARAMS) if search is not None else (recall, _KEY_PARAMS)
        if tool is None:
            return [Note(f"I can't search for '{query}': no memory tool is available here.", cannot=True)]
        args = {ctx.toolbox.param(tool, params): query}
        return [Step(ctx.key(), self.name, tool.name, args, subject=query, produces=True)]

    def describe(self, step: Step, outcome: Outcome) -> str:
        found = [f"{k}: {v}" if k else v for k, v in _entries(outcome.data)]
        if not found and (value := _recalled(step.subject, outcome)):
            found = [value]
        if not found:
            return f"I couldn't find anything about '{step.subject}' in memory."
        return f"Here is what I found in memory about '{step.subject}': {'; '.join(found[:5])}."
