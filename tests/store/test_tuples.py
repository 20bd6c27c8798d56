"""TupleSpace contract: typed matching, wildcards, arity, insertion order, atomic take."""

from __future__ import annotations

import pytest

from minihermes.runtime.store import Scalar, Store

from .conftest import A, B


async def test_write_read_take(store: Store) -> None:
    await store.tuples.write(A, ["job", 1, "queued"])
    assert await store.tuples.read(A, ["job", None, None]) == ("job", 1, "queued")
    assert await store.tuples.read(A, ["job", None, None]) == ("job", 1, "queued")  # read does not remove
    assert await store.tuples.take(A, ["job", 1, None]) == ("job", 1, "queued")
    assert await store.tuples.take(A, ["job", None, None]) is None
    assert await store.tuples.read(A, ["job", None, None]) is None


async def test_typed_equality(store: Store) -> None:
    elements: list[Scalar] = [1, "1", True, 1.0, None]
    for element in elements:
        await store.tuples.write(A, ["t", element])
    assert await store.tuples.read_all(A, ["t", 1]) == [("t", 1)]
    assert await store.tuples.read_all(A, ["t", "1"]) == [("t", "1")]
    assert await store.tuples.read_all(A, ["t", True]) == [("t", True)]
    assert await store.tuples.read_all(A, ["t", 1.0]) == [("t", 1.0)]
    assert await store.tuples.read_all(A, ["t", False]) == []
    # None in a pattern is a wildcard: it matches every element, None included
    assert len(await store.tuples.read_all(A, ["t", None])) == 5
    results = await store.tuples.read_all(A, ["t", None])
    assert [type(x[1]) for x in results] == [int, str, bool, float, type(None)]


async def test_typed_equality_on_first_element(store: Store) -> None:
    await store.tuples.write(A, [1, "int"])
    await store.tuples.write(A, ["1", "str"])
    await store.tuples.write(A, [True, "bool"])
    await store.tuples.write(A, [1.0, "float"])
    assert await store.tuples.read_all(A, [1, None]) == [(1, "int")]
    assert await store.tuples.read_all(A, ["1", None]) == [("1", "str")]
    assert await store.tuples.read_all(A, [True, None]) == [(True, "bool")]
    assert await store.tuples.read_all(A, [1.0, None]) == [(1.0, "float")]
    assert await store.tuples.take(A, [True, None]) == (True, "bool")
    assert await store.tuples.read_all(A, [None, None]) == [(1, "int"), ("1", "str"), (1.0, "float")]


async def test_same_arity_only(store: Store) -> None:
    await store.tuples.write(A, ["a"])
    await store.tuples.write(A, ["a", 1])
    await store.tuples.write(A, ["a", 1, 2])
    assert await store.tuples.read_all(A, ["a", None]) == [("a", 1)]
    assert await store.tuples.read_all(A, [None]) == [("a",)]
    assert await store.tuples.read_all(A, [None, None, None, None]) == []


async def test_insertion_order_and_limits(store: Store) -> None:
    for i in range(10):
        await store.tuples.write(A, ["ev", 9 - i])
    assert [t[1] for t in await store.tuples.read_all(A, ["ev", None])] == list(range(9, -1, -1))
    assert [t[1] for t in await store.tuples.read_all(A, ["ev", None], limit=3)] == [9, 8, 7]
    assert await store.tuples.read_all(A, ["ev", None], limit=0) == []
    assert await store.tuples.take(A, ["ev", None]) == ("ev", 9)  # oldest first
    assert await store.tuples.take(A, [None, 3]) == ("ev", 3)
    assert await store.tuples.read(A, ["ev", None]) == ("ev", 8)


async def test_take_all(store: Store) -> None:
    for i in range(6):
        await store.tuples.write(A, ["skill_trigger", f"s{i}", i % 2 == 0])
    await store.tuples.write(A, ["other", "x", True])
    assert await store.tuples.take_all(A, ["skill_trigger", None, True]) == 3
    assert await store.tuples.read_all(A, ["skill_trigger", None, None]) == [
        ("skill_trigger", "s1", False),
        ("skill_trigger", "s3", False),
        ("skill_trigger", "s5", False),
    ]
    assert await store.tuples.take_all(A, [None, None, None]) == 4
    assert await store.tuples.take_all(A, [None, None, None]) == 0


async def test_duplicates_are_separate_tuples(store: Store) -> None:
    await store.tuples.write(A, ["dup", 1])
    await store.tuples.write(A, ["dup", 1])
    assert await store.tuples.take(A, ["dup", 1]) == ("dup", 1)
    assert await store.tuples.take(A, ["dup", 1]) == ("dup", 1)
    assert await store.tuples.take(A, ["dup", 1]) is None


async def test_write_unless_writes_only_when_nothing_matches(store: Store) -> None:
    assert await store.tuples.write_unless(A, ["owner", "s1", "alice"], ["owner", "s1", None]) is True
    assert await store.tuples.write_unless(A, ["owner", "s1", "bob"], ["owner", "s1", None]) is False
    assert await store.tuples.write_unless(A, ["owner", "s2", "bob"], ["owner", "s2", None]) is True
    assert await store.tuples.read_all(A, ["owner", None, None]) == [
        ("owner", "s1", "alice"),
        ("owner", "s2", "bob"),
    ]
    assert (
        await store.tuples.write_unless(B, ["owner", "s1", "carol"], ["owner", "s1", None]) is True
    )  # scoped
    with pytest.raises(TypeError, match="pattern element 0"):
        await store.tuples.write_unless(A, ["owner", "s3", "x"], [object()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one element"):
        await store.tuples.write_unless(A, [], ["owner", "s3", None])
    with pytest.raises(ValueError, match="finite"):
        await store.tuples.write_unless(A, ["owner", "s3", float("nan")], ["owner", "s3", None])
    assert await store.tuples.read(A, ["owner", "s3", None]) is None


async def test_concurrent_write_unless_writes_once(store: Store) -> None:
    import asyncio

    wrote = await asyncio.gather(
        *(store.tuples.write_unless(A, ["once", "k", i], ["once", "k", None]) for i in range(30))
    )
    assert wrote.count(True) == 1
    assert len(await store.tuples.read_all(A, ["once", "k", None])) == 1


async def test_float_values_and_negative_zero(store: Store) -> None:
    await store.tuples.write(A, ["f", -0.0, 1e300, 0.1])
    assert await store.tuples.read(A, ["f", 0.0, 1e300, 0.1]) == ("f", 0.0, 1e300, 0.1)
    await store.tuples.write(A, [0.0, "zero"])
    assert await store.tuples.read(A, [-0.0, None]) == (0.0, "zero")


@pytest.mark.parametrize(
    "bad",
    [[["nested"]], [{"a": 1}], [b"bytes"], [(1, 2)], [object()]],
)
async def test_non_scalar_elements_are_refused(store: Store, bad: list[object]) -> None:
    with pytest.raises(TypeError, match="element 0 must be str, int, float, bool or None"):
        await store.tuples.write(A, bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pattern element 0"):
        await store.tuples.read(A, bad)  # type: ignore[arg-type]


async def test_bad_tuples_and_patterns(store: Store) -> None:
    with pytest.raises(ValueError, match="at least one element"):
        await store.tuples.write(A, [])
    with pytest.raises(ValueError, match="at least one element"):
        await store.tuples.take(A, [])
    with pytest.raises(TypeError, match="sequence"):
        await store.tuples.write(A, "abc")
    with pytest.raises(TypeError, match="sequence"):
        await store.tuples.write(A, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        await store.tuples.write(A, ["x", float("nan")])
    with pytest.raises(ValueError, match="limit"):
        await store.tuples.read_all(A, [None], limit=-1)


async def test_write_many(store: Store) -> None:
    assert await store.tuples.write_many(A, [["doc", "s1", 1], ["doc", "s1", 2], ["doc", "s2", 3]]) == 3
    assert await store.tuples.read_all(A, ["doc", "s1", None]) == [("doc", "s1", 1), ("doc", "s1", 2)]
    assert await store.tuples.read_all(A, ["doc", None, None]) == [
        ("doc", "s1", 1),
        ("doc", "s1", 2),
        ("doc", "s2", 3),
    ]
    assert await store.tuples.read_all(B, ["doc", None, None]) == []
    assert await store.tuples.write_many(A, []) == 0
    # One bad tuple refuses the batch before anything is written.
    with pytest.raises(TypeError):
        await store.tuples.write_many(A, [["ok", 1], ["bad", object()]])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        await store.tuples.write_many(A, [["ok", 1], []])
    with pytest.raises(TypeError):
        await store.tuples.write_many(A, "ok")  # type: ignore[arg-type]
    assert await store.tuples.read_all(A, ["ok", None]) == []
