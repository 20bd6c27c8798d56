"""tool_executor: patterns in tool input schemas run in linear time (RE2), a pattern RE2 cannot compile is
refused at registration (and a stored one leaves its tool out on restore), and no schema or input makes one
validation cost unbounded CPU on the event loop.

No timing assertions: without these guarantees the catastrophic cases below run for hours and the test
times out."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from minihermes.runtime import InvalidArgument
from minihermes.tools import _schema as _tools_schema
from minihermes.tools import catalog as _tools_catalog
from minihermes.tools import local as local_tools

from .test_tool_executor import ask, run, specs

pytestmark = pytest.mark.timeout(120)

CATASTROPHIC = "^(a+)+$"
"""Exponential in a backtracking engine on "a" * n + "!"."""


def _names(**fields: Any) -> list[str]:
    return sorted(fields)


def refused_by_schema(reply: dict[str, Any], what: str = "does not match") -> bool:
    """Whether the executor refused the input on a schema check (the calculator's own errors are not)."""
    error = reply.get("error") or {}
    return error.get("code") == "invalid_input" and what in error.get("message", "")


def calculator_tool(name: str, expression: dict[str, Any], **schema: Any) -> dict[str, Any]:
    """A runtime tool that runs the built-in calculator, with a schema of the test's choosing."""
    return {
        "name": name,
        "description": "the calculator, behind a pattern",
        "input_schema": {
            "type": "object",
            "properties": {"expression": {"type": "string", **expression}},
            "required": ["expression"],
            **schema,
        },
        "handler_type": "calculator",
    }


async def test_a_catastrophic_pattern_is_answered_not_backtracked(make_node):
    node = await make_node(specs())
    await ask(node, "register_tool", calculator_tool("evil", {"pattern": CATASTROPHIC}))
    reply = await run(node, "evil", {"expression": "a" * 40 + "!"})
    assert reply["status"] == "error"
    error = reply["error"]
    assert (error["code"], error["field"]) == ("invalid_input", "expression")
    assert "does not match" in error["message"]
    # A longer string, and a name matched against patternProperties, are linear too.
    await ask(
        node,
        "register_tool",
        calculator_tool(
            "evil_names",
            {},
            patternProperties={CATASTROPHIC: {"type": "string"}},
            additionalProperties=False,
        ),
    )
    reply = await run(node, "evil_names", {"expression": "1+1", "a" * 5000 + "!": "x"})
    assert (reply["error"]["code"], reply["error"]["field"]) == ("invalid_input", "a" * 5000 + "!")
    assert node.status()["tool_executor"]["restarts"] == 0


async def test_a_pattern_re2_cannot_compile_is_refused_at_registration_naming_it(make_node):
    node = await make_node(specs())
    for pattern, why in (
        (r"^(a)\1$", "backreference"),
        (r"^a(?=b)", "lookahead"),
        (r"(?<!x)y", "lookbehind"),
        ("(unclosed", "missing )"),
    ):
        with pytest.raises(InvalidArgument) as refused:
            await ask(node, "register_tool", calculator_tool("bad", {"pattern": pattern}))
        assert refused.value.details["field"] == "input_schema.properties.expression.pattern", why
        assert repr(pattern) in refused.value.message and "RE2" in refused.value.message, why
    with pytest.raises(InvalidArgument) as refused:
        await ask(
            node,
            "register_tool",
            calculator_tool("bad", {}, patternProperties={"^(x)\\1": {"type": "string"}}),
        )
    assert refused.value.details["field"] == "input_schema.patternProperties.^(x)\\1"
    # Patterns below a $defs entry, in an array of subschemas: found all the same.
    with pytest.raises(InvalidArgument) as refused:
        await ask(
            node,
            "register_tool",
            calculator_tool("bad", {}, **{"$defs": {"w": {"anyOf": [{"pattern": "(?=a)"}]}}}),
        )
    assert refused.value.details["field"] == "input_schema.$defs.w.anyOf[0].pattern"
    names = [t["name"] for t in (await ask(node, "list_tools"))["tools"]]
    assert "bad" not in names


async def test_ordinary_patterns_still_validate(make_node):
    node = await make_node(specs())
    await ask(node, "register_tool", calculator_tool("sums", {"pattern": r"^[0-9 +]+$"}))
    assert (await run(node, "sums", {"expression": "40 + 2"}))["result"]["result"] == 42
    refused = await run(node, "sums", {"expression": "40 - 2"})
    assert (refused["error"]["code"], refused["error"]["field"]) == ("invalid_input", "expression")
    # JSON Schema's ECMA-262 dialect: \uXXXX escapes and Unicode classes (Python's re has no \p{...}).
    await ask(node, "register_tool", calculator_tool("letters", {"pattern": r"^\p{L}+\u0021$"}))
    assert not refused_by_schema(await run(node, "letters", {"expression": "héllo!"}))
    assert refused_by_schema(await run(node, "letters", {"expression": "hello?"}))
    # Names: patternProperties admit them, additionalProperties: false refuses the rest (with its name).
    local_tools.register_local_tool(_names, name="names")
    try:
        await ask(
            node,
            "register_tool",
            {
                "name": "names",
                "description": "echoes the names it gets",
                "input_schema": {
                    "type": "object",
                    "patternProperties": {"^x-[a-z]+$": {"type": "string"}},
                    "additionalProperties": False,
                },
                "handler_type": "python",
                "handler_config": {"function": "names", "effects": "read"},
            },
        )
        assert (await run(node, "names", {"x-note": "hi"}))["result"] == ["x-note"]
        wrong_type = await run(node, "names", {"x-note": 3})
        assert wrong_type["error"]["field"] == "x-note"
        unknown = await run(node, "names", {"x-note": "hi", "x-Note": "hi"})
        assert (unknown["error"]["code"], unknown["error"]["field"]) == ("invalid_input", "x-Note")
    finally:
        local_tools.unregister_local_tool("names")
    # format: regex (the input is itself a pattern) is checked on RE2 as well.
    await ask(node, "register_tool", calculator_tool("regexes", {"format": "regex"}))
    assert not refused_by_schema(await run(node, "regexes", {"expression": r"\p{L}+"}), "regex")
    assert refused_by_schema(await run(node, "regexes", {"expression": r"(a)\1"}), "is not a 'regex'")
    # A lone surrogate (valid JSON, not valid Unicode) is an answer, not a crash.
    assert refused_by_schema(await run(node, "sums", {"expression": "\ud800"}))
    assert node.status()["tool_executor"]["restarts"] == 0


async def test_a_stored_tool_whose_pattern_no_longer_compiles_is_left_out_on_restore(
    make_node, tmp_path, monkeypatch, caplog
):
    # A tool registered before patterns ran on RE2: registration let the backreference through.
    node = await make_node(specs())
    with monkeypatch.context() as m:
        m.setattr(_tools_catalog, "check_schema", lambda schema, op="register_tool": schema)
        m.setattr(_tools_schema, "scan_schema", lambda schema, op="register_tool": {})
        await ask(node, "register_tool", calculator_tool("legacy", {"pattern": r"^(a)\1$"}))
    await ask(node, "register_tool", calculator_tool("fine", {"pattern": "^[0-9+]+$"}))
    await node.stop()
    with caplog.at_level(logging.WARNING):
        node2 = await make_node(specs(), data_dir=tmp_path / "data")
        names = [t["name"] for t in (await ask(node2, "list_tools"))["tools"]]
    warned = [r.getMessage() for r in caplog.records if "legacy" in r.getMessage()]
    assert warned and "RE2" in warned[0] and "input_schema.properties.expression.pattern" in warned[0]
    assert "fine" in names and "legacy" not in names
    assert (await run(node2, "legacy", {"expression": "aa"}))["error"]["code"] == "unknown_tool"
    assert (await run(node2, "fine", {"expression": "1+1"}))["result"]["result"] == 2
    assert node2.status()["tool_executor"]["restarts"] == 0
    # It is still stored: an admin replaces it with a pattern that compiles, or removes it.
    await ask(node2, "register_tool", calculator_tool("legacy", {"pattern": "^(a)a$"}))
    assert refused_by_schema(await run(node2, "legacy", {"expression": "ab"}))


async def test_no_schema_or_input_makes_one_validation_unbounded(make_node):
    node = await make_node(specs())
    # 2**30 evaluations of the same subschema, through $refs, for a one-field input.
    fan = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(30)}
    fan["d30"] = {"type": "string", "minLength": 1}
    await ask(node, "register_tool", calculator_tool("fan", {"$ref": "#/$defs/d0"}, **{"$defs": fan}))
    reply = await run(node, "fan", {"expression": "1+1"})
    assert reply["error"]["code"] == "invalid_input" and "steps" in reply["error"]["message"]
    # A $ref that refers to itself without consuming input.
    await ask(
        node,
        "register_tool",
        calculator_tool("loop", {"$ref": "#/$defs/x"}, **{"$defs": {"x": {"$ref": "#/$defs/x"}}}),
    )
    assert (await run(node, "loop", {"expression": "1"}))["error"]["code"] == "invalid_input"
    # uniqueItems compares every pair of objects.
    await ask(
        node,
        "register_tool",
        calculator_tool(
            "pairs", {}, properties={"expression": {"type": "string"}, "xs": {"uniqueItems": True}}
        ),
    )
    many = [{"k": i} for i in range(5000)]
    assert (await run(node, "pairs", {"expression": "1", "xs": many}))["error"]["code"] == "invalid_input"
    # Input too deep or too large is refused before any validation.
    deep: Any = "1+1"
    for _ in range(_tools_schema.MAX_INPUT_DEPTH + 5):
        deep = {"a": deep}
    too_deep = await run(node, "pairs", {"expression": "1", "xs": deep})
    assert too_deep["error"]["code"] == "invalid_input" and "deeper" in too_deep["error"]["message"]
    wide = await run(node, "pairs", {"expression": "1", "xs": list(range(_tools_schema.MAX_INPUT_NODES))})
    assert wide["error"]["code"] == "invalid_input" and "values" in wide["error"]["message"]
    assert node.status()["tool_executor"]["restarts"] == 0


async def test_schemas_that_would_escape_the_linear_engine_are_refused(make_node):
    node = await make_node(specs())
    # jsonschema validates a subschema naming another dialect with its stock validator (Python's re).
    with pytest.raises(InvalidArgument) as refused:
        await ask(
            node,
            "register_tool",
            calculator_tool(
                "dialect", {"$schema": "http://json-schema.org/draft-07/schema#", "pattern": CATASTROPHIC}
            ),
        )
    assert refused.value.details["field"] == "input_schema.properties.expression.$schema"
    # ...and matches patternProperties with Python's re when it works out unevaluatedProperties.
    with pytest.raises(InvalidArgument) as refused:
        await ask(
            node,
            "register_tool",
            calculator_tool("uneval", {}, patternProperties={CATASTROPHIC: {}}, unevaluatedProperties=False),
        )
    assert refused.value.details["field"] == "input_schema.unevaluatedProperties"
    # A dialect named at the top is fine: the schema is still run as 2020-12, on RE2.
    await ask(
        node,
        "register_tool",
        calculator_tool(
            "draft7", {"pattern": CATASTROPHIC}, **{"$schema": "http://json-schema.org/draft-07/schema#"}
        ),
    )
    assert (await run(node, "draft7", {"expression": "a" * 40 + "!"}))["error"]["code"] == "invalid_input"
    # Too deep, too many patterns, patterns too large to compile: refused with the limit named.
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(_tools_schema.MAX_SCHEMA_DEPTH):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(InvalidArgument, match="nests deeper"):
        await ask(node, "register_tool", {**calculator_tool("deep", {}), "input_schema": deep})
    many = {f"p{i}": {"type": "string", "pattern": f"^{i}$"} for i in range(_tools_schema.MAX_PATTERNS + 1)}
    with pytest.raises(InvalidArgument, match="patterns"):
        await ask(node, "register_tool", calculator_tool("many", {}, properties=many))
    with pytest.raises(InvalidArgument) as refused:
        await ask(node, "register_tool", calculator_tool("huge", {"pattern": r"[\p{L}]{1000}"}))
    assert refused.value.details["field"] == "input_schema.properties.expression.pattern"
