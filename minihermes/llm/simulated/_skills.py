"""Learned procedures in the system prompt, and the advisor that makes the simulated model follow them.

The agent injects matched skills into the system prompt. The format this module reads::

    ## Relevant Skills
    ### calc-and-remember
    1. calculator: evaluate the expression from the request
    2. memory_store: store the result under key last_calc

A section starts at a heading naming skills or procedures; each sub-heading (or ``Skill: name`` line)
starts a procedure; numbered lines (``1.``, ``2)``, ``Step 3:``) or an arrow chain
(``calculator -> memory_store``) are its steps. A step is the first offered tool its line names, with any
arguments the line spells out as ``key=value`` or a JSON object. Lines naming no offered tool are prose.

Effect: a model that knows the procedure does not discover the steps one round at a time. It emits every
step whose inputs it knows (or can foresee, like an arithmetic result) in one response, so a repeated
task takes fewer LLM iterations. If the request alone gave no plan, the procedure supplies the steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ._intents import ROLE_INTENTS, SUBJECT_PARAMS
from ._plan import Note, ParseContext, Plan, Step
from ._planner import PlanningContext
from ._text import clean_clause, strip_quotes

# The system prompt holds memories and skills people wrote: every pattern here is linear in a line's length
# (no lazy group before a trailing whitespace run, no two quantifiers that share a whitespace run).
_HEADING = re.compile(r"(?P<level>#{1,6})(?P<title>.*)")
_SECTION_TITLE = re.compile(r"^(?:relevant\s+|learned\s+|known\s+)?(?:skills?|procedures?)\b", re.I)
_NAMED = re.compile(
    r"^\s*(?:[-*]\s+)?(?:\*\*)?(?:skill|procedure|name)\s*[:=]\s*"
    r"(?P<name>(?!\s).*?(?:\S|[^\S\n](?=\*\*\s*$))|[^\S\n])(?:\*\*)?\s*$",
    re.I,
)
_NUMBERED = re.compile(r"^\s*(?:\d+\s*[.)]|step\s*\d+\s*[:.)-]?)\s*(?P<text>.+)$", re.I)
_ARROW = re.compile(r"(?:(?<!\s)\s+)?(?:->|→|=>)\s*")
_KV = re.compile(r"\b(?P<key>[A-Za-z_]\w*)\s*=\s*(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;]+)")


@dataclass(frozen=True)
class ProcedureStep:
    """One step of a procedure: the tool, the line it came from, and arguments the line spells out."""

    tool: str
    text: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Procedure:
    name: str
    steps: tuple[ProcedureStep, ...]

    @property
    def tools(self) -> set[str]:
        return {step.tool for step in self.steps}


def parse_procedures(text: str, tools: Iterable[str]) -> list[Procedure]:
    """Every procedure in the skills sections of ``text`` whose steps name one of ``tools``."""
    names = sorted(set(tools), key=len, reverse=True)
    procedures: list[Procedure] = []
    section_level: int | None = None
    name: str | None = None
    steps: list[ProcedureStep] = []

    def flush() -> None:
        nonlocal steps
        if steps:
            procedures.append(Procedure(name or f"procedure-{len(procedures) + 1}", tuple(steps)))
        steps = []

    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            # "## Title ##" -> "Title": the title without the whitespace and closing #s around it.
            level, title = len(heading.group("level")), heading.group("title").strip().rstrip("#").rstrip()
            if _SECTION_TITLE.match(title):
                flush()
                section_level, name = level, None
            elif section_level is not None and level > section_level:
                flush()
                name = title
            else:
                flush()
                section_level = None
            continue
        if section_level is None:
            continue
        if named := _NAMED.match(line):
            flush()
            name = named.group("name")
        elif numbered := _NUMBERED.match(line):
            step = _step(numbered.group("text"), names)
            if step is not None:
                steps.append(step)
        elif _ARROW.search(line):
            steps.extend(s for part in _ARROW.split(line) if (s := _step(part, names)) is not None)
    flush()
    return procedures


def _step(text: str, tools: list[str]) -> ProcedureStep | None:
    found = [
        (m.start(), tool) for tool in tools if (m := re.search(rf"(?<![\w]){re.escape(tool)}(?![\w])", text))
    ]
    if not found:
        return None
    _, tool = min(found)
    return ProcedureStep(tool, text.strip(), _explicit_args(text))


def _explicit_args(text: str) -> dict[str, Any]:
    start, end = text.find("{"), text.rfind("}")  # as r"\{.*\}" finds, without its quadratic retries
    if 0 <= start < end:
        try:
            value = json.loads(text[start : end + 1])
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            return value
    return {m.group("key"): strip_quotes(m.group("value")) for m in _KV.finditer(text)}


class SkillProcedures:
    """The default ``PlanAdvisor``: follow the best-matching procedure from the system prompt."""

    def advise(self, plan: Plan, ctx: PlanningContext) -> Plan:
        procedures = parse_procedures(ctx.request.system_text, ctx.toolbox.names)
        if not procedures:
            return plan
        if plan.steps:
            wanted = {step.tool for step in plan.steps}
            overlap = [len(p.tools & wanted) for p in procedures]
            best = max(range(len(procedures)), key=lambda i: overlap[i])
            if overlap[best] == 0:
                # The injected skill is about other tools; the request's own plan stands.
                return plan
            # Every clause still counts: a clause no intent understood is a request of its own ("and
            # tell me a joke"), which the procedure neither does nor excuses.
            return Plan(plan.items, batch=True, procedure=procedures[best].name, unknown=list(plan.unknown))
        if len(plan.unknown) > 1 or any(isinstance(i, Note) and i.cannot for i in plan.items):
            # Several requests none of which was understood, or one that cannot be done: the procedure
            # stands in for one vague request ("do the weekly report"), never for a list of them.
            return plan
        # The request named no steps the model understood; the procedure it was given does.
        for procedure in procedures:
            items = self._derive(procedure, ctx)
            if items:
                return Plan([*plan.items, *items], batch=True, procedure=procedure.name, unknown=[])
        return plan

    def _derive(self, procedure: Procedure, ctx: PlanningContext) -> list[Step]:
        parsing = ParseContext(ctx.toolbox)
        for proc_step in procedure.steps:
            step = self._derive_step(proc_step, ctx, parsing)
            if step is not None:
                parsing.items.append(step)
        return [item for item in parsing.items if isinstance(item, Step)]

    def _derive_step(
        self, proc_step: ProcedureStep, ctx: PlanningContext, parsing: ParseContext
    ) -> Step | None:
        # The line minus the tool's name often reads as a request ("store the result under key x"); else
        # the user's own words may carry the input (an expression, a path).
        line = re.sub(rf"^\W*{re.escape(proc_step.tool)}\W*", "", proc_step.text)
        for text in (line, ctx.user_text):
            for intent in ctx.intents:
                items = intent.parse(clean_clause(text), parsing)
                step = next(
                    (i for i in items or [] if isinstance(i, Step) and i.tool == proc_step.tool), None
                )
                if step is not None:
                    return replace(step, args={**step.args, **proc_step.args})
        tool = ctx.toolbox.by_name[proc_step.tool]
        args = dict(proc_step.args)
        if not args or not all(r in args for r in ctx.toolbox.required(tool)):
            return None
        role = ctx.toolbox.role_of(tool.name)
        intent_name = ROLE_INTENTS.get(role or "", "tool")
        subject = next((str(args[p]) for p in SUBJECT_PARAMS if p in args), tool.name)
        form = "content" if role == "write_file" else ""
        return Step(parsing.key(), intent_name, tool.name, args, subject=subject, form=form, produces=True)
