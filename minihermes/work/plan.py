"""Planning a task into sub-tasks with dependencies: the LLM's plan when it is usable, else a deterministic
planner.

The deterministic planner reads the structure people write tasks in: numbered or bulleted lists, one step per
sentence or per ``;``, and sequencing words (``then``, ``after that``, ``finally``, ``next``) that make a step
depend on the one before. Inside a sentence, ``and`` splits only between two instructions (the right side
starts with an imperative verb: "calculate 6*7 and remember the result" is two steps, "explain cats and
dogs" is one). A step that refers back ("the result", "it", "that", "them") depends on the step before; all
other steps are independent and run concurrently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

PLAN_PROMPT = (
    "Split the user's task into at most 8 self-contained sub-tasks an assistant can do one by one. Answer "
    'with JSON only: [{"task": "<instruction>", "after": [<indexes of earlier sub-tasks it needs>]}]. '
    "Use after only when a sub-task needs an earlier one's result; independent sub-tasks run in parallel. "
    "A task that is one step is a list of one."
)
VERBS = frozenset(
    """add analyse analyze answer ask build calculate check collect compare compile compute convert count create
    define delete describe design draft email estimate evaluate explain extract fetch figure find fix format
    generate get give identify implement investigate list look make measure note outline plan prepare
    recall remember research review rewrite run save schedule search send sort store suggest summarise
    summarize tell test translate update verify write""".split()
)
# Whitespace before a separator is taken from the start of its run only (``(?<!\s)``): the match is found
# there anyway, and trying each position of a long run rescans the rest of it (quadratic in its length).
_SEQ = re.compile(
    r"(?:(?<!\s)\s+)?(?:,\s*)?\b(?:and\s+then|then|after\s+that|afterwards|finally|next)\b\s*,?\s*", re.I
)
_AND = re.compile(r"((?:(?<!\s)\s+)?,\s*(?:and\s+)?|(?<!\s)\s+and\s+)")
MAX_PLANNED_CHARS = 20_000
"""A longer task is not split: it is one sub-task (planning reads it whole, in time linear in its length,
but a plan of a 100,000-character task would not help anyone)."""
_REFERS = re.compile(
    r"\b(?:the\s+(?:result|results|answer|output|above|findings|list|summary)|it|its|that|them|those|this)\b",
    re.I,
)
_ALL = re.compile(
    r"\b(?:them|those|these|both|all\s+of\s+(?:it|them)|the\s+(?:results|findings|answers))\b", re.I
)
_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022])\s+(?P<text>.+)$")


@dataclass(slots=True)
class SubTask:
    n: int
    task: str
    after: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "task": self.task, "after": list(self.after)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SubTask:
        return cls(int(d["n"]), str(d["task"]), [int(a) for a in d.get("after", [])])


def _split_and(sentence: str) -> list[str]:
    """Split a sentence at ``,`` / ``and`` only where an instruction (an imperative verb) follows."""
    pieces = _AND.split(sentence)
    out: list[str] = []
    current = [pieces[0]]  # joined once: gluing many pieces one by one is quadratic
    for sep, piece in zip(pieces[1::2], pieces[2::2], strict=True):
        first = piece.split(" ", 1)[0].lower().strip(",.")
        if first in VERBS:
            out.append("".join(current))
            current = [piece]
        else:
            current += (sep, piece)
    out.append("".join(current))
    return out


def plan_deterministic(task: str, max_subtasks: int = 8) -> list[SubTask]:
    """See the module docstring. Never empty: a task with no structure is one sub-task."""
    if len(task) > MAX_PLANNED_CHARS:
        return [SubTask(0, task.strip())]
    lines = [ln for ln in task.splitlines() if ln.strip()]
    items = [m.group("text") for m in (_ITEM.match(ln) for ln in lines) if m]
    steps: list[tuple[str, bool]] = []  # (text, sequential: depends on the previous step)
    if len(items) >= 2:
        steps = [(t.strip(), False) for t in items]
    else:
        for sentence in re.split(r"(?<=[.!?])\s+|;\s*|\n+", task.strip()):
            # A chunk after a sequencing word (even at the start of the sentence) follows the step before.
            for i, chunk in enumerate(_SEQ.split(sentence)):
                for j, clause in enumerate(_split_and(chunk.strip().rstrip("."))):
                    if clause.strip():
                        steps.append((clause.strip(), (i > 0 and j == 0)))
    plan: list[SubTask] = []
    for text, sequential in steps[:max_subtasks]:
        n = len(plan)
        after: list[int] = []
        if n and _ALL.search(text):
            after = list(range(n))  # "compare them", "summarize the results": everything before
        elif n and (sequential or _REFERS.search(text)):
            after = [n - 1]
        plan.append(SubTask(n, text, after))
    return plan or [SubTask(0, task.strip())]


def plan_from_llm(content: str, max_subtasks: int = 8) -> list[SubTask] | None:
    """The LLM's plan, or None when it is not a usable list (then the caller plans deterministically)."""
    # The first "[" to the last "]", as r"\[.*\]" (re.S) finds, without its quadratic retries.
    start, end = content.find("["), content.rfind("]")
    if not 0 <= start < end:
        return None
    try:
        data = json.loads(content[start : end + 1])
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    if not isinstance(data, list) or not data:
        return None
    plan: list[SubTask] = []
    for i, item in enumerate(data[:max_subtasks]):
        text = item.get("task") if isinstance(item, dict) else item if isinstance(item, str) else None
        if not isinstance(text, str) or not text.strip():
            return None
        after = item.get("after", []) if isinstance(item, dict) else []
        if not isinstance(after, list) or not all(isinstance(a, int) and 0 <= a < i for a in after):
            return None
        plan.append(SubTask(i, text.strip(), sorted(set(after))))
    return plan
