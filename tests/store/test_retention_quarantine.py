"""apply_retention for every rule kind (across scopes) and the Quarantine primitive."""

from __future__ import annotations

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import RetentionRule, Store

from .conftest import A, B


async def test_kv_rules_and_expired_purge(store: Store, clock: ManualClock) -> None:
    for scope in (A, B):
        await store.kv.put(scope, "cache/old", 1)
        await store.kv.put(scope, "keep/old", 1)
    await clock.advance(100)
    for scope in (A, B):
        await store.kv.put(scope, "cache/new", 2)
        await store.kv.put(scope, "tmp", 3, ttl=10)
    await clock.advance(10)
    report = await store.apply_retention([RetentionRule("kv", "cache/", max_age=50)], clock.time())
    assert report.deleted == {"kv": 2, "kv_expired": 2}
    for scope in (A, B):
        assert [k for k, _ in await store.kv.list(scope)] == ["cache/new", "keep/old"]


async def test_kv_max_count_per_scope(store: Store, clock: ManualClock) -> None:
    for i in range(5):
        await store.kv.put(A, f"log/{i}", i)
        await store.kv.put(B, f"log/{i}", i)
        await clock.advance(1)
    report = await store.apply_retention([RetentionRule("kv", "log/", max_count=2)], clock.time())
    assert report.deleted["kv"] == 6
    assert [k for k, _ in await store.kv.list(A)] == ["log/3", "log/4"]
    assert [k for k, _ in await store.kv.list(B)] == ["log/3", "log/4"]


async def test_blobs_checkpoints_tuples(store: Store, clock: ManualClock) -> None:
    await store.blobs.put(A, "tmp/a", b"a")
    await store.blobs.put(A, "keep", b"k")
    await store.checkpoints.save(A, "agent/idle", 1, b"")
    await store.checkpoints.save(A, "cron", 1, b"")
    await store.tuples.write(A, ["trace", 1])
    await store.tuples.write(A, ["job", 1])
    await store.tuples.write(B, ["trace", 1])
    await clock.advance(100)
    await store.blobs.put(A, "tmp/b", b"b")
    await store.checkpoints.save(A, "agent/busy", 1, b"")
    await store.tuples.write(A, ["trace", 2])
    rules = [
        RetentionRule("blobs", "tmp/", max_age=50),
        RetentionRule("checkpoints", "agent/", max_age=50),
        RetentionRule("tuples", "trace", max_age=50),
    ]
    report = await store.apply_retention(rules, clock.time())
    assert (report.deleted["blobs"], report.deleted["checkpoints"], report.deleted["tuples"]) == (1, 1, 2)
    assert [b.name for b in await store.blobs.list(A)] == ["keep", "tmp/b"]
    assert await store.checkpoints.list(A) == ["agent/busy", "cron"]
    assert await store.tuples.read_all(A, [None, None]) == [("job", 1), ("trace", 2)]
    assert await store.tuples.read_all(B, [None, None]) == []


async def test_tuples_max_count_and_typed_selector(store: Store) -> None:
    for i in range(4):
        await store.tuples.write(A, ["n", i])
    await store.tuples.write(A, [1, "int first element is not 'n' nor '1'"])
    report = await store.apply_retention([RetentionRule("tuples", "n", max_count=1)], 0)
    assert report.deleted["tuples"] == 3
    assert len(await store.tuples.read_all(A, [None, None])) == 2
    report = await store.apply_retention([RetentionRule("tuples", "1", max_count=0)], 0)
    assert report.deleted["tuples"] == 0


async def test_dead_letters_and_dedup(store: Store, clock: ManualClock) -> None:
    for scope in (A, B):
        await store.channels.declare(scope, "q", max_deliveries=1)
        for i in range(3):
            msg_id = await store.channels.send(scope, "q", "n", i, dedup_key=f"k{i}")
            await store.channels.nack(scope, "q", msg_id, requeue=False)
    report = await store.apply_retention([RetentionRule("dead_letters", "q", max_count=1)], clock.time())
    assert report.deleted["dead_letters"] == 4
    assert [d.payload for d in await store.channels.dead_letters(A, "q")] == [2]
    assert await store.channels.send(A, "q", "n", "again", dedup_key="k0") != ""
    assert (await store.channels.depth(A, "q")).ready == 0  # k0 still remembered
    await clock.advance(60)
    report = await store.apply_retention([RetentionRule("dedup", "*", max_age=30)], clock.time())
    assert report.deleted["dedup"] == 6
    await store.channels.send(A, "q", "n", "again", dedup_key="k0")
    assert (await store.channels.depth(A, "q")).ready == 1


async def test_quarantine_put_list_and_retention(store: Store, clock: ManualClock) -> None:
    for i in range(4):
        await store.quarantine.put("kv", A if i % 2 else B, f"key{i}", f"reason {i}", bytes([i]))
        await clock.advance(1)
    records = await store.quarantine.list()
    assert [r.key for r in records] == ["key3", "key2", "key1", "key0"]  # newest first
    assert (records[0].scope, records[0].reason, records[0].data, records[0].kind) == (
        A,
        "reason 3",
        b"\x03",
        "kv",
    )
    assert len(await store.quarantine.list(limit=1)) == 1
    report = await store.apply_retention([RetentionRule("quarantine", max_count=1)], clock.time())
    assert report.deleted["quarantine"] == 3
    assert [r.key for r in await store.quarantine.list()] == ["key3"]


async def test_several_rules_of_one_kind_add_up(store: Store) -> None:
    await store.kv.put(A, "a", 1)
    await store.kv.put(A, "b", 1)
    rules = [RetentionRule("kv", "a", max_count=0), RetentionRule("kv", "b", max_count=0)]
    assert (await store.apply_retention(rules, 0)).deleted["kv"] == 2


@pytest.mark.parametrize(
    "rule",
    [
        RetentionRule("bogus", max_age=1),
        RetentionRule("kv"),
        RetentionRule("kv", max_age=-1),
        RetentionRule("kv", max_count=-1),
    ],
)
async def test_invalid_rules_are_refused_before_anything_is_deleted(
    store: Store, rule: RetentionRule
) -> None:
    await store.kv.put(A, "k", 1)
    with pytest.raises(ValueError):
        await store.apply_retention([RetentionRule("kv", max_count=0), rule], 0)
    assert await store.kv.get(A, "k") == 1


async def test_retention_rule_kind_typo_lists_known_kinds(store: Store) -> None:
    with pytest.raises(ValueError, match="known kinds: events, dead_letters"):
        await store.apply_retention([RetentionRule("event", max_age=1)], 0)
