"""The host: what an actor can do, and the only way it touches state or the outside.

Every primitive is scoped by the runtime to the tenant and namespace of the message being handled (the
request context); an actor has no way to name another scope. ``host.private_kv`` is a further namespace that
only actors of the same type can reach (credentials live there).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._clock import Clock
from ._context import current_context
from ._errors import ActorCrashed, ActorError, InvalidArgument
from ._node import RegistryEntry
from .store import (
    JSON,
    BlobInfo,
    ChainCheck,
    ChannelDepth,
    ChannelMessage,
    DeadLetter,
    Erasure,
    EventRecord,
    KVEntry,
    LockInfo,
    Reminder,
    Scalar,
    Scope,
    SearchHit,
    Store,
    StoreError,
    VectorHit,
    Write,
)

if TYPE_CHECKING:
    from ._actor import Actor
    from ._cell import Cell
    from ._node import Node


def _scope() -> Scope:
    return current_context().scope


class _Scoped:
    __slots__ = ("_scope_fn", "_store")

    def __init__(self, store: Store, scope_fn: Any = _scope) -> None:
        self._store = store
        self._scope_fn = scope_fn


class HostKV(_Scoped):
    async def get(self, key: str) -> JSON | None:
        return await self._store.kv.get(self._scope_fn(), key)

    async def get_entry(self, key: str) -> KVEntry | None:
        return await self._store.kv.get_entry(self._scope_fn(), key)

    async def put(self, key: str, value: JSON, ttl: float | None = None) -> int:
        return await self._store.kv.put(self._scope_fn(), key, value, ttl)

    async def cas(
        self, key: str, expected_version: int | None, value: JSON, ttl: float | None = None
    ) -> int | None:
        return await self._store.kv.cas(self._scope_fn(), key, expected_version, value, ttl)

    async def delete(self, key: str) -> bool:
        return await self._store.kv.delete(self._scope_fn(), key)

    async def list(self, prefix: str = "", limit: int | None = None) -> list[tuple[str, JSON]]:
        return await self._store.kv.list(self._scope_fn(), prefix, limit)


class HostTuples(_Scoped):
    async def write(self, tup: Sequence[Scalar]) -> None:
        await self._store.tuples.write(self._scope_fn(), tup)

    async def write_many(self, tuples: Sequence[Sequence[Scalar]]) -> int:
        """Several tuples in one transaction; returns how many."""
        return await self._store.tuples.write_many(self._scope_fn(), tuples)

    async def write_unless(self, tup: Sequence[Scalar], pattern: Sequence[Scalar]) -> bool:
        """Write ``tup`` unless a tuple matching ``pattern`` exists (atomically); True if written."""
        return await self._store.tuples.write_unless(self._scope_fn(), tup, pattern)

    async def read(self, pattern: Sequence[Scalar]) -> tuple[Scalar, ...] | None:
        return await self._store.tuples.read(self._scope_fn(), pattern)

    async def take(self, pattern: Sequence[Scalar]) -> tuple[Scalar, ...] | None:
        return await self._store.tuples.take(self._scope_fn(), pattern)

    async def read_all(self, pattern: Sequence[Scalar], limit: int | None = None) -> list[tuple[Scalar, ...]]:
        return await self._store.tuples.read_all(self._scope_fn(), pattern, limit)

    async def take_all(self, pattern: Sequence[Scalar]) -> int:
        return await self._store.tuples.take_all(self._scope_fn(), pattern)


class HostBlobs(_Scoped):
    async def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        await self._store.blobs.put(self._scope_fn(), name, data, content_type)

    async def get(self, name: str) -> bytes | None:
        return await self._store.blobs.get(self._scope_fn(), name)

    async def delete(self, name: str) -> bool:
        return await self._store.blobs.delete(self._scope_fn(), name)

    async def list(self, prefix: str = "") -> list[BlobInfo]:
        return await self._store.blobs.list(self._scope_fn(), prefix)


class HostEvents(_Scoped):
    async def append(
        self, stream: str, data: JSON, *, kind: str | None = None, subjects: Sequence[str] | None = None
    ) -> EventRecord:
        """Append ``data``; with ``subjects`` (opaque strings) it is sealed under their key, so that
        ``forget`` can make it unreadable (see ``EventLog``)."""
        return await self._store.events.append(self._scope_fn(), stream, data, kind=kind, subjects=subjects)

    def append_nowait(
        self, stream: str, data: JSON, *, kind: str | None = None, subjects: Sequence[str] | None = None
    ) -> asyncio.Future[EventRecord]:
        """Queue an append now; the future resolves once it is committed (appends keep call order)."""
        return self._store.events.append_nowait(self._scope_fn(), stream, data, kind=kind, subjects=subjects)

    async def forget(
        self,
        stream: str,
        subjects: Sequence[str] | None,
        *,
        legacy: Callable[[JSON], str | None] | None = None,
    ) -> Erasure:
        """Make the entries of ``subjects`` (None: all) unreadable; the chain still verifies."""
        return await self._store.events.forget(self._scope_fn(), stream, subjects, legacy=legacy)

    async def anchors(self, stream: str) -> list[dict[str, Any]]:
        """The signed anchors retention wrote for ``stream``, as exported."""
        return await self._store.events.anchors(self._scope_fn(), stream)

    async def read(self, stream: str, after_seq: int = 0, limit: int = 100) -> list[EventRecord]:
        return await self._store.events.read(self._scope_fn(), stream, after_seq, limit)

    async def last_seq(self, stream: str) -> int:
        return await self._store.events.last_seq(self._scope_fn(), stream)

    async def verify(self, stream: str, *, anchor: dict[str, Any] | None = None) -> ChainCheck:
        return await self._store.events.verify(self._scope_fn(), stream, anchor=anchor)


class HostChannels(_Scoped):
    """At-least-once queues. ``receive`` can wait; what this actor received and did not ack is handed out
    again if the actor crashes or the process restarts."""

    __slots__ = ("_cell", "_node")

    def __init__(self, node: Node, cell: Cell) -> None:
        super().__init__(node.store)
        self._node = node
        self._cell = cell

    async def declare(
        self, channel: str, *, max_deliveries: int = 5, visibility_timeout: float = 30.0
    ) -> None:
        await self._store.channels.declare(
            _scope(), channel, max_deliveries=max_deliveries, visibility_timeout=visibility_timeout
        )

    async def send(self, channel: str, msg_type: str, payload: JSON, *, dedup_key: str | None = None) -> str:
        scope = _scope()
        msg_id = await self._store.channels.send(scope, channel, msg_type, payload, dedup_key=dedup_key)
        self._node.channel_event(scope, channel).set()
        return msg_id

    async def send_batch(self, channel: str, messages: Sequence[tuple[str, JSON]]) -> list[str]:
        scope = _scope()
        ids = await self._store.channels.send_batch(scope, channel, messages)
        self._node.channel_event(scope, channel).set()
        return ids

    async def receive(
        self,
        channel: str,
        *,
        timeout: float = 0.0,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        poll_interval: float = 0.05,
    ) -> list[ChannelMessage]:
        """Up to max_messages; waits up to timeout seconds for the first one (wakes at once on a send from
        this node, polls for sends from other processes)."""
        scope = _scope()
        clock = self._node.clock
        deadline = clock.monotonic() + timeout
        while True:
            event = self._node.channel_event(scope, channel)
            event.clear()
            got = await self._store.channels.receive(
                scope,
                channel,
                max_messages=max_messages,
                visibility_timeout=visibility_timeout,
                receipt=self._cell.receipt,
            )
            remaining = deadline - clock.monotonic()
            if got or remaining <= 0:
                return got
            waiter = asyncio.ensure_future(event.wait())
            sleeper = asyncio.ensure_future(clock.sleep(min(poll_interval, remaining)))
            try:
                await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                sleeper.cancel()

    async def ack(self, channel: str, msg_id: str) -> bool:
        return await self._store.channels.ack(_scope(), channel, msg_id, receipt=self._cell.receipt)

    async def ack_batch(self, channel: str, msg_ids: Sequence[str]) -> int:
        return await self._store.channels.ack_batch(_scope(), channel, msg_ids, receipt=self._cell.receipt)

    async def nack(self, channel: str, msg_id: str, *, requeue: bool = True, reason: str = "") -> bool:
        return await self._store.channels.nack(
            _scope(), channel, msg_id, requeue=requeue, reason=reason, receipt=self._cell.receipt
        )

    async def depth(self, channel: str) -> ChannelDepth:
        return await self._store.channels.depth(_scope(), channel)

    async def dead_letters(self, channel: str, limit: int = 100) -> list[DeadLetter]:
        return await self._store.channels.dead_letters(_scope(), channel, limit)

    async def redrive(self, channel: str, msg_id: str) -> bool:
        return await self._store.channels.redrive(_scope(), channel, msg_id)


class HostLocks(_Scoped):
    """Leases with fencing tokens. The holder is this node unless given."""

    __slots__ = ("_holder",)

    def __init__(self, store: Store, holder: str) -> None:
        super().__init__(store)
        self._holder = holder

    async def try_acquire(self, name: str, ttl: float, holder: str | None = None) -> int | None:
        return await self._store.locks.try_acquire(_scope(), name, holder or self._holder, ttl)

    async def renew(self, name: str, token: int, ttl: float, holder: str | None = None) -> bool:
        return await self._store.locks.renew(_scope(), name, holder or self._holder, token, ttl)

    async def release(self, name: str, token: int, holder: str | None = None) -> bool:
        return await self._store.locks.release(_scope(), name, holder or self._holder, token)

    async def get(self, name: str) -> LockInfo | None:
        return await self._store.locks.get(_scope(), name)


class HostText(_Scoped):
    async def upsert(self, index: str, doc_id: str, fields: dict[str, str], meta: JSON = None) -> None:
        await self._store.text.upsert(_scope(), index, doc_id, fields, meta)

    async def upsert_many(self, index: str, docs: Sequence[tuple[str, dict[str, str], JSON]]) -> int:
        """Several ``(doc_id, fields, meta)`` in one transaction; returns how many."""
        return await self._store.text.upsert_many(_scope(), index, docs)

    async def remove(self, index: str, doc_id: str) -> bool:
        return await self._store.text.remove(_scope(), index, doc_id)

    async def documents(self, index: str, prefix: str = "") -> list[tuple[str, JSON]]:
        """``(doc_id, meta)`` of the index's documents whose id starts with prefix, by id."""
        return await self._store.text.documents(_scope(), index, prefix)

    async def search(self, index: str, query: str, limit: int = 10) -> list[SearchHit]:
        return await self._store.text.search(_scope(), index, query, limit)

    async def compact(self, *indexes: str) -> int:
        """After forgetting: no trace of removed documents left in these indexes' storage."""
        return await self._store.text.compact(_scope(), indexes)


class HostVectors(_Scoped):
    async def upsert(self, index: str, doc_id: str, vector: Sequence[float], meta: JSON = None) -> None:
        await self._store.vectors.upsert(_scope(), index, doc_id, vector, meta)

    async def delete(self, index: str, doc_id: str) -> bool:
        return await self._store.vectors.delete(_scope(), index, doc_id)

    async def search(self, index: str, vector: Sequence[float], limit: int = 10) -> list[VectorHit]:
        return await self._store.vectors.search(_scope(), index, vector, limit)


class Host:
    """Bound to one actor cell by the node. Primitives act in the current message's scope."""

    def __init__(self, node: Node, cell: Cell) -> None:
        self._node = node
        self._cell = cell
        store = node.store
        private_ns = f"__private__:{cell.spec.name}"

        def private_scope() -> Scope:
            t, ns = current_context().scope
            return (t, f"{private_ns}:{ns}")

        self.kv = HostKV(store)
        self.private_kv = HostKV(store, private_scope)
        self.tuples = HostTuples(store)
        self.ts = self.tuples
        self.blobs = HostBlobs(store)
        self.events = HostEvents(store)
        self.channels = HostChannels(node, cell)
        self.locks = HostLocks(store, node.node_id)
        self.text = HostText(store)
        self.vectors = HostVectors(store)
        self.log = logging.getLogger(f"minihermes.actor.{cell.spec.name}")

    async def write_batch(self, writes: Sequence[Write]) -> list[Any]:
        """Several writes to kv, tuples and text indexes of this scope in one transaction: all of them, or
        none if one fails (``KVPut``, ``KVDelete``, ``TupleWrite``, ``TupleTakeAll``, ``TextUpsert``,
        ``TextRemove`` from ``minihermes.runtime.store``). Returns each write's result, as its method does.
        For a record kept in several primitives: a crash or a failed write cannot leave part of it."""
        return await self._node.store.write_batch(_scope(), writes)

    # -- identity and time --------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return self._cell.address

    @property
    def node_id(self) -> str:
        return self._node.node_id

    @property
    def clock(self) -> Clock:
        """The node's clock (sleeps and timers that tests drive with ManualClock)."""
        return self._node.clock

    def now(self) -> float:
        return self._node.clock.time()

    def now_ms(self) -> int:
        return int(self._node.clock.time() * 1000)

    # -- messaging ----------------------------------------------------------------------------------------

    async def ask(
        self, target: str, op: str, payload: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any:
        return await self._node.ask(target, op, payload, timeout)

    def send(self, target: str, op: str, payload: dict[str, Any] | None = None) -> None:
        self._node.send(target, op, payload)

    def send_after(
        self, delay: float, op: str, payload: dict[str, Any] | None = None, target: str | None = None
    ) -> str:
        """A one-off timer message to this actor (or target) after delay seconds. Cancelled if this instance
        dies: a restarted actor re-arms its timers in on_init."""
        if delay < 0:
            raise InvalidArgument("delay must be >= 0", field="delay")
        return self._node.send_after(self._cell, delay, op, payload or {}, target)

    def cancel_timer(self, timer_id: str) -> bool:
        return self._node.cancel_timer(timer_id)

    async def set_reminder(
        self,
        name: str,
        op: str,
        payload: dict[str, Any] | None = None,
        *,
        every: float | None = None,
        at: float | None = None,
    ) -> Reminder:
        """A durable timer: stored, so it fires after a process restart too. ``every`` seconds (first fire
        at ``at`` or one period from now), or once at ``at`` (epoch seconds)."""
        if every is None and at is None:
            raise InvalidArgument("give every= or at=", field="every")
        if every is not None and every <= 0:
            raise InvalidArgument("every must be > 0", field="every")
        now = self.now()
        ctx = current_context()
        reminder = Reminder(
            scope=self._cell.scope,
            target=self._cell.address,
            name=name,
            op=op,
            payload=payload or {},
            next_fire_at=at if at is not None else now + (every or 0.0),
            period=every,
            context=ctx.to_dict(),
        )
        await self._node.store.reminders.upsert(reminder)
        await self._node.reminders_changed()
        return reminder

    async def cancel_reminder(self, name: str) -> bool:
        return await self._node.store.reminders.delete(self._cell.scope, self._cell.address, name)

    async def list_reminders(self) -> list[Reminder]:
        return await self._node.store.reminders.list(self._cell.scope, self._cell.address)

    def spawn(self, coro: Awaitable[Any]) -> Any:
        """A background task owned by this instance (cancelled when it stops or crashes)."""
        return self._node.spawn(coro, cell=self._cell)

    def stop(self) -> None:
        """Ask the runtime to stop this actor after the current message (a normal exit)."""
        self._cell.request_stop()

    async def checkpoint(self) -> None:
        """Save state now (Workflow steps use this)."""
        await self._cell.flush()

    def save_soon(self) -> None:
        """Start saving state now without waiting: the actor goes on (an LLM call, a guardrails check) while
        the commit runs. ``wait_saved`` waits for it, e.g. before a step with side effects; a reply a handler
        returns never leaves before it is durable. A ``Deferred`` reply does not wait for saves its task
        started this way: checkpoints commit in the order they are registered, so any checkpoint registered
        after it (the caller saving what it got back) commits with or after it."""
        self._cell.save_soon()

    def hold(self, write: asyncio.Future[Any]) -> None:
        """Have the reply to the current message (and ``wait_saved``) wait for ``write`` too: a write this
        actor queued besides its checkpoint that must be durable when what the reply acknowledges is (an
        audit event). Needed only where the store may commit it after a later checkpoint
        (``commits_in_order`` false); a failed write does not crash the actor."""
        self._cell.hold(write)

    @property
    def commits_in_order(self) -> bool:
        """Whether the store commits every write in the order it was queued (SQLite's single writer): then
        a write queued before a checkpoint is durable no later than the checkpoint."""
        return bool(getattr(self._node.store, "commits_in_order", False))

    async def wait_saved(self) -> None:
        """Until every save this actor started is durable. A failed save raises ``ActorCrashed`` here (the
        actor is being restarted from its last durable checkpoint), so no side effect follows it."""
        cell = self._cell
        await cell.wait_saved()
        if cell.save_failed:
            raise ActorCrashed(f"{cell.address} could not checkpoint its state", actor=cell.address)

    def checkpoint_after(self) -> None:
        """Save state when the current message is handled, whatever the checkpoint interval (if it changed);
        a call's reply then leaves once that save is durable. For actors with a long interval that must
        not lose certain moves (``agent_fsm`` at rest)."""
        self._cell.since_checkpoint = self._cell.interval

    async def mark_durable(self, active: bool) -> None:
        """Have the node re-activate this actor after a restart (a running workflow)."""
        await self._node.mark_durable(self._cell, active)

    # -- supervision relations ----------------------------------------------------------------------------

    def monitor(self, target: str) -> str:
        return self._node.monitor(self._cell, target)

    def demonitor(self, ref: str) -> bool:
        return self._node.demonitor(self._cell, ref)

    def link(self, target: str) -> None:
        self._node.link(self._cell, target)

    def unlink(self, target: str) -> None:
        self._node.unlink(self._cell, target)

    def trap_exit(self, enabled: bool = True) -> None:
        """With trap_exit a linked actor's crash arrives as an ``__EXIT__`` cast instead of crashing this one."""
        self._cell.trap_exit = enabled

    # -- live progress ------------------------------------------------------------------------------------

    def publish(self, topic: str, event: Any) -> int:
        """Offer an event to whoever watches ``topic`` in this tenant right now (never blocks, not durable)."""
        return self._node.pubsub.publish(_scope(), topic, event)

    def has_subscribers(self, topic: str) -> bool:
        return self._node.pubsub.has_subscribers(_scope(), topic)

    # -- discovery ----------------------------------------------------------------------------------------

    def join(self, group: str) -> None:
        self._node.join(self._cell, group, _scope())

    def leave(self, group: str) -> None:
        self._node.leave(self._cell, group, _scope())

    def members(self, group: str) -> list[str]:
        return self._node.members(group, _scope())

    def first(self, group: str) -> str | None:
        m = self._node.members(group, _scope())
        return m[0] if m else None

    def broadcast(self, group: str, op: str, payload: dict[str, Any] | None = None) -> int:
        members = self._node.members(group, _scope())
        for m in members:
            self._node.send(m, op, payload)
        return len(members)

    def register(
        self,
        category: str,
        capabilities: Sequence[str] = (),
        *,
        object_type: str = "actor",
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self._node.register(
            self._cell,
            RegistryEntry(
                self._cell.address, object_type, category, list(capabilities), dict(metadata or {})
            ),
            _scope(),
        )

    def discover(
        self, category: str | None = None, capability: str | None = None, object_type: str | None = None
    ) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self._node.discover(_scope(), category, capability, object_type)]

    def has_actor(self, name: str) -> bool:
        """Whether this node runs an actor type with this name (optional collaborators)."""
        return name in self._node._specs

    def actor_types(self) -> dict[str, type[Actor]]:
        """The actor class this node runs under each name (the permission model reads the access class each
        op declares from them: ``PermissionTable.with_declared``)."""
        node = self._node
        return {name: node.spec(name).cls for name in node.actor_names()}

    def actors_taking(self, op: str) -> list[str]:
        """The actor types this node runs that take ``op``, in name order: the listeners of an event that
        every such type gets (e.g. ``turn_completed``), whether or not an instance runs yet."""
        node = self._node
        return [name for name in node.actor_names() if op in node.spec(name).cls._handlers]

    def service_status(self) -> dict[str, dict[str, Any]]:
        """The node's view of every actor type (up, kind, instances, restarts): for health monitors."""
        return self._node.status()

    async def backup_store(self, label: str = "") -> dict[str, Any]:
        """A backup of the node's store and data dir into the store's configured backups folder, never a path
        a caller names (``label`` only names it): for an operator's op. Refused for a backend that takes none
        (PostgreSQL: ``minihermes backup --config`` runs ``pg_dump``)."""
        store = self._node.store
        backup = getattr(store, "backup", None)
        if not callable(backup):
            raise InvalidArgument(
                f"the {store.backend} store takes no backups through the node: run `minihermes backup --config`"
            )
        try:
            made: dict[str, Any] = await backup(label)
        except ValueError as e:
            raise InvalidArgument(str(e), field="label") from None
        except StoreError as e:
            if isinstance(e, ActorError):
                raise
            raise ActorError(f"the backup failed: {e}", code="backup_failed") from e
        return made

    def store_health(self) -> dict[str, Any] | None:
        """The store's report on itself (``status`` ok or degraded, ``reason``, ``errors``), None for a backend
        that keeps none: for health monitors."""
        report = getattr(self._node.store, "health", None)
        if not callable(report):
            return None
        health: dict[str, Any] = report()
        return health

    # -- metrics and the outside --------------------------------------------------------------------------

    def incr_counter(self, name: str, value: float = 1.0, **labels: str) -> None:
        self._node.metrics.incr(name, value, tenant=current_context().tenant, **labels)

    def set_gauge(self, name: str, value: float, **labels: str) -> None:
        self._node.metrics.set_gauge(name, value, tenant=current_context().tenant, **labels)

    async def http_fetch(
        self,
        link: str,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Call a configured service link. Credentials are attached by the runtime and never returned."""
        return await self._node.links.fetch(link, method, path, json=json, params=params, headers=headers)

    def check_link(self, link: str, method: str, path: str) -> None:
        """Raise ``NotFound`` / ``InvalidArgument`` unless ``http_fetch(link, method, path)`` could be sent:
        the link is configured, allows the method, and the path stays on it. Sends nothing."""
        self._node.links.check(link, method, path)
