"""Leases: which node a dynamic actor (a virtual actor such as ``agent/<session>``, or a per-tenant
service) is active on. At most one node at a time.

A lease is a key in a JetStream KV bucket naming the holder node and its boot id. It needs no renewal of its
own: it is valid while the holder's heartbeat (``Directory``) is, so a node renews all its leases with one
heartbeat. Taking a lease is a compare-and-set on the key's revision (create if absent; replace only the
revision we read, and only after checking the holder's heartbeat is gone), so two nodes racing for the same
actor cannot both win. A node releases a lease when its actor deactivates and all of them on graceful stop;
a node that dies holds its leases until its heartbeat expires, then the next message takes them over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from nats.js.errors import APIError, KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from minihermes.runtime import CellKey

from ._directory import Directory
from ._wire import Signer, Subjects

log = logging.getLogger("minihermes.cluster")

_WRONG_REVISION = (10071, 10164)
"""JetStream's "wrong last sequence" codes: the key changed since the revision we hold."""


@dataclass(frozen=True, slots=True)
class Holder:
    node: str
    boot: str


class LeaseTable:
    def __init__(self, kv: KeyValue, signer: Signer, directory: Directory) -> None:
        self._kv = kv
        self._signer = signer
        self._dir = directory
        self.me = Holder(directory.node_id, directory.boot)
        self.held: dict[str, tuple[CellKey, int]] = {}
        """Our leases: KV key -> (cell key, revision we wrote)."""
        self._owners: dict[str, Holder] = {}
        """Cache of other nodes' leases (dropped when the holder leaves or does not answer)."""
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def forget(self, ck: CellKey) -> None:
        self._owners.pop(Subjects.lease_key(ck), None)

    def forget_node(self, node: str) -> None:
        for key in [k for k, h in self._owners.items() if h.node == node]:
            del self._owners[key]

    async def claim(self, ck: CellKey, on_mine: Callable[[], None], *, fresh: bool = False) -> Holder:
        """The holder of the actor's lease, taking it if it is free or its holder is dead. When it is (or
        becomes) ours, ``on_mine`` runs while the lease cannot be released (it activates the actor)."""
        key = Subjects.lease_key(ck)
        if not fresh and key not in self.held:
            cached = self._owners.get(key)
            if cached is not None and self._dir.alive_cached(cached.node, cached.boot):
                return cached
        async with self._lock(key):
            holder = await self._claim_locked(key, ck)
            if holder == self.me:
                on_mine()
            else:
                self._owners[key] = holder
            return holder

    async def _claim_locked(self, key: str, ck: CellKey) -> Holder:
        if key in self.held:
            return self.me
        (tenant, ns), name, akey = ck
        mine = {"node": self.me.node, "boot": self.me.boot, "actor": f"{tenant}/{ns}/{name}/{akey}"}
        for _ in range(16):
            try:
                entry = await self._kv.get(key)
            except (KeyNotFoundError, KeyDeletedError):
                entry = None
            body = self._signer.open_value(key, entry.value) if entry is not None else None
            if entry is None or body is None:
                # Free (or a value we cannot trust, which we overwrite only at the revision we read).
                try:
                    if entry is None:
                        rev = await self._kv.create(key, self._signer.seal_value(key, dict(mine)))
                    else:
                        rev = await self._kv.update(
                            key, self._signer.seal_value(key, dict(mine)), last=entry.revision
                        )
                except KeyWrongLastSequenceError:
                    continue
                self.held[key] = (ck, rev)
                return self.me
            holder = Holder(str(body.get("node")), str(body.get("boot")))
            if holder == self.me:
                self.held[key] = (ck, int(entry.revision or 0))
                return self.me
            if await self._dir.alive(holder.node, holder.boot):
                return holder
            try:
                rev = await self._kv.update(
                    key, self._signer.seal_value(key, dict(mine)), last=entry.revision
                )
            except KeyWrongLastSequenceError:
                continue  # another node took it first: read who
            log.info("took over %s from dead node %s", mine["actor"], holder.node)
            self.held[key] = (ck, rev)
            return self.me
        raise RuntimeError(f"lease {key} kept changing under us")

    async def release(self, ck: CellKey, still_active: Callable[[], bool]) -> None:
        """Give the lease back unless the actor became active here again meanwhile."""
        key = Subjects.lease_key(ck)
        async with self._lock(key):
            if still_active() or key not in self.held:
                return
            _, rev = self.held.pop(key)
            try:
                await self._kv.delete(key, last=rev)
            except APIError as e:
                if e.err_code not in _WRONG_REVISION:
                    raise
                log.warning("lease of %s was taken over while this node held it", ck)
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            del self._locks[key]

    async def release_all(self) -> int:
        """Graceful stop: every lease we hold, at once."""
        held, self.held = self.held, {}
        results = await asyncio.gather(
            *(self._kv.delete(key, last=rev) for key, (_, rev) in held.items()), return_exceptions=True
        )
        return sum(1 for r in results if r is True)

    def drop_all(self) -> list[CellKey]:
        """Self-fencing: our heartbeat lapsed, so others may have taken our leases; stop claiming them."""
        held, self.held = self.held, {}
        return [ck for ck, _ in held.values()]
