"""What a node offers over HTTP: its actors, their ops and each op's arguments (names, types, JSON schema).

Built from each actor class's ops (``Actor.ops()``), so discovery and the OpenAPI document always match
the code. Each op's access class is the one its handler declares (``@call(access=...)``) unless the
permission table overrides it (``PermissionTable.for_node``): the HTTP edge enforces what the catalog says.
Computed once per app: the actor types of a node do not change while it runs.
"""

from __future__ import annotations

import inspect
import json
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from minihermes.permissions import PermissionTable
from minihermes.runtime import Node, Op

MIN_TIMEOUT = 0.001
"""The shortest ``?timeout=`` taken (1 ms): below it a wait means nothing (``1e-45`` is a valid float)."""

_REF_TEMPLATE = "#/components/schemas/{model}"

LINKED_IDS: dict[tuple[str, str], str] = {
    ("kanban", "create"): "task_id",
    ("session_manager", "create_session"): "session_id",
    ("cron_scheduler", "create_job"): "job_id",
    ("skill_store", "propose_skill"): "skill_id",
    ("guardrails", "request_approval"): "approval_id",
    ("task_queue", "enqueue"): "msg_id",
}
"""Ops whose reply names what they created, by the reply field; the OpenAPI document links each to every
other op of the same actor that takes that field (OpenAPI ``links``: clients and stateful fuzzers chain
``kanban.create`` into ``kanban.show`` with the new ``task_id``)."""


@dataclass(frozen=True, slots=True)
class OpInfo:
    actor: str
    op: str
    kind: str
    """``call`` (a reply) or ``cast`` (202, no reply)."""
    description: str
    params: list[dict[str, Any]]
    schema: dict[str, Any]
    """JSON schema of the argument object."""
    defs: dict[str, Any]
    access: str
    roles: frozenset[str]


@dataclass(frozen=True, slots=True)
class ActorInfo:
    name: str
    behavior: str
    kind: str
    key_field: str | None
    description: str
    ops: dict[str, OpInfo]


def build_catalog(node: Node, permissions: PermissionTable) -> dict[str, ActorInfo]:
    """Every actor of the node with its public ops (``__``-prefixed runtime ops left out), each with its
    effective access class (declared on the handler, overridden by ``permissions``)."""
    effective = permissions.for_node(node)
    out: dict[str, ActorInfo] = {}
    for name in node.actor_names():
        spec = node.spec(name)
        ops: dict[str, OpInfo] = {}
        for op, info in spec.cls.ops().items():
            params, schema, defs = _describe(info)
            ops[op] = OpInfo(
                actor=name,
                op=op,
                kind=info.kind,
                description=info.summary,
                params=params,
                schema=schema,
                defs=defs,
                access=effective.access(name, op),
                roles=effective.roles_for(name, op),
            )
        out[name] = ActorInfo(
            name=name,
            behavior=spec.behavior,
            kind="virtual" if spec.virtual else "per_tenant" if spec.per_tenant else "shared",
            key_field=spec.key_field,
            description=_first_line(spec.cls.__doc__),
            ops=ops,
        )
    return out


def actor_listing(info: ActorInfo, roles: frozenset[str]) -> dict[str, Any]:
    """The discovery view of one actor for a caller with ``roles``."""
    return {
        "name": info.name,
        "behavior": info.behavior,
        "kind": info.kind,
        "key_field": info.key_field,
        "description": info.description,
        "ops": [
            {
                "op": o.op,
                "kind": o.kind,
                "description": o.description,
                "access": o.access,
                "roles": sorted(o.roles),
                "allowed": not o.roles.isdisjoint(roles),
                "params": o.params,
            }
            for o in info.ops.values()
        ],
    }


def openapi_paths(catalog: dict[str, ActorInfo]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One OpenAPI path per (actor, op), and the component schemas they refer to."""
    paths: dict[str, Any] = {}
    components: dict[str, Any] = {}
    error = {"$ref": "#/components/schemas/Error"}
    for actor in catalog.values():
        for o in actor.ops.values():
            components.update(o.defs)
            ok: dict[str, Any] = (
                {"202": {"description": "Accepted (a cast: no reply)"}}
                if o.kind == "cast"
                else {"200": {"description": "The actor's reply", "content": _json({"type": "object"})}}
            )
            links = _links(actor, o)
            if links:
                ok["200"]["links"] = links
            paths[f"/api/v1/actors/{actor.name}/{o.op}"] = {
                "post": {
                    "tags": [actor.name],
                    "summary": o.description or f"{actor.name}.{o.op}",
                    "operationId": f"{actor.name}__{o.op}",
                    "description": f"Access: `{o.access}` (roles: {', '.join(sorted(o.roles))}).",
                    "parameters": [
                        {
                            "name": "timeout",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "number", "minimum": MIN_TIMEOUT},
                            "description": "Seconds to wait for the reply (504 after).",
                        }
                    ],
                    "requestBody": {"required": False, "content": _json(o.schema)},
                    "responses": {
                        **ok,
                        **{
                            code: {"description": text, "content": _json(error)}
                            for code, text in (
                                ("401", "Unauthenticated"),
                                ("403", "Permission denied"),
                                ("404", "Unknown actor, op, or missing object"),
                                ("409", "Conflict, or a transition the object's state does not allow"),
                                ("413", "Body too large"),
                                ("422", "Invalid arguments"),
                                ("429", "A budget is spent"),
                                ("503", "Overloaded, shutting down, or no LLM provider available"),
                                ("504", "The actor did not answer in time"),
                            )
                        },
                    },
                }
            }
    components["Error"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                "additionalProperties": True,
            }
        },
    }
    return paths, components


def _links(actor: ActorInfo, producer: OpInfo) -> dict[str, Any]:
    """The OpenAPI links of ``producer``'s reply: its new id into the ops of its actor that take it."""
    field = LINKED_IDS.get((actor.name, producer.op))
    if field is None or producer.kind != "call":
        return {}
    return {
        o.op: {
            "operationId": f"{actor.name}__{o.op}",
            "requestBody": {field: f"$response.body#/{field}"},
            "description": f"The {field} this call created",
        }
        for o in actor.ops.values()
        if o is not producer and field in o.schema["properties"]
    }


def _describe(info: Op) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    if info.model is not None:
        return _describe_model(info)
    rows: list[dict[str, Any]] = []
    properties: dict[str, Any] = {}
    required: list[str] = []
    defs: dict[str, Any] = {}
    for name, p in info.params.items():
        tp = p.annotation
        schema = _schema(tp, defs)
        row: dict[str, Any] = {"name": name, "type": _type_name(tp), "required": p.required}
        if not p.required:
            default, plain = _jsonable(p.default)
            row["default"] = default
            if plain:
                schema = {**schema, "default": default}
        rows.append(row)
        properties[name] = schema
        if p.required:
            required.append(name)
    obj: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": info.accepts_extra,
    }
    if required:
        obj["required"] = required
    return rows, obj, defs


def _describe_model(info: Op) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """An op taking one model: its arguments are the model's fields, its schema the model's own (with the
    fields' constraints)."""
    assert info.model is not None
    schema = info.model.model_json_schema(ref_template=_REF_TEMPLATE)
    defs = schema.pop("$defs", {})
    schema.pop("title", None)
    schema["additionalProperties"] = info.accepts_extra
    rows: list[dict[str, Any]] = []
    for name, p in info.params.items():
        row: dict[str, Any] = {"name": name, "type": _type_name(p.annotation), "required": p.required}
        if not p.required:
            row["default"] = _jsonable(p.default)[0]
        rows.append(row)
    return rows, schema, defs


def _schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if tp is Any or tp is inspect.Parameter.empty:
        return {}
    try:
        schema = TypeAdapter(tp).json_schema(ref_template=_REF_TEMPLATE)
    except Exception:  # a type pydantic cannot describe is still callable; say nothing about it
        return {}
    defs.update(schema.pop("$defs", {}))
    return schema


def _type_name(tp: Any) -> str:
    if tp is Any or tp is inspect.Parameter.empty:
        return "any"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "").replace("NoneType", "None")


def _jsonable(value: Any) -> tuple[Any, bool]:
    """(value, True) if it is JSON as it is, else (its repr, False)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value), False
    return value, True


def _first_line(doc: str | None) -> str:
    return inspect.cleandoc(doc).split("\n", 1)[0] if doc else ""


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}
