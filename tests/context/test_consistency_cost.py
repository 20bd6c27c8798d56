"""The truthfulness check does no needless work: an equation written as one of the turn's calculator calls
is held against that call's result (no second evaluation), each equation is checked once, and an answer
without digits is not read for numbers. The checks themselves stay as strict (tests/agent/test_turn_truthful.py)."""

from __future__ import annotations

import pytest

from minihermes.context import consistency
from minihermes.context.consistency import ToolOutcome, contradiction, fell_short

CALC = ToolOutcome("calculator", {"expression": "17 * 23"}, False, '{"expression": "17*23", "result": 391}')


@pytest.fixture
def evaluations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = consistency.calculate

    def counting(text: str):  # type: ignore[no-untyped-def]
        seen.append(text)
        return real(text)

    monkeypatch.setattr(consistency, "calculate", counting)
    return seen


def test_an_equation_the_calculator_computed_is_not_evaluated_again(evaluations: list[str]) -> None:
    assert contradiction("17 * 23 = 391, so the total is 391.", [CALC]) == ""
    assert evaluations == []


def test_a_wrong_answer_to_a_computed_equation_is_still_caught(evaluations: list[str]) -> None:
    assert "the calculator gives 391" in contradiction("17 * 23 = 392.", [CALC])


def test_a_repeated_equation_is_evaluated_once(evaluations: list[str]) -> None:
    assert contradiction("2 + 2 = 4. Again: 2 + 2 = 4.", [CALC]) == ""
    assert evaluations == ["2 + 2"]


def test_fell_short_reuses_the_contradiction_it_is_given(evaluations: list[str]) -> None:
    assert fell_short("ok", "2 + 2 = 4.", [CALC], "", wrong="") == ""
    assert evaluations == []
    assert fell_short("ok", "fine", [CALC], "", wrong="the answer says x") == "the answer says x"
