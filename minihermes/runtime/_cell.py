"""A cell: the durable home of one actor instance (its mailbox, links, monitors and checkpoint cursor).

The cell outlives the instances that run in it: when the supervisor restarts a crashed actor, a new instance
is restored from the last checkpoint into the same cell, so casts sent while it restarts reach it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ._actor import Actor, Handler
from ._clock import TimerHandle
from ._context import RequestContext, current_context, reset_context, set_context
from ._errors import ActorCrashed, ActorError, InvalidTransition, UnknownOp
from ._mailbox import DEACTIVATE, STOP, Control, Crash, Envelope, Mailbox
from ._spec import ActorSpec
from ._statelog import LogFields
from .store import FencedOut
from .store.base import Items

Snapshot = tuple[bytes, Items | None]
"""A checkpoint to save: the state document, and the append-only fields' changes (None without any)."""

if TYPE_CHECKING:
    from ._node import Node

log = logging.getLogger("minihermes.runtime")
FENCED_OUT = "fenced out"
"""Exit reason of a leased actor whose checkpoint a newer holder claimed: removed here, its mail forwarded."""

Scope = tuple[str, str]
CellKey = tuple[Scope, str, str]
"""(scope, actor type name, key)."""

current_cell: contextvars.ContextVar[Cell | None] = contextvars.ContextVar("minihermes_cell", default=None)
_uids = itertools.count(1)


class Owner(Protocol):
    """The supervisor side of a cell."""

    def cell_failed(self, cell: Cell, reason: str) -> None: ...
    def cell_exited(self, cell: Cell, reason: str) -> None: ...


class Deferred:
    """Returned by a handler that replies later: the node replies with the awaitable's outcome while the
    actor goes on handling its mailbox (used by Workflow.run)."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable


class _Exit(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


class Cell:
    def __init__(self, node: Node, spec: ActorSpec, scope: Scope, key: str, owner: Owner) -> None:
        self.node = node
        self.spec = spec
        self.scope = scope
        self.key = key
        self.address = f"{spec.name}/{key}" if key else spec.name
        self.ck: CellKey = (scope, spec.name, key)
        self.uid = next(_uids)
        self.owner = owner
        self.mailbox = Mailbox()
        self.capacity = spec.mailbox_capacity or spec.cls.mailbox_capacity or node.mailbox_capacity
        self.interval = max(1, spec.checkpoint_interval or spec.cls.checkpoint_interval)
        self.handlers: dict[str, Handler] = spec.cls._handlers
        self.instance: Actor | None = None
        self.task: asyncio.Task[None] | None = None
        self.status = "new"
        self.incarnation = 0
        self.monitors: dict[str, CellKey] = {}
        self.watching: dict[str, CellKey] = {}
        self.links: set[CellKey] = set()
        self.trap_exit = False
        self.timers: dict[str, TimerHandle] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.groups: set[tuple[Scope, str]] = set()
        self.registered: set[Scope] = set()
        self.last_bytes: bytes | None = None
        """The state as the last message left it (append-only fields aside: ``logs``)."""
        self.logs = LogFields(spec.cls._log_fields) if spec.cls._log_fields else None
        """The append-only state fields' bookkeeping (None without any)."""
        self.stored_items: tuple[str, ...] = ()
        """The append-only fields whose items the restored checkpoint held as rows (``Node._load_into``)."""
        self.drop_items: Items = ()
        """Item rows of fields that are not append-only (any more): deleted with the next checkpoint."""
        self.since_checkpoint = 0
        self.dirty = False
        self.last_active = node.clock.monotonic()
        self.current: Envelope | None = None
        self.idle_timer: TimerHandle | None = None
        self.kill_reason: tuple[str, bool] | None = None
        self.removed = False
        self.tracks_idle = bool(spec.virtual and spec.idle_timeout)
        self.saves_in_flight = 0
        """Checkpoints registered with the store and not yet durable (or failed)."""
        self.held = 0
        """Of ``saves_in_flight``: writes besides the checkpoint that the reply waits for (``hold``)."""
        self._drained: asyncio.Future[None] | None = None
        self.save_failed = False
        """A checkpoint failed: the instance is being killed; nothing it replies or does may go on."""
        self._ctx: RequestContext | None = None
        self.fence: int | None = None
        """In a cluster, the fence of this node's lease on the actor (``Fabric.fence_of``): every checkpoint
        carries it, and one a newer holder has claimed past is refused (``FencedOut``) instead of overwriting
        its state."""

    def __repr__(self) -> str:
        return f"<Cell {self.scope[0]}:{self.scope[1]}:{self.address} {self.status}>"

    @property
    def receipt(self) -> str:
        return f"{self.node.node_id}:{self.node.boot_id}:{self.uid}:{self.incarnation}"

    @property
    def init_context(self) -> RequestContext:
        return self.node.system_context_for(self.scope)

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start a new incarnation on the same mailbox."""
        if self.task is not None and not self.task.done():
            raise RuntimeError(f"{self!r} is already running")
        self.incarnation += 1
        self.kill_reason = None
        self.status = "starting"
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"actor:{self.scope[0]}:{self.address}", context=contextvars.Context()
        )

    async def kill(self, reason: str, *, abnormal: bool = False) -> None:
        """Stop the instance now (supervisor restarts, link propagation). abnormal=True reports a crash."""
        task = self.task
        if task is None or task.done():
            return
        self.kill_reason = (reason, abnormal)
        task.cancel()
        await asyncio.shield(asyncio.wait({task}))

    def request_stop(self) -> None:
        self.mailbox.put(STOP)

    # -- the loop -----------------------------------------------------------------------------------------

    async def _run(self) -> None:
        reason = "normal"
        abnormal = False
        current_cell.set(self)  # this task runs in its own context: set once, never reset
        try:
            await self._activate()
            self.status = "running"
            self.node._cell_started(self)
            mailbox = self.mailbox
            while True:
                item = await mailbox.get()
                if type(item) is Envelope:
                    await self._handle(item)
                else:
                    await self._control(item)  # type: ignore[arg-type]
        except _Exit as e:
            reason = e.reason
        except FencedOut as exc:  # claiming the checkpoint at activation: a newer holder has it
            reason = FENCED_OUT
            log.warning("actor %s: %s", self.address, exc)
        except asyncio.CancelledError:
            reason, abnormal = self.kill_reason or ("killed", False)
        except Exception as exc:
            reason = f"crash: {type(exc).__name__}: {exc}"
            abnormal = True
            log.error("actor %s crashed", self.address, exc_info=exc)
        finally:
            self._fail_current(reason)
            self.instance = None
            self.status = "crashed" if abnormal else "stopped"
            self.node._cell_exited(self, reason, abnormal)

    async def _activate(self) -> None:
        spec = self.spec
        cls = spec.cls
        inst = cls()
        inst.actor_id = self.address
        from ._host import Host  # _host -> _node -> _cell: imported here to keep the cycle out of import time

        inst.host = Host(self.node, self)
        self._use(self.init_context)
        reader = _guarded(inst.preload(self.address, dict(spec.args)), self.address)
        migrated = False
        if cls._state_fields:
            await self.wait_saved()  # a previous instance's last checkpoints land before we read them back
            self.stored_items = self.drop_items = ()
            migrated, inst.preloaded = await self.node._restore(self, inst, reader)
            if self.logs is not None:
                self.logs.reset(inst, self.stored_items, migrated)
                self.last_bytes = inst.dump_state(self.logs.document(inst))
            else:
                self.last_bytes = inst.dump_state()
        elif reader is not None:
            inst.preloaded = await asyncio.to_thread(reader)
        self.instance = inst
        self.since_checkpoint = 0
        # A migrated state is saved in its new shape right away, stale item rows are dropped at once.
        self.dirty = migrated or bool(self.drop_items)
        await inst.on_init(self.address, dict(spec.args))
        await self.flush()  # what on_init (or a migration) changed is durable before the first message
        self.node._arm_idle(self)

    async def _control(self, item: Control) -> None:
        if type(item) is Crash:
            raise item.error
        if item is STOP:
            await self._shutdown_instance("stopped")
            raise _Exit("stopped")
        if item is DEACTIVATE:
            idle = self.spec.idle_timeout or 0.0
            if len(self.mailbox) or self.node.clock.monotonic() - self.last_active < idle:
                self.node._arm_idle(self)
                return
            await self._shutdown_instance("deactivated")
            raise _Exit("deactivated")

    async def _shutdown_instance(self, reason: str) -> None:
        inst = self.instance
        if inst is None:
            return
        for t in list(self.tasks):
            t.cancel()
        self._use(self.init_context)
        await inst.on_stop(reason)
        await self.flush()

    def _use(self, ctx: RequestContext) -> None:
        # The cell's task has its own context, so the variable is only set when the tenant context changes.
        if ctx is not self._ctx:
            self._ctx = ctx
            set_context(ctx)

    async def _handle(self, env: Envelope) -> None:
        inst = self.instance
        assert inst is not None
        self.current = env
        if env.ctx is not self._ctx:
            self._use(env.ctx)
        try:
            h = self.handlers.get(env.op)
            if h is None:
                if not env.op.startswith("__"):
                    raise UnknownOp(f"{self.spec.name} has no op '{env.op}'", op=env.op)
                return
            if h.states is not None:
                self._check_state(inst, h)
            result = h.fn(inst, **env.payload)
            if h.is_async:
                result = await result
        except ActorError as e:
            self._rollback()
            self.current = None
            if env.reply is not None and not env.reply.done():
                env.reply.set_exception(e)
            return
        finally:
            if env.counted:
                self.node._release(env)
            if self.tracks_idle:
                self.last_active = self.node.clock.monotonic()
        if h.kind == "cast" and inst.behavior == "GenEvent":
            self._forward_event(inst, env)
        self._handled(inst, env.reply, result)

    @staticmethod
    def _check_state(inst: Actor, h: Handler) -> None:
        if getattr(inst, "fsm_state", None) not in h.states:  # type: ignore[operator]
            raise InvalidTransition(
                f"{h.op} is not allowed in state {getattr(inst, 'fsm_state', '')}",
                op=h.op,
                state=getattr(inst, "fsm_state", None),
            )

    def _handled(self, inst: Actor, reply: asyncio.Future[Any] | None, result: Any) -> None:
        """After a handler returned: the checkpoint, then the reply (once what it depends on is durable)."""
        snap: Snapshot | None = None
        if inst._state_fields:
            # still "current": if serializing fails, the caller gets the crash instead of waiting forever
            self.since_checkpoint += 1
            snap = self._checkpoint_due(inst)
        self.current = None
        if type(result) is Deferred:
            after = None if snap is None else self._save_future(inst, snap)
            self.node._spawn_reply(self, result, reply, after=after)
        elif snap is not None and not self.held:
            # Pipelined: the actor goes on with its next message; this reply leaves once the commit holding
            # its state is durable (or fails with the crash if the commit fails).
            self._save_then(inst, snap, None if reply is None else (reply, result))
        else:
            if snap is not None:  # with held writes, which may commit after it (``hold``)
                self._save_future(inst, snap)
            if reply is not None and not reply.done():
                if self.saves_in_flight:
                    # A save not durable yet (this one, a ``save_soon``, a held write): the reply waits for it.
                    self.node.spawn(self._reply_when_saved(reply, result))
                else:
                    reply.set_result(result)

    @property
    def idle(self) -> bool:
        """The actor's loop waits for mail with nothing queued or running (inline included): a plain call
        may run inline."""
        return self.current is None and self.mailbox.parked and not self.save_failed

    def call_inline(self, h: Handler, env: Envelope) -> None:
        """Handle a plain (not async) message in the sender's task while the actor is ``idle``: the same
        handler, checks, checkpoint, event forwarding and reply as through the mailbox, without waking the
        actor's task for it. One message at a time still holds: the handler runs to completion without
        yielding, and the actor's loop is parked. ``env.reply`` (None for a cast) is settled here unless it
        waits for a commit (or a crash). A handler that raises anything but an ActorError crashes the actor
        in its own loop."""
        inst = self.instance
        reply = env.reply
        assert inst is not None
        self.current = env
        cell_token = current_cell.set(self)
        ctx_token = set_context(env.ctx) if env.ctx is not current_context() else None
        try:
            try:
                if h.states is not None:
                    self._check_state(inst, h)
                result = h.fn(inst, **env.payload)
                if h.kind == "cast" and inst.behavior == "GenEvent":
                    self._forward_event(inst, env)
                self._handled(inst, reply, result)
            except ActorError as e:
                self._rollback()
                self.current = None
                if reply is not None and not reply.done():
                    reply.set_exception(e)
        except Exception as exc:
            # The actor's loop crashes with it next (nothing runs before): it fails this call with
            # ``actor_crashed`` and reports the exit, in that order, as for a crash in the loop itself.
            self.current = env
            self.mailbox.put_first(Crash(exc))
        finally:
            if ctx_token is not None:
                reset_context(ctx_token)
            current_cell.reset(cell_token)
            if self.tracks_idle:
                self.last_active = self.node.clock.monotonic()

    async def _reply_when_saved(self, reply: asyncio.Future[Any], result: Any) -> None:
        await self.wait_saved()
        _settle(reply, result, self.address, OSError("checkpoint failed") if self.save_failed else None)

    def _forward_event(self, inst: Actor, env: Envelope) -> None:
        events = getattr(inst, "events", ())
        if (
            not getattr(inst, "forward_events", False)
            or (events and env.op not in events)
            or env.op.startswith("__")
        ):
            return
        payload = type(inst)._handlers[env.op].unbind(env.payload)
        for target, op in list(getattr(inst, "subscribers", ())):
            try:
                self.node.send(target, op or env.op, dict(payload), ctx=env.ctx)
            except ActorError as e:
                log.warning("%s: event %s not forwarded to %s: %s", self.address, env.op, target, e.message)

    def _fail_current(self, reason: str) -> None:
        env = self.current
        self.current = None
        if env is not None:
            self.node._release(env)
            if env.reply is not None and not env.reply.done():
                env.reply.set_exception(
                    ActorCrashed(f"{self.address} crashed while handling '{env.op}'", actor=self.address)
                    if reason.startswith("crash")
                    else self.node.stopped_error(
                        ActorCrashed(f"{self.address} stopped ({reason})", actor=self.address, reason=reason)
                    )
                )

    # -- durability ---------------------------------------------------------------------------------------

    def _rollback(self) -> None:
        inst = self.instance
        if inst is not None and inst._state_fields and self.last_bytes is not None:
            logs = self.logs
            if logs is None:
                inst.load_state(json.loads(self.last_bytes))
                return
            kept = {f: getattr(inst, f) for f in logs.fields}  # not in last_bytes: rolled back below
            inst.load_state({**json.loads(self.last_bytes), **kept})
            logs.rollback(inst)

    def _dump(self, inst: Actor) -> tuple[bytes, Items, list[Any]]:
        """The state document, the append-only fields' changes since their last save, and the bookkeeping
        to ``LogFields.commit`` once those are handed to the store (empty without append-only fields)."""
        logs = self.logs
        if logs is None:
            return inst.dump_state(), (), []
        document = logs.document(inst)
        data = inst.dump_state(document)
        items, pending = logs.changes(inst, document)
        logs.see(inst)
        return data, items, pending

    def _commit_items(self, pending: list[Any]) -> None:
        if pending:
            assert self.logs is not None
            self.logs.commit(pending)

    def _checkpoint_due(self, inst: Actor) -> Snapshot | None:
        """The state to save if it changed and a checkpoint is due, else None."""
        data, items, pending = self._dump(inst)
        if data != self.last_bytes:
            self.last_bytes = data
            self.dirty = True
        if items:
            self.dirty = True
        if not (self.dirty and self.since_checkpoint >= self.interval):
            return None
        self._counted_as_saved()
        self._commit_items(pending)
        return data, items or None

    def _counted_as_saved(self) -> None:
        """The bookkeeping of a checkpoint handed to the store: nothing unsaved, the interval restarts."""
        self.dirty = False
        self.since_checkpoint = 0
        self.node.metrics.incr("checkpoints_total")

    def _changed_state(self) -> Snapshot | None:
        """The instance's state if it differs from the last one saved (or is marked dirty), else None; the
        returned state becomes the last saved one."""
        inst = self.instance
        if inst is None or not inst._state_fields:
            return None
        data, items, pending = self._dump(inst)
        if data == self.last_bytes and not self.dirty and not items:
            return None
        self.last_bytes = data
        self._commit_items(pending)
        return data, self._take_drops(items)

    def _take_drops(self, items: Items) -> Items | None:
        """``items`` with the pending drops of stale item rows (once), or None if there is nothing."""
        if self.drop_items:
            items, self.drop_items = self.drop_items + items, ()
        return items or None

    def _save_then(self, inst: Actor, snap: Snapshot, reply: tuple[asyncio.Future[Any], Any] | None) -> None:
        """Register a checkpoint; once durable, release ``reply`` (future, result). No future or extra loop
        pass of its own when the store offers ``save_callback`` (the hot path: one durable message)."""
        checkpoints = self.node.store.checkpoints
        save_callback = getattr(checkpoints, "save_callback", None)
        if save_callback is None:
            fut = self._save_future(inst, snap)
            if reply is not None:
                fut.add_done_callback(functools.partial(_release, reply[0], reply[1], self.address))
            return
        self.saves_in_flight += 1

        def done(error: BaseException | None) -> None:
            self._save_finished(error)
            if reply is not None:
                _settle(reply[0], reply[1], self.address, error)

        data, extra = self._store_args(snap)
        try:
            save_callback(self.scope, self.address, inst.state_version, data, done, **extra)
        except Exception as e:  # refused before it was queued (bad input): as a failed commit
            done(e)

    def _store_args(self, snap: Snapshot) -> tuple[bytes, dict[str, Any]]:
        """The state document and the save's keyword arguments: the fence and the item changes, each only
        when there is one (unfenced and without items, the call any store takes)."""
        data, items = snap
        extra: dict[str, Any] = {} if items is None else {"items": items}
        if self.fence is not None:
            extra["fence"] = self.fence
        return data, extra

    def _save_future(self, inst: Actor, snap: Snapshot) -> asyncio.Future[None]:
        data, extra = self._store_args(snap)
        fut = self.node.store.checkpoints.save_nowait(
            self.scope, self.address, inst.state_version, data, **extra
        )
        self.saves_in_flight += 1
        fut.add_done_callback(self._save_done)
        return fut

    def _save_done(self, fut: asyncio.Future[None]) -> None:
        self._save_finished(asyncio.CancelledError() if fut.cancelled() else fut.exception())

    def _save_finished(self, error: BaseException | None) -> None:
        self.saves_in_flight -= 1
        if self.saves_in_flight == 0 and self._drained is not None:
            drained, self._drained = self._drained, None
            if not drained.done():
                drained.set_result(None)
        if error is None or isinstance(error, asyncio.CancelledError):
            return
        self.save_failed = True
        if isinstance(error, FencedOut):
            # Another node holds the actor now (this one lost its lease unawares): stop here, not restart.
            log.warning("actor %s: %s", self.address, error)
            if self.task is not None and not self.task.done():
                self.node.spawn(self.kill(FENCED_OUT))
            return
        # Memory is now ahead of disk: restart from the last durable checkpoint rather than go on.
        log.error("actor %s: checkpoint failed: %r", self.address, error)
        if self.task is not None and not self.task.done():
            self.node.spawn(self.kill(f"checkpoint failed: {error}", abnormal=True))

    def hold(self, write: asyncio.Future[Any]) -> None:
        """Count ``write`` (something this actor wrote besides its state, on a store that may commit it after
        a later checkpoint) as a save in flight: ``wait_saved`` and the reply to the current message wait
        for it. Its failure is the writer's to report; it does not crash the actor."""
        if not isinstance(write, asyncio.Future):
            raise TypeError(f"hold takes an asyncio.Future, got {type(write).__name__}")
        if write.done():
            return
        self.saves_in_flight += 1
        self.held += 1
        write.add_done_callback(self._held_done)

    def _held_done(self, write: asyncio.Future[Any]) -> None:
        self.held -= 1
        self._save_finished(None)

    def save_soon(self) -> None:
        """Register a checkpoint of the current state now (if it changed) without waiting for it; ordered
        before any later save of this cell. ``wait_saved`` (or the end of the message) waits for it."""
        snap = self._changed_state()
        if snap is None:
            return
        self._counted_as_saved()
        assert self.instance is not None
        self._save_future(self.instance, snap)

    async def wait_saved(self) -> None:
        """Until every registered checkpoint of this cell is durable (or failed)."""
        while self.saves_in_flight:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)

    async def _save(self, snap: Snapshot) -> None:
        inst = self.instance
        assert inst is not None
        data, extra = self._store_args(snap)
        await self.node.store.checkpoints.save(self.scope, self.address, inst.state_version, data, **extra)
        self._counted_as_saved()

    async def flush(self) -> None:
        """Save now if anything changed since the last checkpoint, and wait for saves in flight."""
        await self.wait_saved()
        snap = self._changed_state()
        if snap is not None:
            await self._save(snap)


def _guarded(reader: Callable[[], Any] | None, address: str) -> Callable[[], Any] | None:
    """``Actor.preload``'s function, made to log what it raises and give None (an unreadable file must not
    stop the actor from activating)."""
    if reader is None:
        return None

    def read() -> Any:
        try:
            return reader()
        except Exception:
            log.exception("actor %s: preload failed", address)
            return None

    return read


def _release(reply: asyncio.Future[Any], result: Any, address: str, saved: asyncio.Future[None]) -> None:
    _settle(reply, result, address, asyncio.CancelledError() if saved.cancelled() else saved.exception())


def _settle(reply: asyncio.Future[Any], result: Any, address: str, error: BaseException | None) -> None:
    if reply.done():
        return
    if error is not None:
        reply.set_exception(ActorCrashed(f"{address} could not checkpoint its state", actor=address))
    else:
        reply.set_result(result)
