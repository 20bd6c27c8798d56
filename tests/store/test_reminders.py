"""ReminderStore contract: due, next_fire_at, conditional advance."""

from __future__ import annotations

import pytest

from minihermes.runtime.store import Reminder, Store

from .conftest import A, B

T0 = 1_800_000_000.0


def reminder(name: str, at: float, period: float | None = None, scope: tuple[str, str] = A) -> Reminder:
    return Reminder(scope, "agent/1", name, "tick", {"n": name}, at, period, {"principal": "u1"})


async def test_upsert_list_delete(store: Store) -> None:
    r1, r2 = reminder("b", T0 + 5), reminder("a", T0 + 1, period=60)
    await store.reminders.upsert(r1)
    await store.reminders.upsert(r2)
    other = Reminder(A, "agent/2", "c", "tick", None, T0, None)
    await store.reminders.upsert(other)
    assert await store.reminders.list(A) == [r2, r1, other]
    assert await store.reminders.list(A, "agent/2") == [other]
    changed = reminder("b", T0 + 9)
    await store.reminders.upsert(changed)
    assert await store.reminders.list(A, "agent/1") == [r2, changed]
    assert await store.reminders.delete(A, "agent/1", "b") is True
    assert await store.reminders.delete(A, "agent/1", "b") is False
    assert await store.reminders.list(A, "agent/1") == [r2]


async def test_due_across_scopes_earliest_first_and_next_fire_at(store: Store) -> None:
    assert await store.reminders.next_fire_at() is None
    await store.reminders.upsert(reminder("late", T0 + 30))
    await store.reminders.upsert(reminder("early", T0 + 10, scope=B))
    await store.reminders.upsert(reminder("mid", T0 + 20))
    assert await store.reminders.next_fire_at() == T0 + 10
    assert [r.name for r in await store.reminders.due(T0 + 20)] == ["early", "mid"]
    assert [r.name for r in await store.reminders.due(T0 + 100, limit=1)] == ["early"]
    assert await store.reminders.due(T0) == []
    assert (await store.reminders.due(T0 + 10))[0].scope == B


async def test_advance_one_shot_deletes(store: Store) -> None:
    r = reminder("once", T0)
    await store.reminders.upsert(r)
    assert await store.reminders.advance(r, T0 + 0.5) is True
    assert await store.reminders.list(A) == []
    assert await store.reminders.advance(r, T0 + 0.5) is False


async def test_advance_periodic_collapses_missed_fires(store: Store) -> None:
    r = reminder("every10", T0, period=10)
    await store.reminders.upsert(r)
    assert await store.reminders.advance(r, T0 + 0.1) is True
    [after] = await store.reminders.list(A)
    assert after.next_fire_at == T0 + 10
    # down for a while: 3 fires missed, one fire now, next one on the period grid after now
    assert await store.reminders.advance(after, T0 + 45) is True
    [after2] = await store.reminders.list(A)
    assert after2.next_fire_at == T0 + 50
    assert await store.reminders.advance(after2, T0 + 50) is True  # fired exactly on time
    assert (await store.reminders.list(A))[0].next_fire_at == T0 + 60


async def test_two_nodes_cannot_both_advance_one_fire(store: Store) -> None:
    await store.reminders.upsert(reminder("r", T0, period=5))
    seen_by_node_1 = (await store.reminders.due(T0))[0]
    seen_by_node_2 = (await store.reminders.due(T0))[0]
    assert await store.reminders.advance(seen_by_node_1, T0) is True
    assert await store.reminders.advance(seen_by_node_2, T0) is False
    assert (await store.reminders.list(A))[0].next_fire_at == T0 + 5


async def test_advance_after_reschedule_is_refused(store: Store) -> None:
    r = reminder("r", T0)
    await store.reminders.upsert(r)
    await store.reminders.upsert(reminder("r", T0 + 100))
    assert await store.reminders.advance(r, T0) is False
    assert (await store.reminders.list(A))[0].next_fire_at == T0 + 100


async def test_reminder_bad_input(store: Store) -> None:
    with pytest.raises(ValueError, match="period"):
        await store.reminders.upsert(reminder("r", T0, period=0))
    with pytest.raises(TypeError, match="reminder payload is not JSON-serializable"):
        await store.reminders.upsert(Reminder(A, "t", "n", "op", {1, 2}, T0, None))
    with pytest.raises(ValueError, match="reminder target must not be empty"):
        await store.reminders.upsert(Reminder(A, "", "n", "op", None, T0, None))
    with pytest.raises(ValueError, match="next_fire_at"):
        await store.reminders.upsert(Reminder(A, "t", "n", "op", None, float("nan"), None))
    with pytest.raises(TypeError, match="expected Reminder"):
        await store.reminders.upsert({"name": "x"})  # type: ignore[arg-type]
