"""Monitors and links between the cells of one node, as in Erlang: a monitor's watcher gets ``__DOWN__``
when its target exits (or at once, ``noproc``, if there is none); linked cells die together on an abnormal
exit unless one traps exits, which gets ``__EXIT__`` instead. Both stay within one node: in a cluster,
``monitor``/``link`` of an actor active elsewhere answer ``actor_not_found``."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ._context import RequestContext, current_context
from ._errors import ActorError, ActorNotFound, InvalidArgument
from ._scopes import SYSTEM_SCOPE

if TYPE_CHECKING:
    from ._cell import Cell, CellKey
    from ._node import Node


class Relations:
    __slots__ = ("_cells", "_node")

    def __init__(self, node: Node) -> None:
        self._node = node
        self._cells = node._cells

    def monitor(self, watcher: Cell, target: str) -> str:
        ref = uuid.uuid4().hex[:16]
        ctx = current_context()
        try:
            cell = self._find(target, ctx)
        except ActorError:
            self._notify(
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
        other = self._find(target, current_context())
        if other is cell:
            raise InvalidArgument("an actor cannot link to itself", field="target")
        cell.links.add(other.ck)
        other.links.add(cell.ck)

    def unlink(self, cell: Cell, target: str) -> None:
        other = self._find(target, current_context())
        cell.links.discard(other.ck)
        other.links.discard(cell.ck)

    def cell_down(self, cell: Cell, reason: str, abnormal: bool) -> None:
        """A cell exited: its watchers get ``__DOWN__``, it stops watching, and its links are cut (an abnormal
        exit kills each linked cell, or sends it ``__EXIT__`` if it traps exits)."""
        for ref, watcher in list(cell.monitors.items()):
            self._notify(
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
                self._notify(other_ck, "__EXIT__", {"exit_from": cell.address, "exit_reason": reason})
            else:
                self._node.spawn(other.kill(f"linked actor {cell.address} exited: {reason}", abnormal=True))

    def _find(self, target: str, ctx: RequestContext) -> Cell:
        """Find a running cell by address (activating a virtual one), without an op."""
        node = self._node
        name, _, key = target.partition("/")
        spec = node.spec(name)
        if spec.virtual and not key:
            raise InvalidArgument(f"'{name}' is keyed: give '{name}/<key>'", field="target")
        scope = ctx.scope if spec.dynamic else SYSTEM_SCOPE
        cell = self._cells.get((scope, name, key))
        if cell is None or cell.removed or cell.task is None or cell.task.done():
            if not spec.dynamic:
                raise ActorNotFound(f"actor '{target}' is not running", actor=target)
            if node.fabric is not None and (cell is None or cell.removed):
                # Activating it here would bypass its cluster lease; monitors and links stay in one node.
                raise ActorNotFound(f"actor '{target}' is not active on this node", actor=target)
            cell = node._activate(spec, scope, key)
        return cell

    def _notify(self, ck: CellKey, op: str, payload: dict[str, Any]) -> None:
        """A runtime message to the cell at ck, if its actor handles op (dropped if it cannot land)."""
        node = self._node
        scope, name, key = ck
        spec = node._specs.get(name)
        if spec is None or op not in spec.cls._handlers:
            return
        node.deliver_system(f"{name}/{key}" if key else name, op, payload, node.system_context_for(scope))
