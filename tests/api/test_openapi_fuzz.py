"""Schemathesis against a live server: every documented operation, fuzzed from the OpenAPI document, answers
without a 5xx and as documented (status codes, content types, response schemas).

The server is `minihermes serve` (the whole agent app, JWT auth) in a child process on loopback. Every
``(actor, op)`` of the live catalog is a path of the document (``POST /api/v1/actors/{actor}/{op}``, the body
generated from the op's params schema), beside the session and discovery routes, so a new op is fuzzed the
day it is added. Three passes:

- as an end user over every operation (admin-only ops answer 403, as documented);
- as an admin over every operation but ``OUTSIDE`` (the admin writes that would reach outside the test:
  real LLM providers, MCP server commands, files on the server's disk, tools run for real);
- stateful, as an admin: the OpenAPI links (``kanban.create`` -> ``kanban.show`` with the new ``task_id``,
  and the others of ``minihermes.api._catalog.LINKED_IDS``) chain calls on what earlier calls created.

Each operation gets ``EXAMPLES`` generated cases, whose string fields draw from ``EDGE`` (and a schedule
from ``SCHEDULES``) part of the time, and in the admin pass a sweep: each field of each actor op set to each
boundary value in turn, the others plain (``sweep_cases``). Values that broke the server before are among
them (``msg_id: ""``, a NUL, a schedule on 30 February).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest
import schemathesis
from hypothesis import HealthCheck, example, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from .._server import serve_process

SECRET = "schemathesis-secret-that-is-long-enough-for-hs256"
EXAMPLES = int(os.environ.get("MINIHERMES_FUZZ_EXAMPLES", "15"))
STATEFUL_EXAMPLES = int(os.environ.get("MINIHERMES_FUZZ_STATEFUL_EXAMPLES", "20"))

OUTSIDE = {
    # real providers: the network
    "llm_gateway": {"register_provider", "switch_provider", "set_failover", "test_provider"},
    "mcp_manager": {"add_server", "refresh_server", "call_tool"},  # starts commands, opens connections
    "tool_executor": {"execute"},  # the terminal, files and HTTP for real
    "skill_tools": {"create_tool", "run_tool"},  # a sandbox process per case (see the report of issue 17)
}
"""Admin ops the admin pass leaves out (the user pass still calls them: 403)."""

EDGE = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "a",
    "a" * 5000,
    "0",
    "-1",
    "..",
    "../../etc/passwd",
    "/",
    "*",
    "%",
    "\\",
    "\n",
    "\u202e",
    "\U0001f600",
    "null",
    "UTC",
]
"""Strings every string field of a body draws from now and then (a fuzzing dictionary): empty, blank, NUL,
longer than a store key, path-like, control and non-BMP characters, and plain valid ones."""
SCHEDULES = [
    "0 0 30 2 *",
    "0 0 31 2 *",
    "0 0 31 4 *",
    "0 0 31 11 *",
    "59 23 31 12 *",
    "0 0 29 2 *",
    "*/0 * * * *",
    "61 * * * *",
    "@reboot",
    "every 0s",
    "every 99999d",
    "9999-12-31T23:59:59",
    "0001-01-01T00:00",
]
"""Cron and schedule edge cases: dates that never come (30 February), out-of-range fields and times."""
SCHEDULE_FIELDS = {"schedule", "cron"}
SWEEP_STRINGS = ["", " ", "\x00", "a" * 5000, "../../etc/passwd", "\n", "\u202e", "\U0001f600"]
"""The values of ``EDGE`` every string field of every actor op is swept with (see ``sweep_cases``)."""
SWEEP_INTEGERS = [0, -1, 2**31, 2**63 - 1, -(2**63)]
SWEEP_NUMBERS = [0, -1, 0.5, 1e308, -1e308, 5e-324]
DICTIONARY_PROBABILITY = 0.3


def _token(roles: list[str], tenant: str = "fuzz", sub: str = "fuzzer") -> str:
    return jwt.encode(
        {"tenant": tenant, "sub": sub, "roles": roles, "exp": int(time.time()) + 3600},
        SECRET,
        algorithm="HS256",
    )


USER = {"Authorization": f"Bearer {_token(['user'])}"}
ADMIN = {"Authorization": f"Bearer {_token(['admin'], sub='fuzz-admin')}"}


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("fuzz") / "data"
    options = ["--jwt-secret-env", "FUZZ_JWT_SECRET"]
    with serve_process(data, options, env={"FUZZ_JWT_SECRET": SECRET}, log_level="error") as url:
        yield url


def fuzz_config(document: dict[str, Any]) -> SchemathesisConfig:
    """Every top-level string field of every request body bound to the dictionary (``SCHEDULES`` for a
    schedule, ``EDGE`` for the rest), so a field added tomorrow draws from it too."""
    fields: set[str] = set()
    for methods in document["paths"].values():
        for operation in methods.values():
            content = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            properties = content.get("schema", {}).get("properties", {})
            fields |= {name for name, schema in properties.items() if schema.get("type") == "string"}
    binding = {"probability": DICTIONARY_PROBABILITY}
    return SchemathesisConfig.from_dict(
        {
            # Positive cases (the stateless passes ask for them too): a chain of calls is about what one
            # call created; the negative cases the sweep and the checks cover without it.
            "generation": {"mode": "positive"},
            "output": {"sanitization": {"enabled": False}},  # a reproduction shows the session_id it sent
            "dictionaries": {"edge": {"values": EDGE}, "schedules": {"values": SCHEDULES + EDGE}},
            "parameters": {
                f"body.{name}": {"dictionary": "schedules" if name in SCHEDULE_FIELDS else "edge", **binding}
                for name in sorted(fields)
            },
        }
    )


def _is_outside(ctx: Any) -> bool:
    path = ctx.operation.path
    if not path.startswith("/api/v1/actors/"):
        return False
    actor, _, op = path.removeprefix("/api/v1/actors/").partition("/")
    return op in OUTSIDE.get(actor, ())


@pytest.fixture(scope="module")
def document(live_server: str) -> dict[str, Any]:
    return dict(httpx.get(f"{live_server}/openapi.json", timeout=30).json())


def load_schema(live_server: str, document: dict[str, Any]) -> Any:
    return schemathesis.openapi.from_url(f"{live_server}/openapi.json", config=fuzz_config(document))


@pytest.fixture(scope="module")
def user_schema(live_server: str, document: dict[str, Any]) -> Any:
    return load_schema(live_server, document)


@pytest.fixture(scope="module")
def admin_schema(live_server: str, document: dict[str, Any]) -> Any:
    return load_schema(live_server, document).exclude(_is_outside)


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)


SHORT_TIMEOUT = 1.0
"""A case that asked for less than this (``?timeout=0.001``) may get the documented 504 ``timeout``."""


@schemathesis.check
def no_server_error_but_an_asked_for_timeout(ctx: Any, response: Any, case: Any) -> bool | None:
    """``not_a_server_error``, except the one 5xx the API documents for a caller's choice: the fuzzer sets
    ``?timeout=`` anywhere in its range, and an op that does not answer within a millisecond is a 504
    ``timeout`` by contract. A 504 for a timeout of a second or more, or any other 5xx, still fails."""
    asked = (case.query or {}).get("timeout")
    if response.status_code == 504 and isinstance(asked, int | float) and asked < SHORT_TIMEOUT:
        if response.json().get("error", {}).get("code") == "timeout":
            return None
    return not_a_server_error(ctx, response, case)


# "No 5xx and no schema violations": statuses, content types, headers and bodies as documented, and
# schema-invalid input refused with a 4xx. Not ``positive_data_acceptance``: an op's JSON schema comes from
# its type hints, and actors refuse values no type can describe (an empty message, an unknown skill id).
CHECKS = [
    no_server_error_but_an_asked_for_timeout,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


def sweep_cases(operation: Any) -> list[Any]:
    """One case per (field, dictionary value) of an actor op: the op's plainest valid-looking body (each
    required field ``"a"``, ``1``, ``false``, ``[]`` or ``{}``) with that one field set to each value of
    ``SWEEP_STRINGS`` (``SCHEDULES`` too for a schedule), ``SWEEP_INTEGERS`` or ``SWEEP_NUMBERS``. The
    random cases draw from the same values only now and then; the sweep reaches each of them on every op,
    with the other fields plain enough to get past their checks (``create_job`` with only its schedule
    on 30 February)."""
    if not operation.path.startswith("/api/v1/actors/"):
        return []
    content = operation.definition.raw.get("requestBody", {}).get("content", {}).get("application/json", {})
    schema = content.get("schema", {})
    properties: dict[str, Any] = schema.get("properties", {})
    base = {name: _plain(properties[name]) for name in schema.get("required", [])}
    cases = []
    for name, prop in properties.items():
        kind = prop.get("type")
        values: list[Any] = {
            "string": SWEEP_STRINGS + (SCHEDULES if name in SCHEDULE_FIELDS else []),
            "integer": SWEEP_INTEGERS,
            "number": SWEEP_NUMBERS,
        }.get(kind, [])
        for value in values:
            cases.append(operation.Case(body={**base, name: value}, media_type="application/json"))
    return cases


def _plain(prop: dict[str, Any]) -> Any:
    if "default" in prop:
        return prop["default"]
    if prop.get("enum"):
        return prop["enum"][0]
    kind = prop.get("type") or next((o.get("type") for o in prop.get("anyOf", ()) if "type" in o), "string")
    return {"integer": 1, "number": 1, "boolean": False, "array": [], "object": {}}.get(kind, "a")


SLOWEST: list[tuple[float, str]] = []


def fuzz(schema: Any, headers: dict[str, str], *, sweep: bool = False, examples: int = EXAMPLES) -> int:
    """Every operation of ``schema``: ``examples`` generated cases each, after its sweep cases if asked
    (schemathesis' own pytest plugin does not run under this pytest, so hypothesis drives the cases
    directly). Fails listing every operation that broke a check; returns how many operations ran."""
    ran = 0
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        def check(case: Any) -> None:
            case.call_and_validate(headers=headers, timeout=30, checks=CHECKS)

        test = given(case=operation.as_strategy())(check)
        if sweep:
            for case in reversed(sweep_cases(operation)):
                test = example(case=case)(test)
        test = settings(_SETTINGS, max_examples=examples)(test)
        began = time.monotonic()
        try:
            test()
        except (FailureGroup, Exception) as e:  # reported with the others below
            failures.append(f"{operation.method.upper()} {operation.path}: {_describe(e)[:3000]}")
        ran += 1
        SLOWEST.append((time.monotonic() - began, f"{operation.method.upper()} {operation.path}"))
    SLOWEST.sort(reverse=True)
    print("slowest operations:", [(round(t, 2), name) for t, name in SLOWEST[:12]])
    assert not failures, "\n\n".join(failures)
    return ran


def _describe(error: BaseException) -> str:
    parts = [str(error)]
    for sub in getattr(error, "exceptions", ()):
        parts.append(f"  - {type(sub).__name__}: {sub}")
    return "\n".join(parts)


REFUSED_EXAMPLES = 3
"""Generated cases of an op the caller may not call: each is a 403 before the body is read."""


def _user_may_call(ctx: Any) -> bool:
    """The actor ops a ``user`` may call (their description names the roles), and the fixed routes."""
    description = ctx.operation.definition.raw.get("description", "")
    return not description.startswith("Access:") or "user" in description


def test_every_operation_as_a_user(user_schema: Any, document: dict[str, Any]) -> None:
    """Generated cases only: the admin pass sweeps the same ops (a user's calls differ in ownership, which
    generated values reach too)."""
    allowed = fuzz(user_schema.include(_user_may_call), USER)
    refused = fuzz(user_schema.exclude(_user_may_call), USER, examples=REFUSED_EXAMPLES)
    methods = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
    operations = sum(1 for item in document["paths"].values() for method in item if method in methods)
    assert allowed + refused == operations  # every operation, one way or the other


def test_every_operation_but_those_reaching_outside_as_an_admin(admin_schema: Any) -> None:
    assert fuzz(admin_schema, ADMIN, sweep=True) > 150


def test_linked_operations_statefully_as_an_admin(admin_schema: Any, document: dict[str, Any]) -> None:
    """Calls chained by the document's links: what one call created, the next one reads, changes or
    deletes (``kanban.create`` then ``kanban.show``/``move``/``delete`` of that card, and so on)."""
    links = [
        name
        for methods in document["paths"].values()
        for operation in methods.values()
        for name in operation.get("responses", {}).get("200", {}).get("links", {})
    ]
    assert len(links) >= 30
    machine = admin_schema.as_state_machine()

    class Linked(machine):  # type: ignore[misc,valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": ADMIN, "timeout": 30}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS, headers=ADMIN, transport_kwargs=kwargs)

    Linked.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=6,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
    )
