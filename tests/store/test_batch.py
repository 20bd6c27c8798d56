"""write_batch contract: writes to kv, tuples and text in one transaction, all or none; TextIndex.documents."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from minihermes.runtime.store import (
    KVDelete,
    KVPut,
    Scalar,
    Store,
    TextRemove,
    TextUpsert,
    TupleTakeAll,
    TupleWrite,
    Write,
)
from minihermes.runtime.store.testing import INJECTED, failing_writes

from .conftest import A, B


def record_writes(n: int) -> list[Write]:
    """A record kept in three primitives, as memory keeps one."""
    return [
        KVPut(f"rec:{n}", {"n": n}),
        TextUpsert("idx", f"rec:{n}", {"body": f"record number {n} zebra"}, {"n": n}),
        TupleTakeAll(["rec", n, None]),
        TupleWrite(["rec", n, "core"]),
    ]


async def state_of(store: Store, n: int) -> tuple[Any, list[str], list[tuple[Scalar, ...]]]:
    hits = await store.text.search(A, "idx", "zebra", limit=50)
    return (
        await store.kv.get(A, f"rec:{n}"),
        [h.doc_id for h in hits if h.doc_id == f"rec:{n}"],
        await store.tuples.read_all(A, ["rec", n, None]),
    )


async def test_batch_applies_every_write_in_order_and_returns_their_results(store: Store) -> None:
    await store.kv.put(A, "old", 1)
    await store.tuples.write(A, ["rec", 1, "deep"])
    await store.text.upsert(A, "idx", "gone", {"body": "gone"})
    results = await store.write_batch(
        A,
        [
            *record_writes(1),
            KVPut("old", 2),
            KVDelete("missing"),
            TextRemove("idx", "gone"),
            TextRemove("idx", "never"),
            KVPut("temp", "x"),
            KVDelete("temp"),
        ],
    )
    assert results == [1, None, 1, None, 2, False, True, False, 1, True]
    assert await state_of(store, 1) == ({"n": 1}, ["rec:1"], [("rec", 1, "core")])
    assert await store.kv.get(A, "old") == 2
    assert await store.kv.get(A, "temp") is None
    assert await store.text.search(A, "idx", "gone") == []
    assert await store.write_batch(A, []) == []


async def test_batch_is_scoped(store: Store) -> None:
    await store.write_batch(A, record_writes(1))
    assert await store.kv.get(B, "rec:1") is None
    assert await store.tuples.read_all(B, ["rec", None, None]) == []
    assert await store.text.search(B, "idx", "zebra") == []
    assert await store.text.documents(B, "idx") == []


async def test_a_bad_write_is_refused_before_anything_is_written(store: Store) -> None:
    with pytest.raises(TypeError):
        await store.write_batch(A, [KVPut("k", 1), KVPut("bad", {1, 2})])
    with pytest.raises(ValueError):
        await store.write_batch(A, [KVPut("k", 1), TupleWrite([])])
    with pytest.raises(TypeError, match="not a write"):
        await store.write_batch(A, [KVPut("k", 1), ("kv", "put")])  # type: ignore[list-item]
    assert await store.kv.get(A, "k") is None


@pytest.mark.parametrize(
    ("table", "when"),
    [
        ("kv", "NEW.key = 'rec:1'"),
        ("text_docs", "NEW.doc_id = 'rec:1'"),
        ("tuples", "NEW.body LIKE '[\"rec\",1,%'"),
    ],
)
async def test_a_failure_inside_the_transaction_leaves_none_of_it(
    store: Store, table: str, when: str
) -> None:
    await store.write_batch(A, record_writes(2))
    async with failing_writes(store, table, when):
        # Another caller's writes committing in the same group (SQLite) keep theirs.
        results: list[Any] = await asyncio.gather(
            store.write_batch(A, record_writes(1)),
            store.write_batch(A, record_writes(3)),
            return_exceptions=True,
        )
        failed, other = results
        assert isinstance(failed, Exception) and INJECTED in str(failed), failed
        assert other == [1, None, 0, None]
    assert await state_of(store, 1) == (None, [], [])
    assert (await state_of(store, 3))[0] == {"n": 3}
    # The failure undid this batch's own earlier writes, and nothing before it.
    assert await state_of(store, 2) == ({"n": 2}, ["rec:2"], [("rec", 2, "core")])
    assert await store.write_batch(A, record_writes(1)) == [1, None, 0, None]
    assert await state_of(store, 1) == ({"n": 1}, ["rec:1"], [("rec", 1, "core")])


async def test_a_failing_delete_keeps_every_part(store: Store) -> None:
    await store.write_batch(A, record_writes(1))
    forget: list[Write] = [KVDelete("rec:1"), TextRemove("idx", "rec:1"), TupleTakeAll(["rec", 1, None])]
    async with failing_writes(store, "tuples", "OLD.body LIKE '[\"rec\",1,%'", events=("DELETE",)):
        with pytest.raises(Exception, match=INJECTED):
            await store.write_batch(A, forget)
    assert await state_of(store, 1) == ({"n": 1}, ["rec:1"], [("rec", 1, "core")])
    assert await store.write_batch(A, forget) == [True, True, 1]
    assert await state_of(store, 1) == (None, [], [])


async def test_documents_lists_an_index_by_id_prefix(store: Store) -> None:
    await store.text.upsert(A, "idx", "mem:b", {"body": "b"}, {"n": 2})
    await store.text.upsert(A, "idx", "mem:a", {"body": "a"}, {"n": 1})
    await store.text.upsert(A, "idx", "memo", {"body": "c"})
    await store.text.upsert(A, "other", "mem:z", {"body": "z"})
    assert await store.text.documents(A, "idx") == [("mem:a", {"n": 1}), ("mem:b", {"n": 2}), ("memo", None)]
    assert await store.text.documents(A, "idx", "mem:") == [("mem:a", {"n": 1}), ("mem:b", {"n": 2})]
    assert await store.text.documents(A, "idx", "mem_") == []  # the prefix is literal, not a LIKE pattern
    assert await store.text.documents(A, "none") == []
    await store.text.remove(A, "idx", "mem:a")
    assert [d for d, _ in await store.text.documents(A, "idx")] == ["mem:b", "memo"]
