"""JSON schemas of the fixed endpoints, for the OpenAPI document (the actor ops' come from ``_catalog``).

FastAPI would describe routes that return raw ``Response`` objects as "anything"; the document is instead
completed here, endpoint by endpoint, with what the handlers really answer (a schemathesis run checks it).
"""

from __future__ import annotations

from typing import Any

ERROR_REF = {"$ref": "#/components/schemas/Error"}

_ERROR_TEXT = {
    400: "Bad request (an invalid header), or an actor error without a more precise status",
    401: "Unauthenticated (missing, invalid or expired credential)",
    403: "Permission denied (role, ownership, or a non-local request without auth)",
    404: "Unknown actor, op, session or object",
    405: "Method not allowed",
    409: "Conflict (e.g. the session has a turn waiting for approval)",
    413: "Body too large",
    415: "Unsupported media type",
    422: "Invalid arguments or body",
    429: "A budget is spent",
    500: "Internal error (the actor crashed; never a traceback)",
    503: "Overloaded, shutting down, or no LLM provider available",
    504: "The actor did not answer in time",
}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def error_responses(*codes: int) -> dict[str, Any]:
    return {
        str(code): {"description": _ERROR_TEXT[code], "content": json_content(ERROR_REF)} for code in codes
    }


def _obj(properties: dict[str, Any], required: list[str], extra: bool = True) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": extra,
    }


_STR = {"type": "string"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}

WHOAMI = _obj(
    {
        "tenant": _STR,
        "namespace": _STR,
        "principal": _STR,
        "roles": {"type": "array", "items": {"type": "string", "enum": ["admin", "user", "viewer"]}},
        "authenticated": _BOOL,
    },
    ["tenant", "namespace", "principal", "roles", "authenticated"],
    extra=False,
)

_PARAM = _obj({"name": _STR, "type": _STR, "required": _BOOL, "default": {}}, ["name", "type", "required"])
_OP = _obj(
    {
        "op": _STR,
        "kind": {"type": "string", "enum": ["call", "cast"]},
        "description": _STR,
        "access": {"type": "string", "enum": ["read", "write", "observe", "admin"]},
        "roles": {"type": "array", "items": _STR},
        "allowed": _BOOL,
        "params": {"type": "array", "items": _PARAM},
    },
    ["op", "kind", "description", "access", "roles", "allowed", "params"],
    extra=False,
)
ACTOR = _obj(
    {
        "name": _STR,
        "behavior": _STR,
        "kind": {"type": "string", "enum": ["virtual", "per_tenant", "shared"]},
        "key_field": {"type": ["string", "null"]},
        "description": _STR,
        "ops": {"type": "array", "items": _OP},
    },
    ["name", "behavior", "kind", "key_field", "description", "ops"],
    extra=False,
)
ACTORS = _obj({"actors": {"type": "array", "items": ACTOR}, "count": _INT}, ["actors", "count"], extra=False)

CHAT_REPLY = _obj(
    {
        "status": {"type": "string", "enum": ["ok", "paused", "max_iterations"]},
        "response": _STR,
        "session_id": _STR,
        "tool_calls": _INT,
        "iterations": _INT,
        "turn_id": _STR,
        "approval_id": _STR,
        "pending_tool": _obj({"name": _STR, "input": {}}, ["name"]),
    },
    ["status", "response", "session_id"],
)

_SERIES_POINT = {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
METRICS_VIEW = _obj(
    {
        "tenant": _STR,
        "interval": {"type": "number"},
        "counters": {"type": "array", "items": _obj({"name": _STR, "labels": {}, "value": {}}, ["name"])},
        "gauges": {"type": "array", "items": _obj({"name": _STR, "labels": {}, "value": {}}, ["name"])},
        "series": {"type": "object", "additionalProperties": {"type": "array", "items": _SERIES_POINT}},
    },
    ["tenant", "interval", "counters", "gauges", "series"],
    extra=False,
)


def message_body_schema() -> dict[str, Any]:
    return json_content(
        {
            "type": "object",
            "properties": {
                "content": {"type": "string", "minLength": 1, "maxLength": 100_000, "pattern": r"\S"},
                "stream": {"type": "boolean", "default": False},
            },
            "required": ["content"],
            "additionalProperties": False,
        }
    )


def chat_reply_schema() -> dict[str, Any]:
    return json_content(CHAT_REPLY)


# The data of each Server-Sent Event (a JSON text), by event name.
SSE_EVENTS: dict[str, dict[str, Any]] = {
    "turn_started": _obj({"turn_id": _STR}, ["turn_id"]),
    "text_delta": _obj({"text": _STR}, ["text"]),
    "tool_call_start": _obj({"id": _STR, "name": _STR, "input": {}}, ["id", "name"]),
    "tool_call_end": _obj(
        {"id": _STR, "name": _STR, "is_error": _BOOL, "result": _STR, "duration_ms": {"type": "number"}},
        ["id", "name", "is_error"],
    ),
    "dropped": _obj({"count": _INT}, ["count"]),
    "final": _obj({"reply": CHAT_REPLY}, ["reply"]),
    "error": {"$ref": "#/components/schemas/Error"},
}


def stream_schema() -> dict[str, Any]:
    """One schema per event (``event``, ``id`` and the JSON text in ``data``), as SSE tools read them."""
    return {
        "text/event-stream": {
            "schema": {
                "description": "Server-Sent Events: turn_started, text_delta, tool_call_start, tool_call_end, "
                "dropped, then final {reply} or error {error}; the stream ends after either",
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {
                            "event": {"const": name},
                            "id": {"type": "string", "pattern": "^[0-9]+$"},
                            "data": {
                                "type": "string",
                                "contentMediaType": "application/json",
                                "contentSchema": data,
                            },
                        },
                        "required": ["event", "data"],
                    }
                    for name, data in SSE_EVENTS.items()
                ],
            }
        }
    }


_AUTHED = (401, 403, 405, 500, 503)


def fixed_responses() -> dict[tuple[str, str], dict[str, Any]]:
    """(path, method) -> the OpenAPI ``responses`` of each fixed endpoint."""
    store = _obj({"status": {"enum": ["ok", "degraded"]}, "reason": _STR}, ["status"])
    status_ok = _obj(
        {"status": {"enum": ["ok", "degraded"]}, "reason": _STR, "store": store}, ["status"], extra=False
    )
    ready = _obj({"status": {"const": "ready"}}, ["status"], extra=False)
    not_ready = _obj({"status": {"const": "not_ready"}, "reason": _STR}, ["status", "reason"], extra=False)
    return {
        ("/healthz", "get"): {
            "200": {
                "description": "The process is up; status degraded (with the reason) when its store met a fault",
                "content": json_content(status_ok),
            }
        },
        ("/readyz", "get"): {
            "200": {"description": "Ready", "content": json_content(ready)},
            "503": {
                "description": "Not ready (starting, failed or shutting down)",
                "content": json_content(not_ready),
            },
        },
        ("/api/v1/whoami", "get"): {
            "200": {"description": "The caller", "content": json_content(WHOAMI)},
            **error_responses(*_AUTHED),
        },
        ("/api/v1/actors", "get"): {
            "200": {"description": "Every actor and its ops", "content": json_content(ACTORS)},
            **error_responses(*_AUTHED),
        },
        ("/api/v1/actors/{actor}", "get"): {
            "200": {"description": "One actor and its ops", "content": json_content(ACTOR)},
            **error_responses(404, *_AUTHED),
        },
        ("/api/v1/sessions/{session_id}/messages", "post"): {
            "200": {
                "description": "The turn's reply (JSON), or its live events (text/event-stream)",
                "content": {**chat_reply_schema(), **stream_schema()},
            },
            **error_responses(400, 404, 409, 413, 415, 422, 429, 504, *_AUTHED),
        },
        ("/api/v1/sessions/{session_id}/cancel", "post"): {
            "200": {
                "description": "Whether a turn was stopped (cancelled), its turn_id and its final reply",
                "content": json_content(
                    _obj(
                        {"status": _STR, "session_id": _STR, "cancelled": {"type": "boolean"}}, ["cancelled"]
                    )
                ),
            },
            **error_responses(400, 404, 422, 504, *_AUTHED),
        },
        ("/api/v1/metrics", "get"): {
            "200": {
                "description": "The caller's tenant's counters and gauges, and their recent history",
                "content": json_content(METRICS_VIEW),
            },
            **error_responses(*_AUTHED),
        },
        ("/metrics", "get"): {
            "200": {
                "description": "Prometheus text exposition format",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            **error_responses(*_AUTHED),
        },
        ("/", "get"): {
            "200": {
                "description": "The web dashboard",
                "content": {"text/html": {"schema": {"type": "string"}}},
            },
        },
        ("/static/{path}", "get"): {
            "200": {
                "description": "A dashboard asset",
                "content": {
                    "text/javascript": {"schema": {"type": "string"}},
                    "text/css": {"schema": {"type": "string"}},
                    "image/svg+xml": {"schema": {"type": "string"}},
                },
            },
            **error_responses(404, 405),
        },
    }
