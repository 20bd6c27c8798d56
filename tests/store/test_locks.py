"""LockStore contract: leases, fencing tokens, expiry takeover, stale holders."""

from __future__ import annotations

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import LockInfo, Store

from .conftest import A


async def test_acquire_conflict_release(store: Store, clock: ManualClock) -> None:
    token = await store.locks.try_acquire(A, "leader", "node-a", ttl=10)
    assert token == 1
    assert await store.locks.get(A, "leader") == LockInfo("leader", "node-a", 1, clock.time() + 10)
    assert await store.locks.try_acquire(A, "leader", "node-b", ttl=10) is None
    assert await store.locks.release(A, "leader", "node-a", token) is True
    assert await store.locks.get(A, "leader") is None
    assert await store.locks.release(A, "leader", "node-a", token) is False
    assert await store.locks.try_acquire(A, "leader", "node-b", ttl=10) == 2


async def test_tokens_strictly_increase_forever(store: Store, clock: ManualClock) -> None:
    tokens = []
    for i in range(5):
        token = await store.locks.try_acquire(A, "l", f"h{i % 2}", ttl=1)
        assert token is not None
        tokens.append(token)
        if i % 2:
            assert await store.locks.release(A, "l", f"h{i % 2}", token)
        else:
            await clock.advance(1)  # let it expire instead
    assert tokens == [1, 2, 3, 4, 5]
    # the same holder re-acquiring an unexpired lease gets a new token too
    assert await store.locks.try_acquire(A, "l", "h9", ttl=5) == 6
    assert await store.locks.try_acquire(A, "l", "h9", ttl=5) == 7


async def test_expiry_takeover_and_stale_holder(store: Store, clock: ManualClock) -> None:
    old = await store.locks.try_acquire(A, "l", "a", ttl=5)
    assert old is not None
    await clock.advance(5)
    assert await store.locks.get(A, "l") is None
    new = await store.locks.try_acquire(A, "l", "b", ttl=5)
    assert new == old + 1
    assert await store.locks.renew(A, "l", "a", old, ttl=5) is False
    assert await store.locks.release(A, "l", "a", old) is False
    assert await store.locks.release(A, "l", "b", old) is False  # right holder, wrong token
    info = await store.locks.get(A, "l")
    assert info is not None and (info.holder, info.token) == ("b", new)


async def test_renew_extends_only_unexpired_lease(store: Store, clock: ManualClock) -> None:
    token = await store.locks.try_acquire(A, "l", "a", ttl=5)
    assert token is not None
    await clock.advance(4)
    assert await store.locks.renew(A, "l", "a", token, ttl=5) is True
    await clock.advance(4)
    assert await store.locks.try_acquire(A, "l", "b", ttl=5) is None
    await clock.advance(1)
    assert await store.locks.renew(A, "l", "a", token, ttl=5) is False  # expired: must re-acquire
    assert await store.locks.try_acquire(A, "l", "a", ttl=5) == token + 1


async def test_release_expired_lease_by_its_holder(store: Store, clock: ManualClock) -> None:
    token = await store.locks.try_acquire(A, "l", "a", ttl=1)
    assert token is not None
    await clock.advance(2)
    assert await store.locks.release(A, "l", "a", token) is True
    assert await store.locks.try_acquire(A, "l", "b", ttl=1) == token + 1


async def test_release_holder(store: Store, clock: ManualClock) -> None:
    await store.locks.try_acquire(A, "l1", "node-a", ttl=10)
    await store.locks.try_acquire(A, "l2", "node-a", ttl=10)
    await store.locks.try_acquire(A, "l3", "node-b", ttl=10)
    await store.locks.try_acquire(A, "l4", "node-a", ttl=1)
    await clock.advance(1)  # l4 expired: no longer held, not counted
    assert await store.locks.release_holder("node-a") == 2
    assert await store.locks.get(A, "l1") is None
    assert await store.locks.get(A, "l3") is not None
    assert await store.locks.try_acquire(A, "l1", "node-c", ttl=10) == 2
    assert await store.locks.release_holder("node-a") == 0


async def test_lock_bad_input(store: Store) -> None:
    for ttl in (0, -1, float("inf")):
        with pytest.raises(ValueError, match="ttl"):
            await store.locks.try_acquire(A, "l", "a", ttl=ttl)
    with pytest.raises(ValueError, match="holder must not be empty"):
        await store.locks.try_acquire(A, "l", "", ttl=1)
    with pytest.raises(ValueError, match="lock name must not be empty"):
        await store.locks.get(A, "")
    with pytest.raises(ValueError, match="token"):
        await store.locks.release(A, "l", "a", 0)
