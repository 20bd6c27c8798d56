"""The task queue (one per tenant): durable background work on the runtime's channels.

``enqueue(task_type, payload)`` puts a task on the channel ``tasks:<task_type>``; ``dequeue`` hands tasks out
(from one type, or from every type seen), invisible to other consumers for the visibility timeout; ``ack``
completes one, ``nack`` gives it back (``requeue``) or dead-letters it. A task handed out
``max_deliveries`` times without an ack goes to the dead-letter queue instead of being handed out again.
An ``idempotency_key`` makes a repeated enqueue return the first task's ``msg_id`` and enqueue nothing.

The channel ties an in-flight task to the receipt of the actor that received it, and hands it out again at
once when that actor dies or its node is declared down (see ``Node``/``Cluster``: they release the receipts).
Consumers that ``dequeue`` through this actor ack through it. Task types the agent app runs itself
(``agent_prompt``) are consumed by ``task_worker`` (``task_worker.py``) straight from the channel, under its own
receipt: its tasks stay tied to its node wherever this queue is active. It stores results with
``store_result`` (what ``set_result`` does; ``get_result`` reads them) and reports each outcome here
(``settled``) for the counters and audit events.
"""

from __future__ import annotations

import re
from typing import Any

from minihermes.audit import fire_audit
from minihermes.runtime import (
    ActorArgs,
    Deferred,
    GenServer,
    Host,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    call,
    cast,
    current_context,
    state,
)
from minihermes.runtime.store import ChannelMessage

TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
MAX_LIMIT = 100
MAX_ID = 200
"""The longest ``msg_id`` (or ``idempotency_key``) taken: msg_ids are 32 hex digits, so nothing longer is one."""
MAX_REASON = 500
MAX_WAIT_MS = 60_000
RESULT_TTL = 7 * 86400.0
WORKER_TYPES = frozenset({"agent_prompt"})
_WRITERS = frozenset({"admin", "system", "user"})


def check_msg_id(op: str, msg_id: str, field: str = "msg_id") -> str:
    """``msg_id`` as given, or ``InvalidArgument``: 1..``MAX_ID`` printable characters (what the store can
    key on; an empty id or a NUL reached the store's own checks before, a crash and a 500)."""
    if not _is_id(msg_id):
        raise InvalidArgument(f"{op}: {field} must be 1-{MAX_ID} printable characters", op=op, field=field)
    return msg_id


def check_task_type(op: str, task_type: str) -> str:
    if not TYPE.match(task_type):
        raise InvalidArgument(
            f"{op}: task_type must be 1-64 letters, digits, '_', '.', '-'", op=op, field="task_type"
        )
    return task_type


def channel_of(task_type: str) -> str:
    return f"tasks:{task_type}"


def result_key(msg_id: str) -> str:
    return f"tq:result:{msg_id}"


async def store_result(host: Host, msg_id: str, result: dict[str, Any]) -> None:
    """Keep a task's outcome for ``get_result`` (in the current tenant's KV)."""
    await host.kv.put(result_key(msg_id), result, ttl=RESULT_TTL)


def task_of(msg: ChannelMessage) -> dict[str, Any]:
    """A received channel message as the task ``dequeue`` hands out."""
    body = msg.payload if isinstance(msg.payload, dict) else {}
    return {
        "msg_id": msg.msg_id,
        "task_type": msg.msg_type,
        "payload": body.get("payload", {}),
        "enqueued_at": body.get("enqueued_at"),
        "enqueued_by": body.get("owner"),
        "deliveries": msg.deliveries,
    }


class TaskQueue(GenServer):
    """Per-tenant task queue. Args: ``visibility_timeout`` (s, 30), ``max_deliveries`` (5)."""

    class Args(ActorArgs):
        visibility_timeout: float = 30.0
        max_deliveries: int = 5
        nudge_interval: float = 30

    state_version = 1
    enqueued: int = state(default=0)
    completed: int = state(default=0)
    failed: int = state(default=0)
    types: list[str] = state(default_factory=list)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.visibility_timeout = float(args.get("visibility_timeout", 30.0))
        self.max_deliveries = int(args.get("max_deliveries", 5))
        self._audit = self.host.has_actor("audit_event")
        self.host.join("svc:task_queue")
        for t in self.types:
            await self._declare(t)
        # Durable: after a restart this re-activates the queue, which wakes the worker for what is queued.
        await self.host.set_reminder("task_queue_nudge", "nudge", every=float(args.get("nudge_interval", 30)))
        self.nudge()

    @cast
    def nudge(self) -> None:
        """Wake this tenant's worker when task types it runs have been enqueued here."""
        if any(t in WORKER_TYPES for t in self.types):
            self._wake_worker()

    async def _declare(self, task_type: str) -> None:
        await self.host.channels.declare(
            channel_of(task_type),
            max_deliveries=self.max_deliveries,
            visibility_timeout=self.visibility_timeout,
        )

    @call
    async def enqueue(
        self, task_type: str = "generic", payload: dict[str, Any] | None = None, idempotency_key: str = ""
    ) -> dict[str, Any]:
        """``{status, msg_id, duplicate}``; with ``idempotency_key`` a repeat returns the first ``msg_id``."""
        op = "enqueue"
        ctx = current_context()
        if not ctx.roles & _WRITERS:
            raise PermissionDenied(f"{op}: a read-only role cannot enqueue tasks", op=op)
        check_task_type(op, task_type)
        if idempotency_key:
            check_msg_id(op, idempotency_key, "idempotency_key")
        if task_type not in self.types:
            await self._declare(task_type)
            self.types = sorted({*self.types, task_type})
        body = {
            "payload": payload or {},
            "enqueued_at": self.host.now(),
            "owner": ctx.principal,
            "roles": sorted(ctx.roles & _WRITERS),
        }
        dedup = f"idem:{idempotency_key}" if idempotency_key else None
        duplicate = False
        if dedup is not None:
            known = await self.host.kv.get(f"tq:idem:{idempotency_key}")
            duplicate = isinstance(known, str)
        msg_id = await self.host.channels.send(channel_of(task_type), task_type, body, dedup_key=dedup)
        if dedup is not None and not duplicate:
            await self.host.kv.put(f"tq:idem:{idempotency_key}", msg_id, ttl=RESULT_TTL)
        if not duplicate:
            self.enqueued += 1
            self.host.incr_counter("tasks_enqueued_total", task_type=task_type)
            self._fire("task_enqueued", f"msg_id={msg_id} type={task_type}")
        if task_type in WORKER_TYPES:
            self._wake_worker()
        return {"status": "ok", "msg_id": msg_id, "task_type": task_type, "duplicate": duplicate}

    @call
    async def dequeue(
        self, limit: int = 1, timeout_ms: int = 0, task_type: str = "", visibility_timeout: float = 0.0
    ) -> Any:
        """Up to ``limit`` tasks (``tasks: [{msg_id, task_type, payload, deliveries, ...}]``), waiting up to
        ``timeout_ms`` for the first. Without ``task_type``, from every type enqueued so far."""
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidArgument(f"dequeue: limit must be 1..{MAX_LIMIT}", op="dequeue", field="limit")
        if not 0 <= timeout_ms <= MAX_WAIT_MS:
            raise InvalidArgument(f"dequeue: timeout_ms must be 0..{MAX_WAIT_MS}", field="timeout_ms")
        if task_type and not TYPE.match(task_type):
            raise InvalidArgument("dequeue: invalid task_type", op="dequeue", field="task_type")
        if visibility_timeout < 0:
            raise InvalidArgument("dequeue: visibility_timeout must be >= 0", field="visibility_timeout")
        types = [task_type] if task_type else list(self.types)
        vt = visibility_timeout or None
        # Waiting happens off the mailbox: acks and other consumers' dequeues go on meanwhile.
        return Deferred(self.host.spawn(self._receive(types, limit, timeout_ms / 1000, vt)))

    async def _receive(self, types: list[str], limit: int, wait: float, vt: float | None) -> dict[str, Any]:
        got: list[ChannelMessage] = []
        clock = self.host.clock
        deadline = clock.monotonic() + wait
        while True:
            for t in types:
                if len(got) >= limit:
                    break
                single = len(types) == 1
                remaining = max(0.0, deadline - clock.monotonic()) if single else 0.0
                got += await self.host.channels.receive(
                    channel_of(t), timeout=remaining, max_messages=limit - len(got), visibility_timeout=vt
                )
            left = deadline - clock.monotonic()
            if got or left <= 0 or len(types) == 1 or not types:
                break
            await clock.sleep(min(0.05, left))
        tasks = [task_of(m) for m in got]
        return {"status": "ok", "tasks": tasks, "count": len(tasks)}

    @call
    async def ack(self, msg_id: str, task_type: str = "") -> dict[str, Any]:
        """Complete an in-flight task. ``not_found`` if it is not in flight for this queue (acked already, or
        its visibility timeout passed and it went back to the queue)."""
        check_msg_id("ack", msg_id)
        if task_type:
            check_task_type("ack", task_type)
        for t in [task_type] if task_type else self.types:
            if await self.host.channels.ack(channel_of(t), msg_id):
                self._count_completed(t)
                return {"status": "ok", "msg_id": msg_id, "task_type": t}
        raise NotFound(f"ack: task {msg_id} is not in flight", op="ack", msg_id=msg_id)

    @call
    async def nack(
        self, msg_id: str, requeue: bool = True, reason: str = "", task_type: str = ""
    ) -> dict[str, Any]:
        """Give a task back (``requeue``: ready again now, dead-lettered once it reached max deliveries) or
        dead-letter it with ``reason``."""
        check_msg_id("nack", msg_id)
        if task_type:
            check_task_type("nack", task_type)
        reason = reason[:MAX_REASON]
        if "\x00" in reason or not _utf8(reason):
            raise InvalidArgument(
                "nack: reason must be text without NUL characters", op="nack", field="reason"
            )
        for t in [task_type] if task_type else self.types:
            if await self.host.channels.nack(channel_of(t), msg_id, requeue=requeue, reason=reason):
                self._count_failed(msg_id, t, requeue)
                return {"status": "ok", "msg_id": msg_id, "requeue": requeue, "task_type": t}
        raise NotFound(f"nack: task {msg_id} is not in flight", op="nack", msg_id=msg_id)

    @cast
    def settled(self, msg_id: str, task_type: str, completed: bool, requeue: bool = True) -> None:
        """From a consumer that acked (``completed``) or nacked a task on the channel itself
        (``task_worker``): counted as ``ack`` / ``nack`` count theirs."""
        # A cast has no reply: refuse in the log, keep the metric labels and audit details sane.
        if not TYPE.match(task_type) or not _is_id(msg_id):
            self.host.log.warning("settled: invalid task_type %r or msg_id %r", task_type[:80], msg_id[:80])
            return
        if completed:
            self._count_completed(task_type)
        else:
            self._count_failed(msg_id, task_type, requeue)

    def _count_completed(self, task_type: str) -> None:
        self.completed += 1
        self.host.incr_counter("tasks_completed_total", task_type=task_type)

    def _count_failed(self, msg_id: str, task_type: str, requeue: bool) -> None:
        self.failed += 1
        self.host.incr_counter("tasks_failed_total", task_type=task_type)
        self._fire("task_failed", f"msg_id={msg_id} type={task_type} requeue={requeue}")

    @call(access="read")
    async def get_stats(self) -> dict[str, Any]:
        """``enqueued, completed, failed, depth`` (ready), ``in_flight``, ``dead_lettered``, per type."""
        by_type: dict[str, Any] = {}
        totals = {"depth": 0, "in_flight": 0, "dead_lettered": 0}
        for t in self.types:
            d = await self.host.channels.depth(channel_of(t))
            by_type[t] = {"depth": d.ready, "in_flight": d.in_flight, "dead_lettered": d.dead}
            totals["depth"] += d.ready
            totals["in_flight"] += d.in_flight
            totals["dead_lettered"] += d.dead
        return {
            "status": "ok",
            "enqueued": self.enqueued,
            "completed": self.completed,
            "failed": self.failed,
            **totals,
            "by_type": by_type,
        }

    @call(access="observe")  # dead letters hold other users' payloads: operators only
    async def dead_letters(self, task_type: str, limit: int = 100) -> dict[str, Any]:
        if not 1 <= limit <= 1000:
            raise InvalidArgument("dead_letters: limit must be 1..1000", field="limit")
        check_task_type("dead_letters", task_type)
        dead = await self.host.channels.dead_letters(channel_of(task_type), limit)
        items = [
            {
                "msg_id": d.msg_id,
                "task_type": d.msg_type,
                "payload": (d.payload or {}).get("payload"),
                "deliveries": d.deliveries,
                "reason": d.reason,
                "dead_at": d.dead_at,
            }
            for d in dead
        ]
        return {"status": "ok", "dead_letters": items, "count": len(items)}

    @call(access="admin")
    async def redrive(self, task_type: str, msg_id: str) -> dict[str, Any]:
        """Put a dead-lettered task back on the queue with its deliveries reset."""
        check_task_type("redrive", task_type)
        check_msg_id("redrive", msg_id)
        if not await self.host.channels.redrive(channel_of(task_type), msg_id):
            raise NotFound(f"redrive: no dead letter {msg_id}", op="redrive", msg_id=msg_id)
        return {"status": "ok", "msg_id": msg_id}

    @call
    async def set_result(self, msg_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """Store a task's outcome for ``get_result`` (consumers call this before they ack)."""
        check_msg_id("set_result", msg_id)
        await store_result(self.host, msg_id, result)
        return {"status": "ok", "msg_id": msg_id}

    @call
    async def get_result(self, msg_id: str) -> dict[str, Any]:
        check_msg_id("get_result", msg_id)
        result = await self.host.kv.get(result_key(msg_id))
        if result is None:
            return {"status": "pending", "msg_id": msg_id}
        return {"status": "ok", "msg_id": msg_id, "result": result}

    def _wake_worker(self) -> None:
        if self.host.has_actor("task_worker"):
            self.host.send("task_worker", "wake", {})

    def _fire(self, event_type: str, detail: str) -> None:
        if self._audit:
            fire_audit(self.host, event_type, detail)


def _is_id(text: str) -> bool:
    return 0 < len(text) <= MAX_ID and text.isprintable()


def _utf8(text: str) -> bool:
    """Whether ``text`` can be stored as UTF-8 (no unpaired surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
