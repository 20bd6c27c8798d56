"""tool_executor: catalogue, registration, input validation, built-in calculator and memory tools, failures
that cost only one call (crash, timeout, garbage output), durability and tenant isolation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.memory import Memory
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.runtime import (
    ActorSpec,
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from minihermes.tools import local as local_tools

from .conftest import ACME, ACME_USER, ACME_VIEWER, GLOBEX, audit_trail
from .doubles import WEATHER

BUILTIN = [
    "calculator",
    "http_request",
    "list_files",
    "memory_delete",
    "memory_recall",
    "memory_search",
    "memory_store",
    "read_file",
    "terminal",
    "write_file",
]
LOCAL: list[str] = []


async def audit_events(node, ctx=ACME) -> list[dict[str, Any]]:
    return await audit_trail(node, ctx)


@pytest.fixture(autouse=True)
def _clean():
    yield
    while LOCAL:
        local_tools.unregister_local_tool(LOCAL.pop())


def specs(**tool_args: Any) -> list[ActorSpec]:
    return [
        ActorSpec("audit_event", AuditEvent, per_tenant=True),
        ActorSpec("memory", Memory, per_tenant=True),
        ActorSpec("tool_executor", ToolExecutor, per_tenant=True, args=tool_args),
    ]


async def ask(node, op: str, payload: dict[str, Any] | None = None, ctx=ACME) -> Any:
    return await node.ask("tool_executor", op, payload or {}, ctx=ctx)


async def run(node, name: str, input: Any = None, ctx=ACME, **kw: Any) -> dict[str, Any]:
    return await node.ask("tool_executor", "execute", {"name": name, "input": input, **kw}, ctx=ctx)


def python_tool(fn, *, name: str, **config: Any) -> dict[str, Any]:
    tool = local_tools.register_local_tool(fn, name=name)
    LOCAL.append(name)
    return {
        "name": name,
        "description": tool.description,
        "input_schema": tool.input_schema,
        "handler_type": "python",
        "handler_config": {"function": name, **config},
    }


# ------------------------------------------------------------------------------------------------ catalogue


async def test_list_tools_is_sorted_classified_and_byte_stable(make_node):
    node = await make_node(specs())
    first = await ask(node, "list_tools")
    assert [t["name"] for t in first["tools"]] == BUILTIN
    by_name = {t["name"]: t for t in first["tools"]}
    assert by_name["calculator"]["effects"] == "read" and by_name["calculator"]["trust"] == "trusted"
    assert by_name["terminal"]["effects"] == "mutating" and by_name["terminal"]["trust"] == "untrusted"
    assert by_name["memory_store"] == {**by_name["memory_store"], "effects": "mutating", "trust": "trusted"}
    first["tools"].pop()
    first["tools"][0]["description"] = "edited"  # a caller editing its reply changes nothing
    second = await ask(node, "list_tools")
    assert [t["name"] for t in second["tools"]] == BUILTIN and second["tools"][0]["description"] != "edited"
    assert json.dumps(second) == json.dumps(await ask(node, "list_tools"))
    await ask(node, "register_tool", WEATHER)
    third = await ask(node, "list_tools")
    assert third["digest"] != second["digest"] and "weather" in [t["name"] for t in third["tools"]]
    assert [t["name"] for t in third["tools"]] == sorted(t["name"] for t in third["tools"])


async def test_describe_tool_gives_the_classification_the_guardrails_use(make_node):
    node = await make_node(specs())
    terminal = await ask(node, "describe_tool", {"name": "terminal"})
    assert (terminal["effects"], terminal["trust"], terminal["review_by_default"]) == (
        "mutating",
        "untrusted",
        True,
    )
    assert terminal["builtin"] is True and terminal["timeout"] > 30
    calc = await ask(node, "describe_tool", {"name": "calculator"})
    assert (calc["effects"], calc["trust"], calc["review_by_default"]) == ("read", "trusted", False)
    store = await ask(node, "describe_tool", {"name": "memory_store"})
    assert (store["effects"], store["review_by_default"]) == ("mutating", False)
    get = await ask(node, "describe_tool", {"name": "http_request", "input": {"link": "x", "path": "/a"}})
    post = await ask(
        node,
        "describe_tool",
        {"name": "http_request", "input": {"link": "x", "path": "/a", "method": "POST"}},
    )
    assert (get["effects"], get["review_by_default"]) == ("read", False)
    assert (post["effects"], post["review_by_default"]) == ("mutating", True)
    with pytest.raises(NotFound, match="did you mean 'calculator'"):
        await ask(node, "describe_tool", {"name": "calculater"})


# --------------------------------------------------------------------------------------------- registration


async def test_register_tool_checks_name_schema_and_config(make_node):
    node = await make_node(specs())
    bad = [
        ({"name": "9lives"}, "name"),
        ({"name": "has space"}, "name"),
        ({"description": "  "}, "description"),
        ({"input_schema": {"type": "string"}}, "input_schema"),
        (
            {"input_schema": {"type": "object", "properties": {"city": {"type": "strng"}}}},
            "input_schema.properties.city.type",
        ),
        (
            {"input_schema": {"type": "object", "properties": {"a": {"$ref": "https://evil.test/s.json"}}}},
            "input_schema",
        ),
        ({"handler_type": "shell"}, "handler_type"),
        (
            {"handler_config": {"link_name": "openweather", "path": "/x", "method": "BREW"}},
            "handler_config.method",
        ),
        ({"handler_config": {"link_name": "openweather", "path": "../admin"}}, "handler_config.path"),
        (
            {"handler_config": {"link_name": "openweather", "path": "https://evil.test/"}},
            "handler_config.path",
        ),
        ({"handler_config": {"path": "/x"}}, "handler_config.link_name"),
        ({"handler_config": {**WEATHER["handler_config"], "timeout": 0}}, "handler_config.timeout"),
        ({"handler_config": {**WEATHER["handler_config"], "url": "x"}}, "handler_config.url"),
        ({"handler_type": "terminal", "handler_config": {"trust": "trusted"}}, "handler_config.trust"),
        ({"handler_type": "terminal", "handler_config": {"effects": "read"}}, "handler_config.effects"),
    ]
    for change, field in bad:
        with pytest.raises(InvalidArgument) as info:
            await ask(node, "register_tool", {**WEATHER, **change})
        assert info.value.details["field"] == field, (change, info.value.message)
    with pytest.raises(InvalidArgument) as info:  # the runtime checks argument types before the handler
        await ask(node, "register_tool", {**WEATHER, "input_schema": "not a schema"})
    assert info.value.details["field"] == "input_schema"
    assert [t["name"] for t in (await ask(node, "list_tools"))["tools"]] == BUILTIN


async def test_register_refuses_builtins_and_non_admins_and_replaces_on_request(make_node):
    node = await make_node(specs())
    with pytest.raises(Conflict, match="built-in"):
        await ask(node, "register_tool", {**WEATHER, "name": "calculator"})
    with pytest.raises(Conflict, match="built-in"):
        await ask(node, "unregister_tool", {"name": "terminal"})
    for ctx in (ACME_USER, ACME_VIEWER):
        with pytest.raises(PermissionDenied):
            await ask(node, "register_tool", WEATHER, ctx=ctx)
    first = await ask(node, "register_tool", WEATHER)
    assert first == {
        "status": "ok",
        "name": "weather",
        "replaced": False,
        "effects": "read",
        "trust": "untrusted",
    }
    with pytest.raises(Conflict, match="already registered"):
        await ask(node, "register_tool", {**WEATHER, "replace": False})
    again = await ask(node, "register_tool", {**WEATHER, "description": "Weather now"})
    assert again["replaced"] is True
    assert (await ask(node, "describe_tool", {"name": "weather"}))["description"] == "Weather now"
    assert await ask(node, "unregister_tool", {"name": "weather"}) == {"status": "ok", "name": "weather"}
    with pytest.raises(NotFound):
        await ask(node, "unregister_tool", {"name": "weather"})
    assert [e["event_type"] for e in await audit_events(node)].count("tool_registered") == 2


async def test_runtime_tools_survive_a_restart(make_node, tmp_path):
    node = await make_node(specs())
    await ask(node, "register_tool", WEATHER)
    await ask(
        node,
        "register_tool",
        {**WEATHER, "name": "forecast", "handler_config": {**WEATHER["handler_config"], "method": "POST"}},
    )
    before = await ask(node, "list_tools")
    await node.stop()
    node2 = await make_node(specs(), data_dir=tmp_path / "data")
    after = await ask(node2, "list_tools")
    assert json.dumps(after) == json.dumps(before)  # the same bytes: the prompt prefix does not change
    forecast = await ask(node2, "describe_tool", {"name": "forecast"})
    assert (forecast["effects"], forecast["trust"], forecast["review_by_default"]) == (
        "mutating",
        "untrusted",
        True,
    )
    result = await run(node2, "weather", {"city": 3})
    assert result["error"]["code"] == "invalid_input" and result["error"]["field"] == "city"


async def test_tools_are_per_tenant(make_node):
    node = await make_node(specs())
    await ask(node, "register_tool", WEATHER)
    globex = await ask(node, "list_tools", ctx=GLOBEX)
    assert [t["name"] for t in globex["tools"]] == BUILTIN
    assert (await run(node, "weather", {"city": "Oslo"}, ctx=GLOBEX))["error"]["code"] == "unknown_tool"
    with pytest.raises(NotFound):
        await ask(node, "describe_tool", {"name": "weather"}, ctx=GLOBEX)


# ---------------------------------------------------------------------------------------- input validation


async def test_every_execution_validates_input_first_and_names_the_field(make_node):
    node = await make_node(specs())
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 2},
            "days": {"type": "integer", "minimum": 1},
            "stops": {
                "type": "array",
                "items": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    await ask(node, "register_tool", {**WEATHER, "input_schema": schema})
    cases = [
        ({}, "city", "required"),
        ({"city": "X"}, "city", "too short"),
        ({"city": "Oslo", "days": 0}, "days", "less than the minimum"),
        ({"city": "Oslo", "stops": [{"name": "a"}, {"name": 5}]}, "stops[1].name", "not of type 'string'"),
        ({"city": "Oslo", "extra": 1}, "extra", "unknown field"),
    ]
    for given, field, words in cases:
        reply = await run(node, "weather", given)
        assert reply["status"] == "error" and reply["error"]["code"] == "invalid_input", reply
        assert reply["error"]["field"] == field
        assert words in reply["error"]["message"] and f"input.{field}" in reply["error"]["message"]
    assert (await run(node, "weather", ["not", "an", "object"]))["error"]["code"] == "invalid_input"
    assert (await run(node, "calculator", {"expr": "1+1"}))["error"]["field"] in ("expression", "expr")
    with pytest.raises(InvalidArgument) as info:  # arguments of execute itself are the caller's error
        await ask(node, "execute", {"input": {}})
    assert info.value.details["field"] == "name"


def test_the_quick_schema_check_never_accepts_what_jsonschema_refuses():
    from jsonschema import Draft202012Validator

    from minihermes.app import TOOLSETS
    from minihermes.tools._schema import CompiledSchema, _quick
    from minihermes.tools.catalog import Catalog

    BUILTINS = Catalog(TOOLSETS).tools

    pool = [
        None,
        True,
        False,
        0,
        1,
        -1,
        1.0,
        2.5,
        10**9,
        "",
        "a",
        "GET",
        "x" * 600,
        [],
        [1, "a"],
        {},
        {"a": 1},
    ]
    extra_schema = {
        "type": "object",
        "properties": {
            "n": {"type": ["integer", "null"], "minimum": 0, "exclusiveMaximum": 10},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 1},
            "flag": {"enum": [True, 1]},
        },
        "required": ["n"],
        "additionalProperties": {"type": "string"},
    }
    # Every core built-in takes the quick path; subsystem tools (MCP's pass-through schema, say) may not,
    # and then jsonschema checks them. Where a quick checker exists it must agree with jsonschema.
    core = {name: BUILTINS[name].input_schema for name in BUILTIN}
    others = [t.input_schema for n, t in BUILTINS.items() if n not in core]
    assert all(_quick(schema) is not None for schema in core.values())
    schemas = [*core.values(), *(x for x in others if _quick(x) is not None), extra_schema]
    accepted = 0
    for schema in schemas:
        quick, strict = _quick(schema), Draft202012Validator(schema)
        assert quick is not None
        names = [*schema.get("properties", {}), "zzz"]
        cases: list[Any] = [*pool, {}]
        cases += [{n: v} for n in names for v in pool]
        base = {r: "a" for r in schema.get("required", ())}
        cases += [{**base, n: v} for n in names for v in pool]
        for case in cases:
            if quick(case):
                accepted += 1
                assert strict.is_valid(case), (schema, case)
        if schema.get("additionalProperties") is not True:
            assert CompiledSchema(schema).input_error({**base, "zzz": object()}) is not None
    assert accepted > 50
    assert _quick({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}}) is None


async def test_unknown_tool_is_a_result_with_a_hint(make_node):
    node = await make_node(specs())
    reply = await run(node, "calculater", {"expression": "1"})
    assert reply["status"] == "error" and reply["error"]["code"] == "unknown_tool"
    assert "did you mean 'calculator'" in reply["error"]["message"]
    assert (await ask(node, "get_stats"))["by_tool"]["_unknown"]["errors"] == 1


# ------------------------------------------------------------------------------------------------ built-ins


async def test_calculator_computes_exactly_and_refuses_hostile_input(make_node):
    node = await make_node(specs())
    reply = await run(node, "calculator", {"expression": "42 * 17"}, session_id="s1")
    assert reply["status"] == "ok" and reply["untrusted"] is False
    assert reply["result"]["result"] == 714 and reply["result"]["display"] == "714"
    for hostile, code in [
        ("9**9**9**9", "result_too_large"),
        ("factorial(100000)", "result_too_large"),
        ("__import__('os').system('id')", "unsupported"),
        ("1 +" * 160 + "1", "input_too_long"),
    ]:
        reply = await run(node, "calculator", {"expression": hostile})
        assert reply["status"] == "error" and reply["error"]["code"] in (
            code,
            "too_complex",
            "unknown_name",
        ), reply
    event = next(e for e in await audit_events(node) if e["event_type"] == "tool_executed")
    assert (
        event["session_id"] == "s1"
        and event["data"]["tool"] == "calculator"
        and event["data"]["status"] == "ok"
    )


async def test_memory_tools_round_trip_through_the_memory_actor(make_node):
    node = await make_node(specs())
    stored = await run(node, "memory_store", {"key": "favourite_colour", "value": "teal"}, session_id="s1")
    assert stored == {**stored, "status": "ok", "untrusted": False}
    assert stored["result"]["stored"] is True and stored["result"]["created"] is True
    number = await run(node, "memory_store", {"key": "last_calc", "value": 714, "tier": "core"})
    assert number["status"] == "ok"
    recalled = await run(node, "memory_recall", {"key": "favourite_colour"})
    assert recalled["result"] == {
        "key": "favourite_colour",
        "found": True,
        "value": "teal",
        "scope": "global",
        "tier": "reachable",
    }
    assert (await run(node, "memory_recall", {"key": "last_calc"}))["result"]["value"] == "714"
    missing = await run(node, "memory_recall", {"key": "shoe_size"})
    assert missing["status"] == "ok" and missing["result"]["found"] is False
    found = await run(node, "memory_search", {"query": "colour"})
    assert [m["key"] for m in found["result"]["memories"]] == ["favourite_colour"]
    # session scope uses the session the call runs in, never one named by the LLM
    await run(node, "memory_store", {"key": "draft", "value": "v1", "scope": "session"}, session_id="s1")
    own = await run(node, "memory_recall", {"key": "draft", "scope": "session"}, session_id="s1")
    other = await run(node, "memory_recall", {"key": "draft", "scope": "session"}, session_id="s2")
    assert own["result"]["found"] is True and other["result"]["found"] is False
    no_session = await run(node, "memory_store", {"key": "draft", "value": "v1", "scope": "session"})
    assert no_session["status"] == "error" and no_session["error"]["code"] == "invalid_argument"


async def test_memory_tools_without_a_memory_actor_fail_as_results(make_node):
    node = await make_node([ActorSpec("tool_executor", ToolExecutor, per_tenant=True)])
    reply = await run(node, "memory_store", {"key": "a", "value": "b"})
    assert reply["status"] == "error" and reply["error"]["code"] == "unavailable"


async def test_viewers_run_read_tools_only(make_node):
    node = await make_node(specs())
    assert (await run(node, "calculator", {"expression": "2+2"}, ctx=ACME_VIEWER))["status"] == "ok"
    refused = await run(node, "memory_store", {"key": "a", "value": "b"}, ctx=ACME_VIEWER)
    assert refused["error"]["code"] == "permission_denied"
    assert (await run(node, "memory_store", {"key": "a", "value": "b"}, ctx=ACME_USER))["status"] == "ok"


# ------------------------------------------------------------------------------- failures cost one call only


async def test_a_crashing_tool_costs_only_that_call(make_node):
    def t_boom(x: int) -> int:
        raise RuntimeError(f"kaboom {x}")

    def t_exit() -> int:
        raise SystemExit(3)

    def t_double(x: int) -> int:
        return 2 * x

    node = await make_node(specs())
    for fn in (t_boom, t_exit, t_double):
        await ask(node, "register_tool", python_tool(fn, name=fn.__name__, effects="read"))
    boom = await run(node, "t_boom", {"x": 1})
    assert boom["status"] == "error" and boom["error"]["code"] == "tool_crashed"
    assert "RuntimeError: kaboom 1" in boom["error"]["message"]
    assert (await run(node, "t_exit", {}))["error"]["code"] == "tool_crashed"
    assert (await run(node, "t_double", {"x": 21}))["result"] == 42
    stats = await ask(node, "get_stats")
    assert stats["executions"] == 3 and stats["errors"] == 2
    assert node.status()["tool_executor"]["restarts"] == 0
    assert node.metrics.counter("tool_executions_total", tenant="acme", tool="t_boom") == 1
    assert node.metrics.counter("tool_errors_total", tenant="acme", tool="t_boom", code="tool_crashed") == 1


async def test_garbage_and_huge_output_is_contained(make_node):
    def t_garbage() -> Any:
        return {"nan": float("nan")}

    def t_huge() -> str:
        return "x" * 200_000

    def t_object() -> Any:
        return {"when": object()}

    node = await make_node(specs(max_result_chars=1000))
    for fn in (t_garbage, t_huge, t_object):
        await ask(node, "register_tool", python_tool(fn, name=fn.__name__))
    assert (await run(node, "t_garbage"))["error"]["code"] == "invalid_output"
    huge = await run(node, "t_huge")
    assert (
        huge["status"] == "ok"
        and huge["result"]["truncated"] is True
        and len(huge["result"]["preview"]) == 1000
    )
    assert isinstance((await run(node, "t_object"))["result"]["when"], str)


async def test_a_hanging_tool_times_out_on_the_node_clock_and_the_actor_keeps_serving(make_node, clock):
    entered = asyncio.Event()
    cancelled: list[bool] = []

    async def t_hang() -> str:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    node = await make_node(specs())
    await ask(node, "register_tool", python_tool(t_hang, name="t_hang", timeout=5))
    pending = asyncio.ensure_future(run(node, "t_hang", {}))
    await entered.wait()
    # the hanging call does not block other work of the same tenant
    assert (await run(node, "calculator", {"expression": "1+1"}))["result"]["result"] == 2
    assert (await ask(node, "get_stats"))["running"] == 1
    await clock.advance(4.9)
    assert not pending.done()
    await clock.advance(0.2)
    reply = await pending
    assert (
        reply["status"] == "error"
        and reply["error"]["code"] == "timeout"
        and "5s" in reply["error"]["message"]
    )
    assert cancelled == [True]
    stats = await ask(node, "get_stats")
    assert stats["timeouts"] == 1 and stats["running"] == 0


async def test_python_tools_whose_function_is_gone_are_unavailable(make_node):
    def t_gone() -> int:
        return 1

    node = await make_node(specs())
    await ask(node, "register_tool", python_tool(t_gone, name="t_gone"))
    local_tools.unregister_local_tool("t_gone")
    assert (await run(node, "t_gone"))["error"]["code"] == "unavailable"
