"""The two sides of a cluster fabric, and fabrics by name.

``Fabric`` is what a node calls on its fabric; ``NodePort`` is what a fabric may call on its node (``Node``
implements it with public methods). A fabric is a plug-in over the runtime: the runtime names the built-in
one as a lazy "module:attribute" string and imports no cluster code until a clustered node is built.

    register_fabric("mine", "mypkg.fabric:MyFabric.from_model")   # factory(cluster_model) -> Fabric
    node.fabric = open_fabric(config.model.cluster.fabric, config.model.cluster)
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ._cell import CellKey
from ._context import RequestContext
from ._directory import RegistryEntry
from ._pubsub import Bridge
from .store import Scope

if TYPE_CHECKING:
    from ._config import ClusterModel
    from ._metrics import Metrics
    from ._node import NodeOptions
    from ._pubsub import PubSub
    from .store import Store


class NodePort(Protocol):
    """What a fabric may call on its node (``Fabric.start`` receives it). Everything here is public on
    ``Node``; a fabric needs nothing else of the runtime's internals."""

    node_id: str
    boot_id: str
    """Changes with every start of the node's process (a restarted node is a new member)."""
    options: NodeOptions
    store: Store
    metrics: Metrics
    pubsub: PubSub

    @property
    def accepting(self) -> bool:
        """Whether the node takes new work (false once it is stopping)."""
        ...

    def lease_key(self, target: str, payload: dict[str, Any] | None, ctx: RequestContext) -> CellKey | None:
        """The cell key a message for target lands on if its actor is leased cluster-wide, else None."""
        ...

    def is_active_here(self, ck: CellKey) -> bool: ...

    def activate_here(self, ck: CellKey) -> None:
        """Activate a dynamic actor on this node (the fabric holds its lease)."""
        ...

    def evict_here(self, ck: CellKey, reason: str) -> None:
        """The fabric lost ck's lease: the actor stops here at once and its queued asks fail."""
        ...

    async def ask(
        self,
        target: str,
        op: str,
        payload: dict[str, Any] | None = None,
        timeout: float | None = None,
        *,
        ctx: RequestContext | None = None,
    ) -> Any: ...

    def send(
        self,
        target: str,
        op: str,
        payload: dict[str, Any] | None = None,
        *,
        ctx: RequestContext | None = None,
    ) -> None: ...

    def deliver_system(self, target: str, op: str, payload: dict[str, Any], ctx: RequestContext) -> None:
        """A runtime cast (timers, reminders, DOWN/EXIT, forwarded ones): never raises, drops what cannot land."""
        ...

    def local_directory(self) -> dict[str, Any]:
        """This node's groups and registry entries, by scope (what the fabric shares with other nodes)."""
        ...

    def wake_channel(self, scope: Scope, channel: str) -> None: ...
    def wake_channels(self) -> None: ...
    async def resume_durable(self) -> None: ...
    async def rearm_reminders(self) -> None: ...


class Fabric(Protocol):
    """What a node needs from a cluster fabric (``minihermes.cluster``). A node without one runs alone and
    never calls it: the in-node paths do not change.

    Dynamic actors (virtual and per-tenant) are active on at most one node of the cluster: when a message is
    for one that is not active here, the node hands it to the fabric, which takes the actor's lease and
    calls ``NodePort.activate_here`` or forwards the message to the node holding the lease."""

    pubsub_bridge: Bridge | None

    async def start(self, node: NodePort) -> None: ...
    async def stop(self) -> None: ...
    async def ask(
        self, target: str, op: str, payload: dict[str, Any] | None, timeout: float | None, ctx: RequestContext
    ) -> Any: ...
    def send(
        self, target: str, op: str, payload: dict[str, Any], ctx: RequestContext, system: bool
    ) -> None: ...
    def cell_removed(self, ck: CellKey) -> None:
        """A dynamic actor's cell on this node went (deactivated, stopped, fenced): its lease may go."""
        ...

    def fence_of(self, ck: CellKey) -> int | None:
        """The checkpoint fence of the lease this node holds for ``ck`` (increasing with every new holder), or
        None when it holds none."""
        ...

    def directory_changed(self) -> None: ...
    def remote_members(self, group: str, scope: Scope) -> list[str]: ...
    def remote_entries(self, scope: Scope) -> list[RegistryEntry]: ...
    def channel_sent(self, scope: Scope, channel: str) -> None: ...
    def reminders_changed(self) -> None: ...


FabricFactory = Callable[["ClusterModel"], Fabric]
"""Called with the ``[cluster]`` section; returns an unstarted fabric (``node.fabric = ...``)."""

# Built-ins are "module:attribute" strings (the attribute may be dotted), imported on first use: the runtime
# imports no fabric (nor its client library) unless a clustered node is built.
_fabrics: dict[str, FabricFactory | str] = {
    "nats": "minihermes.cluster:Cluster.from_model",
}


def register_fabric(name: str, factory: FabricFactory | str, *, replace: bool = False) -> None:
    """Make a fabric available under name (``[cluster] fabric = name``): a factory or a "module:attribute"."""
    if not isinstance(name, str) or not name:
        raise ValueError("fabric name must be a non-empty str")
    if name in _fabrics and not replace:
        raise ValueError(f"fabric {name!r} is already registered (pass replace=True to override)")
    _fabrics[name] = factory


def fabric_names() -> list[str]:
    return sorted(_fabrics)


def get_fabric(name: str) -> FabricFactory:
    """The factory registered under name; ValueError with the known names (and a suggestion) if none."""
    entry = _fabrics.get(name)
    if entry is None:
        known = fabric_names()
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown cluster fabric {name!r}.{hint} Known fabrics: {', '.join(known)}")
    if isinstance(entry, str):
        module_name, _, attribute = entry.partition(":")
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
        factory: FabricFactory = found
        _fabrics[name] = factory
        return factory
    return entry


def open_fabric(name: str, settings: ClusterModel) -> Fabric:
    """Build the fabric registered under name from a ``[cluster]`` section (not started: the node starts it)."""
    return get_fabric(name)(settings)
