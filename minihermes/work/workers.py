"""The task worker (one per tenant): runs queued ``agent_prompt`` tasks through the agent.

A task's payload is ``{prompt, session_id?}``. It runs as the principal that enqueued it (with the roles it
had), in its own session ``task:<msg_id>`` unless it names one, at most once in effect
(``_turns.run_turn_once``): a task redelivered after a crash finds its turn done or finishes it. The reply
is stored with ``task_queue.set_result`` before the ack; a turn that fails is nacked, so the queue retries it
and dead-letters it after its max deliveries.
"""

from __future__ import annotations

import asyncio
from typing import Any

from minihermes.runtime import ActorError, GenServer, RequestContext, call, cast, current_context

from ._cronstore import acting_as
from ._turns import run_turn_once

TASK_TYPE = "agent_prompt"


class TaskWorker(GenServer):
    """Args: ``max_concurrent`` (4), ``turn_timeout`` (s, 300), ``wait_ms`` (dequeue long-poll, 1000)."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.max_concurrent = int(args.get("max_concurrent", 4))
        self.turn_timeout = float(args.get("turn_timeout", 300))
        self.wait_ms = int(args.get("wait_ms", 1000))
        self._running: set[str] = set()
        self._free = asyncio.Semaphore(self.max_concurrent)
        self._locks: dict[str, asyncio.Lock] = {}
        self._stats = {"completed": 0, "failed": 0}
        self._scope = current_context().scope
        self.host.spawn(self._loop())

    @cast
    def wake(self) -> None:
        """Sent by ``task_queue`` on enqueue: activating this actor starts its loop."""

    @call
    def get_stats(self) -> dict[str, Any]:
        return {"status": "ok", "running": len(self._running), **self._stats}

    async def _loop(self) -> None:
        while True:
            await self._free.acquire()
            self._free.release()
            free = self.max_concurrent - len(self._running)
            try:
                reply = await self.host.ask(
                    "task_queue",
                    "dequeue",
                    {
                        "limit": max(1, free),
                        "timeout_ms": self.wait_ms,
                        "task_type": TASK_TYPE,
                        "visibility_timeout": self.turn_timeout + 60,
                    },
                    timeout=self.wait_ms / 1000 + 30,
                )
            except ActorError as e:  # the queue restarting must not end this loop for good
                self.host.log.warning("task_worker: dequeue failed (%s); retrying", e.message)
                await self.host.clock.sleep(1.0)
                continue
            for task in reply["tasks"]:
                await self._free.acquire()
                self._running.add(task["msg_id"])
                self.host.spawn(self._one(task))

    async def _one(self, task: dict[str, Any]) -> None:
        msg_id = str(task["msg_id"])
        try:
            await self._run(task)
        finally:
            self._running.discard(msg_id)
            self._free.release()

    async def _run(self, task: dict[str, Any]) -> None:
        msg_id = str(task["msg_id"])
        payload = task.get("payload") or {}
        prompt = str(payload.get("prompt") or "")
        session = str(payload.get("session_id") or f"task:{msg_id}")
        base = {"msg_id": msg_id, "task_type": TASK_TYPE}
        if not prompt.strip():
            await self.host.ask(
                "task_queue", "nack", {**base, "requeue": False, "reason": "payload.prompt is empty"}
            )
            return
        ctx = RequestContext(
            tenant=self._scope[0],
            namespace=self._scope[1],
            principal=str(task.get("enqueued_by") or "task_worker"),
            roles=frozenset({"user"}),
            request_id=f"task:{msg_id}",
        )
        lock = self._locks.setdefault(session, asyncio.Lock())
        async with lock:
            with acting_as(ctx):
                try:
                    reply = await run_turn_once(
                        self.host, f"task:{msg_id}", session, prompt, timeout=self.turn_timeout
                    )
                except ActorError as e:
                    self._stats["failed"] += 1
                    reason = f"{e.code}: {e.message}"
                    await self.host.ask("task_queue", "nack", {**base, "requeue": True, "reason": reason})
                    return
            result = {
                "status": reply.get("status"),
                "response": reply.get("response"),
                "session_id": session,
                "finished_at": self.host.now(),
            }
            await self.host.ask("task_queue", "set_result", {"msg_id": msg_id, "result": result})
            try:
                await self.host.ask("task_queue", "ack", base)
            except ActorError as e:
                # Redelivered meanwhile (visibility timeout): the other delivery finds the turn done.
                self.host.log.info("task %s: ack refused (%s)", msg_id, e.message)
            self._stats["completed"] += 1
