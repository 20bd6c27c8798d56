"""The node: routes messages to cells, runs the supervision tree, timers, reminders, groups and registry."""

from __future__ import annotations

import asyncio
import difflib
import functools
import json
import logging
import signal
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._actor import Actor, Handler
from ._cell import FENCED_OUT, Cell, CellKey, Deferred, Owner, Scope, current_cell
from ._clock import Clock, SystemClock, TimerHandle
from ._context import SYSTEM_CONTEXT, SYSTEM_TENANT, RequestContext, current_context
from ._errors import (
    ActorCrashed,
    ActorError,
    ActorNotFound,
    AskTimeout,
    InvalidArgument,
    Overloaded,
    ShuttingDown,
    UnknownOp,
)
from ._links import ServiceLinks
from ._mailbox import DEACTIVATE, Envelope
from ._metrics import Metrics
from ._pubsub import Bridge, PubSub, Subscription
from ._spec import ActorSpec, SupervisorSpec
from ._supervisor import DynamicChild, Supervisor
from .store import Checkpoint, RetentionRule, Store

log = logging.getLogger("minihermes.runtime")

SYSTEM_SCOPE: Scope = (SYSTEM_TENANT, "default")
RUNTIME_SCOPE: Scope = (SYSTEM_TENANT, "__runtime__")
FENCE_LOOP_WINDOW = 5.0
"""Seconds within which a second fence-out of one actor on a node fails its messages instead of forwarding."""
DEFAULT_ASK_TIMEOUT = 30.0


@dataclass(slots=True)
class RegistryEntry:
    object_id: str
    object_type: str
    category: str
    capabilities: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "object_id": self.object_id,
            "object_type": self.object_type,
            "object_category": self.category,
            "capabilities": list(self.capabilities),
            "metadata": dict(self.metadata),
        }


@dataclass(slots=True)
class NodeOptions:
    node_id: str = "node-1"
    mailbox_capacity: int = 1000
    max_inflight: int = 10_000
    """Messages queued or running on the node at once; past half of it, no tenant may exceed its fair share."""
    tenant_max_share: float = 0.5
    """No tenant may hold more than this share of max_inflight, so another tenant always finds room."""
    ask_timeout: float = DEFAULT_ASK_TIMEOUT
    shutdown_deadline: float = 10.0
    retention: list[RetentionRule] = field(default_factory=list)
    retention_interval: float = 3600.0
    inline_calls: bool = True
    """A plain (not async) call to an idle actor runs in its caller's task (``Cell.call_inline``): the same
    contract without a task wake-up. False sends every message through the actor's own loop."""


class Fabric(Protocol):
    """What a node needs from a cluster fabric (``minihermes.cluster``). A node without one runs alone and
    never calls it: the in-node paths do not change.

    Dynamic actors (virtual and per-tenant) are active on at most one node of the cluster: when a message is
    for one that is not active here, the node hands it to the fabric, which takes the actor's lease and
    calls ``Node.activate_here`` or forwards the message to the node holding the lease."""

    pubsub_bridge: Bridge | None

    async def start(self, node: Node) -> None: ...
    async def stop(self) -> None: ...
    async def ask(
        self, target: str, op: str, payload: dict[str, Any] | None, timeout: float | None, ctx: RequestContext
    ) -> Any: ...
    def send(
        self, target: str, op: str, payload: dict[str, Any], ctx: RequestContext, system: bool
    ) -> None: ...
    def cell_removed(self, cell: Cell) -> None: ...
    def fence_of(self, ck: CellKey) -> int | None:
        """The checkpoint fence of the lease this node holds for ``ck`` (increasing with every new holder), or
        None when it holds none."""
        ...

    def directory_changed(self) -> None: ...
    def remote_members(self, group: str, scope: Scope) -> list[str]: ...
    def remote_entries(self, scope: Scope) -> list[RegistryEntry]: ...
    def channel_sent(self, scope: Scope, channel: str) -> None: ...
    def reminders_changed(self) -> None: ...


class _Elsewhere(Exception):
    """Raised by ``_route`` when a dynamic actor is not active on this node and a fabric decides where."""


class _ClusterEvent(asyncio.Event):
    """A channel wake-up that also wakes receivers on the other nodes (``asyncio.Event.set`` is the local
    half, used when another node's wake-up arrives)."""

    def __init__(self, fabric: Fabric, scope: Scope, channel: str) -> None:
        super().__init__()
        self._fabric = fabric
        self._where = (scope, channel)

    def set(self) -> None:
        super().set()
        self._fabric.channel_sent(*self._where)


class Node:
    """One process's actor system. ``await node.start()``, then ``ask``/``send``; ``await node.stop()``."""

    def __init__(
        self,
        store: Store,
        tree: SupervisorSpec,
        *,
        options: NodeOptions | None = None,
        clock: Clock | None = None,
        links: ServiceLinks | None = None,
    ) -> None:
        self.store = store
        self.tree = tree
        self.options = options or NodeOptions()
        self.node_id = self.options.node_id
        self.boot_id = uuid.uuid4().hex[:12]
        self.clock: Clock = clock or SystemClock()
        self.links = links or ServiceLinks({})
        self.metrics = Metrics()
        self.mailbox_capacity = self.options.mailbox_capacity
        self.max_inflight = self.options.max_inflight
        self._specs: dict[str, ActorSpec] = {}
        self._owners: dict[str, Owner] = {}
        self._cells: dict[CellKey, Cell] = {}
        self._inflight: dict[str, int] = {}
        self._inflight_total = 0
        self._groups: dict[Scope, dict[str, list[str]]] = {}
        self._registry: dict[Scope, dict[str, RegistryEntry]] = {}
        self._timers: dict[str, tuple[Cell, TimerHandle]] = {}
        self._bg: set[asyncio.Task[Any]] = set()
        self._accepting = False
        self._started = False
        self._reminder_timer: TimerHandle | None = None
        self._reminder_due: float | None = None
        self._retention_timer: TimerHandle | None = None
        self._channel_events: dict[tuple[Scope, str], asyncio.Event] = {}
        self._fenced: dict[CellKey, float] = {}
        """When each recently fenced-out actor was (``_fenced_out``), to stop a forwarding loop."""
        self.pubsub = PubSub()
        self._deadlines: dict[int, dict[asyncio.Future[Any], tuple[str, str, float]]] = {}
        self._inline_streak = 0
        self._inlining = False
        """A handler runs inline (``Cell.call_inline``): casts it sends go through the mailbox."""
        self.root: Supervisor | None = None
        self.failed: asyncio.Event = asyncio.Event()
        self.fabric: Fabric | None = None
        """Set (before ``start``) to join a cluster; see ``minihermes.cluster``."""
        for spec in tree.walk():
            if spec.name in self._specs:
                raise ValueError(f"two actors are named {spec.name!r}")
            if "/" in spec.name:
                raise ValueError(f"actor name {spec.name!r} must not contain '/'")
            self._specs[spec.name] = spec

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.store.open()
        released = await self.store.channels.release_receipt_prefix(f"{self.node_id}:")
        if released:
            log.info("redelivering %d channel messages left in flight by a previous run", released)
        self._accepting = True
        if self.fabric is not None:
            self.pubsub.bridge = self.fabric.pubsub_bridge
            await self.fabric.start(self)
        self.root = Supervisor(self, self.tree, parent=None)
        await self.root.start()
        self._started = True
        await self.resume_durable()
        await self._arm_reminders()
        if self.options.retention:
            self._retention_timer = self.clock.call_later(
                self.options.retention_interval, self._retention_tick
            )
        log.info("node %s started (%d actor types)", self.node_id, len(self._specs))

    async def stop(self, deadline: float | None = None) -> None:
        """Graceful stop: refuse new work, let queued and running messages finish up to the deadline, flush
        checkpoints, release locks, close the store."""
        if not self._started:
            return
        self._accepting = False
        self._started = False
        for h in (self._reminder_timer, self._retention_timer):
            if h is not None:
                h.cancel()
        limit = self.options.shutdown_deadline if deadline is None else deadline
        if self.root is not None:
            try:
                await asyncio.wait_for(self.root.stop("shutdown"), timeout=limit)
            except TimeoutError:
                log.warning("shutdown deadline of %.1fs passed; killing remaining actors", limit)
                await self.root.kill("shutdown")
        for _, (_, handle) in list(self._timers.items()):
            handle.cancel()
        self._timers.clear()
        for t in list(self._bg):
            t.cancel()
        if self.fabric is not None:
            await self.fabric.stop()  # after the actors saved their state: others may take them over now
        await self.store.locks.release_holder(self.node_id)
        await self.links.aclose()
        await self.store.close()
        log.info("node %s stopped", self.node_id)

    def install_signal_handlers(self, on_stop: Callable[[], Any]) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_stop)

    def _root_failed(self, reason: str) -> None:
        log.critical("root supervisor gave up: %s", reason)
        self.failed.set()

    # -- routing ------------------------------------------------------------------------------------------

    def spec(self, name: str) -> ActorSpec:
        spec = self._specs.get(name)
        if spec is None:
            hint = difflib.get_close_matches(name, list(self._specs), n=1)
            extra = f"; did you mean '{hint[0]}'?" if hint else ""
            raise ActorNotFound(f"no actor named '{name}'{extra}", actor=name)
        return spec

    def actor_names(self) -> list[str]:
        return sorted(self._specs)

    def status(self) -> dict[str, dict[str, Any]]:
        """Per actor type: whether it can take messages, how it is instantiated, live instances, restarts."""
        out: dict[str, dict[str, Any]] = {}
        for name, spec in self._specs.items():
            cells = [c for c in self._cells.values() if c.spec.name == name]
            owner = self._owners.get(name)
            if spec.dynamic:
                up = bool(isinstance(owner, DynamicChild) and owner.running)
            else:
                up = any(c.status == "running" for c in cells)
            out[name] = {
                "behavior": spec.behavior,
                "kind": "virtual" if spec.virtual else "per_tenant" if spec.per_tenant else "shared",
                "up": up,
                "instances": sum(1 for c in cells if c.status in ("starting", "running")),
                "restarts": self.metrics.counter("actor_restarts_total", actor=name),
                "crashes": self.metrics.counter("actor_crashes_total", actor=name),
            }
        return out

    def _route(
        self, target: str, op: str, payload: dict[str, Any] | None, ctx: RequestContext
    ) -> tuple[Cell, Handler]:
        name, _, key = target.partition("/")
        spec = self.spec(name)
        handler = spec.cls._handlers.get(op)
        if handler is None:
            ops = [o for o in spec.cls._handlers if not o.startswith("__")]
            hint = difflib.get_close_matches(op, ops, n=1)
            extra = f"; did you mean '{hint[0]}'?" if hint else ""
            raise UnknownOp(f"{name} has no op '{op}'{extra}", actor=name, op=op)
        if spec.virtual:
            if not key:
                kf = spec.key_field
                value = (payload or {}).get(kf) if kf else None
                if not isinstance(value, str) or not value:
                    raise InvalidArgument(
                        f"{op}: '{name}' is addressed per {kf or 'key'}: give '{name}/<key>'"
                        + (f" or a non-empty '{kf}' argument" if kf else ""),
                        op=op,
                        field=kf or "key",
                    )
                key = value
            scope = ctx.scope
            cell = self._cells.get((scope, name, key))
            if cell is not None and not cell.removed:
                return cell, handler  # an active cell's key was checked when it was activated
            if not valid_key(key):
                # A key no store can hold would fail activation over and over and take the tree down.
                raise InvalidArgument(
                    f"{op}: the key of '{name}' must be 1-{MAX_KEY_CHARS} printable characters",
                    op=op,
                    field=spec.key_field or "key",
                )
        else:
            if key:
                raise ActorNotFound(f"'{name}' is not a keyed actor", actor=target)
            scope = ctx.scope if spec.per_tenant else SYSTEM_SCOPE
        ck = (scope, name, key)
        cell = self._cells.get(ck)
        if cell is None or cell.removed:
            if self.fabric is not None and spec.dynamic:
                raise _Elsewhere(target)
            cell = self._activate(spec, scope, key)
        return cell, handler

    def lease_key(self, target: str, payload: dict[str, Any] | None, ctx: RequestContext) -> CellKey | None:
        """The cell key a message for ``target`` lands on if its actor is leased cluster-wide (dynamic), else
        None. Raises what ``_route`` raises for a bad address."""
        name, _, key = target.partition("/")
        spec = self.spec(name)
        if not spec.dynamic:
            return None
        if spec.virtual and not key:
            kf = spec.key_field
            value = (payload or {}).get(kf) if kf else None
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"'{name}' is addressed per {kf or 'key'}", field=kf or "key")
            key = value
        return (ctx.scope, name, key)

    def is_active_here(self, ck: CellKey) -> bool:
        cell = self._cells.get(ck)
        return cell is not None and not cell.removed

    def activate_here(self, ck: CellKey) -> None:
        """Activate a dynamic actor on this node (the fabric holds its lease)."""
        scope, name, key = ck
        cell = self._cells.get(ck)
        if cell is None or cell.removed:
            self._activate(self.spec(name), scope, key)

    def _activate(self, spec: ActorSpec, scope: Scope, key: str) -> Cell:
        owner = self._owners.get(spec.name)
        if not spec.dynamic or not isinstance(owner, DynamicChild) or not owner.running:
            raise ActorNotFound(f"actor '{spec.name}' is not running", actor=spec.name)
        cell = Cell(self, spec, scope, key, owner)
        if self.fabric is not None:
            # Leased here: the cell claims its checkpoint with the lease's revision and fences every save.
            cell.fence = self.fabric.fence_of(cell.ck)
        self._cells[cell.ck] = cell
        cell.start()
        return cell

    def _check_accepting(self) -> None:
        """A stopping node takes no new work from outside; its actors may still message each other."""
        if not self._accepting and current_cell.get() is None:
            raise ShuttingDown("the node is shutting down")

    def _admit(self, cell: Cell, env: Envelope) -> None:
        if not env.system:
            self._check_accepting()
        if len(cell.mailbox) >= cell.capacity:
            self.metrics.incr("overloaded_total", tenant=env.ctx.tenant)
            raise Overloaded(
                f"mailbox of {cell.address} is full ({cell.capacity} messages)", actor=cell.address
            )
        if env.system:
            return
        tenant = env.ctx.tenant
        total = self._inflight_total
        mine = self._inflight.get(tenant, 0)
        active = len(self._inflight) + (tenant not in self._inflight)
        if (
            total >= self.max_inflight
            or mine >= max(1.0, self.max_inflight * self.options.tenant_max_share)
            or (total >= self.max_inflight // 2 and mine >= self.max_inflight / active)
        ):
            self.metrics.incr("overloaded_total", tenant=tenant)
            raise Overloaded("the node is overloaded; retry later", tenant=tenant)
        self._inflight[tenant] = mine + 1
        self._inflight_total = total + 1
        env.counted = True

    def _release(self, env: Envelope) -> None:
        if env.counted:
            env.counted = False
            tenant = env.ctx.tenant
            n = self._inflight[tenant] - 1
            if n:
                self._inflight[tenant] = n
            else:
                del self._inflight[tenant]
            self._inflight_total -= 1

    # -- messaging ----------------------------------------------------------------------------------------

    async def ask(
        self,
        target: str,
        op: str,
        payload: dict[str, Any] | None = None,
        timeout: float | None = None,
        *,
        ctx: RequestContext | None = None,
    ) -> Any:
        """Request-reply. Raises ActorError subclasses (structured) on every failure."""
        ctx = ctx or current_context()
        try:
            cell, handler = self._route(target, op, payload, ctx)
        except _Elsewhere:
            assert self.fabric is not None
            return await self.fabric.ask(target, op, payload, timeout, ctx)
        kwargs = handler.bind(payload or {})
        if handler.kind == "cast":
            env = Envelope(op, kwargs, ctx, None, self._sender())
            self._admit(cell, env)
            cell.mailbox.put(env)
            return {"status": "accepted"}
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        env = Envelope(op, kwargs, ctx, fut, self._sender())
        if handler.inline and self.options.inline_calls and cell.idle:
            # Nothing queued and the actor's loop parked: run the plain handler here, no task wake-up.
            self._run_inline(cell, handler, env)
            if fut.done():
                # Answered without a loop pass. A caller that loops over such asks (polling an actor) must
                # still let other tasks run now and then: it yields on every INLINE_YIELD_EVERY-th one.
                self._inline_streak += 1
                if self._inline_streak >= INLINE_YIELD_EVERY:
                    self._inline_streak = 0
                    await asyncio.sleep(0)
                return fut.result()
        else:
            self._admit(cell, env)
            cell.mailbox.put(env)
        limit = self.options.ask_timeout if timeout is None else timeout
        # Deadlines share one timer per bucket (a timer per ask would dominate the cost of a fast ask); a
        # timeout fires at most DEADLINE_BUCKET seconds late, never early.
        slot = int((self.clock.monotonic() + limit) / DEADLINE_BUCKET) + 1
        bucket = self._deadlines.get(slot)
        if bucket is None:
            bucket = self._deadlines[slot] = {}
            self.clock.call_later(slot * DEADLINE_BUCKET - self.clock.monotonic(), self._expire_slot, slot)
        bucket[fut] = (target, op, limit)
        try:
            return await fut
        finally:
            bucket.pop(fut, None)

    def send(
        self,
        target: str,
        op: str,
        payload: dict[str, Any] | None = None,
        *,
        ctx: RequestContext | None = None,
    ) -> None:
        """Fire-and-forget. Bad target/op/arguments and overload raise at once; nothing is awaited."""
        ctx = ctx or current_context()
        try:
            cell, handler = self._route(target, op, payload, ctx)
        except _Elsewhere:
            self._send_elsewhere(target, op, payload or {}, ctx, system=False)
            return
        env = Envelope(op, handler.bind(payload or {}), ctx, None, self._sender())
        if handler.inline and self.options.inline_calls and cell.idle and not self._inlining:
            # As for an inline call: the plain handler runs here instead of waking the actor's task. Not
            # from a handler that itself runs inline, so that a chain of casts stays one hop deep.
            self._run_inline(cell, handler, env)
            return
        self._admit(cell, env)
        cell.mailbox.put(env)

    def _run_inline(self, cell: Cell, handler: Handler, env: Envelope) -> None:
        """Handle a message in this task (``Cell.call_inline``); casts the handler sends are queued."""
        self._check_accepting()
        self._inlining = True
        try:
            cell.call_inline(handler, env)
        finally:
            self._inlining = False

    def _send_elsewhere(
        self, target: str, op: str, payload: dict[str, Any], ctx: RequestContext, *, system: bool
    ) -> None:
        assert self.fabric is not None
        spec = self.spec(target.partition("/")[0])
        spec.cls._handlers[op].bind(payload)  # bad arguments fail here, as for a local send
        if not system:
            self._check_accepting()
        self.fabric.send(target, op, payload, ctx, system)

    def _deliver_system(self, target: str, op: str, payload: dict[str, Any], ctx: RequestContext) -> None:
        """Runtime-originated cast (timers, reminders, DOWN/EXIT): never raises; drops what cannot land."""
        try:
            cell, handler = self._route(target, op, payload, ctx)
            env = Envelope(op, handler.bind(payload), ctx, None, "runtime", system=True)
            self._admit(cell, env)
            cell.mailbox.put(env)
        except _Elsewhere:
            try:
                self._send_elsewhere(target, op, payload, ctx, system=True)
            except ActorError as e:
                self.metrics.incr("system_messages_dropped_total")
                log.warning("dropped %s to %s: %s", op, target, e.message)
        except ActorError as e:
            self.metrics.incr("system_messages_dropped_total")
            log.warning("dropped %s to %s: %s", op, target, e.message)

    def _deliver_ck(self, ck: CellKey, op: str, payload: dict[str, Any]) -> None:
        scope, name, key = ck
        spec = self._specs.get(name)
        if spec is None or op not in spec.cls._handlers:
            return
        self._deliver_system(f"{name}/{key}" if key else name, op, payload, self.system_context_for(scope))

    @staticmethod
    def _sender() -> str:
        cell = current_cell.get()
        return cell.address if cell is not None else ""

    def _spawn_reply(
        self,
        cell: Cell,
        deferred: Deferred,
        reply: asyncio.Future[Any] | None,
        after: asyncio.Future[None] | None = None,
    ) -> None:
        work = deferred.awaitable
        if after is None and isinstance(work, asyncio.Task) and work in cell.tasks:
            # The work is a task of this instance (cancelled if it dies): its completion settles the reply,
            # no waiter task. Its outcome is the reply's, so it is not also logged as a failed task.
            work.remove_done_callback(_log_task_error)
            work.add_done_callback(functools.partial(_settle_deferred, cell.address, reply))
            return

        async def waiter() -> None:
            try:
                if after is not None:
                    try:
                        await asyncio.shield(after)  # the handler's own checkpoint first
                    except Exception:
                        raise ActorCrashed(
                            f"{cell.address} could not checkpoint its state", actor=cell.address
                        ) from None
                result = await deferred.awaitable
            except ActorError as e:
                if reply is not None and not reply.done():
                    reply.set_exception(e)
                return
            except Exception as e:
                # A bug in the deferred work: the caller gets the crash at once, not a timeout.
                log.error("deferred reply of %s failed", cell.address, exc_info=e)
                if reply is not None and not reply.done():
                    reply.set_exception(
                        ActorCrashed(f"{cell.address} failed while replying", actor=cell.address)
                    )
                return
            except asyncio.CancelledError:
                if reply is not None and not reply.done():
                    reply.set_exception(ActorError(f"{cell.address} stopped before replying", code="stopped"))
                raise
            if reply is not None and not reply.done():
                reply.set_result(result)

        self.spawn(waiter(), cell=cell)

    def spawn(self, coro: Awaitable[Any], *, cell: Cell | None = None) -> asyncio.Task[Any]:
        """Run a background task owned by a cell (cancelled when its instance dies) or by the node."""
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        bucket = cell.tasks if cell is not None else self._bg
        bucket.add(task)
        task.add_done_callback(bucket.discard)
        task.add_done_callback(_log_task_error)
        return task

    def system_context_for(self, scope: Scope) -> RequestContext:
        if scope == SYSTEM_SCOPE:
            return SYSTEM_CONTEXT
        return RequestContext(
            tenant=scope[0], namespace=scope[1], principal="system", roles=frozenset({"system"})
        )

    # -- cells: start, exit, restore ----------------------------------------------------------------------

    def register_owner(self, name: str, owner: Owner) -> None:
        self._owners[name] = owner

    def singleton(self, spec: ActorSpec, owner: Owner) -> Cell:
        ck = (SYSTEM_SCOPE, spec.name, "")
        cell = self._cells.get(ck)
        if cell is None or cell.removed:
            cell = Cell(self, spec, SYSTEM_SCOPE, "", owner)
            self._cells[ck] = cell
        return cell

    def cells(self, name: str | None = None) -> list[Cell]:
        return [c for c in self._cells.values() if name is None or c.spec.name == name]

    def _cell_started(self, cell: Cell) -> None:
        self.metrics.incr("actor_starts_total", actor=cell.spec.name)

    def _cell_exited(self, cell: Cell, reason: str, abnormal: bool) -> None:
        for tid in [t for t, (c, _) in self._timers.items() if c is cell]:
            self._timers.pop(tid)[1].cancel()
        if cell.idle_timer is not None:
            cell.idle_timer.cancel()
            cell.idle_timer = None
        for t in list(cell.tasks):
            t.cancel()
        if self.fabric is not None and (cell.groups or cell.registered):
            self.fabric.directory_changed()
        for scope, group in cell.groups:
            members = self._groups.get(scope, {}).get(group)
            if members and cell.address in members:
                members.remove(cell.address)
        cell.groups.clear()
        for scope in cell.registered:
            self._registry.get(scope, {}).pop(cell.address, None)
        cell.registered.clear()
        self.spawn(self._release_receipt(cell.receipt))
        for ref, watcher in list(cell.monitors.items()):
            self._deliver_ck(
                watcher, "__DOWN__", {"monitor_ref": ref, "down_from": cell.address, "down_reason": reason}
            )
        cell.monitors.clear()
        for ref, target_ck in list(cell.watching.items()):
            watched = self._cells.get(target_ck)
            if watched is not None:
                watched.monitors.pop(ref, None)
        cell.watching.clear()
        links, cell.links = cell.links, set()
        for other_ck in links:
            other = self._cells.get(other_ck)
            if other is None:
                continue
            other.links.discard(cell.ck)
            if not abnormal:
                continue
            if other.trap_exit:
                self._deliver_ck(other_ck, "__EXIT__", {"exit_from": cell.address, "exit_reason": reason})
            else:
                self.spawn(other.kill(f"linked actor {cell.address} exited: {reason}", abnormal=True))
        if abnormal:
            self.metrics.incr("actor_crashes_total", actor=cell.spec.name)
            cell.owner.cell_failed(cell, reason)
        elif reason == FENCED_OUT:
            self._fenced_out(cell)
        elif reason == "deactivated":
            self._remove(cell)
            leftovers = cell.mailbox.envelopes()
            if leftovers:
                fresh = self._activate(cell.spec, cell.scope, cell.key)
                for env in leftovers:
                    fresh.mailbox.put(env)
        elif cell.kill_reason is None:
            cell.owner.cell_exited(cell, reason)

    def _fenced_out(self, cell: Cell) -> None:
        """A newer holder of the actor's lease claimed its checkpoint: this node lost the lease without
        noticing (frozen past its heartbeat). The cell goes (its lease with it) and what was queued for it is
        forwarded, through the fabric, to whichever node holds the actor now."""
        self.metrics.incr("actor_fenced_total", actor=cell.spec.name)
        leftovers = cell.mailbox.envelopes()
        cell.mailbox.drain()
        self._remove(cell)
        now = self.clock.monotonic()
        again = now - self._fenced.get(cell.ck, -FENCE_LOOP_WINDOW) < FENCE_LOOP_WINDOW
        self._fenced[cell.ck] = now
        if len(self._fenced) > 1024:
            self._fenced = {ck: t for ck, t in self._fenced.items() if now - t < FENCE_LOOP_WINDOW}
        if again:
            # Fenced out twice in a row here: this node's leases fence below what was claimed before (a lease
            # bucket made anew under running nodes?). Forwarding would come back here: fail instead.
            log.error(
                "actor %s fenced out again within %.0f s: failing its messages",
                cell.address,
                FENCE_LOOP_WINDOW,
            )
        for env in leftovers:
            self._release(env)
            if self.fabric is None or again:  # fences come from a fabric's leases: nothing to forward to
                if env.reply is not None and not env.reply.done():
                    env.reply.set_exception(ActorNotFound(f"{cell.address} is gone ({FENCED_OUT})"))
                continue
            if env.reply is None:
                self.fabric.send(cell.address, env.op, env.payload, env.ctx, env.system)
            else:
                self.spawn(self._forward(cell.address, env, env.reply))

    async def _forward(self, target: str, env: Envelope, reply: asyncio.Future[Any]) -> None:
        assert self.fabric is not None
        try:
            result = await self.fabric.ask(target, env.op, env.payload, None, env.ctx)
        except Exception as e:  # the fabric answers with ActorErrors; anything else reaches the caller as is
            if not reply.done():
                reply.set_exception(e)
        else:
            if not reply.done():
                reply.set_result(result)

    def _remove(self, cell: Cell) -> None:
        cell.removed = True
        if self._cells.get(cell.ck) is cell:
            del self._cells[cell.ck]
            if self.fabric is not None and cell.spec.dynamic:
                self.fabric.cell_removed(cell)

    def fail_pending(self, cell: Cell, reason: str) -> None:
        """Answer every queued ask of a cell that will not run again."""
        for env in cell.mailbox.drain():
            if isinstance(env, Envelope):
                self._release(env)
                if env.reply is not None and not env.reply.done():
                    env.reply.set_exception(ActorNotFound(f"{cell.address} is gone ({reason})"))

    async def _restore(
        self, cell: Cell, inst: Actor, reader: Callable[[], Any] | None = None
    ) -> tuple[bool, Any]:
        """Load the cell's checkpoint into inst; also run ``reader`` (``Actor.preload``), in the same trip
        to a store thread where the store can. Returns (whether the saved state was migrated, so that it is
        saved again; what ``reader`` returned). A leased cell claims its checkpoint with its fence
        (``FencedOut`` if a newer holder has: the activation fails)."""
        checkpoints = self.store.checkpoints
        preloaded: Any = None
        if cell.fence is not None:
            load = checkpoints.claim(cell.scope, cell.address, cell.fence)
            if reader is None:
                cp = await load
            else:
                cp, preloaded = await asyncio.gather(load, asyncio.to_thread(reader))
        elif reader is None:
            cp = await checkpoints.load(cell.scope, cell.address)
        else:
            cp, preloaded = await checkpoints.load_with(cell.scope, cell.address, reader)
        return (False if cp is None else await self._load_into(cell, inst, cp)), preloaded

    async def _load_into(self, cell: Cell, inst: Actor, cp: Checkpoint) -> bool:
        """Apply a saved state (migrated if older; quarantined if corrupt). True if it was migrated."""
        cls = type(inst)
        migrated = False
        try:
            data = json.loads(cp.data)
            if not isinstance(data, dict):
                raise ValueError("checkpoint is not an object")
            for name, array in cp.items.items():  # append-only fields, saved item by item
                if name in cls._state_fields:  # also one no longer append-only: its items are its value
                    data[name] = json.loads(array)
            cell.stored_items = tuple(n for n in cp.items if n in cls._log_fields)
            # Rows of a field that is no longer append-only (now in the document) or gone: dropped with the
            # next checkpoint, so that they can never come back in place of the document's value.
            cell.drop_items = tuple((n, 0, ()) for n in cp.items if n not in cls._log_fields)
            if cp.state_version > cls.state_version:
                raise ValueError(
                    f"saved by state_version {cp.state_version}, newer than this code's {cls.state_version}"
                )
            if cp.state_version < cls.state_version:
                data = cls.migrate_state(cp.state_version, data)
                migrated = True
            inst.load_state(data)
        except (ValueError, TypeError) as e:
            reason = f"corrupt checkpoint: {e}"
            log.error("actor %s: %s; starting from empty state (row quarantined)", cell.address, reason)
            kept = cp.data
            if cp.items:  # the item rows go with the checkpoint: keep them too, as text beside the document
                kept = json.dumps(
                    {
                        "document": cp.data.decode("utf-8", "replace"),
                        "items": {name: array.decode("utf-8", "replace") for name, array in cp.items.items()},
                    }
                ).encode()
            await self.store.quarantine.put("checkpoint", cell.scope, cell.address, reason, kept)
            await self.store.checkpoints.delete(cell.scope, cell.address)
            await self.store.events.append(
                RUNTIME_SCOPE,
                "incidents",
                {"kind": "quarantined", "actor": cell.address, "scope": list(cell.scope), "reason": reason},
            )
            self.metrics.incr("quarantined_total")
            fresh = cls()
            for name in cls._state_fields:
                setattr(inst, name, getattr(fresh, name))
        return migrated

    def _arm_idle(self, cell: Cell) -> None:
        """(Re)arm deactivation for when the cell will have been idle for idle_timeout."""
        idle = cell.spec.idle_timeout
        if not cell.spec.virtual or not idle:
            return
        if cell.idle_timer is not None:
            cell.idle_timer.cancel()
        remaining = idle - (self.clock.monotonic() - cell.last_active)
        cell.idle_timer = self.clock.call_later(max(0.0, remaining), cell.mailbox.put, DEACTIVATE)

    # -- timers and reminders -----------------------------------------------------------------------------

    def send_after(
        self, cell: Cell, delay: float, op: str, payload: dict[str, Any], target: str | None = None
    ) -> str:
        timer_id = uuid.uuid4().hex
        ctx = current_context()
        dest = target or cell.address

        def fire() -> None:
            self._timers.pop(timer_id, None)
            self._deliver_system(dest, op, payload, ctx)

        self._timers[timer_id] = (cell, self.clock.call_later(delay, fire))
        return timer_id

    def _expire_slot(self, slot: int) -> None:
        for fut, (target, op, limit) in list(self._deadlines.pop(slot, {}).items()):
            _expire(fut, target, op, limit)

    def cancel_timer(self, timer_id: str) -> bool:
        entry = self._timers.pop(timer_id, None)
        if entry is None:
            return False
        entry[1].cancel()
        return True

    async def _arm_reminders(self) -> None:
        if not self._started:
            return
        nxt = await self.store.reminders.next_fire_at()
        if nxt is None:
            return
        if self._reminder_timer is not None and self._reminder_due is not None and self._reminder_due <= nxt:
            return
        if self._reminder_timer is not None:
            self._reminder_timer.cancel()
        self._reminder_due = nxt
        self._reminder_timer = self.clock.call_later(
            max(0.0, nxt - self.clock.time()), lambda: self.spawn(self._fire_reminders())
        )

    async def reminders_changed(self) -> None:
        """Re-arm the wake-up after a reminder was added or moved (on every node of a cluster)."""
        if self.fabric is not None:
            self.fabric.reminders_changed()
        await self.rearm_reminders()

    async def rearm_reminders(self) -> None:
        """Re-arm this node's wake-up from the store (a cluster fabric calls it when another node changed
        the reminders, and now and then in case a notice was missed)."""
        if self._reminder_timer is not None:
            self._reminder_timer.cancel()
            self._reminder_timer = None
            self._reminder_due = None
        await self._arm_reminders()

    async def _fire_reminders(self) -> None:
        self._reminder_timer = None
        self._reminder_due = None
        now = self.clock.time()
        for r in await self.store.reminders.due(now):
            if not await self.store.reminders.advance(r, now):
                continue  # another node fired it
            ctx = RequestContext.from_dict(r.context) if isinstance(r.context, dict) else None
            self.metrics.incr("reminders_fired_total")
            self._deliver_system(
                r.target, r.op, dict(r.payload or {}), ctx or self.system_context_for(r.scope)
            )
        await self._arm_reminders()

    def _retention_tick(self) -> None:
        async def run() -> None:
            try:
                await self.compact()
            finally:
                if self._started:
                    self._retention_timer = self.clock.call_later(
                        self.options.retention_interval, self._retention_tick
                    )

        self.spawn(run())

    async def compact(self) -> dict[str, int]:
        report = await self.store.apply_retention(self.options.retention, self.clock.time())
        if any(report.deleted.values()):
            log.info("retention: %s", report.deleted)
        return dict(report.deleted)

    # -- durable activations (workflows resume after a restart) -------------------------------------------

    async def mark_durable(self, cell: Cell, active: bool) -> None:
        key = f"resume:{cell.scope[0]}:{cell.scope[1]}:{cell.address}"
        if active:
            await self.store.kv.put(
                RUNTIME_SCOPE,
                key,
                {"tenant": cell.scope[0], "namespace": cell.scope[1], "address": cell.address},
            )
        else:
            await self.store.kv.delete(RUNTIME_SCOPE, key)

    async def resume_durable(self) -> None:
        """Send ``__resume__`` to every actor marked durable-active (``Host.mark_durable``): one that is not
        running is activated, and resumes in ``on_init``. At start-up, and in a cluster when a node dies."""
        for key, entry in await self.store.kv.list(RUNTIME_SCOPE, "resume:"):
            try:
                ctx = self.system_context_for((entry["tenant"], entry["namespace"]))
                self._deliver_system(entry["address"], "__resume__", {}, ctx)
            except (KeyError, TypeError, ActorError) as e:
                log.error("cannot resume %s: %s", key, e)

    # -- channels: local wake-ups for blocking receive ----------------------------------------------------

    def channel_event(self, scope: Scope, channel: str) -> asyncio.Event:
        ev = self._channel_events.get((scope, channel))
        if ev is None:
            ev = self._channel_events[(scope, channel)] = (
                asyncio.Event() if self.fabric is None else _ClusterEvent(self.fabric, scope, channel)
            )
        return ev

    def wake_channel(self, scope: Scope, channel: str) -> None:
        """Wake this node's receivers of a channel (another node sent on it)."""
        ev = self._channel_events.get((scope, channel))
        if ev is not None:
            asyncio.Event.set(ev)

    def wake_channels(self) -> None:
        """Wake this node's receivers of every channel: messages went back to the queue and the release did
        not say on which channels (a dead node's or a stopped actor's receipts). One extra read each."""
        for ev in list(self._channel_events.values()):
            asyncio.Event.set(ev)

    async def _release_receipt(self, receipt: str) -> None:
        if await self.store.channels.release_receipt(receipt):
            self.wake_channels()

    # -- ephemeral topics (live progress) ------------------------------------------------------------------

    def subscribe(
        self, topic: str, *, ctx: RequestContext | None = None, maxsize: int = 1000
    ) -> Subscription:
        """Watch a topic in the scope of ``ctx`` (the HTTP layer passes the caller's context)."""
        return self.pubsub.subscribe((ctx or current_context()).scope, topic, maxsize)

    def publish(self, topic: str, event: Any, *, ctx: RequestContext | None = None) -> int:
        return self.pubsub.publish((ctx or current_context()).scope, topic, event)

    # -- process groups and registry ----------------------------------------------------------------------

    def join(self, cell: Cell, group: str, scope: Scope) -> None:
        members = self._groups.setdefault(scope, {}).setdefault(group, [])
        if cell.address not in members:
            members.append(cell.address)
        cell.groups.add((scope, group))
        if self.fabric is not None:
            self.fabric.directory_changed()

    def leave(self, cell: Cell, group: str, scope: Scope) -> None:
        members = self._groups.get(scope, {}).get(group, [])
        if cell.address in members:
            members.remove(cell.address)
        cell.groups.discard((scope, group))
        if self.fabric is not None:
            self.fabric.directory_changed()

    def members(self, group: str, scope: Scope) -> list[str]:
        """Members visible from scope: the scope's own, then the shared system services."""
        out = list(self._groups.get(scope, {}).get(group, ()))
        if scope != SYSTEM_SCOPE:
            out.extend(m for m in self._groups.get(SYSTEM_SCOPE, {}).get(group, ()) if m not in out)
        if self.fabric is not None:
            out.extend(m for m in self.fabric.remote_members(group, scope) if m not in out)
        return out

    def local_directory(self) -> dict[str, Any]:
        """This node's groups and registry entries, by scope (what a fabric shares with other nodes)."""
        groups = {
            f"{s[0]}/{s[1]}": {g: list(m) for g, m in table.items() if m} for s, table in self._groups.items()
        }
        registry = {
            f"{s[0]}/{s[1]}": [e.to_dict() for e in table.values()] for s, table in self._registry.items()
        }
        return {
            "groups": {k: v for k, v in groups.items() if v},
            "registry": {k: v for k, v in registry.items() if v},
        }

    def register(self, cell: Cell, entry: RegistryEntry, scope: Scope) -> None:
        self._registry.setdefault(scope, {})[entry.object_id] = entry
        cell.registered.add(scope)
        if self.fabric is not None:
            self.fabric.directory_changed()

    def discover(
        self, scope: Scope, category: str | None, capability: str | None, object_type: str | None = None
    ) -> list[RegistryEntry]:
        pools: Iterable[dict[str, RegistryEntry]] = [self._registry.get(scope, {})]
        if scope != SYSTEM_SCOPE:
            pools = [*pools, self._registry.get(SYSTEM_SCOPE, {})]
        if self.fabric is not None:
            seen = {oid for pool in pools for oid in pool}
            remote = {e.object_id: e for e in self.fabric.remote_entries(scope) if e.object_id not in seen}
            pools = [*pools, remote]
        return [
            e
            for pool in pools
            for e in pool.values()
            if (category is None or e.category == category)
            and (capability is None or capability in e.capabilities)
            and (object_type is None or e.object_type == object_type)
        ]

    # -- monitors and links -------------------------------------------------------------------------------

    def monitor(self, watcher: Cell, target: str) -> str:
        ref = uuid.uuid4().hex[:16]
        ctx = current_context()
        try:
            cell, _ = self._route_any(target, ctx)
        except ActorError:
            self._deliver_ck(
                watcher.ck, "__DOWN__", {"monitor_ref": ref, "down_from": target, "down_reason": "noproc"}
            )
            return ref
        cell.monitors[ref] = watcher.ck
        watcher.watching[ref] = cell.ck
        return ref

    def demonitor(self, watcher: Cell, ref: str) -> bool:
        target = watcher.watching.pop(ref, None)
        if target is None:
            return False
        cell = self._cells.get(target)
        if cell is not None:
            cell.monitors.pop(ref, None)
        return True

    def link(self, cell: Cell, target: str) -> None:
        other, _ = self._route_any(target, current_context())
        if other is cell:
            raise InvalidArgument("an actor cannot link to itself", field="target")
        cell.links.add(other.ck)
        other.links.add(cell.ck)

    def unlink(self, cell: Cell, target: str) -> None:
        other, _ = self._route_any(target, current_context())
        cell.links.discard(other.ck)
        other.links.discard(cell.ck)

    def _route_any(self, target: str, ctx: RequestContext) -> tuple[Cell, None]:
        """Find a running cell by address (activating a virtual one), without an op."""
        name, _, key = target.partition("/")
        spec = self.spec(name)
        if spec.virtual and not key:
            raise InvalidArgument(f"'{name}' is keyed: give '{name}/<key>'", field="target")
        scope = ctx.scope if spec.dynamic else SYSTEM_SCOPE
        cell = self._cells.get((scope, name, key))
        if cell is None or cell.removed or cell.task is None or cell.task.done():
            if not spec.dynamic:
                raise ActorNotFound(f"actor '{target}' is not running", actor=target)
            if self.fabric is not None and (cell is None or cell.removed):
                # Activating it here would bypass its cluster lease; monitors and links stay in one node.
                raise ActorNotFound(f"actor '{target}' is not active on this node", actor=target)
            cell = self._activate(spec, scope, key)
        return cell, None


def _expire(fut: asyncio.Future[Any], target: str, op: str, limit: float) -> None:
    if not fut.done():
        fut.set_exception(AskTimeout(f"{target}.{op} did not answer within {limit:g}s", actor=target, op=op))


DEADLINE_BUCKET = 0.25
INLINE_YIELD_EVERY = 64
"""An ask answered inline with no loop pass yields to the event loop on every 64th (per node)."""
MAX_KEY_CHARS = 512
"""Longest virtual-actor key (a session id, say)."""


def valid_key(key: str) -> bool:
    """Whether a virtual actor may be keyed by ``key``: 1-MAX_KEY_CHARS printable characters (what every
    store can hold as part of an address). Callers in front of the node (HTTP) check with this same rule."""
    return 0 < len(key) <= MAX_KEY_CHARS and key.isprintable()


def _settle_deferred(address: str, reply: asyncio.Future[Any] | None, work: asyncio.Task[Any]) -> None:
    """A deferred reply from its task's outcome (as ``Node._spawn_reply``'s waiter does)."""
    if work.cancelled():
        if reply is not None and not reply.done():
            reply.set_exception(ActorError(f"{address} stopped before replying", code="stopped"))
        return
    error = work.exception()
    if error is not None and not isinstance(error, ActorError):
        # A bug in the deferred work: the caller gets the crash at once, not a timeout.
        log.error("deferred reply of %s failed", address, exc_info=error)
        error = ActorCrashed(f"{address} failed while replying", actor=address)
    if reply is None or reply.done():
        return
    if error is not None:
        reply.set_exception(error)
    else:
        reply.set_result(work.result())


def _log_task_error(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background task failed", exc_info=task.exception())
