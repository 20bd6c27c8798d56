"""A built-in tool written the way CONTRIBUTING.md says ("Adding a built-in tool"): one ``Tool`` in one
module, in a ``Toolset`` that the composition root gives the tool executor."""

from __future__ import annotations

from typing import Any

from minihermes.tools import READ, TRUSTED, Tool, ToolEnv, ToolFailure, Toolset


async def word_count(args: dict[str, Any], env: ToolEnv) -> Any:
    words = args["text"].split()
    if args.get("min_words", 0) > len(words):
        raise ToolFailure("too_short", f"the text has {len(words)} words")
    return {"words": len(words), "session": env.session_id}


WORDS_TOOLSET = Toolset(
    "words",
    [
        Tool(
            "word_count",
            "Count the words of a text.",
            {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "maxLength": 10_000},
                    "min_words": {"type": "integer", "minimum": 0},
                },
                "required": ["text"],
                "additionalProperties": False,
            },
            READ,
            TRUSTED,
            handler=word_count,
            permission="read",  # no actor behind it: any role that may read may run it
        )
    ],
)
