"""TextIndex.compact: a removed document leaves no trace, in the index's answers (every backend) and, on
SQLite, in the bytes of the database files (FTS5 keeps deleted words in old segments until a merge)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import Store, open_store

from .conftest import A, B

TOKEN = "zqxj7k3p"


async def test_compact_keeps_what_was_not_removed(store: Store) -> None:
    for i in range(30):
        await store.text.upsert(
            A, "notes", f"d{i}", {"body": f"note {i} about {TOKEN if i % 3 == 0 else 'x'}"}
        )
    await store.text.upsert(B, "notes", "b", {"body": f"globex {TOKEN}"})
    for i in range(0, 30, 3):
        assert await store.text.remove(A, "notes", f"d{i}")
    assert await store.text.compact(A, ["notes", "never-made"]) == 1
    assert await store.text.search(A, "notes", TOKEN) == []
    assert len(await store.text.search(A, "notes", "note", limit=100)) == 20
    assert [h.doc_id for h in await store.text.search(B, "notes", TOKEN)] == ["b"]  # another tenant's
    assert await store.text.compact(A, []) == 0


def _bytes_hold(folder: Path, token: str) -> list[str]:
    return [p.name for p in folder.iterdir() if p.is_file() and token.encode() in p.read_bytes()]


async def test_sqlite_files_hold_no_removed_words_after_compact(tmp_path: Path) -> None:
    store = open_store("sqlite", path=tmp_path / "store.db", clock=ManualClock(1000.0))
    await store.open()
    try:
        # Enough documents that FTS5 writes several segments, and one of them holds the token.
        for i in range(200):
            body = f"passport {TOKEN} of doc {i}" if i == 7 else f"ordinary words number {i} here"
            await store.text.upsert(A, "notes", f"d{i}", {"body": body}, meta={"text": body})
        assert await store.text.remove(A, "notes", "d7")
        before = _bytes_hold(tmp_path, TOKEN)
        await store.text.compact(A, ["notes"])
        after_compact = _bytes_hold(tmp_path, TOKEN)
    finally:
        await store.close()
    assert before  # without the merge the removed words are still in a segment (or the WAL)
    assert after_compact == []  # merged, zeroed, the WAL truncated: while the store is open
    assert _bytes_hold(tmp_path, TOKEN) == []
    with sqlite3.connect(tmp_path / "store.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
