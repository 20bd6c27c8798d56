"""Schemathesis against a live server: every documented operation, fuzzed from the OpenAPI document, answers
without a 5xx and as documented (status codes, content types, response schemas).

The server is `minihermes serve` (the whole agent app, JWT auth) in a child process on loopback. Two passes:
as an end user over every operation (admin-only ops answer 403, as documented), and as an admin over the
tenant-wide views users do not get. Admin writes are left out on purpose: registering providers or MCP servers and
importing/exporting skills would reach outside the test (network, files), which fuzzing must never do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from .._server import serve_process

SECRET = "schemathesis-secret-that-is-long-enough-for-hs256"
EXAMPLES = int(os.environ.get("MINIHERMES_FUZZ_EXAMPLES", "5"))
_ADMIN_VIEWS = "Access: `observe`"


def _token(roles: list[str], tenant: str = "fuzz", sub: str = "fuzzer") -> str:
    return jwt.encode(
        {"tenant": tenant, "sub": sub, "roles": roles, "exp": int(time.time()) + 3600},
        SECRET,
        algorithm="HS256",
    )


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("fuzz") / "data"
    options = ["--jwt-secret-env", "FUZZ_JWT_SECRET"]
    with serve_process(data, options, env={"FUZZ_JWT_SECRET": SECRET}, log_level="error") as url:
        yield url


def _admin_views(ctx: Any) -> bool:
    """What the user pass cannot reach but an admin may fuzz safely: the tenant-wide ``observe`` views and
    the fixed endpoints (all reads; the user pass already ran every ``read`` and ``write`` op for real)."""
    operation = ctx.operation
    if not operation.path.startswith("/api/v1/actors/"):
        return operation.method.lower() == "get"
    return bool(operation.definition.raw.get("description", "").startswith(_ADMIN_VIEWS))


@pytest.fixture(scope="module")
def user_schema(live_server: str) -> Any:
    return schemathesis.openapi.from_url(f"{live_server}/openapi.json")


@pytest.fixture(scope="module")
def admin_read_schema(live_server: str) -> Any:
    return schemathesis.openapi.from_url(f"{live_server}/openapi.json").include(_admin_views)


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)
USER = {"Authorization": f"Bearer {_token(['user'])}"}
ADMIN = {"Authorization": f"Bearer {_token(['admin'], sub='fuzz-admin')}"}


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


SLOWEST: list[tuple[float, str]] = []


def fuzz(schema: Any, headers: dict[str, str]) -> int:
    """Every operation of ``schema``, ``EXAMPLES`` generated cases each (schemathesis' own pytest plugin
    does not run under this pytest, so hypothesis drives the cases directly). Fails listing every operation
    that broke a check; returns how many operations ran."""
    ran = 0
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @_SETTINGS
        def check(case: Any) -> None:
            case.call_and_validate(headers=headers, timeout=30, checks=CHECKS)

        began = time.monotonic()
        try:
            check()
        except Exception as e:  # a FailureGroup (or the first error): reported with the others below
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


def test_every_operation_as_a_user(user_schema: Any) -> None:
    assert fuzz(user_schema, USER) > 100


def test_tenant_wide_views_as_an_admin(admin_read_schema: Any) -> None:
    assert fuzz(admin_read_schema, ADMIN) >= 8
