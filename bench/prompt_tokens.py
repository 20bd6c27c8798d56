"""What one LLM call of a turn carries: prompt tokens and characters, and tool schemas, before and after the
agent chose the toolsets it offers (``minihermes.context.toolsets``).

    .venv/bin/python bench/prompt_tokens.py            # about 10 seconds
    .venv/bin/python bench/prompt_tokens.py --json     # the rows as JSON too

The real agent tree in-process (``MiniHermes(data_dir=<tmp>)``, every actor of the default config), twice:

- BEFORE: the agent offers every tool on every call (agent arg ``toolsets = ["all"]``: what every turn did
  before toolsets were configuration);
- AFTER: the defaults (``toolsets = ["core"]``, plus what a request calls for).

The LLM is a provider kind registered by this script (``bench_prompt``): it records each request and answers
without tools, except that "remember that ..." stores the fact with ``memory_store`` (as a real model would).
Session ``earlier`` states the fact; session ``chat`` has a few turns of small talk, then the measured turns:
a plain question ("what is my favourite colour"), a kanban request and a reminder request. Each row is the
first LLM call of the measured turn: messages (system prompt, the turn's context, history) plus the tool
schemas, counted with ``minihermes.context.tokens`` (the offline counter unless a cached tiktoken table is
there; the counter used is printed), and characters as the JSON a provider is sent. "fact" says whether the
stated fact (``teal``) is among the prompt's relevant memories.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from minihermes.app import default_config
from minihermes.context.tokens import default_counter, messages_tokens, tools_tokens
from minihermes.embed import MiniHermes
from minihermes.llm import (
    Completion,
    CompletionRequest,
    Provider,
    ProviderConfig,
    StreamEvent,
    ToolCall,
    Usage,
    events_from_completion,
    register_provider,
)

PROVIDER_KIND = "bench_prompt"
REQUESTS: list[CompletionRequest] = []
FACT = "remember that my favourite colour is teal"
EARLIER = [FACT, "thanks!"]
SMALL_TALK = ["hi, I'm planning my week", "what is 17 * 23?", "ok, and how are you today?"]
MEASURED = [
    ("plain chat", "what is my favourite colour"),
    ("kanban request", "add a kanban card: buy milk"),
    ("reminder request", "remind me every Monday at 9am to water the plants"),
]


class RecordingProvider(Provider):
    """Records every request; answers in words, except that it stores a fact it is asked to remember."""

    kind = PROVIDER_KIND

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        self.usage = Usage(input_tokens=0, output_tokens=10)

    async def complete(self, request: CompletionRequest) -> Completion:
        REQUESTS.append(request)
        last_user = next(m.content for m in reversed(request.messages) if m.role == "user")
        answered = request.messages[-1].role == "tool"
        if last_user.startswith("remember that") and not answered:
            call = ToolCall(
                id="call_0",
                name="memory_store",
                input={"key": "favourite_colour", "value": "teal"},
            )
            return self._done("", "tool_use", [call])
        return self._done("Noted." if answered else "All right.", "end_turn", [])

    def _done(self, text: str, stop: Any, calls: list[ToolCall]) -> Completion:
        return Completion(
            content=text,
            stop_reason=stop,
            tool_calls=calls,
            usage=self.usage,
            provider=self.name,
            model="bench",
        )

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        for event in events_from_completion(await self.complete(request)):
            yield event


register_provider(PROVIDER_KIND, RecordingProvider, replace=True)


def measure(request: CompletionRequest) -> dict[str, Any]:
    messages = [m.model_dump(exclude_defaults=True) for m in request.messages]
    tools = [t.model_dump() for t in request.tools]
    tool_chars = len(json.dumps(tools, ensure_ascii=False))
    message_chars = len(json.dumps(messages, ensure_ascii=False))
    section = next(
        (m.content for m in request.messages if m.role == "system" and "## Relevant memories" in m.content),
        "",
    )
    memories = section.split("## Relevant memories", 1)[1] if section else ""
    return {
        "tokens": messages_tokens(messages) + tools_tokens(tools),
        "tool_tokens": tools_tokens(tools),
        "chars": message_chars + tool_chars,
        "tools": len(tools),
        "tool_chars": tool_chars,
        "kanban_tools": sum(1 for t in tools if t["name"].startswith("kanban_")),
        "schedule_tools": sum(1 for t in tools if t["name"].startswith("cron_")),
        "fact": "teal" in memories,
        "memories": memories.count("\n- "),
    }


async def run(variant: str, toolsets: list[str] | None) -> list[dict[str, Any]]:
    cfg = default_config()
    if toolsets is not None:
        for spec in cfg.tree.walk():
            if spec.name == "agent":
                spec.args["toolsets"] = toolsets
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mh-prompt-") as data_dir:
        mh = MiniHermes(data_dir=data_dir, config=cfg)
        await mh.start()
        try:
            await mh.ask(
                "llm_gateway",
                "register_provider",
                {"name": "recording", "kind": PROVIDER_KIND, "model": "bench"},
            )
            await mh.ask("llm_gateway", "switch_provider", {"provider": "recording"})
            for message in EARLIER:
                await mh.chat(message, session_id="earlier")
            for message in SMALL_TALK:
                await mh.chat(message, session_id="chat")
            for label, message in MEASURED:
                before = len(REQUESTS)
                reply = await mh.chat(message, session_id="chat")
                if reply.get("status") != "ok":
                    raise AssertionError(f"{variant} {label}: {reply}")
                rows.append({"variant": variant, "turn": label, **measure(REQUESTS[before])})
        finally:
            await mh.stop()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| turn | variant | prompt tokens | tool-schema tokens | chars | tools | tool-schema chars | kanban "
        "tools | cron tools | memories | fact recalled |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in sorted(
        rows, key=lambda r: ([m[0] for m in MEASURED].index(r["turn"]), r["variant"] != "BEFORE")
    ):
        lines.append(
            f"| {r['turn']} | {r['variant']} | {r['tokens']:,} | {r['tool_tokens']:,} | {r['chars']:,} | "
            f"{r['tools']} | {r['tool_chars']:,} | {r['kanban_tools']} | {r['schedule_tools']} | "
            f"{r['memories']} | {'yes' if r['fact'] else 'no'} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args()
    rows = await run("BEFORE", ["all"]) + await run("AFTER", None)
    print(
        f"machine: {platform.machine()}, Python {platform.python_version()}; "
        f"token counter: {default_counter().name}"
    )
    print(table(rows))
    by = {(r["variant"], r["turn"]): r for r in rows}
    for label, _ in MEASURED:
        b, a = by[("BEFORE", label)], by[("AFTER", label)]
        print(
            f"{label}: {a['tokens'] / b['tokens']:.0%} of the tokens before ({b['tokens'] - a['tokens']:,} fewer)"
        )
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    asyncio.run(main())
