"""VectorIndex contract: cosine ranking, upsert/delete, dimensions, scopes, bad input."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from minihermes.runtime.store import Store

from .conftest import A2, A, B


def unit(angle_degrees: float) -> list[float]:
    a = math.radians(angle_degrees)
    return [math.cos(a), math.sin(a)]


async def test_search_ranks_by_cosine_with_scores_and_meta(store: Store) -> None:
    for doc_id, angle in (("east", 0), ("north-east", 45), ("north", 90), ("west", 180)):
        await store.vectors.upsert(A, "skills", doc_id, unit(angle), meta={"angle": angle})
    hits = await store.vectors.search(A, "skills", [2.0, 0.1], limit=10)
    assert [h.doc_id for h in hits] == ["east", "north-east", "north", "west"]
    expected = [math.cos(math.atan2(0.1, 2.0) - math.radians(a)) for a in (0, 45, 90, 180)]
    assert [h.score for h in hits] == pytest.approx(expected, abs=1e-5)
    assert hits[0].meta == {"angle": 0} and hits[-1].score == pytest.approx(-0.9987, abs=1e-3)
    assert [h.doc_id for h in await store.vectors.search(A, "skills", unit(80), limit=2)] == [
        "north",
        "north-east",
    ]
    # magnitude does not matter, only direction
    [top] = await store.vectors.search(A, "skills", [0.0, 1000.0], limit=1)
    assert top.doc_id == "north" and top.score == pytest.approx(1.0, abs=1e-6)


async def test_upsert_replaces_and_delete(store: Store) -> None:
    await store.vectors.upsert(A, "m", "d1", [1.0, 0.0, 0.0], meta="first")
    await store.vectors.upsert(A, "m", "d2", [0.0, 1.0, 0.0])
    await store.vectors.upsert(A, "m", "d1", [0.0, 0.0, 1.0], meta="second")
    [hit] = await store.vectors.search(A, "m", [0.0, 0.0, 1.0], limit=1)
    assert (hit.doc_id, hit.meta) == ("d1", "second")
    assert len(await store.vectors.search(A, "m", [1.0, 0.0, 0.0])) == 2  # d1 was replaced, not added
    assert await store.vectors.delete(A, "m", "d1") is True
    assert await store.vectors.delete(A, "m", "d1") is False
    assert [h.doc_id for h in await store.vectors.search(A, "m", [0.0, 0.0, 1.0])] == ["d2"]


async def test_dimensions_are_searched_separately(store: Store) -> None:
    await store.vectors.upsert(A, "mixed", "small", [1.0, 0.0])
    await store.vectors.upsert(A, "mixed", "large", [1.0, 0.0, 0.0])
    assert [h.doc_id for h in await store.vectors.search(A, "mixed", [1.0, 0.0])] == ["small"]
    assert [h.doc_id for h in await store.vectors.search(A, "mixed", [1.0, 0.0, 0.0])] == ["large"]
    assert await store.vectors.search(A, "mixed", [1.0, 0.0, 0.0, 0.0]) == []
    # a document re-embedded with another dimension moves
    await store.vectors.upsert(A, "mixed", "small", [0.0, 1.0, 0.0])
    assert await store.vectors.search(A, "mixed", [1.0, 0.0]) == []


async def test_scopes_and_indexes_are_isolated(store: Store) -> None:
    await store.vectors.upsert(A, "memory", "secret", [1.0, 2.0, 3.0], meta={"who": "acme"})
    for scope in (B, A2):
        assert await store.vectors.search(scope, "memory", [1.0, 2.0, 3.0]) == []
        assert await store.vectors.delete(scope, "memory", "secret") is False
        await store.vectors.upsert(scope, "memory", "secret", [-1.0, 0.0, 0.0])
    assert await store.vectors.search(A, "other-index", [1.0, 2.0, 3.0]) == []
    [hit] = await store.vectors.search(A, "memory", [1.0, 2.0, 3.0])
    assert hit.meta == {"who": "acme"} and hit.score == pytest.approx(1.0, abs=1e-6)


async def test_limit_and_many_vectors(store: Store) -> None:
    rng = random.Random(7)
    vectors = {f"d{i}": [rng.uniform(-1, 1) for _ in range(16)] for i in range(200)}
    for doc_id, vec in vectors.items():
        await store.vectors.upsert(A, "big", doc_id, vec)
        await store.vectors.upsert(B, "big", doc_id, [-x for x in vec])  # the other tenant: opposites
    query = vectors["d17"]
    hits = await store.vectors.search(A, "big", query, limit=5)
    assert len(hits) == 5 and hits[0].doc_id == "d17" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))

    def cos(u: list[float], v: list[float]) -> float:
        return sum(x * y for x, y in zip(u, v, strict=True)) / math.hypot(*u) / math.hypot(*v)

    best = sorted(vectors, key=lambda d: -cos(query, vectors[d]))[:5]
    assert [h.doc_id for h in hits] == best
    assert await store.vectors.search(A, "big", query, limit=0) == []
    assert len(await store.vectors.search(A, "big", query, limit=500)) == 200


@pytest.mark.parametrize(
    ("vector", "error", "match"),
    [
        ([], ValueError, "at least one dimension"),
        ([0.0, 0.0], ValueError, "all zeros"),
        ([1.0, float("nan")], ValueError, r"vector\[1\] must be a finite"),
        ([1.0, float("inf")], ValueError, "finite"),
        ([1e39], ValueError, "float32"),
        ([1.0, "2"], TypeError, r"vector\[1\] must be a number"),
        ([True, 1.0], TypeError, "must be a number"),
        ("1,2", TypeError, "sequence of numbers"),
        (None, TypeError, "sequence of numbers"),
        ([1.0] * 2001, ValueError, "at most 2000"),
    ],
)
async def test_bad_vectors_are_refused(store: Store, vector: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        await store.vectors.upsert(A, "i", "d", vector)  # type: ignore[arg-type]
    with pytest.raises(error, match=match):
        await store.vectors.search(A, "i", vector)  # type: ignore[arg-type]


async def test_vector_bad_input(store: Store) -> None:
    with pytest.raises(TypeError, match="vector meta is not JSON-serializable"):
        await store.vectors.upsert(A, "i", "d", [1.0], meta=object())
    with pytest.raises(ValueError, match="index must not be empty"):
        await store.vectors.upsert(A, "", "d", [1.0])
    with pytest.raises(ValueError, match="limit"):
        await store.vectors.search(A, "i", [1.0], limit=-1)
    await store.vectors.upsert(A, "i", "ints", [1, 2, 3])  # ints are numbers too
    assert [h.doc_id for h in await store.vectors.search(A, "i", [1, 2, 3])] == ["ints"]
