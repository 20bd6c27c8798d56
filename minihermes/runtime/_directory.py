"""A node's directory: process groups (``Host.join``/``members``) and the registry (``Host.register``/
``discover``), per scope. A scope sees its own entries, then the shared system services', then (in a
cluster) what the fabric knows of the other nodes'. An exiting cell leaves its groups and entries
(``forget``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._scopes import SYSTEM_SCOPE
from .store import Scope

if TYPE_CHECKING:
    from ._cell import Cell
    from ._node import Node


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


class Directory:
    """Groups and registry entries of the cells on one node. The fabric is read from the node on each
    call: it is set after the node is built."""

    __slots__ = ("_node", "groups", "registry")

    def __init__(self, node: Node) -> None:
        self._node = node
        self.groups: dict[Scope, dict[str, list[str]]] = {}
        self.registry: dict[Scope, dict[str, RegistryEntry]] = {}

    def _changed(self) -> None:
        fabric = self._node.fabric
        if fabric is not None:
            fabric.directory_changed()

    # -- groups -------------------------------------------------------------------------------------------

    def join(self, cell: Cell, group: str, scope: Scope) -> None:
        members = self.groups.setdefault(scope, {}).setdefault(group, [])
        if cell.address not in members:
            members.append(cell.address)
        cell.groups.add((scope, group))
        self._changed()

    def leave(self, cell: Cell, group: str, scope: Scope) -> None:
        members = self.groups.get(scope, {}).get(group, [])
        if cell.address in members:
            members.remove(cell.address)
        cell.groups.discard((scope, group))
        self._changed()

    def members(self, group: str, scope: Scope) -> list[str]:
        """Members visible from scope: the scope's own, then the shared system services, then other nodes'."""
        out = list(self.groups.get(scope, {}).get(group, ()))
        if scope != SYSTEM_SCOPE:
            out.extend(m for m in self.groups.get(SYSTEM_SCOPE, {}).get(group, ()) if m not in out)
        fabric = self._node.fabric
        if fabric is not None:
            out.extend(m for m in fabric.remote_members(group, scope) if m not in out)
        return out

    # -- registry -----------------------------------------------------------------------------------------

    def register(self, cell: Cell, entry: RegistryEntry, scope: Scope) -> None:
        self.registry.setdefault(scope, {})[entry.object_id] = entry
        cell.registered.add(scope)
        self._changed()

    def discover(
        self, scope: Scope, category: str | None, capability: str | None, object_type: str | None = None
    ) -> list[RegistryEntry]:
        pools: Iterable[dict[str, RegistryEntry]] = [self.registry.get(scope, {})]
        if scope != SYSTEM_SCOPE:
            pools = [*pools, self.registry.get(SYSTEM_SCOPE, {})]
        fabric = self._node.fabric
        if fabric is not None:
            seen = {oid for pool in pools for oid in pool}
            remote = {e.object_id: e for e in fabric.remote_entries(scope) if e.object_id not in seen}
            pools = [*pools, remote]
        return [
            e
            for pool in pools
            for e in pool.values()
            if (category is None or e.category == category)
            and (capability is None or capability in e.capabilities)
            and (object_type is None or e.object_type == object_type)
        ]

    # -- the node's side -----------------------------------------------------------------------------------

    def local(self) -> dict[str, Any]:
        """This node's groups and registry entries, by scope (what a fabric shares with other nodes)."""
        groups = {
            f"{s[0]}/{s[1]}": {g: list(m) for g, m in table.items() if m} for s, table in self.groups.items()
        }
        registry = {
            f"{s[0]}/{s[1]}": [e.to_dict() for e in table.values()] for s, table in self.registry.items()
        }
        return {
            "groups": {k: v for k, v in groups.items() if v},
            "registry": {k: v for k, v in registry.items() if v},
        }

    def forget(self, cell: Cell) -> None:
        """An exited cell leaves every group it joined and its registry entries go."""
        if cell.groups or cell.registered:
            self._changed()
        for scope, group in cell.groups:
            members = self.groups.get(scope, {}).get(group)
            if members and cell.address in members:
                members.remove(cell.address)
        cell.groups.clear()
        for scope in cell.registered:
            self.registry.get(scope, {}).pop(cell.address, None)
        cell.registered.clear()
