"""The simulated model in a real LLM -> tools -> LLM loop: it must act like a sensible model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from minihermes.llm import (
    CompletionRequest,
    Done,
    SimulatedProvider,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
    collect_stream,
    create_provider,
)

from .support import FakeTools, default_tools, run_turn, tool


@pytest.fixture
def model() -> SimulatedProvider:
    made = create_provider("simulated")
    assert isinstance(made, SimulatedProvider)
    return made


async def test_calculate_and_remember_chains_two_tools_then_answers(model: SimulatedProvider) -> None:
    turn = await run_turn(model, [], "calculate 42 * 17 and remember the result")

    assert turn.calls == [
        ("calculator", {"expression": "42 * 17"}),
        ("memory_store", {"key": "last_calc", "value": "714"}),
    ]
    assert turn.iterations == 3
    assert turn.text.startswith("42 x 17 = 714.")
    assert "stored the result" in turn.text
    assert [c.stop_reason for c in turn.completions] == ["tool_use", "tool_use", "end_turn"]


async def test_the_stored_value_is_the_tool_result_not_the_models_own_arithmetic(
    model: SimulatedProvider,
) -> None:
    class WrongCalculator(FakeTools):
        def run(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
            if name == "calculator":
                self.calls.append((name, dict(args)))
                return {"result": "715"}
            return super().run(name, args)

    turn = await run_turn(model, [], "calculate 42 * 17 and remember the result", executor=WrongCalculator())
    assert turn.calls[1] == ("memory_store", {"key": "last_calc", "value": "715"})
    assert "42 x 17 = 715" in turn.text


async def test_remember_then_recall_a_fact_across_turns(model: SimulatedProvider) -> None:
    tools, history = FakeTools(), []
    stored = await run_turn(model, history, "Remember that my favourite colour is teal.", executor=tools)
    recalled = await run_turn(model, history, "What is my favourite colour?", executor=tools)

    assert stored.calls == [("memory_store", {"key": "favourite colour", "value": "teal"})]
    assert stored.text == "Got it. I'll remember that your favourite colour is teal."
    assert recalled.calls == [("memory_recall", {"key": "favourite colour"})]
    assert recalled.text == "Your favourite colour is teal."
    assert recalled.iterations == 2


async def test_recall_of_something_never_stored_says_so(model: SimulatedProvider) -> None:
    turn = await run_turn(model, [], "what's my shoe size")
    assert turn.calls == [("memory_recall", {"key": "shoe size"})]
    assert turn.text == "I don't have your shoe size stored yet."


async def test_conjunctions_inside_a_fact_stay_in_the_value(model: SimulatedProvider) -> None:
    turn = await run_turn(model, [], "remember that my favourite colours are red and blue")
    assert turn.calls == [("memory_store", {"key": "favourite colours", "value": "red and blue"})]
    assert turn.text.endswith("your favourite colours are red and blue.")


@pytest.mark.parametrize(
    ("question", "expression", "answer"),
    [
        ("what is 12 plus 30", "12 + 30", "12 + 30 = 42."),
        ("What is twelve times three?", "12 * 3", "12 x 3 = 36."),
        ("how much is 15% of 80", "15 / 100 * 80", "15 / 100 x 80 = 12."),
        ("divide 10 by 4", "10 / 4", "10 / 4 = 2.5."),
        ("calculate (2+3)*4", "(2 + 3) * 4", "(2 + 3) x 4 = 20."),
    ],
)
async def test_the_calculator_gets_the_actual_expression(
    model: SimulatedProvider, question: str, expression: str, answer: str
) -> None:
    turn = await run_turn(model, [], question)
    assert turn.calls == [("calculator", {"expression": expression})]
    assert turn.text == answer


async def test_several_calculations_run_one_by_one_and_are_all_reported(model: SimulatedProvider) -> None:
    turn = await run_turn(model, [], "what is 2+2, 3*3 and 10 - 4?")
    assert [args["expression"] for _, args in turn.calls] == ["2 + 2", "3 * 3", "10 - 4"]
    assert turn.iterations == 4
    assert turn.text == "2 + 2 = 4. 3 x 3 = 9. 10 - 4 = 6."


async def test_search_memory(model: SimulatedProvider) -> None:
    tools, history = FakeTools(), []
    await run_turn(model, history, "remember that my favourite colour is teal", executor=tools)
    turn = await run_turn(model, history, "search my memory for colour", executor=tools)
    assert turn.calls == [("memory_search", {"query": "colour"})]
    assert turn.text == "Here is what I found in memory about 'colour': favourite colour: teal."


async def test_file_tools(model: SimulatedProvider) -> None:
    tools = FakeTools(files={"notes.txt": "buy milk"})
    read = await run_turn(model, [], "Please read the file notes.txt", executor=tools)
    write = await run_turn(model, [], "write 'hello world' to out/greeting.txt", executor=tools)
    listed = await run_turn(model, [], "list the files", executor=tools)

    assert read.calls == [("read_file", {"path": "notes.txt"})]
    assert read.text == "Here is notes.txt:\nbuy milk"
    assert write.calls == [("write_file", {"path": "out/greeting.txt", "content": "hello world"})]
    assert tools.files["out/greeting.txt"] == "hello world"
    assert write.text == "I wrote 11 characters to out/greeting.txt."
    assert listed.calls == [("list_files", {})]
    assert listed.text == "Files in the workspace: notes.txt, out/greeting.txt."


async def test_a_tool_error_is_explained_and_the_turn_ends(model: SimulatedProvider) -> None:
    turn = await run_turn(model, [], "calculate 1 / 0 and remember the result")
    assert turn.calls == [("calculator", {"expression": "1 / 0"})]
    assert turn.iterations == 2
    assert "calculator tool returned an error: division by zero" in turn.text
    assert "instead of retrying" in turn.text


async def test_a_denied_tool_call_ends_the_turn(model: SimulatedProvider) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "read secrets.txt"}]
    first = await model.complete(CompletionRequest(messages=history, tools=default_tools()))
    call = first.tool_calls[0]
    history += [
        {"role": "assistant", "content": first.content, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "[denied: read_file]"},
    ]
    second = await model.complete(CompletionRequest(messages=history, tools=default_tools()))
    assert second.stop_reason == "end_turn"
    assert "[denied: read_file]" in second.content


async def test_a_tool_that_is_not_offered_is_answered_around(model: SimulatedProvider) -> None:
    only_files = [tool("read_file", "path")]
    calc = await run_turn(model, [], "what is 12 plus 30", tools=only_files)
    store = await run_turn(model, [], "remember that my name is Ada", tools=only_files)
    recall = await run_turn(model, [], "what is my name?", tools=[])

    assert calc.calls == [] and calc.iterations == 1
    assert calc.text == "12 + 30 = 42."
    assert store.calls == [] and "no memory tool" in store.text
    assert recall.calls == [] and "can't look up your name" in recall.text


async def test_recall_falls_back_to_search_when_that_is_what_is_offered(model: SimulatedProvider) -> None:
    tools = FakeTools()
    tools.memory["name"] = "Ada"
    turn = await run_turn(
        model, [], "what is my name", tools=[tool("memory_search", "query")], executor=tools
    )
    assert turn.calls == [("memory_search", {"query": "name"})]
    assert turn.text == "Your name is Ada."


async def test_plain_chat_gets_a_deterministic_reply_about_the_message(model: SimulatedProvider) -> None:
    hello = await run_turn(model, [], "hello there")
    question = await run_turn(model, [], "What is the capital of France?")
    again = await run_turn(model, [], "What is the capital of France?")

    assert hello.calls == [] and hello.text.startswith("Hello!")
    assert "calculator" in hello.text
    assert question.calls == [] and "capital of France" in question.text
    assert question.text == again.text


async def test_a_registered_tool_is_used_when_the_request_names_it(model: SimulatedProvider) -> None:
    weather = tool("weather", "city")
    turn = await run_turn(model, [], "what's the weather in Paris?", tools=[*default_tools(), weather])
    assert turn.calls == [("weather", {"city": "Paris"})]
    assert turn.text.startswith("The weather tool returned:")


async def test_it_never_loops_even_if_the_agent_drops_tool_calls_from_history(
    model: SimulatedProvider,
) -> None:
    # An agent that records assistant messages without their tool_calls (as a naive loop does) must
    # still see the turn end: results are matched to steps by the model's own call ids.
    history: list[dict[str, Any]] = [{"role": "user", "content": "calculate 6 * 7 and remember the result"}]
    tools = FakeTools()
    for _ in range(5):
        completion = await model.complete(CompletionRequest(messages=history, tools=default_tools()))
        history.append({"role": "assistant", "content": completion.content})
        if completion.stop_reason == "end_turn":
            break
        for call in completion.tool_calls:
            result = tools.run(call.name, call.input)
            history.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    assert completion.stop_reason == "end_turn"
    assert "6 x 7 = 42" in completion.content
    assert [name for name, _ in tools.calls] == ["calculator", "memory_store"]


async def test_responses_are_deterministic_and_ids_unique_per_turn(model: SimulatedProvider) -> None:
    request = CompletionRequest(
        messages=[{"role": "user", "content": "calculate 2 + 2"}], tools=default_tools()
    )
    first, second = await model.complete(request), await SimulatedProvider().complete(request)
    assert first.model_dump() == second.model_dump()

    later = CompletionRequest(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "calculate 2 + 2"},
        ],
        tools=default_tools(),
    )
    assert (await model.complete(later)).tool_calls[0].id != first.tool_calls[0].id


async def test_usage_is_estimated_and_prompt_caching_simulated(model: SimulatedProvider) -> None:
    messages = [
        {"role": "system", "content": "You are MiniHermes. " * 40},
        {"role": "user", "content": "calculate 2 + 2"},
    ]
    request = CompletionRequest(messages=messages, tools=default_tools(), cache_prefix_messages=1)
    first = await model.complete(request)
    second = await model.complete(request)

    assert first.usage.input_tokens > 200
    assert first.usage.output_tokens > 0
    assert first.usage.cache_write_tokens > 0 and first.usage.cached_tokens == 0
    assert second.usage.cached_tokens == first.usage.cache_write_tokens
    assert second.usage.cache_write_tokens == 0
    assert (first.provider, first.model) == ("simulated", "simulated")


async def test_max_tokens_truncates_a_long_answer(model: SimulatedProvider) -> None:
    request = CompletionRequest(
        messages=[{"role": "user", "content": "hello"}], tools=default_tools(), max_tokens=5
    )
    completion = await model.complete(request)
    assert completion.stop_reason == "max_tokens"
    assert len(completion.content) <= 20


async def test_stream_emits_words_then_tool_calls_then_done(model: SimulatedProvider) -> None:
    chat = CompletionRequest(messages=[{"role": "user", "content": "hello"}])
    events = [e async for e in model.stream(chat)]
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 3
    final = events[-1]
    assert isinstance(final, Done)
    assert "".join(deltas) == final.completion.content

    tooled = CompletionRequest(
        messages=[{"role": "user", "content": "calculate 2 + 2"}], tools=default_tools()
    )
    events = [e async for e in model.stream(tooled)]
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert [(s.name, e.tool_call.input) for s, e in zip(starts, ends, strict=True)] == [
        ("calculator", {"expression": "2 + 2"})
    ]
    assert (await collect_stream(model.stream(tooled))) == await model.complete(tooled)


async def test_no_user_message_yet() -> None:
    completion = await SimulatedProvider().complete(
        CompletionRequest(messages=[{"role": "system", "content": "x"}])
    )
    assert completion.stop_reason == "end_turn"
    assert completion.content


async def test_a_pronoun_passes_an_earlier_result_on(model: SimulatedProvider) -> None:
    tools = FakeTools(files={"a.txt": "alpha"})
    turn = await run_turn(model, [], "read a.txt and write it to b.txt", executor=tools)
    assert turn.calls == [
        ("read_file", {"path": "a.txt"}),
        ("write_file", {"path": "b.txt", "content": "alpha"}),
    ]
    assert tools.files["b.txt"] == "alpha"
    assert turn.text.endswith("I wrote 5 characters to b.txt.")


async def test_lines_are_separate_requests(model: SimulatedProvider) -> None:
    turn = await run_turn(model, [], "calculate 2+2\nremember the result as four")
    assert turn.calls == [
        ("calculator", {"expression": "2 + 2"}),
        ("memory_store", {"key": "four", "value": "4"}),
    ]
