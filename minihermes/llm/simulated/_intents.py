"""What the simulated model understands: one ``Intent`` per kind of request.

An intent turns a clause into plan items (tool steps, or notes when the tool it needs is not offered)
and, once a step's result is in the conversation, describes that result for the final answer. New
intents are added by passing a list to ``SimulatedProvider(intents=...)``.
"""

from __future__ import annotations

import re
from typing import Any

from .._types import ToolSpec
from ._arith import (
    ArithmeticError_,
    arithmetic_clause,
    continuation,
    evaluate,
    format_number,
    normalize,
    pretty,
)
from ._files import ListFiles, ReadFile, WriteFile, quote_block
from ._memory import Forget, Recall, RecallKey, RecallThe, Remember, Search
from ._plan import Intent, Item, Note, Outcome, ParseContext, Ref, Step
from ._text import Toolbox, strip_quotes
from ._work import Courtesy, FindTools, Goals, Kanban, Reminders


class Calculate(Intent):
    """Arithmetic in symbols or words: the calculator gets the expression ("12 plus 30" -> "12 + 30").

    The whole clause must be arithmetic. A clause that goes on from the previous result ("add 100 to it",
    "times two", "squared") is a new calculation on that result, left to right."""

    name = "calculate"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        expression = arithmetic_clause(clause)
        if expression is not None:
            return [self._step(ctx, expression, _predict(expression))]
        template = continuation(clause)
        if template is None:
            return None
        source = ctx.last_result()
        if source is None:
            return [
                Note(f'I can\'t tell what "{clause}" applies to: there is no earlier result.', cannot=True)
            ]
        if isinstance(source, Note):
            expression = normalize(template.format(_operand(source.value)))
            return [self._step(ctx, expression, _predict(expression))]
        ref = Ref(source.key, template)
        prediction = None
        if source.prediction is not None:
            prediction = _predict(normalize(ref.fill(source.prediction)))
        return [self._step(ctx, ref, prediction)]

    def _step(self, ctx: ParseContext, expression: str | Ref, prediction: str | None) -> Item:
        tool = ctx.toolbox.find("calculator")
        if tool is None:
            # A model without a calculator still knows arithmetic; it answers directly.
            if isinstance(expression, Ref) or prediction is None:
                shown = "that" if isinstance(expression, Ref) else pretty(expression)
                return Note(f"I can't evaluate {shown} here: no calculator is available.", cannot=True)
            return Note(f"{pretty(expression)} = {prediction}.", value=prediction)
        param = ctx.toolbox.param(tool, ("expression", "expr", "input", "formula", "query"))
        subject = expression if isinstance(expression, str) else ""
        return Step(
            ctx.key(),
            self.name,
            tool.name,
            {param: expression},
            subject=subject,
            prediction=prediction,
            produces=True,
            form=param,
        )

    def describe(self, step: Step, outcome: Outcome) -> str:
        sent = outcome.call.input.get(step.form) if step.form else None
        expression = sent if isinstance(sent, str) and sent else step.subject
        # A chained step computes on the exact earlier result; the person reads it as it was shown.
        shown = _DECIMAL.sub(_shorter, expression)
        return f"{pretty(shown)} = {outcome.shown or '(no result)'}."


_DECIMAL = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])")


def _shorter(match: re.Match[str]) -> str:
    """A float's full repr (7.3500000000000005) to 15 significant digits, as the calculator shows it."""
    text = match.group(0)
    return format(float(text), ".15g") if len(text) > 16 else text


def _predict(expression: str) -> str | None:
    try:
        return format_number(evaluate(expression))
    except ArithmeticError_:
        return None


def _operand(value: str) -> str:
    return f"({value})" if value.startswith("-") else value


class UseTool(Intent):
    """A request that names an offered tool the other intents do not know ("weather in Paris")."""

    name = "tool"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        for tool in ctx.toolbox.by_name.values():
            if ctx.toolbox.role_of(tool.name) is not None:
                continue
            mention = _mention(tool.name, clause)
            if mention is None:
                continue
            args = _explicit_args(tool, clause, ctx.toolbox)
            missing = [r for r in ctx.toolbox.required(tool) if r not in args]
            if len(missing) == 1 or (not args and not missing and len(ctx.toolbox.properties(tool)) == 1):
                name = missing[0] if missing else next(iter(ctx.toolbox.properties(tool)))
                value = _trailing_value(clause[mention:])
                if value:
                    args[name] = value
                missing = [r for r in ctx.toolbox.required(tool) if r not in args]
            if missing:
                return [Note(f"I can't use {tool.name} yet: I need {', '.join(missing)}.", cannot=True)]
            return [Step(ctx.key(), self.name, tool.name, args, subject=tool.name, produces=True)]
        return None

    def describe(self, step: Step, outcome: Outcome) -> str:
        if outcome.untrusted:
            return f"The {step.tool} tool returned (quoted as data):\n{quote_block(outcome.text)}"
        return f"The {step.tool} tool returned: {outcome.text}."


def _mention(name: str, clause: str) -> int | None:
    """The end offset of the tool's name in the clause ("get_weather" also as "get weather"/"weather")."""
    words = name.replace("_", " ").replace("-", " ")
    variants = {name, words, re.sub(r"^(?:get|fetch|lookup|search|find)\s+", "", words)}
    for variant in sorted(variants, key=len, reverse=True):
        found = re.search(rf"(?<![\w]){re.escape(variant)}(?![\w])", clause, re.I)
        if found:
            return found.end()
    return None


def _explicit_args(tool: ToolSpec, clause: str, toolbox: Toolbox) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for name in toolbox.properties(tool):
        found = re.search(rf"\b{re.escape(name)}\s*[=:]\s*(\"[^\"]*\"|'[^']*'|\S+)", clause)
        if found:
            args[name] = strip_quotes(found.group(1).rstrip(","))
    return args


def _trailing_value(text: str) -> str:
    """The argument a request gives after the tool's name: "weather in Paris" -> "Paris"."""
    parts = re.split(r"\b(?:in|for|of|about|on|at|to|with)\b", text, flags=re.I)
    value = parts[-1] if len(parts) > 1 else text
    return strip_quotes(value.strip(" ,:?!.\"'"))


# Which intent describes a step for a tool of each role (used when a procedure supplies the step).
ROLE_INTENTS = {
    "calculator": Calculate.name,
    "memory_store": Remember.name,
    "memory_recall": Recall.name,
    "memory_search": Search.name,
    "memory_delete": Forget.name,
    "read_file": ReadFile.name,
    "write_file": WriteFile.name,
    "list_files": ListFiles.name,
    "kanban_create": Kanban.name,
    "kanban_list": Kanban.name,
    "cron_schedule": Reminders.name,
    "cron_list": Reminders.name,
    "goal_set": Goals.name,
    "goal_list": Goals.name,
}
SUBJECT_PARAMS = ("path", "file", "expression", "expr", "key", "query", "directory", "dir")

DEFAULT_INTENTS: tuple[Intent, ...] = (
    Courtesy(),
    WriteFile(),
    ReadFile(),
    ListFiles(),
    Kanban(),
    Reminders(),
    Goals(),
    Search(),
    Forget(),
    Remember(),
    Recall(),
    Calculate(),
    UseTool(),
    RecallThe(),
    RecallKey(),
    FindTools(),
)
