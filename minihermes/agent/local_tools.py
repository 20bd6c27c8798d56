"""Moved to ``minihermes.tools.local`` (the tool layer below the agent). This name stays importable."""

from minihermes.tools.local import (
    LocalTool,
    get_local_tool,
    register_local_tool,
    schema_from_hints,
    unregister_local_tool,
)

__all__ = ["LocalTool", "get_local_tool", "register_local_tool", "schema_from_hints", "unregister_local_tool"]
