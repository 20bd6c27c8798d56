"""A store client in a child process, for the multi-process and crash tests.

    python -m tests.store._proc_worker <mode> <db path> [args...]

Every line it prints is a fact that is already durable (printed only after the awaited call returned).
Modes that race wait for "go" on stdin after printing "ready", so the parent can start them together
without sleeping.
"""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path


def _bare_runtime_package() -> None:
    """Import the store without running minihermes/runtime/__init__.py, which loads the whole actor runtime
    (pydantic, httpx, ...): children then start in a fraction of the time, and this also proves the store
    does not depend on the layer above it."""
    import minihermes

    package = types.ModuleType("minihermes.runtime")
    package.__path__ = [str(Path(minihermes.__file__).parent / "runtime")]
    sys.modules.setdefault("minihermes.runtime", package)


_bare_runtime_package()

from minihermes.runtime._clock import ManualClock  # noqa: E402
from minihermes.runtime._loop import run as run_on_loop  # noqa: E402
from minihermes.runtime.store import Store, open_store  # noqa: E402

SCOPE = ("acme", "main")


def emit(*parts: object) -> None:
    print(*parts, flush=True)


async def wait_for_go() -> None:
    emit("ready")
    line = await asyncio.to_thread(sys.stdin.readline)
    assert line.strip() == "go", line


async def take(store: Store) -> None:
    await wait_for_go()
    while (tup := await store.tuples.take(SCOPE, ["job", None])) is not None:
        emit("took", tup[1])


async def consume(store: Store, name: str) -> None:
    await wait_for_go()
    while batch := await store.channels.receive(SCOPE, "q", max_messages=2, receipt=name):
        for msg in batch:
            assert await store.channels.ack(SCOPE, "q", msg.msg_id, receipt=name)
            emit("got", msg.msg_id)


async def lock(store: Store, name: str, rounds: int) -> None:
    await wait_for_go()
    won = 0
    while won < rounds:
        token = await store.locks.try_acquire(SCOPE, "leader", name, ttl=60)
        if token is None:
            await asyncio.sleep(0)
            continue
        emit("token", token)
        assert await store.locks.release(SCOPE, "leader", name, token)
        won += 1


async def crash(store: Store) -> None:
    """Hold some messages unacked, then write forever until killed."""
    for i in range(5):
        emit("sent", await store.channels.send(SCOPE, "q", "held", i))
    for msg in await store.channels.receive(
        SCOPE, "q", max_messages=5, visibility_timeout=60, receipt="crashy"
    ):
        emit("held", msg.msg_id)

    async def writer(w: int) -> None:
        i = 0
        while True:
            key = f"w{w}-{i}"
            await store.kv.put(SCOPE, key, {"w": w, "i": i})
            emit("kv", key)
            emit("sent", await store.channels.send(SCOPE, "q", "work", key))
            await store.checkpoints.save(SCOPE, f"actor{w}", i, key.encode())
            emit("ckpt", w, i)
            i += 1

    await asyncio.gather(*(writer(w) for w in range(8)))


async def main(mode: str, path: str, *args: str) -> None:
    store = open_store("sqlite", path=path, clock=ManualClock())
    await store.open()
    try:
        if mode == "take":
            await take(store)
        elif mode == "consume":
            await consume(store, args[0])
        elif mode == "lock":
            await lock(store, args[0], int(args[1]))
        elif mode == "crash":
            await crash(store)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    finally:
        await store.close()
    emit("done")


if __name__ == "__main__":
    run_on_loop(main(*sys.argv[1:]))
