"""Who is in the cluster: every node's heartbeat in a JetStream KV bucket with a per-key TTL.

A node writes its heartbeat (boot id, groups, registry entries, watched topics) every ``heartbeat`` seconds
with a TTL of ``node_ttl`` (from a thread of its own: ``_heartbeat``); nats-server (2.11+) removes the key when the TTL runs out and tells watchers with
a delete marker, so every node learns of a death within ``node_ttl`` without any other protocol. A node
leaving gracefully purges its key at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from minihermes.runtime import RegistryEntry
from minihermes.runtime.store import Scope

from ._heartbeat import HeartbeatThread
from ._wire import Signer, Subjects

log = logging.getLogger("minihermes.cluster")

FENCE_AT = 0.7
"""Share of the heartbeat TTL after which a node without a landed heartbeat stops its leased actors."""


@dataclass(slots=True)
class Peer:
    """What this node knows of another node, from its last heartbeat."""

    node: str
    boot: str
    seen: float
    groups: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    registry: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    topics: frozenset[str] = frozenset()


class Directory:
    """The live view of the other nodes, kept by watching the heartbeat bucket."""

    def __init__(
        self,
        kv: KeyValue,
        signer: Signer,
        subjects: Subjects,
        node_id: str,
        boot: str,
        ttl: float,
        on_down: Callable[[str, str], None],
    ) -> None:
        self._kv = kv
        self._signer = signer
        self._subjects = subjects
        self.node_id = node_id
        self.boot = boot
        self.ttl = ttl
        self._on_down = on_down
        self.peers: dict[str, Peer] = {}
        self._key_to_node: dict[str, str] = {}
        self._my_key = subjects.node_key(node_id)
        self._watcher: Any = None
        self.heartbeat: HeartbeatThread | None = None
        self.on_self_expired: Callable[[], None] | None = None

    # -- our heartbeat -------------------------------------------------------------------------------------

    def heartbeat_value(self, directory: dict[str, Any], topics: list[str]) -> bytes:
        """This node's signed heartbeat (written by the ``HeartbeatThread`` with the TTL)."""
        body = {"node": self.node_id, "boot": self.boot, "dir": directory, "topics": topics}
        return self._signer.seal_value(self._my_key, body)

    @property
    def heartbeat_subject(self) -> str:
        return f"$KV.{self._subjects.nodes_bucket}.{self._my_key}"

    def beat_overdue(self) -> bool:
        """Whether our heartbeat may soon expire (70% of its TTL passed since the last one that landed was
        sent): the node must stop acting on its leases before others may take them. The margin left (30%,
        checked every half heartbeat) is for this loop to notice."""
        last = self.heartbeat.last_sent_ok if self.heartbeat is not None else time.monotonic()
        return time.monotonic() - last > self.ttl * FENCE_AT

    async def leave(self) -> None:
        """Remove our heartbeat now (graceful stop): the others see us gone without waiting for the TTL."""
        self.on_self_expired = None
        await self._kv.purge(self._my_key)

    # -- the others ----------------------------------------------------------------------------------------

    async def start_watch(self) -> None:
        self._watcher = await self._kv.watchall()

    async def stop_watch(self) -> None:
        if self._watcher is not None:
            await self._watcher.stop()
            self._watcher = None

    async def watch_loop(self) -> None:
        """Apply heartbeat updates and expiries as they arrive (a task of the fabric)."""
        assert self._watcher is not None
        async for entry in self._watcher:
            if entry is None:
                continue  # the end of the initial values
            key = entry.key
            if entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
                if key == self._my_key and self.on_self_expired is not None:
                    self.on_self_expired()  # our heartbeat ran out: the others may take our leases now
                node = self._key_to_node.pop(key, None)
                if node is not None:
                    self._drop(node)
                continue
            body = self._signer.open_value(key, entry.value)
            if body is None:
                log.warning("ignoring a heartbeat without a valid cluster signature (key %s)", key)
                continue
            node, boot = str(body.get("node", "")), str(body.get("boot", ""))
            if not node or (node == self.node_id and boot == self.boot):
                continue
            self._key_to_node[key] = node
            old = self.peers.get(node)
            if old is not None and old.boot != boot:
                self._drop(node)  # restarted: what the old boot held is free
            d = body.get("dir") or {}
            self.peers[node] = Peer(
                node=node,
                boot=boot,
                seen=time.monotonic(),
                groups=d.get("groups") or {},
                registry=d.get("registry") or {},
                topics=frozenset(body.get("topics") or ()),
            )

    def sweep(self) -> None:
        """Forget peers whose heartbeat is older than the TTL (in case an expiry notice was missed)."""
        limit = time.monotonic() - self.ttl
        for node, peer in list(self.peers.items()):
            if peer.seen < limit:
                self._drop(node)

    def _drop(self, node: str) -> None:
        peer = self.peers.pop(node, None)
        if peer is not None:
            log.info("node %s (boot %s) left the cluster", node, peer.boot)
            self._on_down(node, peer.boot)

    def alive_cached(self, node: str, boot: str) -> bool:
        if node == self.node_id:
            return boot == self.boot
        peer = self.peers.get(node)
        return peer is not None and peer.boot == boot

    async def alive(self, node: str, boot: str) -> bool:
        """Authoritative: is ``node`` running with this boot id right now (its heartbeat key is there)?"""
        if node == self.node_id:
            return boot == self.boot
        key = self._subjects.node_key(node)
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return False
        body = self._signer.open_value(key, entry.value)
        return body is not None and body.get("boot") == boot

    # -- cluster-wide groups, registry and topic interest --------------------------------------------------

    def members(self, group: str, scope: Scope) -> list[str]:
        keys = [f"{scope[0]}/{scope[1]}"]
        if scope != ("system", "default"):
            keys.append("system/default")
        out: list[str] = []
        for peer in self.peers.values():
            for k in keys:
                for m in peer.groups.get(k, {}).get(group, ()):
                    if m not in out:
                        out.append(m)
        return out

    def entries(self, scope: Scope) -> list[RegistryEntry]:
        keys = [f"{scope[0]}/{scope[1]}"]
        if scope != ("system", "default"):
            keys.append("system/default")
        out: list[RegistryEntry] = []
        for peer in self.peers.values():
            for k in keys:
                for e in peer.registry.get(k, ()):
                    try:
                        out.append(
                            RegistryEntry(
                                object_id=str(e["object_id"]),
                                object_type=str(e["object_type"]),
                                category=str(e["object_category"]),
                                capabilities=[str(c) for c in e.get("capabilities", ())],
                                metadata=dict(e.get("metadata") or {}),
                            )
                        )
                    except (KeyError, TypeError):
                        continue
        return out

    def interested(self, subject: str) -> bool:
        return any(subject in p.topics for p in self.peers.values())


async def cancel_quietly(task: asyncio.Task[Any] | None) -> None:
    if task is not None and not task.done():
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass
