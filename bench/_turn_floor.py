"""The floor of bench/turn.py: the same turn written by hand with nothing but what durability costs.

One coroutine runs the loop: the LLM is the same deterministic function of the conversation as the bench
provider (one ``calculator`` call per reply, then the answer), the tool is the very ``calculate`` function
MiniHermes's built-in runs, and every LLM reply and every tool result is committed to SQLite (WAL,
``synchronous=NORMAL``, the settings of MiniHermes's store and of the LangGraph run) before the next step,
as one row per message, on the event loop's own thread (no writer thread to hand over to). The history of
a session stays in a dict in memory, so a long session only appends.

There is no actor, no validation of LLM output or tool input, no guardrails check, no audit trail, no
lifecycle FSM, no usage accounting, no tenant, no restart story beyond the rows: it is what one durable
turn cannot go below in CPython on this machine, not a design anybody should ship. It puts a number on how
much of the per-turn target (``TARGET_TURN_MS``) the commits alone take.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

from minihermes.tools.calculator import calculate

_INSERT = "INSERT INTO messages (session_id, seq, body) VALUES (?, ?, ?)"


class FloorTurns:
    """``turn(session_id, message)``: one durable turn; ``check`` reads it back from disk."""

    def __init__(
        self, path: str, expressions: tuple[str, ...], results: tuple[str, ...], answer: str, shape: str
    ) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,"
            " PRIMARY KEY (session_id, seq))"
        )
        self.expressions = expressions
        self.results = results
        self.answer = answer
        self.shape = shape
        self.sessions: dict[str, list[dict[str, Any]]] = {}

    def close(self) -> None:
        self.db.close()

    def _append(self, session_id: str, history: list[dict[str, Any]], message: dict[str, Any]) -> None:
        history.append(message)
        self.db.execute(_INSERT, (session_id, len(history), json.dumps(message)))  # autocommit: durable

    def _llm(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        done = 0
        for m in reversed(history):
            if m["role"] == "user":
                break
            if m["role"] == "tool":
                done += 1
        if done >= len(self.expressions):
            return {"role": "assistant", "content": self.answer}
        todo = range(done, done + 1) if self.shape == "sequential" else range(len(self.expressions))
        calls = [
            {"id": f"call_{i}", "name": "calculator", "input": {"expression": self.expressions[i]}}
            for i in todo
        ]
        return {"role": "assistant", "content": "", "tool_calls": calls}

    async def turn(self, session_id: str, message: str) -> str:
        history = self.sessions.setdefault(session_id, [])
        self._append(session_id, history, {"role": "user", "content": message})
        while True:
            await asyncio.sleep(0)  # where the LLM call would await
            reply = self._llm(history)
            self._append(session_id, history, reply)
            if not reply.get("tool_calls"):
                return str(reply["content"])
            for call in reply["tool_calls"]:
                result = calculate(call["input"]["expression"]).to_dict()
                self._append(
                    session_id,
                    history,
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)},
                )

    def history(self, session_id: str, last: int) -> list[dict[str, Any]]:
        """The session's ``last`` messages, read back from disk, oldest first."""
        rows = self.db.execute(
            "SELECT body FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT ?", (session_id, last)
        ).fetchall()
        return [json.loads(body) for (body,) in reversed(rows)]

    def check(self, session_id: str, answer: str) -> None:
        """The turn answered, and its durable rows end with every step of it: the user message, each LLM
        reply, each tool result with the calculator's answer."""
        calls = len(self.expressions) + 1 if self.shape == "sequential" else 2
        steps = self.history(session_id, 1 + calls + len(self.expressions))
        tools = tuple(str(json.loads(m["content"])["display"]) for m in steps if m["role"] == "tool")
        if answer != self.answer or steps[0]["role"] != "user" or steps[-1]["content"] != self.answer:
            raise AssertionError(f"floor turn went wrong: {answer!r}, {steps}")
        if tools != self.results:
            raise AssertionError(f"floor turn's tool results went wrong: {tools}")
