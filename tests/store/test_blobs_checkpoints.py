"""BlobStore and CheckpointStore contracts."""

from __future__ import annotations

import asyncio

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import BlobInfo, Checkpoint, FencedOut, Store

from .conftest import A, B


async def test_blob_roundtrip_and_overwrite(store: Store, clock: ManualClock) -> None:
    data = bytes(range(256)) * 100
    await store.blobs.put(A, "files/a.bin", data)
    assert await store.blobs.get(A, "files/a.bin") == data
    await clock.advance(5)
    await store.blobs.put(A, "files/a.bin", b"{}", content_type="application/json")
    assert await store.blobs.get(A, "files/a.bin") == b"{}"
    assert await store.blobs.list(A) == [BlobInfo("files/a.bin", 2, "application/json", clock.time())]


async def test_blob_empty_bytes_and_bytearray(store: Store) -> None:
    await store.blobs.put(A, "empty", b"")
    assert await store.blobs.get(A, "empty") == b""
    await store.blobs.put(A, "ba", bytearray(b"xy"))  # type: ignore[arg-type]
    assert await store.blobs.get(A, "ba") == b"xy"


async def test_blob_delete_and_list_prefix(store: Store) -> None:
    for name in ["img/2.png", "img/1.png", "doc/a", "img_x", "img"]:
        await store.blobs.put(A, name, name.encode(), "text/plain")
    assert [b.name for b in await store.blobs.list(A, "img/")] == ["img/1.png", "img/2.png"]
    assert [b.name for b in await store.blobs.list(A, "img")] == ["img", "img/1.png", "img/2.png", "img_x"]
    assert [b.size for b in await store.blobs.list(A, "doc")] == [5]
    assert await store.blobs.delete(A, "img/1.png") is True
    assert await store.blobs.delete(A, "img/1.png") is False
    assert await store.blobs.get(A, "img/1.png") is None
    assert len(await store.blobs.list(A)) == 4


async def test_blob_bad_input(store: Store) -> None:
    with pytest.raises(TypeError, match="blob data must be bytes"):
        await store.blobs.put(A, "x", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="blob name must not be empty"):
        await store.blobs.put(A, "", b"")
    with pytest.raises(TypeError, match="content_type"):
        await store.blobs.put(A, "x", b"", content_type=None)  # type: ignore[arg-type]


async def test_checkpoint_save_load_overwrite_delete(store: Store, clock: ManualClock) -> None:
    assert await store.checkpoints.load(A, "agent/1") is None
    await store.checkpoints.save(A, "agent/1", 1, b"one")
    await clock.advance(1)
    await store.checkpoints.save(A, "agent/1", 2, b"two")
    assert await store.checkpoints.load(A, "agent/1") == Checkpoint("agent/1", 2, b"two", clock.time())
    assert await store.checkpoints.delete(A, "agent/1") is True
    assert await store.checkpoints.delete(A, "agent/1") is False
    assert await store.checkpoints.load(A, "agent/1") is None


async def test_checkpoint_list_prefix(store: Store) -> None:
    for actor in ["agent/2", "agent/1", "agent_x", "cron"]:
        await store.checkpoints.save(A, actor, 1, b"")
    assert await store.checkpoints.list(A) == ["agent/1", "agent/2", "agent_x", "cron"]
    assert await store.checkpoints.list(A, "agent/") == ["agent/1", "agent/2"]


async def test_concurrent_checkpoint_saves_of_one_actor_last_wins(store: Store) -> None:
    # Issued in order on one loop: every save returns after commit and the final state is the last one.
    await asyncio.gather(*(store.checkpoints.save(A, "hot", v, str(v).encode()) for v in range(1, 101)))
    checkpoint = await store.checkpoints.load(A, "hot")
    assert checkpoint is not None and (checkpoint.state_version, checkpoint.data) == (100, b"100")


async def test_concurrent_saves_of_many_actors_are_all_durable(store: Store) -> None:
    await asyncio.gather(*(store.checkpoints.save(A, f"a{i}", i, b"x" * i) for i in range(200)))
    loaded = await asyncio.gather(*(store.checkpoints.load(A, f"a{i}") for i in range(200)))
    assert [(c.state_version, len(c.data)) for c in loaded if c] == [(i, i) for i in range(200)]


async def test_load_with_returns_the_checkpoint_and_what_the_reader_read_off_the_loop(
    store: Store, clock: ManualClock
) -> None:
    import threading

    loop_thread = threading.current_thread()
    where: list[threading.Thread] = []

    def reader() -> str:
        where.append(threading.current_thread())
        return "soul text"

    assert await store.checkpoints.load_with(A, "agent/9", reader) == (None, "soul text")
    await store.checkpoints.save(A, "agent/9", 3, b"state")
    got = await store.checkpoints.load_with(A, "agent/9", reader)
    assert got == (Checkpoint("agent/9", 3, b"state", clock.time()), "soul text")
    assert len(where) == 2 and loop_thread not in where
    with pytest.raises(ValueError, match="actor_id must not be empty"):
        await store.checkpoints.load_with(A, "", reader)
    assert len(where) == 2  # refused before anything ran


async def test_checkpoint_bad_input(store: Store) -> None:
    with pytest.raises(TypeError, match="state_version"):
        await store.checkpoints.save(A, "a", "1", b"")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="checkpoint data must be bytes"):
        await store.checkpoints.save(A, "a", 1, {"state": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="actor_id must not be empty"):
        await store.checkpoints.load(A, "")


# -- fences: a newer lease holder's claim refuses the old holder's saves ----------------------------------


async def test_a_claim_returns_the_checkpoint_and_refuses_lower_fences_from_then_on(store: Store) -> None:
    await store.checkpoints.save(A, "agent/s1", 1, b'{"n": 1}', fence=5)  # the old holder (lease rev 5)
    got = await store.checkpoints.claim(A, "agent/s1", 7)  # a new holder (rev 7) takes over
    assert got is not None and got.data == b'{"n": 1}'
    with pytest.raises(FencedOut):  # the old holder, frozen past its lease, wakes and saves
        await store.checkpoints.save(A, "agent/s1", 1, b'{"n": 99}', fence=5)
    assert (await store.checkpoints.load(A, "agent/s1")).data == b'{"n": 1}'  # type: ignore[union-attr]
    await store.checkpoints.save(A, "agent/s1", 1, b'{"n": 2}', fence=7)  # the holder's own saves go on
    await store.checkpoints.save(A, "agent/s1", 1, b'{"n": 3}', fence=8)  # and a higher fence (not claimed)
    assert (await store.checkpoints.load(A, "agent/s1")).data == b'{"n": 3}'  # type: ignore[union-attr]
    with pytest.raises(FencedOut):  # claiming with an older fence than one claimed before
        await store.checkpoints.claim(A, "agent/s1", 6)
    assert await store.checkpoints.claim(A, "agent/s1", 7) is not None  # the same fence again is fine


async def test_a_claim_of_an_actor_with_no_checkpoint_still_fences_it(store: Store) -> None:
    assert await store.checkpoints.claim(A, "agent/new", 3) is None
    with pytest.raises(FencedOut):  # the stale holder must not create the row either
        await store.checkpoints.save(A, "agent/new", 1, b"{}", fence=2)
    assert await store.checkpoints.load(A, "agent/new") is None


async def test_unfenced_saves_and_other_actors_are_not_affected(store: Store) -> None:
    await store.checkpoints.claim(A, "agent/s1", 9)
    await store.checkpoints.save(A, "agent/s1", 1, b'{"single": true}')  # one node, no fence: never refused
    await store.checkpoints.save(A, "agent/s2", 1, b"{}", fence=1)
    await store.checkpoints.save(B, "agent/s1", 1, b"{}", fence=1)  # another tenant's actor of that name
    assert (await store.checkpoints.load(A, "agent/s1")).data == b'{"single": true}'  # type: ignore[union-attr]


async def test_in_one_group_commit_only_the_fenced_out_save_fails(store: Store) -> None:
    await store.checkpoints.claim(A, "stale", 10)
    results = await asyncio.gather(
        store.checkpoints.save(A, "fine", 1, b'{"a": 1}', fence=1),
        store.checkpoints.save(A, "stale", 1, b'{"b": 1}', fence=9),
        store.checkpoints.save(A, "plain", 1, b'{"c": 1}'),
        return_exceptions=True,
    )
    assert results[0] is None and isinstance(results[1], FencedOut) and results[2] is None
    assert (await store.checkpoints.load(A, "fine")).data == b'{"a": 1}'  # type: ignore[union-attr]
    assert await store.checkpoints.load(A, "stale") is None


async def test_fence_bad_input(store: Store) -> None:
    for bad in ("1", 1.5, True):
        with pytest.raises(TypeError):
            await store.checkpoints.claim(A, "x", bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await store.checkpoints.save(A, "x", 1, b"{}", fence=bad)  # type: ignore[arg-type]


def _arrays(cp: Checkpoint | None) -> dict[str, list[object]]:
    import json

    assert cp is not None
    return {name: json.loads(array) for name, array in cp.items.items()}


async def test_checkpoint_items_are_appended_cut_and_replaced_with_the_checkpoint(store: Store) -> None:
    cps = store.checkpoints
    await cps.save(A, "agent/1", 1, b"{}", items=(("history", 0, (b'{"n":0}', b'{"n":1}')),))
    await cps.save(A, "agent/1", 1, b"{}", items=(("history", 2, (b'{"n":2}',)), ("log", 0, (b"1",))))
    assert _arrays(await cps.load(A, "agent/1")) == {"history": [{"n": 0}, {"n": 1}, {"n": 2}], "log": [1]}
    # From position 1 on: the stored items are replaced (the last one changed, one appended).
    await cps.save(A, "agent/1", 1, b"{}", items=(("history", 1, (b'{"n":10}', b'{"n":11}')),))
    assert _arrays(await cps.load(A, "agent/1"))["history"] == [{"n": 0}, {"n": 10}, {"n": 11}]
    # Replaced by a shorter list: nothing of the old one is left; a save without items keeps them.
    await cps.save(A, "agent/1", 1, b"{}", items=(("history", 0, (b"7",)),))
    await cps.save(A, "agent/1", 2, b'{"x":1}')
    cp = await cps.load(A, "agent/1")
    assert cp is not None and cp.data == b'{"x":1}' and _arrays(cp) == {"history": [7], "log": [1]}
    await cps.save(A, "agent/1", 2, b"{}", items=(("log", 0, ()),))  # emptied
    assert _arrays(await cps.load(A, "agent/1")) == {"history": [7]}
    loaded, _ = await cps.load_with(A, "agent/1", lambda: None)
    assert _arrays(loaded) == {"history": [7]}
    # Another tenant's actor of the same name sees none of it; delete takes the items with the checkpoint.
    await cps.save(B, "agent/1", 1, b"{}")
    assert _arrays(await cps.load(B, "agent/1")) == {}
    assert await cps.delete(A, "agent/1") is True
    assert await cps.load(A, "agent/1") is None
    await cps.save(A, "agent/1", 1, b"{}")
    assert _arrays(await cps.load(A, "agent/1")) == {}


async def test_saves_of_one_actor_collapsed_in_a_pass_keep_every_item_change(store: Store) -> None:
    cps = store.checkpoints
    await cps.save(A, "a", 1, b"{}", items=(("h", 0, (b"0", b"1")),))
    # Three saves registered in one loop pass go out as one: their changes are merged in order.
    futures = [
        cps.save_nowait(A, "a", 1, b"{}", items=(("h", 2, (b"2", b"3")),)),
        cps.save_nowait(A, "a", 1, b"{}", items=(("h", 3, (b"30", b"4")), ("g", 0, (b"9",)))),
        cps.save_nowait(A, "a", 1, b'{"last":true}'),
        cps.save_nowait(A, "a", 1, b'{"last":true}', items=(("h", 5, (b"5",)),)),
    ]
    await asyncio.gather(*futures)
    cp = await cps.load(A, "a")
    assert cp is not None and cp.data == b'{"last":true}'
    assert _arrays(cp) == {"g": [9], "h": [0, 1, 2, 30, 4, 5]}
    await asyncio.gather(
        cps.save_nowait(A, "a", 1, b"{}", items=(("h", 6, (b"6",)),)),
        cps.save_nowait(A, "a", 1, b"{}", items=(("h", 1, (b"1",)),)),  # a replacement after an append
    )
    assert _arrays(await cps.load(A, "a"))["h"] == [0, 1]


async def test_a_refused_fenced_save_leaves_the_items_alone(store: Store) -> None:
    cps = store.checkpoints
    await cps.claim(A, "leased", 2)
    await cps.save(A, "leased", 1, b"{}", fence=2, items=(("h", 0, (b"1",)),))
    with pytest.raises(FencedOut):
        await cps.save(A, "leased", 1, b"{}", fence=1, items=(("h", 0, (b"99",)),))
    assert _arrays(await cps.claim(A, "leased", 3)) == {"h": [1]}


@pytest.mark.parametrize(
    ("items", "error"),
    [
        ("h", TypeError),
        ((("h", 0),), TypeError),
        ((("not a name", 0, ()),), ValueError),
        ((("h", -1, ()),), ValueError),
        ((("h", True, ()),), TypeError),
        ((("h", 0, b"x"),), TypeError),
        ((("h", 0, ("text",)),), TypeError),
    ],
)
async def test_bad_checkpoint_items_are_refused(store: Store, items: object, error: type) -> None:
    with pytest.raises(error):
        await store.checkpoints.save(A, "a", 1, b"{}", items=items)  # type: ignore[arg-type]
    assert await store.checkpoints.load(A, "a") is None
