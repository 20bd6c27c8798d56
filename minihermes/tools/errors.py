"""The structured error shared by the built-in tool libraries (calculator, workspace files)."""

from __future__ import annotations

from typing import Any


class ToolError(Exception):
    """A refused or failed tool operation with a stable code and a human message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def to_dict(self) -> dict[str, Any]:
        """The project's structured error shape."""
        return {"error": {"code": self.code, "message": self.message}}
