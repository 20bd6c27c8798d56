"""KV contract: JSON values, versions, TTL, CAS, prefix listing."""

from __future__ import annotations

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import KVEntry, Store

from .conftest import A


async def test_put_get_roundtrip_json_values(store: Store) -> None:
    values = [None, True, 0, -5, 1.5, "text ü 中", [1, "a", None], {"nested": {"list": [1, 2.5]}}]
    for i, value in enumerate(values):
        assert await store.kv.put(A, f"k{i}", value) == 1
    for i, value in enumerate(values):
        assert await store.kv.get(A, f"k{i}") == value


async def test_missing_key_is_none(store: Store) -> None:
    assert await store.kv.get(A, "nope") is None
    assert await store.kv.get_entry(A, "nope") is None


async def test_versions_increment_and_restart_after_delete(store: Store, clock: ManualClock) -> None:
    assert await store.kv.put(A, "k", 1) == 1
    assert await store.kv.put(A, "k", 2) == 2
    entry = await store.kv.get_entry(A, "k")
    assert entry == KVEntry(value=2, version=2, expires_at=None, updated_at=clock.time())
    assert await store.kv.delete(A, "k") is True
    assert await store.kv.delete(A, "k") is False
    assert await store.kv.put(A, "k", 3) == 1


async def test_ttl_expiry_makes_entry_invisible(store: Store, clock: ManualClock) -> None:
    assert await store.kv.put(A, "session", {"u": 1}, ttl=10) == 1
    entry = await store.kv.get_entry(A, "session")
    assert entry is not None and entry.expires_at == clock.time() + 10
    await clock.advance(9.9)
    assert await store.kv.get(A, "session") == {"u": 1}
    await clock.advance(0.1)
    assert await store.kv.get(A, "session") is None
    assert await store.kv.list(A) == []
    assert await store.kv.delete(A, "session") is False
    # an expired key counts as absent: the next put starts again at version 1
    assert await store.kv.put(A, "session", "new") == 1
    assert (await store.kv.get_entry(A, "session")) == KVEntry("new", 1, None, clock.time())


async def test_put_without_ttl_clears_previous_ttl(store: Store, clock: ManualClock) -> None:
    await store.kv.put(A, "k", 1, ttl=5)
    await store.kv.put(A, "k", 2)
    await clock.advance(100)
    assert await store.kv.get(A, "k") == 2


async def test_cas_create_only_if_absent(store: Store) -> None:
    assert await store.kv.cas(A, "k", None, "first") == 1
    assert await store.kv.cas(A, "k", None, "second") is None
    assert await store.kv.get(A, "k") == "first"


async def test_cas_create_over_expired_entry(store: Store, clock: ManualClock) -> None:
    await store.kv.put(A, "k", "old", ttl=1)
    assert await store.kv.cas(A, "k", None, "x") is None
    await clock.advance(1)
    assert await store.kv.cas(A, "k", None, "fresh", ttl=5) == 1
    entry = await store.kv.get_entry(A, "k")
    assert entry is not None and entry.value == "fresh" and entry.expires_at == clock.time() + 5


async def test_cas_on_version(store: Store, clock: ManualClock) -> None:
    await store.kv.put(A, "k", "v1")
    assert await store.kv.cas(A, "k", 2, "wrong") is None
    assert await store.kv.cas(A, "k", 1, "v2") == 2
    assert await store.kv.cas(A, "k", 1, "stale") is None
    assert await store.kv.get(A, "k") == "v2"
    assert await store.kv.cas(A, "missing", 1, "x") is None
    await store.kv.put(A, "t", "v", ttl=1)
    await clock.advance(2)
    assert await store.kv.cas(A, "t", 1, "after-expiry") is None


async def test_list_by_prefix_ordered_with_limit(store: Store) -> None:
    for key in ["b/2", "a/1", "b/1", "c", "b/10", "b"]:
        await store.kv.put(A, key, key.upper())
    assert await store.kv.list(A, "b/") == [("b/1", "B/1"), ("b/10", "B/10"), ("b/2", "B/2")]
    assert [k for k, _ in await store.kv.list(A)] == ["a/1", "b", "b/1", "b/10", "b/2", "c"]
    assert [k for k, _ in await store.kv.list(A, "b", limit=2)] == ["b", "b/1"]
    assert await store.kv.list(A, "b", limit=0) == []
    assert await store.kv.list(A, "zzz") == []


async def test_list_prefix_is_literal_not_a_pattern(store: Store) -> None:
    for key in ["a_1", "ab", "a%", "aXc", "A_1", "a_"]:
        await store.kv.put(A, key, 0)
    assert [k for k, _ in await store.kv.list(A, "a_")] == ["a_", "a_1"]
    assert [k for k, _ in await store.kv.list(A, "a%")] == ["a%"]
    assert [k for k, _ in await store.kv.list(A, "A")] == ["A_1"]


async def test_list_prefix_with_non_ascii_and_max_code_point(store: Store) -> None:
    top = "\U0010ffff"
    for key in ["é", "éa", "é" + top, "é" + top + "z", "ê", "f"]:
        await store.kv.put(A, key, 0)
    assert [k for k, _ in await store.kv.list(A, "é")] == ["é", "éa", "é" + top, "é" + top + "z"]
    assert [k for k, _ in await store.kv.list(A, "é" + top)] == ["é" + top, "é" + top + "z"]


@pytest.mark.parametrize("value", [{1, 2}, object(), b"bytes", {"k": float("nan")}, float("inf")])
async def test_non_json_values_are_refused(store: Store, value: object) -> None:
    with pytest.raises((TypeError, ValueError), match="key 'k'"):
        await store.kv.put(A, "k", value)
    assert await store.kv.get(A, "k") is None


async def test_bad_keys_ttls_and_versions(store: Store) -> None:
    with pytest.raises(ValueError, match="key must not be empty"):
        await store.kv.put(A, "", 1)
    with pytest.raises(TypeError, match="key must be a str"):
        await store.kv.get(A, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NUL"):
        await store.kv.put(A, "a\x00b", 1)
    with pytest.raises(ValueError, match="surrogate"):
        await store.kv.put(A, "\ud800", 1)
    for ttl in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="ttl"):
            await store.kv.put(A, "k", 1, ttl=ttl)
    with pytest.raises(ValueError, match="expected_version"):
        await store.kv.cas(A, "k", 0, 1)
    with pytest.raises(TypeError, match="expected_version"):
        await store.kv.cas(A, "k", True, 1)
    with pytest.raises(ValueError, match="limit"):
        await store.kv.list(A, limit=-1)


@pytest.mark.parametrize("scope", [("", "ns"), ("t", ""), ("t",), ["t", "ns"], ("t", 1), None])
async def test_bad_scopes_are_refused(store: Store, scope: object) -> None:
    with pytest.raises((TypeError, ValueError), match=r"scope|tenant|namespace"):
        await store.kv.put(scope, "k", 1)  # type: ignore[arg-type]
