"""Learned procedures in the system prompt make the simulated model take fewer LLM iterations."""

from __future__ import annotations

from typing import Any

from minihermes.llm import CompletionRequest, SimulatedProvider
from minihermes.llm.simulated import Plan, PlanningContext, parse_procedures

from .support import FakeTools, default_tools, run_turn, tool

BASE = "You are a helpful assistant with access to tools."
CALC_AND_REMEMBER = f"""{BASE}

## Relevant Skills
### calc-and-remember
Calculate an expression and keep the result.
1. calculator: evaluate the arithmetic expression from the request
2. memory_store: store the result under key last_calc

## Memory
- user prefers metric units
"""


def test_procedures_are_parsed_from_skills_sections_only() -> None:
    text = """Intro mentions calculator but is not a procedure.
1. calculator outside any skills section
## Relevant Skills
### calc-and-remember
1. calculator: evaluate it
2) memory_store: key=last_calc
Step 3: a line that names no tool
Skill: report
- list_files -> read_file path="notes.txt"
# Other
1. write_file somewhere else
"""
    names = ["calculator", "memory_store", "list_files", "read_file", "write_file"]
    procedures = parse_procedures(text, names)
    assert [(p.name, [s.tool for s in p.steps]) for p in procedures] == [
        ("calc-and-remember", ["calculator", "memory_store"]),
        ("report", ["list_files", "read_file"]),
    ]
    assert procedures[0].steps[1].args == {"key": "last_calc"}
    assert procedures[1].steps[1].args == {"path": "notes.txt"}


def test_tools_that_are_not_offered_are_not_steps() -> None:
    assert (
        parse_procedures("## Skills\n1. calculator\n2. teleport\n", ["calculator"])[0].steps[0].tool
        == "calculator"
    )
    assert parse_procedures("## Skills\n1. teleport now\n", ["calculator"]) == []


async def test_a_known_procedure_saves_an_iteration_on_a_dependent_chain() -> None:
    model = SimulatedProvider()
    request = "calculate 42 * 17 and remember the result"
    learning = await run_turn(model, [], request)
    repeated = await run_turn(model, [], request, system=CALC_AND_REMEMBER)

    assert learning.iterations == 3
    assert repeated.iterations == 2
    # Same tools, same arguments, same answer: only the number of LLM round trips changed.
    assert (
        repeated.calls
        == learning.calls
        == [
            ("calculator", {"expression": "42 * 17"}),
            ("memory_store", {"key": "last_calc", "value": "714"}),
        ]
    )
    assert repeated.text == learning.text
    assert len(repeated.completions[0].tool_calls) == 2


async def test_independent_steps_go_out_in_one_response() -> None:
    model = SimulatedProvider()
    system = f"{BASE}\n\n## Relevant Skills\n### sums\n1. calculator: each expression\n"
    without = await run_turn(model, [], "what is 2+2 and 3*3 and 5-1")
    with_skill = await run_turn(model, [], "what is 2+2 and 3*3 and 5-1", system=system)
    assert (without.iterations, with_skill.iterations) == (4, 2)
    assert with_skill.text == without.text == "2 + 2 = 4. 3 x 3 = 9. 5 - 1 = 4."


async def test_independent_lookups_of_different_tools_batch_too() -> None:
    model = SimulatedProvider()
    system = f"{BASE}\n\n## Relevant Skills\n### recall-and-add\n1. memory_recall\n2. calculator\n"
    tools = FakeTools()
    tools.memory["favourite colour"] = "teal"
    turn = await run_turn(
        model, [], "what is my favourite colour and what is 2 + 2", system=system, executor=tools
    )
    assert turn.iterations == 2
    assert [name for name, _ in turn.calls] == ["memory_recall", "calculator"]
    assert turn.text == "Your favourite colour is teal. 2 + 2 = 4."


async def test_a_step_whose_input_cannot_be_foreseen_waits_for_its_result() -> None:
    model = SimulatedProvider()
    system = f"{BASE}\n\n## Relevant Skills\n### keep-notes\n1. read_file\n2. memory_store the result\n"
    tools = FakeTools(files={"todo.txt": "buy milk"})
    turn = await run_turn(
        model, [], "read todo.txt and remember the result as todo", system=system, executor=tools
    )
    assert turn.iterations == 3
    assert turn.calls == [
        ("read_file", {"path": "todo.txt"}),
        ("memory_store", {"key": "todo", "value": "buy milk"}),
    ]


async def test_a_failed_step_in_a_batch_still_ends_the_turn_with_an_explanation() -> None:
    model = SimulatedProvider()
    turn = await run_turn(model, [], "calculate 1 / 0 and remember the result", system=CALC_AND_REMEMBER)
    # 1 / 0 has no foreseeable value, so the store waits, and never runs.
    assert turn.calls == [("calculator", {"expression": "1 / 0"})]
    assert "division by zero" in turn.text


async def test_a_procedure_supplies_the_steps_for_a_vague_request() -> None:
    model = SimulatedProvider()
    system = f"""{BASE}

## Relevant Skills
### weekly-report
1. list_files path=reports
2. read_file path=reports/summary.md
"""
    tools = FakeTools(files={"reports/summary.md": "all good"})
    plain = await run_turn(model, [], "do the weekly report", executor=tools)
    guided = await run_turn(model, [], "do the weekly report", system=system, executor=tools)

    assert plain.calls == []
    assert guided.calls == [
        ("list_files", {"path": "reports"}),
        ("read_file", {"path": "reports/summary.md"}),
    ]
    assert guided.iterations == 2
    assert "all good" in guided.text


async def test_an_unrelated_skill_does_not_change_the_plan() -> None:
    model = SimulatedProvider()
    system = f"{BASE}\n\n## Relevant Skills\n### files\n1. read_file path=a.txt\n"
    turn = await run_turn(model, [], "what is 2+2 and 3*3", system=system)
    assert turn.iterations == 3
    assert [name for name, _ in turn.calls] == ["calculator", "calculator"]


async def test_custom_advisors_replace_the_skill_follower() -> None:
    class AlwaysBatch:
        def advise(self, plan: Plan, ctx: PlanningContext) -> Plan:
            return Plan(plan.items, batch=True, procedure="always")

    batched = SimulatedProvider(advisors=[AlwaysBatch()])
    ignoring = SimulatedProvider(advisors=[])
    request = CompletionRequest(
        messages=[
            {"role": "system", "content": CALC_AND_REMEMBER},
            {"role": "user", "content": "what is 2+2 and 3*3"},
        ],
        tools=[*default_tools(), tool("unused")],
    )
    assert len((await batched.complete(request)).tool_calls) == 2
    assert len((await ignoring.complete(request)).tool_calls) == 1


async def test_a_foreseen_value_that_the_tool_contradicts_is_owned_up_to() -> None:
    class OffByOne(FakeTools):
        def run(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
            if name == "calculator":
                self.calls.append((name, dict(args)))
                return {"result": "715"}
            return super().run(name, args)

    turn = await run_turn(
        SimulatedProvider(),
        [],
        "calculate 42 * 17 and remember the result",
        system=CALC_AND_REMEMBER,
        executor=OffByOne(),
    )
    assert turn.calls[1] == ("memory_store", {"key": "last_calc", "value": "714"})
    assert "42 x 17 = 715." in turn.text
    assert "Note: memory_store got value '714' before calculator returned '715'." in turn.text
