"""Issue 24: the offline model's answer after a failed tool call says what happened in words and what to do
next (``minihermes/llm/simulated/_failures.py``), for each error code, and never quotes raw JSON."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.llm import SimulatedProvider

from .support import FakeTools, run_turn


class Failing(FakeTools):
    """``tool`` fails with ``error`` (the executor's ``{"error": {...}}``); other tools work."""

    def __init__(self, tool: str, error: dict[str, Any]) -> None:
        super().__init__()
        self.tool, self.error = tool, error

    def run(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name == self.tool:
            self.calls.append((name, dict(args)))
            return {"error": self.error}
        return super().run(name, args)


@pytest.mark.parametrize(
    ("request_", "tool", "error", "said"),
    [
        (
            "read packing.txt",
            "read_file",
            {"code": "not_found", "message": "packing.txt does not exist"},
            ["I couldn't read packing.txt: packing.txt does not exist.", "list the files"],
        ),
        (
            "read packing.txt",
            "read_file",
            {"code": "not_found"},  # no message: the file is named all the same
            ["I couldn't read packing.txt: packing.txt does not exist.", "Check the file name"],
        ),
        (
            "write 'milk' to todo.txt",
            "write_file",
            {"code": "denied", "reason": "reviewer", "message": "a reviewer denied write_file (todo.txt)"},
            ["I couldn't write todo.txt: a reviewer denied it, so nothing was changed.", "reviewer approve"],
        ),
        (
            "write 'milk' to todo.txt",
            "write_file",
            {"code": "denied", "reason": "policy", "message": "write_file: policy is deny"},
            ["the guardrails did not allow it (write_file: policy is deny)", "An admin can change"],
        ),
        (
            "write 'milk' to todo.txt",
            "write_file",
            {"code": "permission_denied", "message": "write_file: changes things is not allowed to viewer"},
            ["I couldn't write todo.txt: you don't have permission", "An admin can give you access"],
        ),
        (
            "remember that my shoe size is 42",
            "memory_store",
            {"code": "invalid_input", "message": "input.value: too long"},
            ["I couldn't remember shoe size: input.value: too long.", "with that detail corrected"],
        ),
        (
            "list the files",
            "list_files",
            {"code": "timeout", "message": "no answer in 30 s"},
            ["I couldn't list the files: the list_files tool took too long", "Try again in a moment"],
        ),
    ],
)
async def test_a_failure_is_said_in_words_with_a_next_step(
    request_: str, tool: str, error: dict[str, Any], said: list[str]
) -> None:
    executor = Failing(tool, error)
    turn = await run_turn(SimulatedProvider(), [], request_, executor=executor)
    assert [name for name, _ in executor.calls] == [tool]
    for words in said:
        assert words in turn.text, turn.text
    assert "{" not in turn.text and "check the request and try again" not in turn.text
    assert turn.text.startswith("I couldn't")  # a failure, not an answer (bench/offline_corpus.py)


async def test_an_error_without_words_is_named_by_its_code_not_its_json() -> None:
    executor = Failing("calculator", {"code": "result_too_large", "limit": 10**6})
    turn = await run_turn(SimulatedProvider(), [], "what is 9 ** 99", executor=executor)
    assert "the calculator tool returned an error (result_too_large)" in turn.text, turn.text
    assert "{" not in turn.text and "limit" not in turn.text
