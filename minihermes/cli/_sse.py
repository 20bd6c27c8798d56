"""Server-Sent Events read by the CLI: a turn's events (``chat``) and the notification stream (``_inbox``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """Server-Sent Events as dicts: the JSON ``data`` of each event, with ``type`` from ``event:`` when the
    data has none. Comments (keep-alives) are skipped."""
    name = ""
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r")
        if not line:
            if data:
                try:
                    value = json.loads("\n".join(data))
                except ValueError:
                    value = {"text": "\n".join(data)}
                if not isinstance(value, dict):
                    value = {"value": value}
                if name and "type" not in value:
                    value["type"] = name
                yield value
            name, data = "", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
