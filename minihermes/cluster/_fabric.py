"""The cluster fabric: nodes over NATS (JetStream for the heartbeat and lease buckets, core NATS for
request/reply and notices), plugged into a ``Node`` as its ``fabric``.

- ``ask``/``send`` to a dynamic actor (virtual or per-tenant) that is not active here: take its lease and
  activate it here, or forward the message to the node holding the lease (request/reply carrying the
  request context); retried when that node is stopping, has moved the actor or has died.
- Groups, registry entries and watched topics travel in the heartbeats, so ``members``/``discover`` see the
  whole cluster and topic events cross to nodes that have watchers.
- Channel sends and reminder changes are announced, so receivers and reminder timers on every node wake.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from minihermes.runtime import (
    ActorError,
    AskTimeout,
    Bridge,
    CellKey,
    NodePort,
    RegistryEntry,
    RequestContext,
    ShuttingDown,
)
from minihermes.runtime.store import Scope

from ._directory import Directory, cancel_quietly
from ._heartbeat import HeartbeatThread
from ._leases import Holder, LeaseTable
from ._settings import ClusterSettings
from ._topics import TopicBridge
from ._wire import Signer, Subjects, Unauthenticated

if TYPE_CHECKING:
    from minihermes.runtime import ClusterModel

log = logging.getLogger("minihermes.cluster")

_RETRY_CODES = frozenset({"not_owner", "shutting_down"})


class ClusterUnavailable(ActorError):
    code = "cluster_unavailable"


class NodeDown(ActorError):
    """The node holding the actor died while handling this ask (the next ask activates it elsewhere)."""

    code = "node_down"


class _Retry(Exception):
    """The holder could not take the message (gone, stopping, moved): read the lease again and retry."""


class Cluster:
    """A node's membership of a cluster: ``node.fabric = Cluster(settings)`` before ``node.start()``. It
    reaches its node only through ``NodePort`` (``minihermes.runtime``)."""

    @classmethod
    def from_model(cls, model: ClusterModel) -> Cluster:
        """The fabric for a ``[cluster]`` section (registered as fabric ``nats``: ``build_node`` calls it)."""
        return cls(ClusterSettings.from_model(model))

    def __init__(self, settings: ClusterSettings) -> None:
        self.settings = settings
        self.subjects = Subjects(settings.name)
        self.signer = Signer(settings.secret)
        self.pubsub_bridge: Bridge | None = TopicBridge(self)
        self._node: NodePort | None = None
        self._nc: Client | None = None
        self._dir: Directory | None = None
        self._leases: LeaseTable | None = None
        self._fence_epoch = 0
        self._hb: HeartbeatThread | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pending: dict[str, set[asyncio.Future[Any]]] = {}
        self._down: set[asyncio.Future[Any]] = set()
        self._dir_dirty = asyncio.Event()
        self._outbox: asyncio.Queue[tuple[str, bytes, dict[str, str]]] = asyncio.Queue(10_000)
        self.stats = {"forwarded": 0, "served": 0, "rejected": 0, "takeovers": 0}

    # -- lifecycle ----------------------------------------------------------------------------------------

    @property
    def node(self) -> NodePort:
        assert self._node is not None, "the cluster fabric is not started"
        return self._node

    @property
    def leases(self) -> LeaseTable:
        assert self._leases is not None, "the cluster fabric is not started"
        return self._leases

    @property
    def directory(self) -> Directory:
        assert self._dir is not None, "the cluster fabric is not started"
        return self._dir

    async def start(self, node: NodePort) -> None:
        self._node = node
        s = self.settings
        self._nc = nc = await nats.connect(
            **s.connect_options(node.node_id), error_cb=self._nats_error, disconnected_cb=self._nats_down
        )
        js = nc.jetstream(timeout=max(2.0, s.node_ttl))
        nodes = await _bucket(
            js, KeyValueConfig(bucket=self.subjects.nodes_bucket, history=1, limit_marker_ttl=s.node_ttl)
        )
        leases = await _bucket(js, KeyValueConfig(bucket=self.subjects.leases_bucket, history=1))
        # Fences are the lease's revision within the bucket's lifetime: a bucket made anew (revisions from 1
        # again) still fences above everything the old one handed out.
        created = (await js.stream_info(f"KV_{self.subjects.leases_bucket}")).created
        self._fence_epoch = int(created.timestamp()) if created is not None else 0
        self._dir = Directory(
            nodes, self.signer, self.subjects, node.node_id, node.boot_id, s.node_ttl, self._node_down
        )
        self._leases = LeaseTable(leases, self.signer, self._dir)
        self._dir.on_self_expired = self._fence
        await self._dir.start_watch()
        self.spawn(self._dir.watch_loop())
        await nc.subscribe(self.subjects.requests(node.node_id), cb=self._on_request)
        await nc.subscribe(self.subjects.channels, cb=self._on_channel)
        await nc.subscribe(self.subjects.reminders, cb=self._on_reminders)
        self._hb = HeartbeatThread(
            s.connect_options(node.node_id),
            self._dir.heartbeat_subject,
            s.heartbeat,
            s.node_ttl,
            stall_limit=max(10.0, 2 * s.node_ttl),
        )
        await self._hb.start(self._dir.heartbeat_value(node.local_directory(), self._watched_topics()))
        self._dir.heartbeat = self._hb
        self.spawn(self._heartbeat_loop())
        self.spawn(self._reminder_loop())
        self.spawn(self._pump())
        log.info("node %s joined cluster %s at %s", node.node_id, s.name, s.nats_url)

    async def stop(self) -> None:
        """After the node's actors stopped: release every lease, leave, disconnect."""
        if self._nc is None:
            return
        for t in list(self._tasks):
            if t.get_name().startswith("mh-release"):
                await asyncio.wait({t}, timeout=self.settings.node_ttl)
        if self._hb is not None:
            await asyncio.to_thread(self._hb.stop)  # no heartbeat may land after we leave
        released = await self.leases.release_all()
        # Each step is a courtesy to the other nodes (the heartbeat's TTL ends our membership anyway), so a
        # failure of one (the connection is already gone) does not keep the node from stopping.
        for step in (self.directory.leave, self.directory.stop_watch):
            try:
                await step()
            except Exception as e:
                log.warning("leaving the cluster: %s failed: %r", step.__name__, e)
        for t in list(self._tasks):
            await cancel_quietly(t)
        nc, self._nc = self._nc, None
        if not nc.is_closed:
            try:
                await nc.drain()
            except Exception as e:
                log.warning("leaving the cluster: drain failed: %r", e)
        log.info("node %s left the cluster (%d leases released)", self.node.node_id, released)

    def status(self) -> dict[str, Any]:
        d = self.directory
        return {
            "cluster": self.settings.name,
            "node": d.node_id,
            "boot": d.boot,
            "peers": sorted(d.peers),
            "leases": len(self.leases.held),
            **self.stats,
        }

    def spawn(self, coro: Any, name: str = "mh-fabric") -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)
        return task

    async def _nats_error(self, e: Exception) -> None:
        log.warning("nats: %r", e)

    async def _nats_down(self) -> None:
        if self._nc is not None:  # not while we close it ourselves
            log.warning("nats: disconnected (reconnecting)")

    # -- routing (the Node side) ---------------------------------------------------------------------------

    async def ask(
        self, target: str, op: str, payload: dict[str, Any] | None, timeout: float | None, ctx: RequestContext
    ) -> Any:
        node = self.node
        limit = node.options.ask_timeout if timeout is None else timeout
        return await self._route("ask", target, op, payload or {}, ctx, limit)

    def send(self, target: str, op: str, payload: dict[str, Any], ctx: RequestContext, system: bool) -> None:
        limit = self.node.options.ask_timeout
        self.spawn(self._send(target, op, payload, ctx, system, limit), "mh-send")

    async def _send(
        self, target: str, op: str, payload: dict[str, Any], ctx: RequestContext, system: bool, limit: float
    ) -> None:
        try:
            await self._route("sys" if system else "send", target, op, payload, ctx, limit)
        except ActorError as e:
            self.node.metrics.incr("cluster_sends_dropped_total")
            log.warning("cast %s to %s not delivered: %s", op, target, e.message)

    async def _route(
        self, kind: str, target: str, op: str, payload: dict[str, Any], ctx: RequestContext, limit: float
    ) -> Any:
        node = self.node
        ck = node.lease_key(target, payload, ctx)
        assert ck is not None, f"{target} is not a leased actor"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        fresh, backoff = False, 0.02
        while True:
            holder = await self._claim(ck, fresh)
            remaining = deadline - loop.time()
            if holder == self.leases.me:
                return await self._local(kind, target, op, payload, ctx, max(remaining, 0.001))
            if remaining <= 0:
                break
            try:
                self.stats["forwarded"] += 1
                return await self._request(holder, kind, target, op, payload, ctx, remaining)
            except _Retry:
                self.leases.forget(ck)
                fresh = True
                await asyncio.sleep(min(backoff, max(0.0, deadline - loop.time())))
                backoff = min(backoff * 2, 0.25)
            if loop.time() >= deadline:
                break
        raise AskTimeout(f"{target}.{op} did not answer within {limit:g}s", actor=target, op=op)

    async def _claim(self, ck: CellKey, fresh: bool) -> Holder:
        node = self.node
        try:
            return await self.leases.claim(ck, lambda: node.activate_here(ck), fresh=fresh)
        except (TimeoutError, nats.errors.Error) as e:
            raise ClusterUnavailable(f"cluster leases unavailable: {e!r}") from None

    async def _local(
        self, kind: str, target: str, op: str, payload: dict[str, Any], ctx: RequestContext, timeout: float
    ) -> Any:
        node = self.node
        if kind == "ask":
            return await node.ask(target, op, payload, timeout, ctx=ctx)
        if kind == "send":
            node.send(target, op, payload, ctx=ctx)
        else:
            node.deliver_system(target, op, payload, ctx)
        return {"status": "accepted"}

    async def _request(
        self,
        holder: Holder,
        kind: str,
        target: str,
        op: str,
        payload: dict[str, Any],
        ctx: RequestContext,
        timeout: float,
    ) -> Any:
        assert self._nc is not None
        subject = self.subjects.requests(holder.node)
        body = {
            "k": kind,
            "t": target,
            "o": op,
            "p": payload,
            "c": ctx.to_dict(),
            "to": timeout,
            "f": self.directory.node_id,
        }
        data, headers = self.signer.seal(subject, body)
        # The remote side answers ask timeouts itself; the margin lets its answer arrive first.
        task = asyncio.ensure_future(self._nc.request(subject, data, timeout=timeout + 0.5, headers=headers))
        pending = self._pending.setdefault(holder.node, set())
        pending.add(task)
        try:
            msg = await task
        except NoRespondersError:
            raise _Retry() from None
        except NatsTimeout:
            raise AskTimeout(
                f"{target}.{op} did not answer within {timeout:g}s", actor=target, op=op
            ) from None
        except asyncio.CancelledError:
            if task not in self._down:
                raise
            if kind == "ask":
                # It may have run before its node died: the caller decides whether asking again is safe.
                raise NodeDown(
                    f"node {holder.node} died while handling {target}.{op}; it may or may not have run",
                    actor=target,
                    op=op,
                ) from None
            raise _Retry() from None  # a cast is at least once: deliver it to the new holder
        finally:
            pending.discard(task)
            self._down.discard(task)
        try:
            reply = self.signer.open(msg.subject, msg.data, msg.headers)
        except Unauthenticated:
            raise ClusterUnavailable("a reply without a valid cluster signature") from None
        err = reply.get("e")
        if err is not None:
            e = ActorError.from_dict(err)
            if e.code in _RETRY_CODES:
                raise _Retry()
            raise e
        return reply.get("r")

    # -- serving other nodes' requests ---------------------------------------------------------------------

    async def _on_request(self, msg: Msg) -> None:
        # nats-py runs one subscription's callbacks one at a time: serve each request in its own task.
        self.spawn(self._serve(msg), "mh-serve")

    async def _serve(self, msg: Msg) -> None:
        node = self.node
        try:
            body = self.signer.open(msg.subject, msg.data, msg.headers)
        except Unauthenticated as e:
            self.stats["rejected"] += 1
            node.metrics.incr("cluster_rejected_total")
            log.warning("rejected a fabric request: %s", e.message)
            return  # nothing is answered to a stranger
        self.stats["served"] += 1
        reply: dict[str, Any]
        if self.directory.beat_overdue():
            self._fence()
        try:
            if not node.accepting:
                raise ShuttingDown("the node is shutting down")
            kind, target, op = str(body["k"]), str(body["t"]), str(body["o"])
            payload = body.get("p") or {}
            ctx = RequestContext.from_dict(body.get("c") or {})
            ck = node.lease_key(target, payload, ctx)
            if ck is not None and not node.is_active_here(ck):
                holder = await self._claim(ck, fresh=True)
                if holder != self.leases.me:
                    raise ActorError(f"{target} is active on {holder.node}", code="not_owner")
            timeout = float(body.get("to") or node.options.ask_timeout)
            reply = {"r": await self._local(kind, target, op, payload, ctx, timeout)}
        except ActorError as e:
            reply = {"e": e.to_dict()}
        except (KeyError, TypeError, ValueError) as e:
            reply = {"e": {"error": {"code": "invalid_argument", "message": f"bad fabric request: {e}"}}}
        if msg.reply and self._nc is not None:
            data, headers = self.signer.seal(msg.reply, reply)
            await self._nc.publish(msg.reply, data, headers=headers)

    # -- leases, membership ----------------------------------------------------------------------------------

    def fence_of(self, ck: CellKey) -> int | None:
        if self._leases is None:
            return None
        held = self._leases.held.get(Subjects.lease_key(ck))
        return fence(self._fence_epoch, held[1]) if held is not None else None

    def cell_removed(self, ck: CellKey) -> None:
        if self._leases is None:
            return
        node = self.node
        self.spawn(self.leases.release(ck, lambda: node.is_active_here(ck)), "mh-release")

    def _node_down(self, node_id: str, boot: str) -> None:
        if self._leases is not None:
            self._leases.forget_node(node_id)
        for task in list(self._pending.get(node_id, ())):
            self._down.add(task)
            task.cancel()
        self.spawn(self._take_over(node_id, boot), "mh-take-over")

    async def _take_over(self, node_id: str, boot: str) -> None:
        """What a dead node held comes back on the survivors now, not when something next touches it."""
        node = self.node
        # Channel messages it had received and not acked go back to the queue, and receivers waiting here
        # (a task worker's long poll) look again now rather than at their next poll of the store. The
        # release does not say which channels it touched: every channel with a receiver here is woken, one
        # extra read each per dead node. Each survivor wakes its own.
        if await node.store.channels.release_receipt_prefix(f"{node_id}:{boot}:"):
            node.wake_channels()
        # Actors it ran that are marked durable-active (a running workflow, an agent turn in flight) are
        # re-activated: each survivor asks, the lease decides where; one already running elsewhere gets a
        # no-op ``__resume__``.
        await node.resume_durable()

    def directory_changed(self) -> None:
        self._dir_dirty.set()

    def remote_members(self, group: str, scope: Scope) -> list[str]:
        return self._dir.members(group, scope) if self._dir is not None else []

    def remote_entries(self, scope: Scope) -> list[RegistryEntry]:
        return self._dir.entries(scope) if self._dir is not None else []

    async def _heartbeat_loop(self) -> None:
        """Feed the heartbeat thread (directory changes, proof that this loop runs), fence when our heartbeat
        is overdue, forget silent peers. It awaits nothing but its timer."""
        s, d, node, hb = self.settings, self.directory, self.node, self._hb
        assert hb is not None
        while True:
            try:
                await asyncio.wait_for(self._dir_dirty.wait(), s.heartbeat / 2)
                await asyncio.sleep(0.02)  # coalesce a burst of joins/leaves into one heartbeat
            except TimeoutError:
                pass
            hb.tick = time.monotonic()
            hb.healthy = self._nc is not None and self._nc.is_connected
            if self._dir_dirty.is_set():
                self._dir_dirty.clear()
                hb.value = d.heartbeat_value(node.local_directory(), self._watched_topics())
                hb.nudge()
            if d.beat_overdue():
                self._fence()  # cut off, or this loop stalled: our heartbeat may expire any moment
            d.sweep()

    async def _reminder_loop(self) -> None:
        """Re-arm this node's reminder timer now and then, in case a notice from another node was missed (its
        own task: a slow store must not hold up the heartbeat loop)."""
        while True:
            await asyncio.sleep(self.settings.heartbeat)
            try:
                await self.node.rearm_reminders()
            except Exception as e:
                log.warning("re-arming reminders failed: %r", e)

    def _fence(self) -> None:
        """Our heartbeat may have expired: others may take our actors, so they must not run here."""
        node = self.node
        dropped = self.leases.drop_all()
        if dropped:
            node.metrics.incr("cluster_fenced_total")
            log.error("heartbeat overdue: stopping %d leased actors (they may move)", len(dropped))
        for ck in dropped:
            node.evict_here(ck, "lease lost")

    # -- notices: channel wake-ups, reminders, topics ---------------------------------------------------------

    def _watched_topics(self) -> list[str]:
        bridge = self.pubsub_bridge
        return bridge.subjects() if isinstance(bridge, TopicBridge) else []

    def post(self, subject: str, body: dict[str, Any]) -> None:
        body["f"] = self.directory.node_id
        data, headers = self.signer.seal(subject, body)
        try:
            self._outbox.put_nowait((subject, data, headers))
        except asyncio.QueueFull:
            self.node.metrics.incr("cluster_notices_dropped_total")

    async def _pump(self) -> None:
        while True:
            subject, data, headers = await self._outbox.get()
            if self._nc is not None:
                await self._nc.publish(subject, data, headers=headers)

    def open_notice(self, msg: Msg) -> dict[str, Any] | None:
        try:
            body = self.signer.open(msg.subject, msg.data, msg.headers)
        except Unauthenticated as e:
            self.stats["rejected"] += 1
            self.node.metrics.incr("cluster_rejected_total")
            log.warning("rejected a fabric notice: %s", e.message)
            return None
        return None if body.get("f") == self.directory.node_id else body

    def channel_sent(self, scope: Scope, channel: str) -> None:
        if self._dir is not None:
            self.post(self.subjects.channels, {"s": list(scope), "ch": channel})

    async def _on_channel(self, msg: Msg) -> None:
        body = self.open_notice(msg)
        if body is not None:
            tenant, ns = body["s"]
            self.node.wake_channel((str(tenant), str(ns)), str(body["ch"]))

    def reminders_changed(self) -> None:
        if self._dir is not None:
            self.post(self.subjects.reminders, {})

    async def _on_reminders(self, msg: Msg) -> None:
        if self.open_notice(msg) is not None:
            self.spawn(self.node.rearm_reminders(), "mh-rearm")


def fence(epoch: int, revision: int) -> int:
    """A checkpoint fence: the lease bucket's creation time (seconds) above its revision (32 bits; a bucket
    that handed out 2**32 leases keeps fencing at the top), so it fits a signed 64-bit column."""
    return (epoch << 32) | min(revision, 0xFFFF_FFFF)


async def _bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    try:
        return await js.key_value(config.bucket)
    except BucketNotFoundError:
        return await js.create_key_value(config)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("cluster task %s failed", task.get_name(), exc_info=task.exception())
