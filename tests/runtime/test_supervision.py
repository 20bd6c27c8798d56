"""Crashes, restarts, strategies, policies, intensity and escalation."""

from __future__ import annotations

import asyncio

import pytest

from minihermes.runtime import ActorCrashed, ActorNotFound, ActorSpec, SupervisorSpec

from .actors import Counter, Echo
from .conftest import tree


def starts(node, name: str) -> float:
    return node.metrics.counter("actor_starts_total", actor=name)


async def settle(node, *names: str) -> None:
    """Wait until the named actors answer again (restarts are asynchronous)."""
    for n in names:
        await node.ask(n, "get" if n != "echo" else "echo", {})


async def test_crash_restarts_only_that_actor_from_its_checkpoint(make_node):
    node = await make_node(tree(ActorSpec("counter", Counter), ActorSpec("echo", Echo)))
    await node.ask("counter", "add", {"amount": 5})
    with pytest.raises(ActorCrashed) as ei:
        await node.ask("counter", "crash")  # answered at once: the manual clock never moves, so no timeout
    assert ei.value.code == "actor_crashed"
    assert "Traceback" not in ei.value.message and "boom" not in ei.value.message
    assert await node.ask("echo", "echo", {"value": 1}) == 1
    assert (await node.ask("counter", "get"))["count"] == 5
    assert starts(node, "counter") == 2 and starts(node, "echo") == 1
    assert node.metrics.counter("actor_restarts_total", actor="counter") == 1


async def test_casts_sent_while_restarting_reach_the_new_instance(make_node):
    node = await make_node(tree(ActorSpec("counter", Counter)))
    crash = asyncio.ensure_future(node.ask("counter", "crash"))
    for _ in range(10):
        node.send("counter", "bump")
    with pytest.raises(ActorCrashed):
        await crash
    assert (await node.ask("counter", "get"))["count"] == 10


async def test_one_for_one_rest_for_one_one_for_all(make_node, tmp_path):
    for strategy, expected in [
        ("one_for_one", {"a": 1, "b": 2, "c": 1}),
        ("rest_for_one", {"a": 1, "b": 2, "c": 2}),
        ("one_for_all", {"a": 2, "b": 2, "c": 2}),
    ]:
        node = await make_node(
            tree(
                ActorSpec("a", Counter), ActorSpec("b", Counter), ActorSpec("c", Counter), strategy=strategy
            ),
            data_dir=tmp_path / strategy,
        )
        for n in "abc":
            await node.ask(n, "add", {"amount": 3})
        with pytest.raises(ActorCrashed):
            await node.ask("b", "crash")
        await settle(node, "a", "b", "c")
        assert {n: starts(node, n) for n in "abc"} == expected, strategy
        for n in "abc":
            assert (await node.ask(n, "get"))["count"] == 3, (strategy, n)


async def test_restart_policies(make_node):
    node = await make_node(
        tree(
            ActorSpec("perm", Counter, restart="permanent"),
            ActorSpec("trans", Counter, restart="transient"),
            ActorSpec("temp", Counter, restart="temporary"),
        )
    )
    # a normal exit: permanent restarts, transient does not
    await node.ask("perm", "quit")
    await node.ask("trans", "quit")
    await settle(node, "perm")
    assert starts(node, "perm") == 2
    with pytest.raises(ActorNotFound):
        await node.ask("trans", "get")
    # a crash: temporary is not restarted
    with pytest.raises(ActorCrashed):
        await node.ask("temp", "crash")
    await asyncio.sleep(0)
    with pytest.raises(ActorNotFound):
        await node.ask("temp", "get")


async def test_transient_restarts_after_a_crash(make_node):
    node = await make_node(tree(ActorSpec("trans", Counter, restart="transient")))
    with pytest.raises(ActorCrashed):
        await node.ask("trans", "crash")
    await settle(node, "trans")
    assert starts(node, "trans") == 2


async def test_restart_intensity_escalates_to_the_parent(make_node):
    inner = SupervisorSpec(
        name="inner",
        strategy="one_for_one",
        max_restarts=2,
        max_restart_window=60,
        children=[ActorSpec("worker", Counter), ActorSpec("sibling", Counter)],
    )
    node = await make_node(tree(ActorSpec("outside", Counter), inner, max_restarts=5))
    for _ in range(3):
        with pytest.raises(ActorCrashed):
            await node.ask("worker", "crash")
        await settle(node, "worker")
    # the third crash exceeded inner's intensity: inner gave up and root restarted the whole inner tree
    # (the new sibling may still be loading its checkpoint when the new worker first answers)
    await settle(node, "sibling")
    assert starts(node, "sibling") == 2
    assert starts(node, "outside") == 1
    assert starts(node, "worker") == 4
    assert not node.failed.is_set()


async def test_root_intensity_exceeded_fails_the_node(make_node):
    node = await make_node(tree(ActorSpec("a", Counter), max_restarts=1))
    with pytest.raises(ActorCrashed):
        await node.ask("a", "crash")
    await settle(node, "a")
    with pytest.raises(ActorCrashed):
        await node.ask("a", "crash")
    await asyncio.wait_for(node.failed.wait(), 5)


async def test_virtual_instance_crash_restarts_only_that_key(make_node):
    node = await make_node(tree(ActorSpec("nb", Counter, virtual=True), ActorSpec("echo", Echo)))
    await node.ask("nb/s1", "add", {"amount": 1})
    await node.ask("nb/s2", "add", {"amount": 2})
    with pytest.raises(ActorCrashed):
        await node.ask("nb/s1", "crash")
    assert (await node.ask("nb/s1", "get"))["count"] == 1
    assert (await node.ask("nb/s2", "get"))["count"] == 2
    assert starts(node, "nb") == 3


async def test_virtual_type_restart_intensity_escalates(make_node):
    node = await make_node(
        tree(
            ActorSpec("nb", Counter, virtual=True, max_restarts=1),
            ActorSpec("other", Counter),
            max_restarts=5,
        )
    )
    await node.ask("nb/k", "add", {"amount": 1})
    for _ in range(2):
        with pytest.raises(ActorCrashed):
            await node.ask("nb/k", "crash")
    await settle(node, "other")
    # escalated: the family was restarted by root (its instances deactivated), and k comes back from its checkpoint
    assert (await node.ask("nb/k", "get"))["count"] == 1
    assert node.metrics.counter("actor_restarts_total", actor="nb") >= 2
