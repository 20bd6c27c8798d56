"""The task worker (one per tenant): runs queued ``agent_prompt`` tasks through the agent.

A task's payload is ``{prompt, session_id?}``. It runs as the principal that enqueued it, with the ``user``
role whatever roles that principal had (the principal travels in the channel message, so a redelivered task
runs as it again, never as the worker's own ``system``), in its own session ``task:<msg_id>`` unless it names
one, at most once in effect (``_turns.run_turn_once``): a task redelivered after a crash finds its turn done
or waits for it, and the agent resumes a turn cut off mid-way as that same caller.

The worker receives from the queue's channel itself (not through ``task_queue.dequeue``), so a task in flight
is held under this worker's receipt: if the worker dies, or its node is declared down, the task is handed
out again at once, wherever ``task_queue`` is active. The result is stored (``task_queue.store_result``)
before the ack; a turn that fails is nacked, so the channel hands it out again and dead-letters it after the
queue's max deliveries. Each outcome is reported to ``task_queue`` (``settled``) for its counters.
"""

from __future__ import annotations

import asyncio
from typing import Any

from minihermes.runtime import ActorArgs, ActorError, GenServer, RequestContext, call, cast, current_context
from minihermes.runtime.store import ChannelMessage

from ._cronstore import acting_as
from ._turns import run_turn_once
from .cron_runner import ConsumerLoop
from .task_queue import MARKER_PREFIX, channel_of, drop_payload, open_task, store_result

TASK_TYPE = "agent_prompt"


class TaskWorker(GenServer):
    """Args: ``max_concurrent`` (4), ``turn_timeout`` (s, 300), ``wait_ms`` (receive long-poll, 1000)."""

    class Args(ActorArgs):
        turn_timeout: float = 300
        max_concurrent: int = 4
        wait_ms: int = 1000

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.turn_timeout = float(args.get("turn_timeout", 300))
        self.channel = channel_of(TASK_TYPE)
        # A task stays invisible to other consumers while its turn may still run here.
        self._loop = ConsumerLoop(
            self,
            self.channel,
            int(args.get("max_concurrent", 4)),
            int(args.get("wait_ms", 1000)) / 1000,
            visibility_timeout=self.turn_timeout + 60,
        )
        self._locks: dict[str, asyncio.Lock] = {}
        self._stats = {"completed": 0, "failed": 0}
        self._scope = current_context().scope
        self.host.spawn(self._loop.run(self._handle))
        # Durable-active: when its node dies, a surviving node re-activates it at once for the tasks the dead
        # node had taken (their receipts are released then), instead of at the queue's next nudge.
        await self.host.mark_durable(True)

    @cast
    def wake(self) -> None:
        """Sent by ``task_queue`` on enqueue: activating this actor starts its loop."""

    @cast
    def __resume__(self) -> None:
        """Sent by the node to re-activate this worker (at start-up, or when another node died)."""

    @call
    def get_stats(self) -> dict[str, Any]:
        return {"status": "ok", "running": len(self._loop.busy), **self._stats}

    async def _handle(self, msg: ChannelMessage) -> None:
        task = await open_task(self.host, msg)
        if task is None:  # its payload was forgotten with its owner: nothing to run, nobody to tell
            if await self.host.channels.ack(self.channel, msg.msg_id):
                await drop_payload(self.host, msg.msg_id)
            return
        msg_id = str(task["msg_id"])
        payload = task.get("payload") or {}
        prompt = str(payload.get("prompt") or "")
        session = str(payload.get("session_id") or f"task:{msg_id}")
        if not prompt.strip():
            await self._nack(msg_id, requeue=False, reason="payload.prompt is empty")
            return
        owner = str(task.get("enqueued_by") or "task_worker")
        ctx = RequestContext(
            tenant=self._scope[0],
            namespace=self._scope[1],
            principal=owner,
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
                    await self._nack(msg_id, requeue=True, reason=f"{e.code}: {e.message}")
                    return
            if await open_task(self.host, msg) is None:  # its owner was forgotten while it ran: keep nothing
                await self.host.kv.delete(f"{MARKER_PREFIX}{msg_id}")
                if await self.host.channels.ack(self.channel, msg_id):
                    await drop_payload(self.host, msg_id)
                return
            result = {
                "status": reply.get("status"),
                "response": reply.get("response"),
                "session_id": session,
                "finished_at": self.host.now(),
            }
            await store_result(self.host, msg_id, result, owner)
            if await self.host.channels.ack(self.channel, msg_id):
                await drop_payload(self.host, msg_id)
                self._settled(msg_id, completed=True)
            else:
                # Handed out again meanwhile (visibility timeout): that delivery finds the turn done.
                self.host.log.info("task %s: ack refused (no longer in flight here)", msg_id)
            self._stats["completed"] += 1

    async def _nack(self, msg_id: str, *, requeue: bool, reason: str) -> None:
        if await self.host.channels.nack(self.channel, msg_id, requeue=requeue, reason=reason[:500]):
            self._settled(msg_id, completed=False, requeue=requeue)

    def _settled(self, msg_id: str, *, completed: bool, requeue: bool = True) -> None:
        try:
            self.host.send(
                "task_queue",
                "settled",
                {"msg_id": msg_id, "task_type": TASK_TYPE, "completed": completed, "requeue": requeue},
            )
        except ActorError as e:  # counters only: the task itself is settled on the channel already
            self.host.log.warning("task %s: settled not reported to task_queue (%s)", msg_id, e.message)
