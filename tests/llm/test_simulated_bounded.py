"""One chat message costs the event loop time linear in its length, whatever it holds.

The simulated model, the deterministic task planner and the context/skills text helpers apply fixed regexes to
text a person or an LLM wrote. Each input below made one of them backtrack quadratically (or worse): a long run
of whitespace between two words, of digits, of ``{`` or ``[``, or a failing match retried at every split of a
run. At 100,000 characters the old patterns took minutes to hours, blocking every tenant on the node; the
module's timeout turns that into a failure. No timing is asserted: each answer is checked, and is what the
same request gets when it is short.
"""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.context._compress import anchors, fallback_summary
from minihermes.context._text import snippet
from minihermes.llm import CompletionRequest, Message, SimulatedProvider
from minihermes.llm.simulated import Plan, Step, parse_procedures
from minihermes.llm.simulated._planner import MAX_REQUEST_CHARS, MAX_REQUEST_PIECES
from minihermes.skills._extract import parse_name
from minihermes.skills._text import tokens
from minihermes.work.plan import MAX_PLANNED_CHARS, plan_deterministic, plan_from_llm

from .support import default_tools, run_turn, tool

pytestmark = pytest.mark.timeout(30)

N = 100_000
SPACES = " " * N
TOOLS = [*default_tools(), tool("weather", "city")]


def _plan(text: str, system: str = "You are a helpful assistant.") -> list[Any]:
    """What the model plans for ``text`` with no length limit: (tool, args) per step, or a note's text."""
    model = SimulatedProvider()
    messages = [Message(role="system", content=system), Message(role="user", content=text)]
    plan: Plan = model.planner.plan(CompletionRequest(messages=messages, tools=TOOLS), text)
    return [(i.tool, i.args) if isinstance(i, Step) else i.text for i in plan.items]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("hello" + SPACES + "there", [], id="spaces-between-words"),
        pytest.param(
            "remember my x" + SPACES + "is" + SPACES + "42",
            [("memory_store", {"key": "x", "value": "42"})],
            id="remember-fact",
        ),
        pytest.param("remember my x is 4" + " is 4" * (N // 5) + "\nthat", [], id="remember-many-is"),
        pytest.param("remember k:" + SPACES + "\nz", [], id="remember-colon"),
        pytest.param(
            "calculate 6*7 and remember the result as" + SPACES + "\nz",
            [("calculator", {"expression": "6 * 7"})],
            id="remember-result-as",
        ),
        pytest.param("what is my a" + SPACES + "b", [("memory_recall", {"key": "a b"})], id="recall"),
        pytest.param("search memory for" + SPACES + "x\ny", [], id="search-for"),
        pytest.param("find a" + SPACES + "in memory", [("memory_search", {"query": "a"})], id="search-in"),
        pytest.param(
            "write hello" + SPACES + "to a.txt",
            [("write_file", {"path": "a.txt", "content": "hello"})],
            id="write-to",
        ),
        pytest.param(
            "create file a.txt with the" + SPACES + "\nz",
            [("write_file", {"path": "a.txt", "content": "z"})],
            id="create-with",
        ),
        pytest.param("weather in" + SPACES + "Paris", [("weather", {"city": "Paris"})], id="named-tool"),
        pytest.param("calculate " + "1" * N + "% of 5", [], id="digits-percent"),
        pytest.param("what is " + "1." * (N // 2) + "5 percent of 80", [], id="dotted-digits-percent"),
        pytest.param("calculate " + "1+" * (N // 2) + "1", [], id="long-sum"),
        pytest.param(", " * (N // 2), [], id="separators"),
    ],
)
def test_planning_any_long_message_is_linear(text: str, expected: list[Any]) -> None:
    assert _plan(text) == expected


def test_clauses_split_by_a_long_tab_run_still_chain() -> None:
    steps = _plan("calculate 2+2" + "\t" * N + "and remember the result")
    assert [tool for tool, _ in steps] == ["calculator", "memory_store"]
    assert steps[1][1]["key"] == "last_calc"


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        pytest.param(
            "## Relevant Skills\n### a"
            + SPACES
            + "b\n1. calculator: evaluate 2+3\n2. memory_store: store it",
            [("a" + SPACES + "b", ["calculator", "memory_store"])],
            id="heading",
        ),
        pytest.param(
            "## Skills\nskill: a" + SPACES + "b\ncalculator" + SPACES + "-> memory_store",
            [("a" + SPACES + "b", ["calculator", "memory_store"])],
            id="named-and-arrow",
        ),
        pytest.param(
            "## Skills\n### c\n1." + SPACES + "calculator " + "{" * N + "\n2) memory_store key=k value=v",
            [("c", ["calculator", "memory_store"])],
            id="numbered-and-braces",
        ),
    ],
)
def test_procedures_in_a_long_system_prompt_parse_linearly(system: str, expected: list[Any]) -> None:
    procedures = parse_procedures(system, ["calculator", "memory_store"])
    assert [(p.name, [s.tool for s in p.steps]) for p in procedures] == expected


# -- through the provider: the limits, and answers on long messages under them ------------------------------


async def test_an_over_long_message_is_answered_honestly_without_planning() -> None:
    model = SimulatedProvider()
    turn = await run_turn(model, [], "hello" + SPACES + "there", tools=TOOLS)
    assert turn.calls == [] and turn.iterations == 1
    assert f"{N + 10:,} characters" in turn.text
    assert f"up to {MAX_REQUEST_CHARS:,} characters" in turn.text


async def test_a_message_of_too_many_parts_is_answered_honestly() -> None:
    model = SimulatedProvider()
    turn = await run_turn(model, [], "calculate 1+1, " * (MAX_REQUEST_PIECES + 20), tools=TOOLS)
    assert turn.calls == []
    assert f"up to {MAX_REQUEST_PIECES:,} parts" in turn.text


async def test_a_long_message_under_the_limit_gets_its_usual_answer() -> None:
    model = SimulatedProvider()
    gap = " " * (MAX_REQUEST_CHARS - 100)
    turn = await run_turn(model, [], "remember my x" + gap + "is 42", tools=TOOLS)
    assert turn.calls == [("memory_store", {"key": "x", "value": "42"})]
    assert turn.text == "Got it. I'll remember that your x is 42."


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("calculate " + "1" * 400 + "% of 5", id="overflows-a-float"),
        pytest.param("calculate " + "1 + " * 2000 + "1", id="nested-too-deep"),
    ],
)
async def test_arithmetic_it_cannot_foresee_goes_to_the_calculator(text: str) -> None:
    # Both used to raise from the model (OverflowError, RecursionError): a failed turn instead of an answer.
    model = SimulatedProvider()
    request = CompletionRequest(messages=[Message(role="user", content=text)], tools=TOOLS)
    completion = await model.complete(request)
    assert [call.name for call in completion.tool_calls] == ["calculator"]


# -- the orchestrator's deterministic planner -----------------------------------------------------------------


@pytest.mark.timeout(10)  # the old patterns took 14 s here (under the limit's length); these take ms
def test_a_task_split_around_long_whitespace_runs() -> None:
    gap = " " * ((MAX_PLANNED_CHARS - 100) // 2)
    plan = plan_deterministic("calculate 1+1" + gap + "and check it" + gap + "then summarize")
    assert [(s.task, s.after) for s in plan] == [
        ("calculate 1+1", []),
        ("check it", [0]),
        ("summarize", [1]),
    ]


def test_an_over_long_task_is_one_sub_task() -> None:
    task = "do a" + SPACES + "then do b"
    assert [(s.task, s.after) for s in plan_deterministic(task)] == [(task, [])]


def test_an_llm_plan_is_found_in_linear_time() -> None:
    assert plan_from_llm("[" * N) is None
    assert plan_from_llm("[" * N + "]") is None  # nested past the JSON parser's depth: not a plan
    good = 'Plan: [{"task": "a"}, {"task": "b", "after": [0]}] ' + "]" * N
    assert plan_from_llm(good) is None  # the first "[" to the last "]" is not JSON
    plan = plan_from_llm('Plan: [{"task": "a"}, {"task": "b", "after": [0]}]' + " " * N)
    assert plan is not None and [(s.task, s.after) for s in plan] == [("a", []), ("b", [0])]


# -- context and skills helpers that read chat and tool text --------------------------------------------------


@pytest.mark.parametrize("run", ["a", "1", "-", "a.", "_", "eyJ"])
def test_anchors_of_a_long_run(run: str) -> None:
    text = run * (N // len(run))
    found = anchors(text)
    assert found == ({text} if run == "1" else set())


def test_anchors_are_what_they_were() -> None:
    text = 'see "quoted value" at /tmp/a.txt, id ab12, x_y, 42 and -3.5 (café9, "b c d")'
    assert anchors(text) == {"quoted value", "/tmp/a.txt", "ab12", "x_y", "42", "-3.5", "café9", "b c d"}
    # RE2 reads UTF-8: a lone surrogate (valid in a JSON string) reads as "?".
    assert anchors('id ab12 "b\ud800 c d"') == {"ab12", "b? c d"}


def test_a_snippet_of_a_long_word() -> None:
    word = "(a" + "!" * N + "b)"
    assert snippet(f"x {word} y", ["x"]) == f"[x] {word} y"


def test_skill_terms_of_a_long_number() -> None:
    assert tokens("1" * N + " then 3*4") == ["arithmetic"]
    assert tokens("1" * N + " + 2 then 3*4") == ["arithmetic", "arithmetic"]


def test_a_summary_heading_with_a_long_gap() -> None:
    for heading in ("## Facts" + SPACES + "!", "##" + SPACES + "Facts" + SPACES):
        middle = [{"role": "user", "is_summary": True, "content": f"{heading}\n- kept fact"}]
        assert "## Facts\n- kept fact" in fallback_summary([], middle)


def test_a_skill_name_reply_of_many_braces() -> None:
    assert parse_name("{" * 3 * N) is None
    assert parse_name('{"name": "add-up", "description": "Adds."}' + "}" * N) is None
    assert parse_name('x {"name": "add up", "description": "Adds numbers."} y') == {
        "name": "add-up",
        "description": "Adds numbers.",
    }
