"""A child that re-encrypts a store, for the SIGKILL-mid-rotation test.

    python -m tests.store._rotation_worker <data dir> <new key file>

With MINIHERMES_DB_KEY holding the current key: opens the store, prints "rotating", re-encrypts it with the
new key (``SqliteStore.rotate_key``, as a serving node does), prints "rotated", then waits to be killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from minihermes.runtime._loop import run as run_on_loop
from minihermes.runtime.store import open_store
from minihermes.runtime.store._sqlite_keys import parse_key
from tests.store._proc_worker import emit


async def main(data_dir: str, new_key_file: str) -> None:
    import asyncio

    store = open_store("sqlite", data_dir=data_dir)
    await store.open()
    key = parse_key(await asyncio.to_thread(Path(new_key_file).read_bytes), f"file {new_key_file}")
    emit("rotating")
    await store.rotate_key(key)  # type: ignore[attr-defined]
    emit("rotated")
    await asyncio.Event().wait()  # the parent's SIGKILL ends it


if __name__ == "__main__":
    run_on_loop(main(sys.argv[1], sys.argv[2]))
