"""The fabric between nodes of one process (each with its own NATS connection, leases and heartbeat) on a
real nats-server: routing by lease, hand-over on stop, take-over after a node is cut off, cluster-wide groups,
registry and topics, and trust (a stray client cannot act for a tenant)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nats
import orjson
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import KeyDeletedError, KeyNotFoundError

from minihermes.cluster import Cluster, ClusterSettings
from minihermes.cluster._wire import Signer, Subjects
from minihermes.runtime import (
    ActorSpec,
    ConfigError,
    GenServer,
    Node,
    RequestContext,
    SupervisorSpec,
    call,
    cast,
    state,
)
from minihermes.runtime._config import ClusterModel

from .conftest import NodeFactory, settings

ACME = RequestContext(tenant="acme", principal="alice")
GLOBEX = RequestContext(tenant="globex", principal="bob")


class Counter(GenServer):
    n: int = state(default=0)

    @call
    def incr(self) -> dict[str, Any]:
        self.n += 1
        return {"n": self.n, "node": self.host.node_id}


class Service(GenServer):
    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.host.join("svc:demo")
        self.host.register("demo", ["echo"])

    @call
    def where(self) -> str:
        return self.host.node_id

    @call
    def shout(self, topic: str, text: str) -> int:
        return self.host.publish(topic, {"text": text, "from": self.host.node_id})


def tree() -> SupervisorSpec:
    return SupervisorSpec(
        name="root",
        children=[
            ActorSpec("counter", Counter, virtual=True),
            ActorSpec("service", Service, per_tenant=True),
        ],
    )


def fabric(node: Node) -> Cluster:
    assert isinstance(node.fabric, Cluster)
    return node.fabric


async def until(pred: Any, timeout: float = 10.0, step: float = 0.05) -> None:
    end = time.monotonic() + timeout
    while not await pred():
        if time.monotonic() > end:
            pytest.fail("condition not reached in time")
        await asyncio.sleep(step)


async def test_one_activation_cluster_wide_and_forwarding(cluster_node: NodeFactory) -> None:
    a = await cluster_node(tree(), "a")
    b = await cluster_node(tree(), "b")
    assert await a.ask("counter/x", "incr", ctx=ACME) == {"n": 1, "node": "a"}
    assert await b.ask("counter/x", "incr", ctx=ACME) == {"n": 2, "node": "a"}
    assert await b.ask("counter/y", "incr", ctx=ACME) == {"n": 1, "node": "b"}
    assert await a.ask("counter/y", "incr", ctx=ACME) == {"n": 2, "node": "b"}
    # the same key in another tenant is another actor, leased on its own
    assert await b.ask("counter/x", "incr", ctx=GLOBEX) == {"n": 1, "node": "b"}
    assert [c.address for c in b.cells("counter")] == ["counter/y", "counter/x"]
    assert fabric(b).stats["forwarded"] >= 1 and fabric(a).stats["forwarded"] >= 1
    assert fabric(a).stats["served"] >= 1 and fabric(b).stats["served"] >= 1
    # per-tenant services are leased too: one instance per tenant in the cluster
    assert await b.ask("service", "where", ctx=ACME) == await a.ask("service", "where", ctx=ACME)


async def test_errors_cross_the_wire_structured(cluster_node: NodeFactory) -> None:
    a = await cluster_node(tree(), "a")
    b = await cluster_node(tree(), "b")
    await a.ask("counter/x", "incr", ctx=ACME)
    with pytest.raises(Exception) as bad_arg:
        await b.ask("counter/x", "incr", {"oops": 1}, ctx=ACME)
    assert getattr(bad_arg.value, "code", "") == "invalid_argument"
    with pytest.raises(Exception) as bad_op:
        await b.ask("counter/x", "decr", ctx=ACME)
    assert getattr(bad_op.value, "code", "") == "unknown_op"


async def test_graceful_stop_releases_leases_at_once(cluster_node: NodeFactory) -> None:
    a = await cluster_node(tree(), "a")
    b = await cluster_node(tree(), "b")
    for _ in range(3):
        await a.ask("counter/x", "incr", ctx=ACME)
    key = Subjects.lease_key((ACME.scope, "counter", "x"))
    kv = fabric(b).leases._kv
    assert (await kv.get(key)).value
    await a.stop()
    with pytest.raises((KeyDeletedError, KeyNotFoundError)):
        await kv.get(key)  # released by the stop itself, not by the heartbeat's TTL
    assert await b.ask("counter/x", "incr", ctx=ACME) == {"n": 4, "node": "b"}  # from a's last checkpoint


async def test_cut_off_node_fences_itself_and_its_actors_move(cluster_node: NodeFactory) -> None:
    a = await cluster_node(tree(), "a")
    b = await cluster_node(tree(), "b")
    await a.ask("counter/x", "incr", ctx=ACME)
    await a.ask("counter/x", "incr", ctx=ACME)
    nc = fabric(a)._nc
    assert nc is not None
    # Cut a off the bus without a word: no lease released, no heartbeat removed.
    await nc.close()
    await until(lambda: _async(not a.cells("counter")), timeout=5.0)  # a stops what it can no longer hold

    async def moved() -> bool:
        try:
            return bool(await b.ask("counter/x", "incr", timeout=1.0, ctx=ACME) == {"n": 3, "node": "b"})
        except Exception:
            return False

    await until(moved, timeout=10.0)


async def _async(value: bool) -> bool:
    return value


class LongJob(GenServer):
    """Marks itself durable-active, as a running workflow or an agent turn in flight does."""

    running: bool = state(default=False)

    @call
    async def begin(self) -> str:
        self.running = True
        await self.host.mark_durable(True)
        return self.host.node_id

    @cast
    def __resume__(self) -> None:
        """Activation resumes the work (``on_init``); the message itself has nothing to do."""


async def test_a_dead_nodes_durable_actors_resume_on_a_survivor(cluster_node: NodeFactory) -> None:
    """Nothing needs to message it: the survivors re-activate what the dead node was running."""
    spec = SupervisorSpec(name="root", children=[ActorSpec("job", LongJob, virtual=True)])
    a = await cluster_node(spec, "a")
    b = await cluster_node(spec, "b")
    assert await a.ask("job/j1", "begin", ctx=ACME) == "a"
    assert not b.cells("job")
    nc = fabric(a)._nc
    assert nc is not None
    await nc.close()  # a is cut off: its heartbeat expires, b sees it down
    await until(lambda: _async(bool(b.cells("job"))), timeout=10.0)
    assert await b.ask("job/j1", "begin", ctx=ACME) == "b"


async def test_groups_registry_and_topics_are_cluster_wide(cluster_node: NodeFactory) -> None:
    a = await cluster_node(tree(), "a")
    b = await cluster_node(tree(), "b")
    assert await a.ask("service", "where", ctx=ACME) == "a"
    await until(lambda: _async(b.members("svc:demo", ACME.scope) == ["service"]))
    assert [e.object_id for e in b.discover(ACME.scope, "demo", "echo")] == ["service"]
    assert b.members("svc:demo", GLOBEX.scope) == []  # another tenant sees none of it

    # A watcher on b sees events published by the service running on a.
    sub = b.subscribe("session:s1", ctx=ACME)
    other = b.subscribe("session:s1", ctx=GLOBEX)

    got: list[Any] = []

    async def delivered() -> bool:
        await a.ask("service", "shout", {"topic": "session:s1", "text": "hi"}, ctx=ACME)
        event = sub.get_nowait()
        if event is not None:
            got.append(event)
        return bool(got)

    await until(delivered)
    assert got[0] == {"text": "hi", "from": "a"}
    assert other.get_nowait() is None
    sub.close()
    other.close()


async def test_a_stray_client_cannot_act_for_a_tenant(
    cluster_node: NodeFactory, nats_server: dict[str, str], cluster_name: str
) -> None:
    a = await cluster_node(tree(), "a")
    await a.ask("counter/x", "incr", ctx=GLOBEX)
    subjects = Subjects(cluster_name)
    subject = subjects.requests("a")
    forged = {"k": "ask", "t": "counter/x", "o": "incr", "p": {}, "c": GLOBEX.to_dict(), "to": 1.0, "f": "z"}

    # 1. A client that is not a node (the guest user) may not publish on the fabric's subjects at all.
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    guest = await nats.connect(
        nats_server["MINIHERMES_NATS_URL"],
        user=nats_server.get("MINIHERMES_NATS_GUEST_USER", "guest"),
        password=nats_server["MINIHERMES_NATS_GUEST_PASSWORD"],
        error_cb=on_error,
        allow_reconnect=False,
    )
    try:
        data, headers = Signer(b"not-the-cluster-secret-at-all").seal(subject, dict(forged))
        await guest.publish(subject, data, headers=headers)
        await guest.flush()
        await until(lambda: _async(any("permissions violation" in str(e).lower() for e in errors)), 5.0)
        with pytest.raises((nats.errors.Error, TimeoutError)):  # nor read or write the lease bucket
            kv = await guest.jetstream().key_value(subjects.leases_bucket)
            await kv.put(subjects.lease_key((GLOBEX.scope, "counter", "x")), b"{}")
    finally:
        await guest.close()

    # 2. Even on the node account, a message without the cluster's MAC is dropped unanswered.
    intruder = await nats.connect(
        nats_server["MINIHERMES_NATS_URL"],
        user=nats_server.get("MINIHERMES_NATS_USER", "node"),
        password=nats_server["MINIHERMES_NATS_PASSWORD"],
    )
    try:
        for signer in (Signer(b"not-the-cluster-secret-at-all"), None):
            if signer is None:
                data, headers = orjson.dumps(forged), {}
            else:
                data, headers = signer.seal(subject, dict(forged))
            with pytest.raises((NatsTimeout, NoRespondersError)):
                await intruder.request(subject, data, timeout=0.5, headers=headers)
        # A replay of a genuine message on another node's subject does not verify either (the MAC covers it).
        good = Signer(nats_server["MINIHERMES_CLUSTER_SECRET"].encode())
        data, headers = good.seal(subjects.requests("elsewhere"), dict(forged))
        with pytest.raises((NatsTimeout, NoRespondersError)):
            await intruder.request(subject, data, timeout=0.5, headers=headers)
    finally:
        await intruder.close()
    assert fabric(a).stats["rejected"] == 3
    assert await a.ask("counter/x", "incr", ctx=GLOBEX) == {"n": 2, "node": "a"}  # untouched by all of it


async def test_without_a_cluster_the_node_has_no_fabric() -> None:
    from minihermes.app import default_config
    from minihermes.runtime import build_node

    cfg = default_config("/tmp/unused-minihermes-data")
    node = build_node(cfg)
    assert node.fabric is None and node.pubsub.bridge is None


def test_settings_from_config_and_environment(tmp_path: Any) -> None:
    env = {"MINIHERMES_NATS_URL": "nats://127.0.0.1:4222", "MINIHERMES_CLUSTER_SECRET": "s" * 32}
    s = ClusterSettings.from_model(ClusterModel(enabled=True, user="node"), env)
    assert s.nats_url == "nats://127.0.0.1:4222" and s.secret == b"s" * 32 and s.node_ttl == 3.0
    with pytest.raises(ConfigError, match="MINIHERMES_NATS_URL"):
        ClusterSettings.from_model(ClusterModel(enabled=True), {})
    with pytest.raises(ConfigError, match="secret"):
        ClusterSettings.from_model(ClusterModel(enabled=True), {"MINIHERMES_NATS_URL": "nats://x:1"})
    with pytest.raises(ConfigError, match="16 bytes"):
        ClusterSettings.from_model(ClusterModel(), {**env, "MINIHERMES_CLUSTER_SECRET": "short"})
    with pytest.raises(ConfigError, match="three times the heartbeat"):
        ClusterSettings.from_model(ClusterModel(heartbeat="2s", node_ttl="5s"), env)
    secret = tmp_path / "secret"
    secret.write_text("f" * 40 + "\n")
    s = ClusterSettings.from_model(ClusterModel(secret_file=str(secret)), env)
    assert s.secret == b"f" * 40
    opts = settings(
        {
            "MINIHERMES_NATS_URL": "nats://h1:1,nats://h2:2",
            "MINIHERMES_CLUSTER_SECRET": "x" * 20,
            "MINIHERMES_NATS_PASSWORD": "pw",
        },
        "c1",
    ).connect_options("n1")
    assert opts["servers"] == ["nats://h1:1", "nats://h2:2"] and opts["user"] == "node"


async def test_a_node_that_lost_a_lease_unawares_cannot_overwrite_the_new_holders_state(
    cluster_node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node a holds counter/x; b decides a is dead (as when a is frozen past its heartbeat) and takes the
    lease over. a, not knowing, handles one more message: its checkpoint carries its older fence and is
    refused, the caller gets an error rather than a reply that is not durable, and a hands the actor over
    (its next messages go to b). b's state is the one that stays."""
    a = await cluster_node(tree(), "a")
    b = await cluster_node(tree(), "b")
    ck = (ACME.scope, "counter", "x")
    assert await a.ask("counter/x", "incr", ctx=ACME) == {"n": 1, "node": "a"}
    assert await a.ask("counter/x", "incr", ctx=ACME) == {"n": 2, "node": "a"}
    old_fence = fabric(a).fence_of(ck)
    assert old_fence is not None and [c.fence for c in a.cells("counter")] == [old_fence]

    async def a_looks_dead(node: str, boot: str) -> bool:
        return node != "a"

    monkeypatch.setattr(fabric(b).directory, "alive", a_looks_dead)
    holder = await fabric(b).leases.claim(ck, lambda: b.activate_here(ck), fresh=True)
    assert holder.node == "b" and b.cells("counter") and a.cells("counter")  # both think they hold it
    new_fence = fabric(b).fence_of(ck)
    assert new_fence is not None and new_fence > old_fence
    assert await b.ask("counter/x", "incr", ctx=ACME) == {"n": 3, "node": "b"}  # b read a's n = 2

    with pytest.raises(Exception) as stale:  # a's stale turn: handled, but its checkpoint is refused
        await a.ask("counter/x", "incr", ctx=ACME)
    assert getattr(stale.value, "code", "") == "actor_crashed"
    await until(lambda: _async(not a.cells("counter")), timeout=5.0)  # a let the actor go
    assert a.metrics.counter("actor_fenced_total", actor="counter") == 1
    # Nothing a did reached the store, and a's next message goes to the holder.
    assert await a.ask("counter/x", "incr", ctx=ACME) == {"n": 4, "node": "b"}
    assert await b.ask("counter/x", "incr", ctx=ACME) == {"n": 5, "node": "b"}


async def test_a_restart_after_losing_the_lease_unawares_hands_the_actor_over(
    cluster_node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but a's instance restarts (a crash) after b took the lease: the restart's claim of the
    checkpoint is refused, so a does not run the actor again from b's state; the cell goes, not restarted in
    a loop, and a's next message goes to b."""
    a = await cluster_node(tree(), "a")
    b = await cluster_node(tree(), "b")
    ck = (ACME.scope, "counter", "x")
    assert await a.ask("counter/x", "incr", ctx=ACME) == {"n": 1, "node": "a"}

    async def a_looks_dead(node: str, boot: str) -> bool:
        return node != "a"

    monkeypatch.setattr(fabric(b).directory, "alive", a_looks_dead)
    assert (await fabric(b).leases.claim(ck, lambda: b.activate_here(ck), fresh=True)).node == "b"
    assert await b.ask("counter/x", "incr", ctx=ACME) == {"n": 2, "node": "b"}
    [cell] = a.cells("counter")
    await cell.kill("injected crash", abnormal=True)  # the supervisor restarts it: its claim is refused
    await until(lambda: _async(not a.cells("counter")), timeout=5.0)
    assert a.metrics.counter("actor_fenced_total", actor="counter") == 1
    assert a.metrics.counter("actor_restarts_total", actor="counter") == 1  # one restart, no loop
    assert await a.ask("counter/x", "incr", ctx=ACME) == {"n": 3, "node": "b"}


async def test_fences_below_what_was_claimed_fail_the_message_instead_of_looping(
    cluster_node: NodeFactory,
) -> None:
    """If a node's fences are all below what the store has seen (its view of the lease bucket is older than
    the one that fenced the actor), every activation there is refused: the first refusal forwards the
    message, the second within FENCE_LOOP_WINDOW fails it instead of forwarding it back here for ever."""
    from minihermes.runtime import ActorNotFound

    a = await cluster_node(tree(), "a")
    b = await cluster_node(tree(), "b")
    assert await b.ask("counter/x", "incr", ctx=ACME) == {"n": 1, "node": "b"}  # claimed with b's fence
    await b.stop(deadline=2.0)  # hands the lease back
    fabric(a)._fence_epoch = 0  # a's fences now count from an older bucket: all below b's
    with pytest.raises(ActorNotFound):
        await a.ask("counter/x", "incr", timeout=5.0, ctx=ACME)
    assert a.metrics.counter("actor_fenced_total", actor="counter") == 2 and not a.cells("counter")
