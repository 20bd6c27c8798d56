"""Embed MiniHermes in a program: your own function as a tool, a durable turn, the tool-call history.

    python examples/embed_agent.py [DATA_DIR]

Runs offline with the simulated model. Run it twice with the same DATA_DIR: the session's history is
still there the second time (it lives in DATA_DIR/minihermes.db).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile

from minihermes import MiniHermes


async def main(data_dir: str) -> None:
    async with MiniHermes(data_dir=data_dir) as mh:

        @mh.tool
        def word_count(text: str) -> int:
            """Count the words in a text."""
            return len(text.split())

        await mh.register_tool(word_count)

        reply = await mh.chat("calculate 42 * 17 and remember the result", session_id="demo")
        print("agent:", reply["response"])
        print("tool calls this turn:", reply["tool_calls"], "LLM calls:", reply["iterations"])

        reply = await mh.chat("use word_count on: the quick brown fox", session_id="demo")
        print("agent:", reply["response"])

        for call in await mh.tool_history("demo"):
            print(f"  {call['tool']}({call['input']}) -> {call['output']}")
        print("messages in the session:", len(await mh.history("demo")))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as d:
            asyncio.run(main(d))
