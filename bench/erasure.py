"""What forgetting costs in the full-text index: ``text.compact`` (FTS5 ``optimize``) after removals, on SQLite.

    .venv/bin/python bench/erasure.py            # 10k, 100k documents
    .venv/bin/python bench/erasure.py --quick    # 1k, 10k

One index (a tenant's ``transcripts``) of N documents shaped like session-index windows (about 60 analysed
words from a 5,000-word vocabulary), written in batches of 500 as turns are. Then one user's share (1%) is
removed, and ``compact`` merges the index into one segment. Reported: the time of the removals, of the
compact (FTS5 reads and rewrites every segment, so it grows with the index, not with what was removed), the
database size before and after, and whether the removed documents' words are still in the file's bytes
(yes before compact, never after: the point of it).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import open_store

SCOPE = ("acme", "default")
INDEX = "transcripts"
WORDS = [f"w{i:04d}" for i in range(5000)]


def _body(rng: random.Random, marker: str) -> str:
    return " ".join([*rng.choices(WORDS, k=60), marker])


def _file_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())


async def run(n: int) -> dict[str, float | int | bool]:
    rng = random.Random(n)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = open_store("sqlite", path=folder / "store.db", clock=ManualClock(1000.0))
        await store.open()
        try:
            gone = set(rng.sample(range(n), max(1, n // 100)))
            for start in range(0, n, 500):
                docs = [
                    (f"d{i}", {"terms": _body(rng, f"forgetme{i}" if i in gone else "kept")}, {"i": i})
                    for i in range(start, min(n, start + 500))
                ]
                await store.text.upsert_many(SCOPE, INDEX, docs)
            size_before = (folder / "store.db").stat().st_size
            t0 = time.perf_counter()
            for i in sorted(gone):
                await store.text.remove(SCOPE, INDEX, f"d{i}")
            t1 = time.perf_counter()
            residue_before = b"forgetme" in _file_bytes(folder)
            await store.text.compact(SCOPE, [INDEX])
            t2 = time.perf_counter()
            residue_after = b"forgetme" in _file_bytes(folder)
            size_after = (folder / "store.db").stat().st_size
        finally:
            await store.close()
    return {
        "docs": n,
        "removed": len(gone),
        "remove_s": t1 - t0,
        "compact_s": t2 - t1,
        "mb_before": size_before / 1e6,
        "mb_after": size_after / 1e6,
        "residue_before": residue_before,
        "residue_after": residue_after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    sizes = [1_000, 10_000] if parser.parse_args().quick else [10_000, 100_000]
    print(f"{'docs':>8} {'removed':>8} {'remove s':>9} {'compact s':>10} {'MB':>13} {'words left':>16}")
    for n in sizes:
        r = asyncio.run(run(n))
        print(
            f"{r['docs']:>8} {r['removed']:>8} {r['remove_s']:>9.2f} {r['compact_s']:>10.2f} "
            f"{r['mb_before']:>6.1f}->{r['mb_after']:<6.1f} "
            f"{'yes' if r['residue_before'] else 'no':>6} -> {'yes' if r['residue_after'] else 'no'}"
        )


if __name__ == "__main__":
    main()
