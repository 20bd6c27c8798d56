"""The simulated model's reasoning: plan the request, then take the next step the conversation lacks.

Stateless by design: every call re-reads the conversation, re-plans the last user message, matches the
tool calls already made in this turn to plan steps, and either emits the next step(s) or ends the turn
with an answer composed from the actual tool results. A restarted or failed-over gateway therefore gets
the same behaviour from the same history, and the model cannot loop: a plan is finite, an error ends
the turn, and a round limit backs both up.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .._types import CompletionRequest, Message, ToolCall
from ._arith import ArithmeticError_, evaluate
from ._directives import Directive, verdicts
from ._directives import split as split_directive
from ._directives import whole as whole_directive
from ._failures import failure
from ._memory import join_statements
from ._plan import Intent, Item, Note, Outcome, ParseContext, Plan, Ref, Step
from ._replies import chat_reply, refusal, too_long
from ._text import ROLE_NAMES, Toolbox, as_text, clean_clause, count_pieces, split_clauses
from ._typos import read_typos
from ._work import FindTools

MAX_REQUEST_CHARS = 10_000
MAX_REQUEST_PIECES = 100
"""The longest user message the model plans from, and the most pieces (clauses, list items) it may split
into. Planning is linear in the message's length (every pattern it applies is) and in its pieces times the
tools offered, but it runs on the event loop: a larger message gets an honest "I can't" instead."""
MAX_ONE_BY_ONE = 6
"""A plan of more steps sends the independent ones together: one at a time, a long request would run out of
the agent's rounds (8 by default) and end unfinished."""


@dataclass(frozen=True)
class PlanningContext:
    """What an advisor may consult: the request, its last user message, the tools and the intents."""

    request: CompletionRequest
    user_text: str
    toolbox: Toolbox
    intents: Sequence[Intent]


class PlanAdvisor(Protocol):
    """Reshapes a plan from context beyond the user's words, e.g. a learned procedure in the system prompt."""

    def advise(self, plan: Plan, ctx: PlanningContext) -> Plan: ...


@dataclass(frozen=True)
class Turn:
    """The current turn: the last user message and the tool calls (with results) made since."""

    user_text: str
    user_index: int
    calls: list[Outcome] = field(default_factory=list)
    rounds: int = 0
    orphans: dict[str, Message] = field(default_factory=dict)
    """Tool results whose call is missing from the history (an agent that dropped ``tool_calls``)."""

    @property
    def digest(self) -> str:
        """Names this turn in the tool-call ids the model makes, so results find their step by id too."""
        return hashlib.sha256(f"{self.user_index}|{self.user_text}".encode()).hexdigest()[:10]

    @classmethod
    def read(cls, request: CompletionRequest) -> Turn:
        messages = request.messages
        user_index = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        if user_index < 0:
            return cls("", -1)
        results = {m.tool_call_id: m for m in messages[user_index + 1 :] if m.role == "tool"}
        calls: list[Outcome] = []
        rounds = 0
        for message in messages[user_index + 1 :]:
            if message.role == "assistant" and message.tool_calls:
                rounds += 1
                for call in message.tool_calls:
                    result = results.get(call.id)
                    calls.append(
                        Outcome.of(
                            call, result.content if result else None, result.is_error if result else False
                        )
                    )
        answered = {outcome.call.id for outcome in calls}
        orphans = {key: m for key, m in results.items() if key is not None and key not in answered}
        return cls(messages[user_index].content, user_index, calls, rounds, orphans)


@dataclass(frozen=True)
class Decision:
    """What the model says next: text, and tool calls if the turn goes on."""

    content: str
    tool_calls: list[ToolCall]


class Planner:
    """Turns a request into the next response. ``intents`` parse, ``advisors`` reshape the plan."""

    def __init__(self, intents: Sequence[Intent], advisors: Sequence[PlanAdvisor] = ()) -> None:
        self.intents = list(intents)
        self.advisors = list(advisors)
        self._by_name = {intent.name: intent for intent in self.intents}

    def plan(self, request: CompletionRequest, user_text: str) -> Plan:
        toolbox = Toolbox(request.tools)
        ctx = ParseContext(toolbox, earlier_result=_earlier_result(request))
        unknown = []
        directives: list[Directive] = []
        clauses = split_clauses(user_text, lambda piece: self._parses(piece, toolbox))
        clauses = join_statements(clauses, lambda clause: self._parses(clause, toolbox))
        for clause in clauses:
            if (directive := whole_directive(clause, toolbox)) is not None:
                directives.append(directive)
                continue
            items = self._parse_directed(clause, ctx, directives)
            if items is not None and len(clauses) > 1 and any(isinstance(i, Step) and i.alone for i in items):
                items = None
            if items is None:
                unknown.append(clause)
            else:
                ctx.items.extend(items)
        plan = Plan(_find_first(ctx.items), unknown=unknown)
        planning = PlanningContext(request, user_text, toolbox, self.intents)
        for advisor in self.advisors:
            plan = advisor.advise(plan, planning)
        # "use the calculator" holds only if the plan does use it; else the turn says it can't.
        plan.items.extend(verdicts(directives, plan))
        if len(plan.steps) > MAX_ONE_BY_ONE:
            plan.batch = True
        return plan

    def respond(self, request: CompletionRequest) -> Decision:
        turn = Turn.read(request)
        if turn.user_index < 0:
            return Decision("How can I help?", [])
        if len(turn.user_text) > MAX_REQUEST_CHARS:
            return Decision(too_long(f"{len(turn.user_text):,} characters", MAX_REQUEST_CHARS), [])
        if (pieces := count_pieces(turn.user_text)) > MAX_REQUEST_PIECES:
            return Decision(too_long(f"{pieces:,} parts", MAX_REQUEST_PIECES), [])
        asked = card_request(request.system_text, turn.user_text)
        plan = self.plan(request, asked)
        toolbox = Toolbox(request.tools)
        cannot = [item for item in plan.items if isinstance(item, Note) and item.cannot]
        if not plan.items and not turn.calls:
            return Decision(chat_reply(asked, plan.unknown, toolbox), [])
        if (plan.unknown or cannot) and not turn.calls:
            return Decision(refusal(plan, cannot, toolbox), [])
        done = _match(plan, turn)
        failed = next((step for step in plan.steps if step.key in done and done[step.key].error), None)
        found = next((s for s in plan.steps if s.intent == FindTools.name and s.key in done), None)
        if found is not None and failed is None:
            # find_tools ran and the tools it was asked for are still not offered: nothing else is done.
            return Decision(self._compose(Plan([found]), done), [])
        pending = [step for step in plan.steps if step.key not in done]
        if failed is not None or not pending:
            return Decision(self._compose(plan, done), [])
        if turn.rounds >= len(plan.steps) + 2:
            stopped = f"I stopped after {turn.rounds} rounds of tool calls without finishing."
            return Decision(f"{self._compose(plan, done)} {stopped}".strip(), [])
        calls = self._next_calls(plan, pending, done, turn)
        if not calls:
            return Decision(self._compose(plan, done), [])
        names = list(dict.fromkeys(call.name for call in calls))
        return Decision(f"Let me use {', '.join(names)}.", calls)

    def _parses(self, piece: str, toolbox: Toolbox) -> bool:
        clause = clean_clause(piece)
        if whole_directive(clause, toolbox) is not None:
            return True
        return self._parse_directed(clause, ParseContext(toolbox), []) is not None

    def _parse_directed(
        self, clause: str, ctx: ParseContext, directives: list[Directive]
    ) -> list[Item] | None:
        """Parse a clause that may start or end with the tool to use ("what is 6 * 7 using the calculator").

        The clause without the directive is preferred when its plan uses the named tool; else the whole
        clause, if it parses ("remember I cook with the calculator" may be a fact); else the rest, with the
        directive left for the plan to answer for."""
        found = split_directive(clause, ctx.toolbox)
        if found is None:
            return self._parse(clause, ctx)
        rest, directive = found
        items = self._parse(rest, ctx)
        if items is not None and directive.used_by({i.tool for i in items if isinstance(i, Step)}):
            directives.append(directive)
            return items
        whole = self._parse(clause, ctx)
        if whole is not None:
            return whole
        if items is not None:
            directives.append(directive)
        return items

    def _parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        items = self._parse_as_written(clause, ctx)
        if items is not None and not any(isinstance(i, Note) and i.cannot for i in items):
            return items
        # Not understood as written: a one-letter typo in a keyword ("remeber", "calcualte") is read as the
        # keyword, and kept only if the whole clause is then understood (and said in the answer).
        reading = read_typos(clause)
        if reading is None:
            return items
        fixed = self._parse_as_written(reading.text, ctx)
        if fixed is None:
            return items
        if any(isinstance(i, Note) and i.cannot for i in fixed):
            # Read, but it cannot be done ("forgt my dog's name" with no tool to forget): its honest "I can't"
            # is better than "I don't understand"; a clause that had its own "I can't" keeps it.
            return fixed if items is None else items
        return [*fixed, Note(reading.note())]

    def _parse_as_written(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        for intent in self.intents:
            items = intent.parse(clause, ctx)
            if items is not None:
                return items
        return None

    def _next_calls(
        self, plan: Plan, pending: list[Step], done: dict[str, Outcome], turn: Turn
    ) -> list[ToolCall]:
        """The next step, or with ``plan.batch`` every step whose inputs are known or foreseeable."""
        values = {key: outcome.value for key, outcome in done.items()}
        shown = {key: outcome.shown for key, outcome in done.items()}
        if pending[0].intent == FindTools.name:
            # The tools it finds come first, alone: nothing runs before the whole request can.
            return [ToolCall(id=_call_id(turn, pending[0]), name=pending[0].tool, input=pending[0].args)]
        calls = []
        for step in pending:
            args = _resolve(step.args, values, shown)
            if args is None:
                if plan.batch:
                    continue
                break
            calls.append(ToolCall(id=_call_id(turn, step), name=step.tool, input=args))
            if not plan.batch:
                break
            if step.prediction is not None:
                # Following a known procedure, the model passes on the value it foresees instead of
                # waiting a round for the tool to confirm it.
                values[step.key] = shown[step.key] = step.prediction
        return calls

    def _compose(self, plan: Plan, done: dict[str, Outcome]) -> str:
        parts: list[str] = []
        for item in plan.items:
            if isinstance(item, Note):
                parts.append(item.text)
                continue
            outcome = done.get(item.key)
            if outcome is None:
                continue
            intent = self._by_name.get(item.intent)
            if outcome.error:
                done_so_far = " ".join(parts)
                explained = intent.explain(item, outcome) if intent else None
                parts = [explained or failure(item, outcome)]  # in words, with the next step
                if done_so_far:
                    parts.append(f"Before that: {done_so_far}")
                break
            parts.append(
                intent.describe(item, outcome) if intent else f"{item.tool} returned {outcome.value}."
            )
            parts.extend(_foresight_mismatches(item, outcome, done))
        return "\n".join(parts) if any("\n" in p for p in parts) else " ".join(parts)


_CARD = re.compile(r"This turn works on kanban card \S+ \((?P<title>[^\n]*)\) for its author")
"""The kanban worker's instructions for a card's turn (``minihermes/work/kanban_worker.py``,
``worker_instructions``): the user message is then the card, its title, a blank line and its body."""
_HAND_OFF = "\n\nHand-off from the cards this one depends on:\n"


def card_request(system: str, message: str) -> str:
    """What a kanban card asks: its body when it has one (the title names the request, the body is it), else
    its title; the hand-off from the cards it depends on is context, not a request. Any other message is the
    request as it is."""
    card = _CARD.search(system) if "kanban card" in system else None
    if card is None:
        return message
    message = message.split(_HAND_OFF, 1)[0]
    title, _, body = message.partition("\n\n")
    if " ".join(title.split())[:300] != card.group("title") or not body.strip():
        return message
    return body.strip()


def _find_first(items: list[Item]) -> list[Item]:
    """The request's ``find_tools`` steps as one, first: one call finds every toolset the request needs
    before anything else runs (whole or not at all)."""
    finds = [i for i in items if isinstance(i, Step) and i.intent == FindTools.name]
    if not finds:
        return items
    toolsets = list(dict.fromkeys(t for step in finds for t in step.args.get("toolsets", [])))
    subject = " and ".join(dict.fromkeys(step.subject for step in finds))
    merged = replace(finds[0], args={**finds[0].args, "toolsets": toolsets}, subject=subject)
    return [merged, *(i for i in items if not (isinstance(i, Step) and i.intent == FindTools.name))]


def _foresight_mismatches(step: Step, outcome: Outcome, done: dict[str, Outcome]) -> list[str]:
    """Own up when a value passed on ahead of its tool's answer turned out different from that answer."""
    notes = []
    for name, value in step.args.items():
        if not isinstance(value, Ref) or value.step not in done:
            continue
        source = done[value.step]
        sent = as_text(outcome.call.input.get(name, ""))
        actual = value.fill(source.value, source.shown)
        if not _same(sent, actual, value.fill(source.shown, source.shown)):
            # What the source returned is its value, not the argument it makes ("7.35", not "7.35 * 2").
            should = f" (so it should have been {actual!r})" if actual != source.shown else ""
            notes.append(
                f"Note: {step.tool} got {name} {sent!r} before {source.call.name} returned "
                f"{source.shown!r}{should}."
            )
    return notes


def _same(sent: str, actual: str, shown: str) -> bool:
    """Whether a value passed on ahead of its tool's answer is that answer: the same text, or arithmetic
    whose value is the same but for rounding (7.35 foreseen for 7.3500000000000005)."""
    if sent in (actual, shown):
        return True
    try:
        a, b = evaluate(sent), evaluate(actual)
    except ArithmeticError_:
        return False
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _earlier_result(request: CompletionRequest) -> str | None:
    """The last successful calculator result before the last user message: "the last result" is this
    conversation's, never one a memory kept from another."""
    messages = request.messages
    user_index = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    calls = {
        call.id: call for m in messages[:user_index] if m.role == "assistant" for call in m.tool_calls or []
    }
    for message in reversed(messages[:user_index]):
        call = calls.get(message.tool_call_id or "") if message.role == "tool" else None
        if call is None or call.name not in ROLE_NAMES["calculator"]:
            continue
        outcome = Outcome.of(call, message.content, message.is_error)
        if outcome.error is None and outcome.shown:
            return outcome.shown
    return None


def _match(plan: Plan, turn: Turn) -> dict[str, Outcome]:
    """Pair the turn's tool calls with plan steps, in order, by tool name; then results by our call ids."""
    done: dict[str, Outcome] = {}
    for outcome in turn.calls:
        step = next((s for s in plan.steps if s.key not in done and s.tool == outcome.call.name), None)
        if step is not None:
            done[step.key] = outcome
    for step in plan.steps:
        call_id = _call_id(turn, step)
        if step.key not in done and call_id in turn.orphans:
            result = turn.orphans[call_id]
            call = ToolCall(id=call_id, name=step.tool, input={})
            done[step.key] = Outcome.of(call, result.content, result.is_error)
    return done


def _call_id(turn: Turn, step: Step) -> str:
    return f"call_{turn.digest}_{step.key}"


def _resolve(args: dict[str, Any], values: dict[str, str], shown: dict[str, str]) -> dict[str, Any] | None:
    resolved = {}
    for name, value in args.items():
        if isinstance(value, Ref):
            if value.step not in values:
                return None
            value = value.fill(values[value.step], shown.get(value.step))
        resolved[name] = value
    return resolved
