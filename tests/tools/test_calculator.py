"""The AST calculator: right answers for the forms people type, a precise refusal for everything else."""

from __future__ import annotations

import math

import pytest

from minihermes.tools.calculator import MAX_RESULT_DIGITS, CalculatorError, calculate


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42 * 17", 714),
        ("42 x 17", 714),
        ("42x17", 714),
        ("42 \u00d7 17", 714),
        ("2^10", 1024),
        ("2**10", 1024),
        ("12 plus 30", 42),
        ("50 minus 8", 42),
        ("6 times 7", 42),
        ("84 divided by 2", 42),
        ("6 multiplied by 7", 42),
        ("2 to the power of 8", 256),
        ("3 squared", 9),
        ("2 cubed", 8),
        ("17 mod 5", 2),
        ("17 modulo 5", 2),
        ("17 % 5", 2),
        ("1,000 + 1", 1001),
        ("1,234,567 * 2", 2469134),
        ("15% of 80", 12.0),
        ("200 * 15%", 30.0),
        ("What is 2 + 2?", 4),
        ("calculate (1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("10 / 2", 5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("-(3 - 5)", 2),
        ("2 ** -2", 0.25),
        ("sqrt(16)", 4),
        ("sqrt(2)", math.sqrt(2)),
        ("abs(-3)", 3),
        ("round(3.14159, 2)", 3.14),
        ("round(2.5)", 2),
        ("floor(2.7) + ceil(2.1)", 5),
        ("min(3, 1, 2) + max(3, 1, 2)", 4),
        ("factorial(10)", 3628800),
        ("log(e)", 1.0),
        ("ln(e)", 1.0),
        ("log(8, 2)", 3.0),
        ("log10(1000)", 3.0),
        ("exp(0)", 1.0),
        ("sin(0) + cos(0)", 1.0),
        ("tan(pi / 4)", 1.0),
        ("2 * pi", math.tau),
        ("2²", 4),
        ("\uff11\uff12 + \uff13\uff10", 42),  # full-width digits
        ("5 \u2212 3", 2),  # minus sign
        ("1 < 2", True),
        ("3 >= 4", False),
        ("0.1 + 0.2", 0.1 + 0.2),
        ("10**999 // 10**998", 10),
    ],
)
def test_results(text: str, expected: float) -> None:
    result = calculate(text).result
    if isinstance(expected, float):
        assert result == pytest.approx(expected)
    else:
        assert result == expected and type(result) is type(expected)


def test_structured_result() -> None:
    calc = calculate("42 x 17")
    assert calc.to_dict() == {"expression": "42*17", "result": 714, "display": "714"}
    assert calculate("0.1 + 0.2").display == "0.3"
    assert calculate("sqrt(16.0)").display == "4"
    assert calculate("1 < 2").display == "true"
    assert calculate("-0.0").display == "0"


def test_largest_allowed_integer() -> None:
    assert len(str(calculate("10**999").result)) == MAX_RESULT_DIGITS
    assert len(str(calculate("factorial(449)").result)) <= MAX_RESULT_DIGITS


HOSTILE = [
    # size bombs: refused by estimate, before anything is computed
    ("9**9**9**9", "result_too_large"),
    ("9**9**9", "result_too_large"),
    ("2**3**4**5", "result_too_large"),
    ("10**1000", "result_too_large"),
    ("2^100000000000", "result_too_large"),
    ("(10**999) * (10**999)", "result_too_large"),
    ("10**300 * 10**300 * 10**300 * 10**300", "result_too_large"),
    ("factorial(100000)", "result_too_large"),
    ("factorial(factorial(10))", "result_too_large"),
    ("2.0 ** 10**300", "result_too_large"),
    ("exp(1000)", "result_too_large"),
    ("1e999", "result_too_large"),
    ("10**999 * 1.5", "result_too_large"),
    ("1e308 * 10", "result_too_large"),
    # code instead of arithmetic
    ("__import__('os').system('id')", "unsupported"),
    ("__import__('os')", "unknown_name"),
    ("().__class__.__bases__[0].__subclasses__()", "unsupported"),
    ("open('/etc/passwd')", "unknown_name"),
    ("lambda: 1", "unsupported"),
    ("[x for x in range(10**9)]", "unsupported"),
    ("'a' * 10", "unsupported"),
    ("1 if 1 else 2", "unsupported"),
    ("x", "unknown_name"),
    ("True + 1", "unknown_name"),
    ("sqrt(x=4)", "unsupported"),
    ("max(*[1, 2])", "invalid_argument"),
    ("2j", "unsupported"),
    ("(1 < 2) + 1", "unsupported"),
    # structure bombs
    ("(" * 250 + "1" + ")" * 250, "input_too_long"),
    ("(" * 210 + "1" + ")" * 210, "invalid_expression"),
    ("-" * 450 + "1", "too_complex"),
    ("+".join(["1"] * 240), "too_complex"),
    ("abs(" * 60 + "1" + ")" * 60, "too_complex"),
    ("1" * 501, "input_too_long"),
    # plain mistakes
    ("", "empty_expression"),
    ("   ", "empty_expression"),
    ("what is ?", "empty_expression"),
    ("2 +", "invalid_expression"),
    ("1,0000", "unsupported"),
    ("1 / 0", "division_by_zero"),
    ("1 // 0", "division_by_zero"),
    ("1 % 0", "division_by_zero"),
    ("0 ** -1", "division_by_zero"),
    ("sqrt(-1)", "math_error"),
    ("log(0)", "math_error"),
    ("log(8, 1)", "math_error"),
    ("asin(2)", "math_error"),
    ("(-8) ** (1/3)", "math_error"),
    ("factorial(-1)", "invalid_argument"),
    ("factorial(2.5)", "invalid_argument"),
    ("round(1, 1000)", "invalid_argument"),
    ("max()", "invalid_argument"),
    ("sqrt(1, 2)", "invalid_argument"),
    ("frobnicate(1)", "unknown_name"),
]


@pytest.mark.parametrize(("text", "code"), HOSTILE)
def test_refusals(text: str, code: str) -> None:
    with pytest.raises(CalculatorError) as err:
        calculate(text)
    assert err.value.code == code, err.value
    assert err.value.to_dict()["error"]["code"] == code


def test_non_string_input() -> None:
    with pytest.raises(CalculatorError) as err:
        calculate(None)  # type: ignore[arg-type]
    assert err.value.code == "empty_expression"
