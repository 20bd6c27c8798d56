"""Memory intents: remember a fact or a result, recall it, search for it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .._types import ToolSpec
from ._plan import Intent, Item, Note, Outcome, ParseContext, Ref, Step
from ._text import REDACTED, SECRETS_BELONG, as_text, memory_key, second_person, strip_quotes

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
_CALLED = re.compile(r"^(?P<key>.*?\S)\s+(?!\s)is\s+(?!\s)(?:called|named)\s+(?!\s)(?P<value>.+)$", re.I)
""""my dog is called Biscuit" is the dog's name: stored as "dog's name", as "my dog's name is Biscuit" is."""
_COLON = re.compile(r"^(?P<key>[^:]{1,60}):\s*(?!\s)(?P<value>.+)$")
_NEXT_FACT = re.compile(r"(?<!\s)\s+(?!\s)and\s+(?!\s)|(?<!\s)\s*,\s*(?:and\s+(?!\s))?", re.I)
_OWNED = re.compile(r"^(?:my|our)\s", re.I)


def secret_note(what: str) -> Note:
    """The honest answer to "remember the wifi password is hunter2": the message reached the model as
    "... is [REDACTED]", so nothing true can be stored."""
    return Note(
        f"I can't remember {what}: it looks like a secret, so it was removed from your message before I saw "
        f"it, and nothing was stored. {SECRETS_BELONG}",
        cannot=True,
        standalone=True,
    )


_BARE_AFTER = re.compile(
    r"^(?:(?:remember|memori[sz]e|note|save|store|keep)\s+(?:that|this|it)(?:\s+for\s+me)?"
    r"|(?:keep|bear)\s+(?:that|this|it)\s+in\s+mind|(?:don't|do\s+not)\s+forget\s+(?:that|this|it))$",
    re.I,
)
_BARE_BEFORE = re.compile(r"^(?:remember|memori[sz]e|note)(?:\s+(?:this|the\s+following))?$", re.I)
_STATEMENT = re.compile(r"^(?:my|our|the)\s", re.I)


def join_statements(clauses: list[str], parses: Callable[[str], bool]) -> list[str]:
    """A statement and a bare "remember that" beside it are one request: "My dog's name is Biscuit, please
    remember that" -> "remember that My dog's name is Biscuit" (also "Remember this. My ..."). A statement is
    a clause no intent understands that starts with my/our/the and states something ("X is Y")."""

    def statement(clause: str) -> bool:
        return (
            bool(_STATEMENT.match(clause))
            and "\n" not in clause
            and not parses(clause)
            and (_CALLED.match(clause) is not None or _COPULA.match(clause) is not None)
        )

    joined: list[str] = []
    index = 0
    while index < len(clauses):
        clause = " ".join(clauses[index].split())
        after = index + 1 < len(clauses)
        if _BARE_AFTER.match(clause) and joined and statement(joined[-1]):
            joined[-1] = f"remember that {joined[-1]}"
        elif _BARE_BEFORE.match(clause) and after and statement(clauses[index + 1]):
            joined.append(f"remember that {clauses[index + 1]}")
            index += 1
        else:
            joined.append(clauses[index])
        index += 1
    return joined


def _cli_arg(key: str) -> str:
    return key if re.fullmatch(r"[\w.-]+", key) else f'"{key}"'


class Remember(Intent):
    """'remember that my X is Y' stores key X, value Y; 'remember the result' stores an earlier result."""

    name = "remember"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = _REMEMBER.match(clause)
        if match is None:
            return None
        rest = re.sub(
            r"^(?:this|the\s+following)\s*[:.,;-]\s*", "", match.group("rest").strip(), count=1, flags=re.I
        )
        tool = ctx.toolbox.find("memory_store")
        ref = _RESULT_WORDS.match(rest)
        if ref is not None:
            source = ctx.last_result()
            if source is None:
                return [Note("I can't tell what you would like me to remember.", cannot=True)]
            key = strip_quotes(ref.group("key") or RESULT_KEY)
            value: str | Ref = Ref(source.key) if isinstance(source, Step) else source.value
            return [self._step(ctx, tool, key, value, owner="", form="result")]
        facts = self._facts(rest, ctx, tool)
        if facts is not None:
            return facts
        if not rest:
            return [Note("I can't tell what you would like me to remember.", cannot=True)]
        if REDACTED in rest:
            return [secret_note("that")]
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

    def _facts(self, rest: str, ctx: ParseContext, tool: ToolSpec | None) -> list[Item] | None:
        """ "my X is Y" (also "my dog is called Biscuit", "X: Y"), or several joined by "and" or commas ("my
        dog's name is Rex and my cat's name is Tom": two facts, never one fact holding the other)."""
        # Neither pattern matches across a line break; without one, a failed match is not retried at
        # each "is" of the first line, to its end each time.
        if "\n" in rest:
            return None
        pieces = _split_facts(rest)
        if len(pieces) > 1:
            items: list[Item] = []
            for piece in pieces:
                found = self._facts(piece.strip(), ctx, tool)
                if found is None:
                    return None
                items.extend(found)
            return items
        fact = _CALLED.match(rest)
        called = fact is not None
        fact = fact or _COPULA.match(rest) or _COLON.match(rest)
        if fact is None:
            return None
        owner, subject = memory_key(fact.group("key"))
        if not subject:
            return None
        if called:
            subject = possessive(subject, "name")
        value_text = strip_quotes(fact.group("value").strip())
        if REDACTED in value_text or REDACTED in subject:
            return [secret_note(f"{owner} {subject}".strip())]
        plural = (fact.groupdict().get("verb") or "").lower() in ("are", "were")
        form = "fact-plural" if plural else "fact"
        return [self._step(ctx, tool, subject, value_text, owner=owner, form=form)]

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

    def explain(self, step: Step, outcome: Outcome) -> str | None:
        if outcome.code != "secret_not_stored":
            return None
        # The value came from a tool result that held a redacted secret ("read creds.txt and remember it").
        return (
            f"I can't remember {_phrase(step.owner, step.subject)}: the value held a secret, which was removed "
            f"before I saw it, so nothing was stored. {SECRETS_BELONG}"
        )

    def describe(self, step: Step, outcome: Outcome) -> str:
        stored = _stored_value(step, outcome)
        if isinstance(outcome.data, dict) and outcome.data.get("quarantined"):
            # Derived from untrusted content this turn: held until the person confirms it, and said so.
            return (
                f"I haven't stored {_phrase(step.owner, step.subject)} yet: it comes from content I read "
                f"in this conversation ({stored}), so it waits for your confirmation on the Quarantine page "
                "(or `minihermes quarantine`) before I remember it."
            )
        if step.form == "result":
            return f"I've stored the result ({stored}) in your memory as '{step.subject}'."
        if step.form.startswith("fact"):
            verb = "are" if step.form == "fact-plural" else "is"
            return f"Got it. I'll remember that {step.owner} {step.subject} {verb} {stored}."
        return f"Got it. I'll remember that {second_person(stored)}."


def _split_facts(rest: str) -> list[str]:
    """``rest`` cut before each "and my X is Y" / ", my X is Y"; other separators stay inside a value ("red and
    blue"), with the text as written."""
    separators = list(_NEXT_FACT.finditer(rest))
    pieces, start = [], 0
    for index, separator in enumerate(separators):
        end = separators[index + 1].start() if index + 1 < len(separators) else len(rest)
        part = rest[separator.end() : end]
        if _OWNED.match(part) and _COPULA.match(part):
            pieces.append(rest[start : separator.start()])
            start = separator.end()
    pieces.append(rest[start:])
    return pieces


def possessive(owner_noun: str, thing: str) -> str:
    """ "dog", "name" -> "dog's name" (the key "my dog's name is Rex" stores)."""
    return f"{owner_noun}'s {thing}"


def _stored_value(step: Step, outcome: Outcome) -> str:
    for name in _VALUE_PARAMS:
        if name in outcome.call.input:
            return as_text(outcome.call.input[name])
    return step.subject


_RECALL = re.compile(
    r"^(?:(?:what|who|when|where)(?:'s|\s+is|\s+are|\s+was|\s+were)|tell\s+me(?:\s+what)?"
    r"|remind\s+me(?:\s+of|\s+what)?|do\s+you\s+(?:remember|know|recall)|recall"
    r"|what\s+did\s+i\s+(?:say|tell\s+you)(?:\s+about)?)"
    r"\s+(?!\s)(?P<phrase>(?:the\s+(?!\s)[\w'-]+(?:\s+(?!\s)[\w'-]+)?\s+of\s+)?(?:my|our)\s+(?!\s).*?\S)"
    r"(?:\s+(?:is|are|was|were))?$",
    re.I,
)
_CALLED_Q = re.compile(r"^(?P<who>.*?\S)\s+(?:called|named)$", re.I)
""""what's my dog called": the key "my dog is called Rex" and "my dog's name is Rex" store ("dog's name")."""
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
            phrase = match.group("phrase")
            called = _CALLED_Q.match(phrase)
            owner, subject = memory_key(called.group("who") if called else phrase)
            if called:
                subject = possessive(subject, "name")
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


_RECALL_KEY = re.compile(
    r"^(?:(?:what|who)(?:'s|\s+is|\s+was)|recall|look\s+up"
    r"|what(?:'s|\s+is|\s+did\s+(?:i|you)\s+(?:store|save|keep))(?:\s+(?:stored|saved|kept))?\s+(?:as|under))"
    r"\s+(?!\s)(?P<key>[A-Za-z][\w-]{0,79}|'[^'\n]{1,80}'|\"[^\"\n]{1,80}\"|`[^`\n]{1,80}`)$",
    re.I,
)
_NOT_A_NAME = frozenset(
    {"it", "that", "this", "up", "new", "there", "he", "she", "they", "you", "i", "me", "happening", "going"}
)


class RecallKey(RecallThe):
    """'what is weekly_hours', 'recall budget', "what is stored under 'office code'": a key by its exact
    name, as 'remember the result as weekly_hours' stored it. Like 'what is the X', the whole request only,
    tried last; a miss is an honest "I can't answer"."""

    name = "recall-key"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = _RECALL_KEY.match(clause)
        if match is None:
            return None
        raw = match.group("key")
        key = strip_quotes(raw).strip()
        if raw == key and (key.lower() in _NOT_A_NAME or _NOT_A_KEY.search(key)):
            return None
        tool = ctx.toolbox.find("memory_recall")
        if not key or tool is None:
            return None
        args = {ctx.toolbox.param(tool, _KEY_PARAMS): key}
        return [Step(ctx.key(), self.name, tool.name, args, subject=key, owner="", produces=True, alone=True)]

    def describe(self, step: Step, outcome: Outcome) -> str:
        value = _recalled(step.subject, outcome)
        if value:
            return f"{step.subject} is {value}."
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


_FORGET = re.compile(
    r"^(?:(?:please\s+)?forget(?:\s+about)?|(?:delete|remove|erase|wipe)(?=.*\bfrom\s+(?:your\s+|my\s+|the\s+)?memory$))"
    r"\s+(?!\s)(?P<phrase>(?:my|our|the)\s+(?!\s).*?\S|'[^'\n]{1,80}'|\"[^\"\n]{1,80}\"|[A-Za-z][\w-]{0,79})"
    r"(?:\s+from\s+(?:your\s+|my\s+|the\s+)?memory)?$",
    re.I,
)


_NOT_ONE = frozenset({"everything", "all", "anything", "us", "him", "her", "them", "about", "what"})


class Forget(Intent):
    """'forget my dog's name', "delete 'budget' from memory": a memory deleted by its key, with a tool that
    deletes memories (``memory_delete``); without one, an honest "I can't" that says how to do it."""

    name = "forget"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = _FORGET.match(" ".join(clause.split()))
        if match is None:
            return None
        phrase = match.group("phrase")
        if phrase.lower() in _NOT_A_NAME | _NOT_ONE:
            return None  # "forget it", "forget everything": no one memory named
        quoted = strip_quotes(phrase)
        if quoted != phrase or " " not in phrase:
            owner, subject = "", quoted
        else:
            owner, subject = memory_key(phrase)
        if not subject:
            return None
        tool = ctx.toolbox.find("memory_delete")
        if tool is None:
            return [
                Note(
                    f"I can't forget {_phrase(owner, subject)} from here: no tool for deleting memories is "
                    f"offered in this chat. You can delete it yourself: `/memory forget {_cli_arg(subject)}` in "
                    "`minihermes chat`, or Delete on the dashboard's Memory page.",
                    cannot=True,
                    standalone=True,
                )
            ]
        args = {ctx.toolbox.param(tool, _KEY_PARAMS): subject}
        return [Step(ctx.key(), self.name, tool.name, args, subject=subject, owner=owner)]

    def describe(self, step: Step, outcome: Outcome) -> str:
        data = outcome.data if isinstance(outcome.data, dict) else {}
        phrase = _phrase(step.owner, step.subject)
        if data.get("deleted") is False or data.get("found") is False:
            return f"Nothing was stored as {phrase}, so there was nothing to forget."
        return f"Done: I forgot {phrase}."

    def explain(self, step: Step, outcome: Outcome) -> str | None:
        # memory_delete's "nothing stored under that key" is an answer, not a failure to report.
        if outcome.code == "not_found":
            phrase = _phrase(step.owner, step.subject)
            return f"Nothing was stored as {phrase}, so there was nothing to forget."
        return None


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
