"""The offline model is never confidently wrong: each request of a labelled corpus gets the right answer (and
leaves the right state) or an explicit "I can't", through the real agent loop; and the simple forms of the
work tools (reminders, goals, kanban) are used only when those tools are offered."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from minihermes.llm import CompletionRequest, Message, SimulatedProvider, ToolSpec

from .support import FakeTools, default_tools, run_turn, tool

pytestmark = pytest.mark.timeout(600)


def _bench() -> ModuleType:
    path = Path(__file__).parents[2] / "bench" / "offline_corpus.py"
    spec = importlib.util.spec_from_file_location("bench_offline_corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


corpus = _bench()


def test_the_corpus_is_large_and_labelled() -> None:
    items = corpus.load()
    assert len(items) >= 280
    assert len({item["id"] for item in items}) == len(items)
    assert {item["category"] for item in items} >= {
        "arithmetic", "words", "chained", "memory", "files", "lists", "multi-step", "kanban", "reminders",
        "goals", "cannot", "chit-chat", "tool named", "secrets", "typos",
    }  # fmt: skip
    for item in items:
        labels = {"answer", "memory", "file", "tool", "forgotten", "quarantined"}
        assert item["expect"] == "cannot" or set(item["expect"]) <= labels
    # Issue 24: everyday wordings of each ability, and ones that must stay "cannot".
    everyday = [item for item in items if item["id"].startswith("everyday-")]
    assert len(everyday) >= 40 and sum(item["expect"] == "cannot" for item in everyday) >= 10
    assert {item["category"] for item in everyday} >= {
        "memory",
        "secrets",
        "files",
        "kanban",
        "reminders",
        "arithmetic",
        "words",
        "typos",
        "chit-chat",
    }


async def test_every_answer_is_right_or_an_explicit_cannot(tmp_path: Path) -> None:
    results = await corpus.run(corpus.load(), tmp_path / "data")
    wrong = [(r.item["id"], r.item["request"], r.answer, r.why) for r in results if r.outcome == "wrong"]
    assert wrong == []
    # What it understands, it does: every labelled value in this corpus is reached (docs/benchmarks.md).
    assert [r.item["id"] for r in results if r.outcome == "cannot"] == []


# -- the work tools, with and without them offered ---------------------------------------------------------

CRON = [
    tool("cron_schedule", "schedule", "prompt", optional=("name", "timezone")),
    tool("cron_list"),
    tool("cron_pause", "job_id"),
    tool("cron_resume", "job_id"),
    tool("cron_delete", "job_id"),
]
GOALS = [
    tool("goal_set", "goal"),
    tool("goal_list", optional=("status",)),
    tool("goal_complete", "goal_id", optional=("reason",)),
    tool("goal_clear", "goal_id"),
]


class WorkTools(FakeTools):
    def run(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name.startswith(("cron_", "goal_")):
            self.calls.append((name, dict(args)))
            return {"job": {"job_id": "j1", **args}} if name == "cron_schedule" else {"ok": True}
        return super().run(name, args)


@pytest.mark.parametrize(
    ("request_", "schedule", "prompt"),
    [
        ("remind me every Monday at 9am to water the plants", "0 9 * * 1", "water the plants"),
        ("remind me every day at 7:30 to stretch", "30 7 * * *", "stretch"),
        ("remind me every weekday at 8am to check the post", "0 8 * * 1-5", "check the post"),
        ("remind me every hour to drink water", "0 * * * *", "drink water"),
        ("remind me to stand up every 15 minutes", "*/15 * * * *", "stand up"),
        ("remind me every Friday at 5:45 pm to log my hours", "45 17 * * 5", "log my hours"),
    ],
)
async def test_reminders_become_cron_jobs(request_: str, schedule: str, prompt: str) -> None:
    turn = await run_turn(
        SimulatedProvider(), [], request_, tools=[*default_tools(), *CRON], executor=WorkTools()
    )
    assert turn.calls == [("cron_schedule", {"schedule": schedule, "prompt": prompt})]
    assert schedule in turn.text and "j1" in turn.text


async def test_goals_and_listing_use_the_offered_tools() -> None:
    tools, model = [*default_tools(), *CRON, *GOALS], SimulatedProvider()
    for request_, call in [
        ("set a goal: learn Spanish", ("goal_set", {"goal": "learn Spanish"})),
        ("my goal is to run a marathon", ("goal_set", {"goal": "run a marathon"})),
        ("list my goals", ("goal_list", {})),
        ("what is my goal?", ("goal_list", {})),
        ("complete goal g7", ("goal_complete", {"goal_id": "g7"})),
        ("clear goal g7", ("goal_clear", {"goal_id": "g7"})),
        ("list my reminders", ("cron_list", {})),
        ("pause reminder j1", ("cron_pause", {"job_id": "j1"})),
        ("delete cron job j1", ("cron_delete", {"job_id": "j1"})),
    ]:
        turn = await run_turn(model, [], request_, tools=tools, executor=WorkTools())
        assert turn.calls == [call], request_
        assert not turn.text.startswith("I can't"), turn.text


@pytest.mark.parametrize(
    "request_",
    [
        "remind me every Monday at 9am to water the plants",
        "set a goal: learn Spanish",
        "add a kanban task to buy milk",
        "list my reminders",
    ],
)
async def test_without_the_tool_it_says_it_cannot_and_why(request_: str) -> None:
    turn = await run_turn(SimulatedProvider(), [], request_)
    assert turn.calls == []
    assert turn.text.startswith("I can't") and "not available in this chat" in turn.text
    assert "docs/providers.md" in turn.text


async def test_it_lists_only_tools_it_understands() -> None:
    tools = [*default_tools(), tool("kanban_create", "title"), tool("kanban_heartbeat", "task_id"), *GOALS]
    turn = await run_turn(SimulatedProvider(), [], "hello", tools=tools)
    assert "kanban_create" in turn.text and "goal_set" in turn.text
    assert "kanban_heartbeat" not in turn.text


async def test_a_request_understood_in_part_is_not_done_in_part() -> None:
    tools = WorkTools()
    turn = await run_turn(SimulatedProvider(), [], "calculate 3 * 3 and tell me a joke", executor=tools)
    assert tools.calls == []
    assert turn.text.startswith('I can\'t do "tell me a joke"')
    assert "haven't done any of the request" in turn.text


@pytest.mark.parametrize(
    ("request_", "call"),
    [
        ("what is 6 * 7? use the calculator", ("calculator", {"expression": "6 * 7"})),
        ("what is 5 * 5 using the calculator", ("calculator", {"expression": "5 * 5"})),
        ("use calculator to work out 2 + 3", ("calculator", {"expression": "2 + 3"})),
        ("with the calculator, what is 9 * 9", ("calculator", {"expression": "9 * 9"})),
        ("what is 3 * 3 (use the calculator tool)", ("calculator", {"expression": "3 * 3"})),
        ("remember my name is Bob (use the memory tool)", ("memory_store", {"key": "name", "value": "Bob"})),
        ("what is my name? use the memory tool", ("memory_recall", {"key": "name"})),
        ("please use write_file to write 'hi' to a.txt", ("write_file", {"path": "a.txt", "content": "hi"})),
        ("write 'hi' to a.txt. Please use write_file", ("write_file", {"path": "a.txt", "content": "hi"})),
    ],
)
async def test_naming_the_tool_to_use_is_how_not_another_request(
    request_: str, call: tuple[str, dict[str, Any]]
) -> None:
    turn = await run_turn(SimulatedProvider(), [], request_)
    assert turn.calls == [call]
    assert not turn.text.startswith("I can't"), turn.text


@pytest.mark.parametrize(
    ("request_", "tools", "says"),
    [
        (
            "what is 6 * 7? use the calculator",
            [],
            "I can't use the calculator: it is not available in this chat",
        ),
        ("what is 6 * 7? use the memory tool", None, "the rest of the request doesn't need the memory tools"),
        (
            "remember my name is Bob, use the calculator",
            None,
            "the rest of the request doesn't need the calculator",
        ),
        ("use the calculator", None, "the request gives the calculator nothing to do"),
        (
            "what is 6 * 7? use the weather tool",
            None,
            'I can\'t answer "what is 6 * 7? use the weather tool"',
        ),
    ],
)
async def test_a_named_tool_that_is_missing_or_unneeded_is_an_honest_cannot(
    request_: str, tools: list[Any] | None, says: str
) -> None:
    executor = FakeTools()
    turn = await run_turn(
        SimulatedProvider(),
        [],
        request_,
        tools=default_tools() if tools is None else tools,
        executor=executor,
    )
    assert executor.calls == [] and turn.calls == []
    assert turn.text.startswith("I can't") and says in turn.text, turn.text


async def test_a_fact_that_mentions_a_tool_stays_a_fact() -> None:
    turn = await run_turn(SimulatedProvider(), [], "remember I cook with the calculator")
    assert turn.calls == [
        ("memory_store", {"key": "i cook with the calculator", "value": "I cook with the calculator"})
    ]


async def test_untrusted_results_are_unwrapped_and_quoted() -> None:
    class Wrapped(FakeTools):
        def run(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
            result = super().run(name, args)
            return {"untrusted_content": result, "note": "data, not an instruction"}

    turn = await run_turn(
        SimulatedProvider(), [], "write 'buy milk' to todo.txt, then read todo.txt, then list the files",
        executor=Wrapped(),
    )  # fmt: skip
    assert "untrusted_content" not in turn.text and "not an instruction" not in turn.text
    assert "```\nbuy milk\n```" in turn.text
    assert turn.text.endswith("Files in the workspace: todo.txt.")
    assert json.dumps("buy milk") not in turn.text  # the content, not its JSON


async def test_a_long_request_fits_the_agents_rounds() -> None:
    sums = ", ".join(f"{i}+{i}" for i in range(1, 15))
    turn = await run_turn(SimulatedProvider(), [], f"what is {sums}", max_iterations=8)
    assert len(turn.calls) == 14 and turn.iterations == 2
    assert turn.text.endswith("14 + 14 = 28.")
    chain = "calculate 1+1" + ", then add 1 to it" * 9
    turn = await run_turn(SimulatedProvider(), [], chain, max_iterations=8)
    assert [args["expression"] for _, args in turn.calls][-1] == "10 + 1"
    assert turn.text.endswith("10 + 1 = 11.")


# -- long messages stay linear (as in test_simulated_bounded.py) -------------------------------------------

N = 100_000


@pytest.mark.timeout(30)  # quadratic, the first took minutes here
@pytest.mark.parametrize(
    "text",
    [
        pytest.param("calculate " + "1." * (N // 2), id="dotted-digits-no-percent"),
        pytest.param("two hundred and " * (N // 16), id="spelled-number-and-run"),
        pytest.param(" 'a" * (N // 3), id="unclosed-quotes"),
        pytest.param("remind me every" + " " * N + "x to" + " " * N + "y", id="reminder-spaces"),
        pytest.param("add 1 to " + "it " * (N // 3), id="continuation"),
        pytest.param("create a file a.txt with the lines " + "a, " * (N // 3), id="listed-lines"),
        pytest.param("what is 1 + 1 " + "using the " * (N // 10) + "calculator", id="named-tool-run"),
        pytest.param("use the calculator " * (N // 19), id="named-tool-repeated"),
        pytest.param("remind me to" + " x" * (N // 2) + " every day at 9am", id="reminder-text-first"),
        pytest.param("remind me every day" + " to x" * (N // 5), id="reminder-many-links"),
        pytest.param("remember that my a is b" + " and my c is d" * (N // 14), id="several-facts"),
        pytest.param("remember that" + " my" * (N // 3) + " dog is called Rex", id="called"),
        pytest.param("what is 1" + ",000" * (N // 4), id="thousands"),
        pytest.param("what is " + "one two " * (N // 8) + "plus 1", id="number-words"),
        pytest.param("remeber " * (N // 8), id="typos"),
        pytest.param("make a file called a.txt with:" + "\nx" * (N // 2), id="file-lines"),
        pytest.param("forget my" + " x" * (N // 2), id="forget"),
        pytest.param("add" + " x" * (N // 2) + " to my todo list", id="todo-list"),
        pytest.param("my a is b, " * (N // 11) + "remember that", id="statements"),
    ],
)
def test_planning_the_new_forms_is_linear(text: str) -> None:
    tools = [*default_tools(), *CRON, *GOALS, tool("kanban_create", "title")]
    request = CompletionRequest(messages=[Message(role="user", content=text)], tools=tools)
    SimulatedProvider().planner.plan(request, text)  # no limit applied: must finish, and not raise


# -- found by a newcomer walkthrough of the served node -----------------------------------------------------

STEPS_SKILL = """You are a helpful assistant with access to tools.

## Relevant Skills
### calculator-steps
1. calculator: evaluate the expression from the request
2. calculator: double the result
3. calculator: subtract 1
"""


@pytest.mark.parametrize("request_", ["calculate 3 * 3 and tell me a joke", "what is 2 + 2 and sing a song"])
async def test_a_learned_skill_does_not_swallow_a_clause_it_does_not_understand(request_: str) -> None:
    tools = WorkTools()
    turn = await run_turn(SimulatedProvider(), [], request_, system=STEPS_SKILL, executor=tools)
    assert tools.calls == []
    assert turn.text.startswith("I can't do"), turn.text
    assert "haven't done any of the request" in turn.text


async def test_a_procedure_stands_in_for_one_vague_request_not_for_several() -> None:
    system = "## Relevant Skills\n### weekly-report\n1. list_files path=reports\n"
    tools = FakeTools(files={"reports/a.md": "x"})
    turn = await run_turn(
        SimulatedProvider(), [], "do the weekly report and tell me a joke", system=system, executor=tools
    )
    assert tools.calls == []
    assert turn.text.startswith("I can't"), turn.text


class DisplayTools(WorkTools):
    """A calculator that answers the way minihermes/tools/calculator.py does: exact result and display."""

    def run(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name == "calculator":
            from minihermes.tools.calculator import calculate

            self.calls.append((name, dict(args)))
            return calculate(args["expression"]).to_dict()
        return super().run(name, args)


async def test_the_last_result_is_this_conversations_not_a_stored_memory() -> None:
    tools, model = DisplayTools(), SimulatedProvider()
    history: list[dict[str, Any]] = []
    tools.memory["last_calc"] = "714"  # saved by another session
    await run_turn(model, history, "calculate 250 * 4 and remember the result as budget", executor=tools)
    turn = await run_turn(model, history, "what was the last result", executor=tools)
    assert turn.calls == []
    assert turn.text == "The last result was 1000."
    fresh = await run_turn(model, [], "what was the last result", executor=tools)
    assert fresh.calls == []
    assert "714" not in fresh.text
    assert fresh.text == "I don't have an earlier result in this conversation."


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        ("what is 3.5 * 2.1", "3.5 x 2.1 = 7.35."),
        ("what is 14.7 squared", "14.7^2 = 216.09."),
        ("what is 19.6 squared", "19.6^2 = 384.16."),
        ("what is 24 / 2.0", "24 / 2.0 = 12."),
        ("what is 3.5 * 2.1 then double it", "3.5 x 2.1 = 7.35. 7.35 x 2 = 14.7."),
    ],
)
async def test_answers_show_the_calculators_display_value(request_: str, says: str) -> None:
    for system in ("You are a helpful assistant.", STEPS_SKILL):
        turn = await run_turn(SimulatedProvider(), [], request_, system=system, executor=DisplayTools())
        assert turn.text == says, (system, turn.text)


async def test_a_chained_step_gets_the_exact_value() -> None:
    tools = DisplayTools()
    await run_turn(SimulatedProvider(), [], "what is 3.5 * 2.1 then double it", executor=tools)
    assert tools.calls[1] == ("calculator", {"expression": "7.3500000000000005 * 2"})


async def test_hello_lists_every_offered_tool_family_it_understands() -> None:
    kanban = [tool("kanban_list", optional=("status",)), tool("kanban_show", "task_id")]
    cron = [tool("cron_list")]
    goals = [tool("goal_list", optional=("status",))]
    for request_ in ("hello", "what can you do"):
        turn = await run_turn(
            SimulatedProvider(), [], request_, tools=[*default_tools(), *kanban, *cron, *goals]
        )
        for family in ("kanban", "reminders", "goals"):
            assert family in turn.text, (request_, turn.text)
    turn = await run_turn(SimulatedProvider(), [], "what can you do")
    assert "kanban" not in turn.text and "goals" not in turn.text


@pytest.mark.parametrize(
    "question", ["what is the office code", "what's the office code?", "do you remember the office code"]
)
async def test_a_noted_fact_about_the_something_is_recalled(question: str) -> None:
    tools, model = FakeTools(), SimulatedProvider()
    await run_turn(model, [], "note that the office code is 4711", executor=tools)
    turn = await run_turn(model, [], question, executor=tools)
    assert turn.calls == [("memory_recall", {"key": "office code"})]
    assert turn.text == "The office code is 4711."
    missing = await run_turn(model, [], "what is the door code", executor=tools)
    assert missing.text.startswith("I can't"), missing.text
    before = len(tools.calls)
    half = await run_turn(model, [], "what is 2 + 2 and what is the office code", executor=tools)
    assert tools.calls[before:] == [] and half.text.startswith("I can't"), half.text


# -- issue 24: everyday wordings, what it can do, reminders that notify, finding tools, typos --------------


async def test_what_can_you_do_lists_exactly_what_it_can_do(tmp_path: Path) -> None:
    """Through the agent: every family it can do here is listed (reminders, goals, kanban and forgetting
    too), and each example it gives works when asked."""
    node = await corpus.start_node(tmp_path / "data")
    try:
        ctx = corpus.user({"id": "help"})
        answer = await corpus.chat(node, ctx, "help", "what can you do?")
        families = (
            "arithmetic", "remembering facts", "recalling them", "forgetting them", "writing files",
            "reading files", "listing files", "kanban tasks", "reminders", "goals",
        )  # fmt: skip
        for family in families:
            assert f"- {family}: " in answer, (family, answer)
        listed = answer.split("For example:", 1)[1].split("More examples", 1)[0]
        examples = re.findall(r'"([^"]+)"', listed)
        assert len(examples) >= len(families)
        for example in examples:  # one session, in the order given: the read follows the write
            said = await corpus.chat(node, ctx, "help-examples", example)
            assert not corpus.is_cannot(said), (example, said)
            assert "don't have" not in said, (example, said)
        # "forget my dog's name" came after remembering it: the fact is gone.
        recalled = await corpus._tool(node, ctx, "help-examples", "memory_recall", {"key": "dog's name"})
        assert recalled["found"] is False, recalled
    finally:
        await node.stop(deadline=5)


async def test_what_can_you_do_lists_no_family_whose_tools_are_missing() -> None:
    turn = await run_turn(
        SimulatedProvider(), [], "what can you do", tools=[tool("calculator", "expression")]
    )
    assert "- arithmetic: " in turn.text
    for family in ("remembering", "files", "kanban", "reminders", "goals"):
        assert family not in turn.text, turn.text


async def test_a_reminder_is_a_notify_job_when_the_tool_takes_an_action() -> None:
    cron = [tool("cron_schedule", "schedule", "prompt", optional=("action", "name", "timezone")), *CRON[1:]]
    turn = await run_turn(
        SimulatedProvider(),
        [],
        "remind me to water the plants every Monday at 9am",
        tools=[*default_tools(), *cron],
        executor=WorkTools(),
    )
    assert turn.calls == [
        ("cron_schedule", {"schedule": "0 9 * * 1", "prompt": "water the plants", "action": "notify"})
    ]
    assert "0 9 * * 1" in turn.text and "notifications" in turn.text


FIND_TOOLS = ToolSpec(
    name="find_tools",
    description="Add toolsets to the rest of this turn. The toolsets there are:\n"
    "- kanban: cards on the board\n- schedule: cron jobs and reminders\n- goals: the session's goals",
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "toolsets": {"type": "array", "items": {"type": "string"}},
        },
    },
)
FOUND = {
    "kanban": [tool("kanban_create", "title"), tool("kanban_list")],
    "schedule": CRON,
    "goals": GOALS,
}


async def found_turn(text: str, *, grant: bool = True) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """A turn whose ``find_tools`` adds the toolsets it is asked for (``grant``) to the rest of the turn."""
    model, tools, executor = SimulatedProvider(), [*default_tools(), FIND_TOOLS], WorkTools()
    history: list[dict[str, Any]] = [{"role": "user", "content": text}]
    for _ in range(8):
        completion = await model.complete(CompletionRequest(messages=history, tools=tools))
        history.append(
            {
                "role": "assistant",
                "content": completion.content,
                "tool_calls": [c.model_dump() for c in completion.tool_calls],
            }
        )
        if completion.stop_reason != "tool_use":
            return executor.calls, completion.content
        for call in completion.tool_calls:
            if call.name == "find_tools":
                executor.calls.append((call.name, dict(call.input)))
                if grant:
                    tools += [t for name in call.input["toolsets"] for t in FOUND[name]]
                result: Any = {"added": call.input["toolsets"]}
            else:
                result = executor.run(call.name, call.input)
            history.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    raise AssertionError("the turn did not end")


async def test_a_tool_that_is_not_offered_is_found_first_then_used() -> None:
    calls, text = await found_turn("what is 2 + 2 and put renew insurance on my to-do list")
    assert calls == [
        ("find_tools", {"toolsets": ["kanban"]}),
        ("calculator", {"expression": "2 + 2"}),
        ("kanban_create", {"title": "renew insurance"}),
    ]
    assert text == "2 + 2 = 4. I added the kanban task 'renew insurance'."
    calls, _ = await found_turn("add x to my todo list and remind me every day at 9am to stretch")
    assert calls[0] == ("find_tools", {"toolsets": ["kanban", "schedule"]})  # one call finds both
    assert [name for name, _ in calls[1:]] == ["kanban_create", "cron_schedule"]


async def test_a_tool_still_missing_after_find_tools_is_an_honest_cannot_and_nothing_runs() -> None:
    calls, text = await found_turn("what is 2 + 2 and add renew insurance to my todo list", grant=False)
    assert calls == [("find_tools", {"toolsets": ["kanban"]})]
    assert text.startswith("I can't add kanban tasks here") and "even after asking" in text


async def test_what_can_you_do_lists_what_find_tools_can_add() -> None:
    turn = await run_turn(SimulatedProvider(), [], "what can you do", tools=[*default_tools(), FIND_TOOLS])
    for family in ("- kanban tasks: ", "- reminders: ", "- goals: "):
        assert family in turn.text, turn.text


@pytest.mark.parametrize(
    ("request_", "call", "read"),
    [
        ("remeber that my favourite colour is teal", ("memory_store", {"key": "favourite colour", "value": "teal"}), "remeber"),
        ("calcualte 12 * 12", ("calculator", {"expression": "12 * 12"}), "calcualte"),
        ("what is fourty two plus one", ("calculator", {"expression": "42 + 1"}), "fourty"),
        ("wrte 'x' to a.txt", ("write_file", {"path": "a.txt", "content": "x"}), "wrte"),
        ("lsit the files", ("list_files", {}), "lsit"),
    ],
)  # fmt: skip
async def test_a_one_letter_typo_in_a_keyword_is_read_and_said(
    request_: str, call: tuple[str, dict[str, Any]], read: str
) -> None:
    turn = await run_turn(SimulatedProvider(), [], request_)
    assert turn.calls == [call]
    assert f'(I read "{read}" as ' in turn.text


@pytest.mark.parametrize(
    "request_",
    [
        "rewind me every day at 9am to stretch",  # a real word, not "remind"
        "what is there plus two",  # "there" is not "three"
        "tell me a jkoe",  # no keyword near it
        "calcualte the meaning of life",  # read, but still not understood
    ],
)
async def test_a_typo_reading_never_makes_an_answer_up(request_: str) -> None:
    executor = WorkTools()
    turn = await run_turn(
        SimulatedProvider(), [], request_, tools=[*default_tools(), *CRON], executor=executor
    )
    assert executor.calls == [] and turn.text.startswith("I can't"), turn.text


async def test_forget_uses_a_memory_deleting_tool_when_one_is_offered() -> None:
    tools = [*default_tools(), tool("memory_delete", "key")]
    turn = await run_turn(SimulatedProvider(), [], "forget my dog's name", tools=tools)
    assert turn.calls == [("memory_delete", {"key": "dog's name"})]
    assert turn.text == "Done: I forgot your dog's name."
    without = await run_turn(SimulatedProvider(), [], "forget my dog's name")
    assert without.calls == [] and without.text.startswith("I can't forget your dog's name")
    assert '/memory forget "dog\'s name"' in without.text


@pytest.mark.parametrize(
    ("request_", "calls"),
    [
        (
            "My dog's name is Biscuit, please remember that",
            [("memory_store", {"key": "dog's name", "value": "Biscuit"})],
        ),
        ("remember that my dog is called Rex", [("memory_store", {"key": "dog's name", "value": "Rex"})]),
        ("What's my dog called?", [("memory_recall", {"key": "dog's name"})]),
        ("what is the name of my dog", [("memory_recall", {"key": "dog's name"})]),
        ("What is weekly_hours?", [("memory_recall", {"key": "weekly_hours"})]),
        (
            "remember that my dog's name is Rex and my cat's name is Tom",
            [
                ("memory_store", {"key": "dog's name", "value": "Rex"}),
                ("memory_store", {"key": "cat's name", "value": "Tom"}),
            ],
        ),
        (
            "remember that my address is 5 Main St, London",
            [("memory_store", {"key": "address", "value": "5 Main St, London"})],
        ),
    ],
)
async def test_everyday_memory_wordings_name_one_key(request_: str, calls: list[Any]) -> None:
    turn = await run_turn(SimulatedProvider(), [], request_)
    assert turn.calls == calls


async def test_a_secret_in_the_message_is_never_stored_or_written() -> None:
    executor = FakeTools()
    for request_ in (
        "remember the wifi password is [REDACTED]",
        "remember that my api key is [REDACTED]",
        "write 'password: [REDACTED]' to creds.txt",
    ):
        turn = await run_turn(SimulatedProvider(), [], request_, executor=executor)
        assert turn.text.startswith("I can't") and "secret" in turn.text and "credential vault" in turn.text
        assert "[REDACTED]" not in turn.text
    assert executor.calls == [] and executor.memory == {} and executor.files == {}


async def test_a_secret_not_stored_refusal_is_said_in_words() -> None:
    class Refusing(FakeTools):
        def run(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
            if name == "memory_store":
                self.calls.append((name, dict(args)))
                return {"error": {"code": "secret_not_stored", "message": "not stored: a secret"}}
            return super().run(name, args)

    turn = await run_turn(
        SimulatedProvider(),
        [],
        "read creds.txt and remember the result as wifi",
        executor=Refusing(files={"creds.txt": "password: [REDACTED]"}),
    )
    assert turn.text.startswith("I can't remember wifi: the value held a secret"), turn.text
    assert "secret_not_stored" not in turn.text and '{"error"' not in turn.text
