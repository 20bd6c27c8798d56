"""Activation of dynamic actors and what surrounds it: a cell is made for a key on first message
(``activate``), restores its checkpoint (``restore``: migrated if older, quarantined if corrupt), is
deactivated when idle (``arm_idle``; mail that raced the deactivation activates it again), is removed and
its mail forwarded when a newer lease holder fenced it out (``fenced_out``), and is sent ``__resume__``
after a restart if it was marked durable-active (``mark_durable``/``resume_durable``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._actor import Actor
from ._cell import FENCED_OUT, Cell, CellKey
from ._errors import ActorError, ActorNotFound
from ._mailbox import DEACTIVATE, Envelope
from ._scopes import RUNTIME_SCOPE
from ._spec import ActorSpec
from ._supervisor import DynamicChild
from .store import Checkpoint, Scope

if TYPE_CHECKING:
    from ._node import Node

log = logging.getLogger("minihermes.runtime")

FENCE_LOOP_WINDOW = 5.0
"""Seconds within which a second fence-out of one actor on a node fails its messages instead of forwarding."""


class Activation:
    __slots__ = ("_fenced", "_node")

    def __init__(self, node: Node) -> None:
        self._node = node
        self._fenced: dict[CellKey, float] = {}
        """When each recently fenced-out actor was (``fenced_out``), to stop a forwarding loop."""

    def activate(self, spec: ActorSpec, scope: Scope, key: str) -> Cell:
        node = self._node
        owner = node._owners.get(spec.name)
        if not spec.dynamic or not isinstance(owner, DynamicChild) or not owner.running:
            raise ActorNotFound(f"actor '{spec.name}' is not running", actor=spec.name)
        cell = Cell(node, spec, scope, key, owner)
        if node.fabric is not None:
            # Leased here: the cell claims its checkpoint with the lease's revision and fences every save.
            cell.fence = node.fabric.fence_of(cell.ck)
        node._cells[cell.ck] = cell
        cell.start()
        return cell

    # -- restore ------------------------------------------------------------------------------------------

    async def restore(
        self, cell: Cell, inst: Actor, reader: Callable[[], Any] | None = None
    ) -> tuple[bool, Any]:
        """Load the cell's checkpoint into inst; also run ``reader`` (``Actor.preload``), in the same trip
        to a store thread where the store can. Returns (whether the saved state was migrated, so that it is
        saved again; what ``reader`` returned). A leased cell claims its checkpoint with its fence
        (``FencedOut`` if a newer holder has: the activation fails)."""
        checkpoints = self._node.store.checkpoints
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
        store = self._node.store
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
            await store.quarantine.put("checkpoint", cell.scope, cell.address, reason, kept)
            await store.checkpoints.delete(cell.scope, cell.address)
            await store.events.append(
                RUNTIME_SCOPE,
                "incidents",
                {"kind": "quarantined", "actor": cell.address, "scope": list(cell.scope), "reason": reason},
            )
            self._node.metrics.incr("quarantined_total")
            fresh = cls()
            for name in cls._state_fields:
                setattr(inst, name, getattr(fresh, name))
        return migrated

    # -- deactivation -------------------------------------------------------------------------------------

    def arm_idle(self, cell: Cell) -> None:
        """(Re)arm deactivation for when the cell will have been idle for idle_timeout."""
        idle = cell.spec.idle_timeout
        if not cell.spec.virtual or not idle:
            return
        if cell.idle_timer is not None:
            cell.idle_timer.cancel()
        remaining = idle - (self._node.clock.monotonic() - cell.last_active)
        cell.idle_timer = self._node.clock.call_later(max(0.0, remaining), cell.mailbox.put, DEACTIVATE)

    def deactivated(self, cell: Cell) -> None:
        """The cell deactivated when idle: it goes; mail that arrived meanwhile lands on a fresh one."""
        self._node._remove(cell)
        leftovers = cell.mailbox.envelopes()
        if leftovers:
            fresh = self.activate(cell.spec, cell.scope, cell.key)
            for env in leftovers:
                fresh.mailbox.put(env)

    # -- fenced out ---------------------------------------------------------------------------------------

    def fenced_out(self, cell: Cell) -> None:
        """A newer holder of the actor's lease claimed its checkpoint: this node lost the lease without
        noticing (frozen past its heartbeat). The cell goes (its lease with it) and what was queued for it is
        forwarded, through the fabric, to whichever node holds the actor now."""
        node = self._node
        node.metrics.incr("actor_fenced_total", actor=cell.spec.name)
        leftovers = cell.mailbox.envelopes()
        cell.mailbox.drain()
        node._remove(cell)
        now = node.clock.monotonic()
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
        fabric = node.fabric
        for env in leftovers:
            node._release(env)
            if fabric is None or again:  # fences come from a fabric's leases: nothing to forward to
                if env.reply is not None and not env.reply.done():
                    env.reply.set_exception(ActorNotFound(f"{cell.address} is gone ({FENCED_OUT})"))
                continue
            if env.reply is None:
                fabric.send(cell.address, env.op, env.payload, env.ctx, env.system)
            else:
                node.spawn(self._forward(cell.address, env, env.reply))

    async def _forward(self, target: str, env: Envelope, reply: asyncio.Future[Any]) -> None:
        fabric = self._node.fabric
        assert fabric is not None
        try:
            result = await fabric.ask(target, env.op, env.payload, None, env.ctx)
        except Exception as e:  # the fabric answers with ActorErrors; anything else reaches the caller as is
            if not reply.done():
                reply.set_exception(e)
        else:
            if not reply.done():
                reply.set_result(result)

    # -- durable activations (workflows resume after a restart) -------------------------------------------

    async def mark_durable(self, cell: Cell, active: bool) -> None:
        kv = self._node.store.kv
        key = f"resume:{cell.scope[0]}:{cell.scope[1]}:{cell.address}"
        if active:
            await kv.put(
                RUNTIME_SCOPE,
                key,
                {"tenant": cell.scope[0], "namespace": cell.scope[1], "address": cell.address},
            )
        else:
            await kv.delete(RUNTIME_SCOPE, key)

    async def resume_durable(self) -> None:
        node = self._node
        for key, entry in await node.store.kv.list(RUNTIME_SCOPE, "resume:"):
            try:
                ctx = node.system_context_for((entry["tenant"], entry["namespace"]))
                node.deliver_system(entry["address"], "__resume__", {}, ctx)
            except (KeyError, TypeError, ActorError) as e:
                log.error("cannot resume %s: %s", key, e)
