"""Plain Python functions registered as tools by a program that embeds MiniHermes.

These are the embedding developer's own trusted code (unlike LLM-written tools, which only ever run in the
sandbox), so they run in-process. The input schema is derived from the function's type hints.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

_REGISTRY: dict[str, LocalTool] = {}


@dataclass(slots=True)
class LocalTool:
    name: str
    fn: Callable[..., Any]
    description: str
    input_schema: dict[str, Any]
    effects: str = "read"
    capabilities: list[str] = field(default_factory=list)

    async def __call__(self, arguments: dict[str, Any]) -> Any:
        result = self.fn(**arguments)
        if inspect.isawaitable(result):
            result = await result
        return result


def schema_from_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON Schema object for fn's keyword parameters (required = no default)."""
    hints = typing.get_type_hints(fn)
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = hints.get(p.name, Any)
        props[p.name] = TypeAdapter(ann).json_schema() if ann is not Any else {}
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
        else:
            try:
                TypeAdapter(type(p.default)).dump_json(p.default)
                props[p.name]["default"] = p.default
            except Exception:
                pass
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def register_local_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    capabilities: list[str] | None = None,
    mutating: bool | None = None,
) -> LocalTool:
    """Register fn as a tool; capabilities like "network" or "filesystem" or mutating=True mark it as having
    effects outside the agent's own state (guardrails then treat it as mutating)."""
    tool_name = name or fn.__name__
    caps = list(capabilities or [])
    effects = (
        "mutating"
        if (mutating or (mutating is None and {"network", "filesystem", "write"} & set(caps)))
        else "read"
    )
    doc = (description or inspect.getdoc(fn) or tool_name).strip().splitlines()[0]
    tool = LocalTool(tool_name, fn, doc, schema_from_hints(fn), effects, caps)
    _REGISTRY[tool_name] = tool
    return tool


def get_local_tool(name: str) -> LocalTool | None:
    return _REGISTRY.get(name)


def unregister_local_tool(name: str) -> None:
    _REGISTRY.pop(name, None)
