"""The node: routes messages to cells, admits them (mailbox and per-tenant in-flight limits), and runs the
supervision tree from start to stop. What else a node keeps is in modules of its own, each owned by the node
and reached through its methods here (a facade: ``Host`` and the fabric call the node):

- ``_directory``: process groups and the registry (with other nodes' members and entries, via the fabric);
- ``_relations``: monitors and links (``__DOWN__``, ``__EXIT__``);
- ``_timers``: ``send_after``, ask deadline buckets, reminders, retention;
- ``_activation``: activating dynamic actors, restoring checkpoints, deactivation, fence-outs, durable
  re-activation;
- ``_fabric``: the ``Fabric`` and ``NodePort`` protocols, and fabrics by name.

The message path (``ask``, ``send``, ``deliver_system``, ``_route``, ``_admit``) stays here and calls none of
them.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import logging
import signal
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._activation import FENCE_LOOP_WINDOW, Activation
from ._actor import Actor, Handler
from ._cell import FENCED_OUT, Cell, CellKey, Deferred, Owner, Scope, current_cell
from ._clock import Clock, SystemClock
from ._context import SYSTEM_CONTEXT, RequestContext, current_context, reset_context, set_context
from ._datadir import DataDirLock
from ._directory import Directory, RegistryEntry
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
from ._fabric import Fabric, NodePort
from ._links import ServiceLinks
from ._mailbox import Crash, Envelope
from ._metrics import Metrics
from ._pubsub import PubSub, Subscription
from ._relations import Relations
from ._scopes import RUNTIME_SCOPE, SYSTEM_SCOPE
from ._spec import ActorSpec, SupervisorSpec
from ._supervisor import DynamicChild, Supervisor
from ._timers import DEADLINE_BUCKET, Timers
from .store import RetentionRule, Store

__all__ = [
    "DEADLINE_BUCKET",
    "DEFAULT_ASK_TIMEOUT",
    "FENCE_LOOP_WINDOW",
    "INLINE_YIELD_EVERY",
    "MAX_KEY_CHARS",
    "RUNTIME_SCOPE",
    "SYSTEM_SCOPE",
    "Fabric",
    "Node",
    "NodeOptions",
    "NodePort",
    "RegistryEntry",
    "valid_key",
]

log = logging.getLogger("minihermes.runtime")

DEFAULT_ASK_TIMEOUT = 30.0


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
        self._bg: set[asyncio.Task[Any]] = set()
        self._accepting = False
        self._started = False
        self._channel_events: dict[tuple[Scope, str], asyncio.Event] = {}
        self._cell_observers: list[Callable[[Cell, str], None]] = []
        self.pubsub = PubSub()
        self._inline_streak = 0
        self._inlining = False
        """A handler runs inline (``Cell.call_inline``): casts it sends go through the mailbox."""
        self.root: Supervisor | None = None
        self.failed: asyncio.Event = asyncio.Event()
        self.fabric: Fabric | None = None
        """Set (before ``start``) to join a cluster; see ``minihermes.cluster``."""
        self.data_dir_lock: DataDirLock | None = None
        """Held from before the store opens until after it closes: one node per data dir (``build_node``
        sets it for an unclustered SQLite node; ``None`` shares the dir, as a cluster's nodes do)."""
        self._directory = Directory(self)
        self._relations = Relations(self)
        self._scheduler = Timers(self)
        self._activation = Activation(self)
        # The message path fills the deadline buckets itself (no call into the scheduler per ask); tests and
        # tools peek at the pending timers under their old name.
        self._deadlines = self._scheduler.deadlines
        self._timers = self._scheduler.timers
        for spec in tree.walk():
            if spec.name in self._specs:
                raise ValueError(f"two actors are named {spec.name!r}")
            if "/" in spec.name:
                raise ValueError(f"actor name {spec.name!r} must not contain '/'")
            self._specs[spec.name] = spec

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.data_dir_lock is not None:
            self.data_dir_lock.acquire(node_id=self.node_id)  # DataDirBusy: another node runs there
        try:
            await self.store.open()
        except BaseException:
            if self.data_dir_lock is not None:
                self.data_dir_lock.release()
            raise
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
        await self._scheduler.start()
        log.info("node %s started (%d actor types)", self.node_id, len(self._specs))

    async def stop(self, deadline: float | None = None) -> None:
        """Graceful stop: refuse new work, let queued and running messages finish up to the deadline, flush
        checkpoints, release locks, close the store."""
        if not self._started:
            return
        self._accepting = False
        self._started = False
        self._scheduler.stop_wake_ups()
        limit = self.options.shutdown_deadline if deadline is None else deadline
        if self.root is not None:
            try:
                await asyncio.wait_for(self.root.stop("shutdown"), timeout=limit)
            except TimeoutError:
                log.warning("shutdown deadline of %.1fs passed; killing remaining actors", limit)
                await self.root.kill("shutdown")
        self._scheduler.stop()
        for t in list(self._bg):
            t.cancel()
        if self.fabric is not None:
            await self.fabric.stop()  # after the actors saved their state: others may take them over now
        await self.store.locks.release_holder(self.node_id)
        await self.links.aclose()
        await self.store.close()
        if self.data_dir_lock is not None:
            self.data_dir_lock.release()
        log.info("node %s stopped", self.node_id)

    @property
    def accepting(self) -> bool:
        """Whether the node takes new work from outside (false once it is stopping)."""
        return self._accepting

    def stopped_error(self, error: ActorError) -> ActorError:
        """What a caller gets whose message an actor will not finish: ``error``, or ``ShuttingDown`` (503,
        retry later) when the actor stopped because the node is stopping; durable work cut off by the stop
        is resumed at the next start."""
        if self._accepting:
            return error
        return ShuttingDown(f"the node is shutting down ({error.message})", **error.details)

    def install_signal_handlers(self, on_stop: Callable[[], Any]) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_stop)
        # `minihermes keys rotate` asks a serving node to re-encrypt its store (SqliteStore.serve_key_rotation)
        rotate = getattr(self.store, "serve_key_rotation", None)
        if rotate is not None and hasattr(signal, "SIGUSR2"):
            loop.add_signal_handler(signal.SIGUSR2, lambda: self.spawn(rotate()))
            if self.data_dir_lock is not None and self.data_dir_lock.held:
                self.data_dir_lock.update(key_rotation=True)  # only a node saying so is sent SIGUSR2

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
        return self._activation.activate(spec, scope, key)

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
        if handler.concurrent and cell.instance is not None and cell.status == "running":
            return await self._run_concurrent(cell, handler, kwargs, ctx, timeout)
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
                    fut.exception()  # taken now: a caller cancelled in the yield (at its deadline) never reads it
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
            self.clock.call_later(
                slot * DEADLINE_BUCKET - self.clock.monotonic(), self._scheduler.expire_slot, slot
            )
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

    async def _run_concurrent(
        self, cell: Cell, handler: Handler, kwargs: dict[str, Any], ctx: RequestContext, timeout: float | None
    ) -> Any:
        """Handle a ``concurrent`` call in this task, beside whatever the actor's loop runs (``call``). A
        handler that raises anything but an ActorError crashes the actor in its own loop, as inline."""
        self._check_accepting()
        inst = cell.instance
        assert inst is not None
        cell_token = current_cell.set(cell)
        ctx_token = set_context(ctx)
        try:
            result = handler.fn(inst, **kwargs)
            if handler.is_async:
                limit = self.options.ask_timeout if timeout is None else timeout
                try:
                    result = await asyncio.wait_for(result, limit)
                except TimeoutError:
                    raise AskTimeout(
                        f"{cell.address}.{handler.op} did not answer within {limit:g}s",
                        actor=cell.address,
                        op=handler.op,
                    ) from None
            return result
        except ActorError:
            raise
        except Exception as exc:
            cell.mailbox.put_first(Crash(exc))
            raise ActorCrashed(
                f"{cell.address} crashed while handling '{handler.op}'", actor=cell.address
            ) from None
        finally:
            reset_context(ctx_token)
            current_cell.reset(cell_token)
            if cell.tracks_idle:
                cell.last_active = self.clock.monotonic()

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

    def deliver_system(self, target: str, op: str, payload: dict[str, Any], ctx: RequestContext) -> None:
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
            work.add_done_callback(
                functools.partial(_settle_deferred, cell.address, reply, self.stopped_error)
            )
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
                    stopped = ActorError(f"{cell.address} stopped before replying", code="stopped")
                    reply.set_exception(self.stopped_error(stopped))
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

    # -- cells: the node's table of live cells; start and exit -------------------------------------------

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

    def observe_cells(self, observer: Callable[[Cell, str], None]) -> None:
        """Call ``observer(cell, "start" | "exit")`` as each cell's actor instance starts and exits (for test
        harnesses that record where actors ran; not on the message path)."""
        self._cell_observers.append(observer)

    def _cell_started(self, cell: Cell) -> None:
        self.metrics.incr("actor_starts_total", actor=cell.spec.name)
        for observe in self._cell_observers:
            observe(cell, "start")

    def _cell_exited(self, cell: Cell, reason: str, abnormal: bool) -> None:
        for observe in self._cell_observers:
            observe(cell, "exit")
        self._scheduler.cancel_all(cell)
        if cell.idle_timer is not None:
            cell.idle_timer.cancel()
            cell.idle_timer = None
        for t in list(cell.tasks):
            t.cancel()
        self._directory.forget(cell)
        self.spawn(self._release_receipt(cell.receipt))
        self._relations.cell_down(cell, reason, abnormal)
        if abnormal:
            self.metrics.incr("actor_crashes_total", actor=cell.spec.name)
            cell.owner.cell_failed(cell, reason)
        elif reason == FENCED_OUT:
            self._activation.fenced_out(cell)
        elif reason == "deactivated":
            self._activation.deactivated(cell)
        elif cell.kill_reason is None:
            cell.owner.cell_exited(cell, reason)

    def _remove(self, cell: Cell) -> None:
        cell.removed = True
        if self._cells.get(cell.ck) is cell:
            del self._cells[cell.ck]
            if self.fabric is not None and cell.spec.dynamic:
                self.fabric.cell_removed(cell.ck)

    def evict_here(self, ck: CellKey, reason: str) -> None:
        """The fabric lost ck's lease (this node's heartbeat is overdue): the cell goes at once, its instance
        is killed and its queued asks fail (``actor_not_found``), so that it no longer acts here."""
        cell = self._cells.get(ck)
        if cell is not None:
            self._remove(cell)
            self.spawn(cell.kill(reason))
            self.fail_pending(cell, reason)

    def fail_pending(self, cell: Cell, reason: str) -> None:
        """Answer every queued ask of a cell that will not run again."""
        for env in cell.mailbox.drain():
            if isinstance(env, Envelope):
                self._release(env)
                if env.reply is not None and not env.reply.done():
                    env.reply.set_exception(
                        self.stopped_error(ActorNotFound(f"{cell.address} is gone ({reason})"))
                    )

    async def _restore(
        self, cell: Cell, inst: Actor, reader: Callable[[], Any] | None = None
    ) -> tuple[bool, Any]:
        """Load the cell's checkpoint into inst (``Activation.restore``)."""
        return await self._activation.restore(cell, inst, reader)

    def _arm_idle(self, cell: Cell) -> None:
        self._activation.arm_idle(cell)

    # -- timers and reminders (``_timers``) ----------------------------------------------------------------

    def send_after(
        self, cell: Cell, delay: float, op: str, payload: dict[str, Any], target: str | None = None
    ) -> str:
        return self._scheduler.send_after(cell, delay, op, payload, target)

    def cancel_timer(self, timer_id: str) -> bool:
        return self._scheduler.cancel(timer_id)

    async def reminders_changed(self) -> None:
        """Re-arm the wake-up after a reminder was added or moved (on every node of a cluster)."""
        await self._scheduler.reminders_changed()

    async def rearm_reminders(self) -> None:
        """Re-arm this node's wake-up from the store (a cluster fabric calls it when another node changed
        the reminders, and now and then in case a notice was missed)."""
        await self._scheduler.rearm_reminders()

    async def compact(self) -> dict[str, int]:
        """Apply the retention rules now (also run every ``retention_interval``)."""
        return await self._scheduler.compact()

    # -- durable activations (workflows resume after a restart; ``_activation``) ---------------------------

    async def mark_durable(self, cell: Cell, active: bool) -> None:
        await self._activation.mark_durable(cell, active)

    async def resume_durable(self) -> None:
        """Send ``__resume__`` to every actor marked durable-active (``Host.mark_durable``): one that is not
        running is activated, and resumes in ``on_init``. At start-up, and in a cluster when a node dies."""
        await self._activation.resume_durable()

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

    # -- process groups and registry (``_directory``) ------------------------------------------------------

    def join(self, cell: Cell, group: str, scope: Scope) -> None:
        self._directory.join(cell, group, scope)

    def leave(self, cell: Cell, group: str, scope: Scope) -> None:
        self._directory.leave(cell, group, scope)

    def members(self, group: str, scope: Scope) -> list[str]:
        """Members visible from scope: the scope's own, then the shared system services."""
        return self._directory.members(group, scope)

    def local_directory(self) -> dict[str, Any]:
        """This node's groups and registry entries, by scope (what a fabric shares with other nodes)."""
        return self._directory.local()

    def register(self, cell: Cell, entry: RegistryEntry, scope: Scope) -> None:
        self._directory.register(cell, entry, scope)

    def discover(
        self, scope: Scope, category: str | None, capability: str | None, object_type: str | None = None
    ) -> list[RegistryEntry]:
        return self._directory.discover(scope, category, capability, object_type)

    # -- monitors and links (``_relations``) ---------------------------------------------------------------

    def monitor(self, watcher: Cell, target: str) -> str:
        return self._relations.monitor(watcher, target)

    def demonitor(self, watcher: Cell, ref: str) -> bool:
        return self._relations.demonitor(watcher, ref)

    def link(self, cell: Cell, target: str) -> None:
        self._relations.link(cell, target)

    def unlink(self, cell: Cell, target: str) -> None:
        self._relations.unlink(cell, target)


if TYPE_CHECKING:  # mypy checks that a node is what its fabric may call
    _port: type[NodePort] = Node


INLINE_YIELD_EVERY = 64
"""An ask answered inline with no loop pass yields to the event loop on every 64th (per node)."""
MAX_KEY_CHARS = 512
"""Longest virtual-actor key (a session id, say)."""


def valid_key(key: str) -> bool:
    """Whether a virtual actor may be keyed by ``key``: 1-MAX_KEY_CHARS printable characters (what every
    store can hold as part of an address). Callers in front of the node (HTTP) check with this same rule."""
    return 0 < len(key) <= MAX_KEY_CHARS and key.isprintable()


def _settle_deferred(
    address: str,
    reply: asyncio.Future[Any] | None,
    stopped_error: Callable[[ActorError], ActorError],
    work: asyncio.Task[Any],
) -> None:
    """A deferred reply from its task's outcome (as ``Node._spawn_reply``'s waiter does)."""
    if work.cancelled():
        if reply is not None and not reply.done():
            reply.set_exception(
                stopped_error(ActorError(f"{address} stopped before replying", code="stopped"))
            )
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
