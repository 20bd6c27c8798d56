"""What the simulated model understands: one ``Intent`` per kind of request.

An intent turns a clause into plan items (tool steps, or notes when the tool it needs is not offered)
and, once a step's result is in the conversation, describes that result for the final answer. New
intents are added by passing a list to ``SimulatedProvider(intents=...)``.
"""

from __future__ import annotations

import re
from typing import Any

from .._types import ToolSpec
from ._arith import ArithmeticError_, evaluate, find_expression, format_number, pretty
from ._files import ListFiles, ReadFile, WriteFile
from ._memory import Recall, Remember, Search
from ._plan import Intent, Item, Note, Outcome, ParseContext, Step
from ._text import Toolbox, strip_quotes


class Calculate(Intent):
    """Arithmetic in symbols or words: the calculator gets the expression ("12 plus 30" -> "12 + 30")."""

    name = "calculate"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        expression = find_expression(clause)
        if expression is None:
            return None
        try:
            prediction: str | None = format_number(evaluate(expression))
        except ArithmeticError_:
            prediction = None
        tool = ctx.toolbox.find("calculator")
        if tool is None:
            # A model without a calculator still knows arithmetic; it answers directly.
            if prediction is None:
                return [Note(f"I can't evaluate {pretty(expression)}.")]
            return [Note(f"{pretty(expression)} = {prediction}.", value=prediction)]
        param = ctx.toolbox.param(tool, ("expression", "expr", "input", "formula", "query"))
        return [
            Step(
                ctx.key(),
                self.name,
                tool.name,
                {param: expression},
                subject=expression,
                prediction=prediction,
                produces=True,
            )
        ]

    def describe(self, step: Step, outcome: Outcome) -> str:
        return f"{pretty(step.subject)} = {outcome.value or '(no result)'}."


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
                return [Note(f"To use {tool.name} I need: {', '.join(missing)}.")]
            return [Step(ctx.key(), self.name, tool.name, args, subject=tool.name, produces=True)]
        return None

    def describe(self, step: Step, outcome: Outcome) -> str:
        return f"The {step.tool} tool returned: {outcome.value or outcome.content}."


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
    "read_file": ReadFile.name,
    "write_file": WriteFile.name,
    "list_files": ListFiles.name,
}
SUBJECT_PARAMS = ("path", "file", "expression", "expr", "key", "query", "directory", "dir")

DEFAULT_INTENTS: tuple[Intent, ...] = (
    WriteFile(),
    ReadFile(),
    ListFiles(),
    Search(),
    Remember(),
    Recall(),
    Calculate(),
    UseTool(),
)
