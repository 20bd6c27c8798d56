"""The LangGraph side of bench/turn.py: the same agent loop as MiniHermes's turn, built the LangGraph way.

A ``StateGraph(MessagesState)`` with an ``agent`` node (a chat model with the tools bound) and a prebuilt
``ToolNode``, routed by ``tools_condition`` -- the graph ``create_react_agent`` builds, without its extra
hooks -- compiled with the ``AsyncSqliteSaver`` checkpointer on a temp file, so every super-step (each model
reply, each tool result) is checkpointed. The chat model is a ``BaseChatModel`` subclass that answers at
once and deterministically, from the conversation alone, exactly like the bench provider on the MiniHermes
side: one ``calculator`` call per reply for the expressions in ``EXPRESSIONS``, then the final answer. The
tool runs the very function MiniHermes's built-in calculator runs, so tool work is identical on both sides.

Imported only when LangGraph is measured (``--no-langgraph`` skips it), so the bench runs without it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import aiosqlite
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from minihermes.context.prompt import default_soul, stable_prefix
from minihermes.tools.calculator import calculate

SYSTEM_PROMPT = stable_prefix(default_soul(), "", [])
"""The system prompt MiniHermes's agent sends when no SOUL.md, project file or core memory is present."""

EXPRESSIONS = ("2+2", "3*3", "5-1")
RESULTS = ("4", "9", "4")
FINAL_ANSWER = "2+2 = 4, 3*3 = 9 and 5-1 = 4."


@tool
def calculator(expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression."""
    return calculate(expression).to_dict()


class FakeToolChatModel(BaseChatModel):
    """Zero-latency, deterministic: counts the tool results since the last human message and asks for the
    next calculator call (``shape="sequential"``, one call per reply) or all three at once (``"batch"``),
    then gives the final answer. ``latency`` (seconds) sleeps before answering, for concurrency runs."""

    shape: str = "sequential"
    latency: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "bench-fake-tool-model"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        # What a real integration does: the tools travel as OpenAI-style schemas in the bound kwargs.
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        done = 0
        for m in reversed(messages):
            if isinstance(m, HumanMessage):
                break
            if isinstance(m, ToolMessage):
                done += 1
        if done >= len(EXPRESSIONS):
            return AIMessage(content=FINAL_ANSWER)
        todo = range(done, done + 1) if self.shape == "sequential" else range(len(EXPRESSIONS))
        calls = [
            {
                "name": "calculator",
                "args": {"expression": EXPRESSIONS[i]},
                "id": f"call_{i}",
                "type": "tool_call",
            }
            for i in todo
        ]
        return AIMessage(content="", tool_calls=calls)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency:
            await asyncio.sleep(self.latency)
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])


class LangGraphTurns:
    """``async with LangGraphTurns(db_path) as lg: await lg.turn(thread_id)`` runs one checkpointed turn.

    ``durability``: "sync" (each checkpoint is written before the next step runs: what MiniHermes does) or
    "async" (LangGraph's default: written while the next step runs). ``synchronous``: the SQLite PRAGMA on
    the saver's connection; "NORMAL" matches MiniHermes's store (WAL + synchronous=NORMAL), None keeps
    SQLite's default (FULL: an fsync per commit).
    """

    def __init__(
        self,
        db_path: str,
        *,
        durability: str = "sync",
        synchronous: str | None = "NORMAL",
        shape: str = "sequential",
        latency: float = 0.0,
    ) -> None:
        self.db_path = db_path
        self.durability = durability
        self.synchronous = synchronous
        self.model = FakeToolChatModel(shape=shape, latency=latency)
        self.conn: aiosqlite.Connection | None = None
        self.graph: Any = None

    async def __aenter__(self) -> LangGraphTurns:
        self.conn = await aiosqlite.connect(self.db_path)
        saver = AsyncSqliteSaver(self.conn)
        await saver.setup()  # WAL
        if self.synchronous:
            await self.conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        bound = self.model.bind_tools([calculator])
        system = SystemMessage(content=SYSTEM_PROMPT)

        async def agent(state: MessagesState) -> dict[str, Any]:
            reply = await bound.ainvoke([system, *state["messages"]])
            return {"messages": [reply]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode([calculator]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
        builder.add_edge("tools", "agent")
        self.graph = builder.compile(checkpointer=saver)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def turn(self, thread_id: str, message: str = "calculate 2+2, 3*3 and 5-1") -> dict[str, Any]:
        out = await self.graph.ainvoke(
            {"messages": [HumanMessage(content=message)]},
            {"configurable": {"thread_id": thread_id}},
            durability=self.durability,
        )
        return out  # type: ignore[no-any-return]


def check_turn(out: dict[str, Any], shape: str) -> None:
    """The turn did what the MiniHermes turn does: 3 tool results, then the final answer."""
    messages = out["messages"]
    last_human = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    turn = messages[last_human:]
    tools = [m for m in turn if isinstance(m, ToolMessage)]
    if len(tools) != len(EXPRESSIONS) or turn[-1].content != FINAL_ANSWER:
        raise AssertionError(f"LangGraph turn went wrong: {[type(m).__name__ for m in turn]}")
    shown = [json.loads(str(m.content)).get("display") for m in tools]
    if shown != list(RESULTS) or any(getattr(m, "status", "success") != "success" for m in tools):
        raise AssertionError(f"LangGraph tool calls went wrong: {tools}")
