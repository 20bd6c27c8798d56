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

A task's payload is not in the channel message: it is kept in the tenant's KV (``tq:task:<ref>``, with its
owner) and the message carries the reference, so that forgetting a person can delete what they queued
(the channel has no delete); ``tq:ref:<msg_id>`` leads from a message to it, and both go when the task is
acked. A message whose payload is gone was forgotten: it is acked (dropped) when it is next handed out, and
nobody gets it. Results keep their task's owner.

Forgetting (``forget_subject``, asked by ``memory.forget``): the background work a session, a user or the
tenant left, as far as the caller may forget it: queued tasks' payloads (ready, in flight or dead-lettered),
results and the turn markers that hold their replies (``cleared: tasks, task_results``); the delegation
records of ``delegate_task`` (``delegations``, ``delegation.forget_delegations``); and the orchestrator's
runs (``orchestrations``, ``orchestrator.forget_orchestrations``): those two are no actor the fan-out can
ask (a tool's records, a workflow keyed per run), so the queue asks for them.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from minihermes.audit import fire_audit
from minihermes.context.forget import Subject, may_forget, session_owner, subject
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

from .delegation import forget_delegations
from .orchestrator import forget_orchestrations

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


RESULT_PREFIX = "tq:result:"
TASK_PREFIX = "tq:task:"
REF_PREFIX = "tq:ref:"
MARKER_PREFIX = "work:turn:task:"
"""``_turns.run_turn_once``'s marker of a task's turn (``task_worker``): it keeps the turn's reply."""


def result_key(msg_id: str) -> str:
    return f"{RESULT_PREFIX}{msg_id}"


async def store_result(host: Host, msg_id: str, result: dict[str, Any], owner: str = "") -> None:
    """Keep a task's outcome for ``get_result`` (in the current tenant's KV), with the task's ``owner`` (whom
    forgetting it follows)."""
    await host.kv.put(result_key(msg_id), {**result, "owner": owner} if owner else result, ttl=RESULT_TTL)


async def task_owner(host: Host, msg_id: str) -> str:
    """Who enqueued the task ``msg_id`` while its payload is kept (queued or in flight), else ``""``."""
    ref = await host.kv.get(f"{REF_PREFIX}{msg_id}")
    record = await host.kv.get(f"{TASK_PREFIX}{ref}") if isinstance(ref, str) else None
    return str(record.get("owner") or "") if isinstance(record, dict) else ""


async def open_task(host: Host, msg: ChannelMessage) -> dict[str, Any] | None:
    """A received channel message as the task ``dequeue`` hands out, its payload read from where it is kept;
    None if the payload was forgotten. (A message from before payloads left the channel carries its own.)"""
    body = msg.payload if isinstance(msg.payload, dict) else {}
    payload = body.get("payload", {})
    if "ref" in body:
        record = await host.kv.get(f"{TASK_PREFIX}{body['ref']}")
        if not isinstance(record, dict):
            return None
        payload = record.get("payload", {})
    return {
        "msg_id": msg.msg_id,
        "task_type": msg.msg_type,
        "payload": payload,
        "enqueued_at": body.get("enqueued_at"),
        "enqueued_by": body.get("owner"),
        "deliveries": msg.deliveries,
    }


async def drop_payload(host: Host, msg_id: str) -> None:
    """An acked task's payload and the way to it: no longer needed."""
    ref = await host.kv.get(f"{REF_PREFIX}{msg_id}")
    if isinstance(ref, str):
        await host.kv.delete(f"{TASK_PREFIX}{ref}")
    await host.kv.delete(f"{REF_PREFIX}{msg_id}")


async def forget_tasks(host: Host, who: Subject) -> dict[str, int]:
    """Delete the payloads of the subject's queued tasks (a session: those naming it), their results and the
    markers holding their turns' replies, those the caller may forget: ``{tasks, task_results}``."""

    def named(owner: str, session: str) -> bool:
        if who.session_id:
            return session == who.session_id and may_forget(owner)
        return who.tenant or owner == who.user_id

    refs: set[str] = set()
    for key, record in await host.kv.list(TASK_PREFIX):
        if not isinstance(record, dict):
            continue
        payload = record.get("payload")
        session = payload.get("session_id") if isinstance(payload, dict) else ""
        if named(str(record.get("owner") or ""), str(session or "")):
            await host.kv.delete(key)
            refs.add(key.removeprefix(TASK_PREFIX))
    msg_ids: set[str] = set()
    for key, ref in await host.kv.list(REF_PREFIX):
        if ref in refs:
            await host.kv.delete(key)
            msg_ids.add(key.removeprefix(REF_PREFIX))
    results = 0
    for key, result in await host.kv.list(RESULT_PREFIX):
        if not isinstance(result, dict):
            continue
        session = str(result.get("session_id") or "")
        owner = str(result.get("owner") or "") or await session_owner(host, session) or ""
        if named(owner, session):
            results += await host.kv.delete(key)
            msg_ids.add(key.removeprefix(RESULT_PREFIX))
    for msg_id in msg_ids:
        await host.kv.delete(f"{MARKER_PREFIX}{msg_id}")
    return {"tasks": len(refs), "task_results": results}


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
        dedup = f"idem:{idempotency_key}" if idempotency_key else None
        duplicate = False
        if dedup is not None:
            known = await self.host.kv.get(f"tq:idem:{idempotency_key}")
            duplicate = isinstance(known, str)
        # The payload is kept beside the channel, by its owner, so that forgetting them can delete it.
        ref = uuid.uuid4().hex
        if not duplicate:
            record = {"owner": ctx.principal, "task_type": task_type, "payload": payload or {}}
            await self.host.kv.put(f"{TASK_PREFIX}{ref}", record)
        body = {
            "ref": ref,
            "enqueued_at": self.host.now(),
            "owner": ctx.principal,
            "roles": sorted(ctx.roles & _WRITERS),
        }
        try:
            msg_id = await self.host.channels.send(channel_of(task_type), task_type, body, dedup_key=dedup)
        except BaseException:
            await self.host.kv.delete(f"{TASK_PREFIX}{ref}")
            raise
        if not duplicate:
            # The channel deduplicates for longer than ``tq:idem``: a first msg_id that has its payload wins.
            if await self.host.kv.get(f"{REF_PREFIX}{msg_id}") is None:
                await self.host.kv.put(f"{REF_PREFIX}{msg_id}", ref)
            else:
                await self.host.kv.delete(f"{TASK_PREFIX}{ref}")
                duplicate = True
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
        tasks = []
        for m in got:
            task = await open_task(self.host, m)
            if task is not None:
                tasks.append(task)
            elif await self.host.channels.ack(channel_of(m.msg_type), m.msg_id):  # forgotten: dropped
                await drop_payload(self.host, m.msg_id)
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
                await drop_payload(self.host, msg_id)
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
        items = []
        for d in dead:
            body = d.payload if isinstance(d.payload, dict) else {}
            payload = body.get("payload")
            if "ref" in body:
                record = await self.host.kv.get(f"{TASK_PREFIX}{body['ref']}")
                payload = record.get("payload") if isinstance(record, dict) else None
            items.append(
                {
                    "msg_id": d.msg_id,
                    "task_type": d.msg_type,
                    "payload": payload,
                    "forgotten": "ref" in body and payload is None,
                    "deliveries": d.deliveries,
                    "reason": d.reason,
                    "dead_at": d.dead_at,
                }
            )
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
        owner = await task_owner(self.host, msg_id) or current_context().principal
        await store_result(self.host, msg_id, result, owner)
        return {"status": "ok", "msg_id": msg_id}

    @call
    async def get_result(self, msg_id: str) -> dict[str, Any]:
        check_msg_id("get_result", msg_id)
        result = await self.host.kv.get(result_key(msg_id))
        if result is None:
            return {"status": "pending", "msg_id": msg_id}
        return {"status": "ok", "msg_id": msg_id, "result": result}

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Forget a session's, a user's or (admin) the tenant's background work, as far as the caller may
        (see the module): ``cleared: {tasks, task_results, delegations, orchestrations}``. Nothing is audited
        per task (a payload is the user's own words)."""
        who = subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        cleared = await forget_tasks(self.host, who)
        cleared["delegations"] = await forget_delegations(self.host, who)
        cleared["orchestrations"] = await forget_orchestrations(self.host, who)
        return {"status": "ok", "cleared": cleared}

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
