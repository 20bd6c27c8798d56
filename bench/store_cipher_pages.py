"""Where encryption at rest costs a turn: pages encrypted and decrypted per turn, and CPU time per turn.

    .venv/bin/python bench/store_cipher_pages.py                # 3 rounds of 200 turns per variant
    .venv/bin/python bench/store_cipher_pages.py --quick

SQLCipher encrypts a page when it writes it (a WAL frame at a commit) and decrypts one when a connection
reads it from the file (a page-cache miss): each costs AES-256-CBC and an HMAC of the page, while a plain
store copies the bytes. This runs ``bench/turn.py``'s fresh-session turn (full agent, 4 LLM calls, 3 tool
calls, every step durable; a manual clock, gc as ``serve``) in a child process per variant and round, and reads
SQLite's own counters of every store connection (``sqlite3_db_status``: ``CACHE_MISS``, pages read from the
file; ``CACHE_WRITE``, pages written) before and after the measured turns:

- no key (the standard library's sqlite3);
- a key, on a file with SQLCipher 4's defaults (HMAC-SHA512 per page: files encrypted before 2026-11-27, and
  new ones on a CPU without SHA-256 instructions);
- a key, on a file with HMAC-SHA256 pages (new files where the CPU has SHA-256 instructions);
- both again with the CPU's SHA extensions hidden from OpenSSL (``OPENSSL_ia32cap``), as on a CPU without
  them (x86-64 only; e.g. Skylake and Cascade Lake Xeons);
- with ``--page-sizes``, HMAC-SHA256 files with 2 KB and with 1 KB pages as well (fewer bytes per frame).

Then the cost of one page read from the file (``--pages``: a fresh connection scans a table of 8,000 rows of
1,000 bytes, 20 times; the lowest of the rounds), for each variant: what a decrypt and its check add to the
copy a plain read is.

CPU time per turn is the process's (every thread), the lowest of the rounds: the VM's other load adds to
wall-clock time, and less to the lowest CPU time. Valgrind is no judge here: it hides the CPU's SHA
extensions from OpenSSL, which then runs SHA-256 in plain instructions (more of them than SHA-512's).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KEY = "3c" * 32
NO_SHA_NI = {"OPENSSL_ia32cap": ":~0x20000000"}  # CPUID leaf 7 EBX bit 29 (SHA) off
VARIANTS: dict[str, tuple[str | None, dict[str, str]]] = {
    "no key": (None, {}),
    "key, HMAC-SHA512": ("SQLCIPHER4", {}),
    "key, HMAC-SHA256": ("SHA256_PAGES", {}),
    "key, HMAC-SHA512, no SHA-NI": ("SQLCIPHER4", NO_SHA_NI),
    "key, HMAC-SHA256, no SHA-NI": ("SHA256_PAGES", NO_SHA_NI),
}
PAGE_SIZE_VARIANTS: dict[str, tuple[str | None, dict[str, str]]] = {
    "key, HMAC-SHA256, 2 KB pages": ("SHA256_PAGES@2048", {}),
    "key, HMAC-SHA256, 1 KB pages": ("SHA256_PAGES@1024", {}),
}


def cipher_profile(spec: str) -> Any:
    """``SQLCIPHER4`` or ``SHA256_PAGES``, optionally ``@<page size>``: a ``_sqlite_keys.CipherProfile``."""
    import dataclasses

    import minihermes.runtime.store._sqlite_keys as keys

    name, _, size = spec.partition("@")
    profile = getattr(keys, name)
    return dataclasses.replace(profile, page_size=int(size)) if size else profile


CACHE_MISS, CACHE_WRITE = 8, 9  # SQLITE_DBSTATUS_CACHE_MISS, SQLITE_DBSTATUS_CACHE_WRITE


def _db_pointer(conn: Any) -> int:
    """The ``sqlite3 *`` of a connection of either driver (the first field after the object header)."""
    return int(ctypes.c_void_p.from_address(id(conn) + 2 * ctypes.sizeof(ctypes.c_void_p)).value or 0)


def _status(lib: Any, conn: Any, op: int) -> int:
    cur, high = ctypes.c_int(), ctypes.c_int()
    lib.sqlite3_db_status(ctypes.c_void_p(_db_pointer(conn)), op, ctypes.byref(cur), ctypes.byref(high), 0)
    return int(cur.value)


def child(variant: str, turns: int, warmup: int) -> dict[str, float]:
    """One variant in this process: counters and CPU time per turn."""
    import asyncio

    sys.path.insert(0, str(HERE))
    import turn as T

    import minihermes.runtime.store._sqlite_engine as engine
    import minihermes.runtime.store._sqlite_keys as keys
    from minihermes.embed import MiniHermes
    from minihermes.runtime import ManualClock
    from minihermes.runtime._loop import tune_gc

    profile = (VARIANTS | PAGE_SIZE_VARIANTS)[variant][0]
    os.environ.pop("MINIHERMES_DB_KEY", None)
    if profile is not None:
        os.environ["MINIHERMES_DB_KEY"] = KEY
        keys.PROFILES = (cipher_profile(profile),)  # type: ignore[assignment]  # the file is made with it
        import sqlcipher3._sqlite3 as driver

        lib = ctypes.CDLL(driver.__file__)
    else:
        lib = ctypes.CDLL("libsqlite3.so.0")  # what the standard library's _sqlite3 links
    conns: list[tuple[str, Any]] = []
    real_connect = engine.connect

    def recording_connect(*args: Any, **kw: Any) -> Any:
        conn = real_connect(*args, **kw)
        thread = threading.current_thread().name  # the pool's threads; not a check's passing connection
        if thread.startswith("minihermes-sqlite-"):
            conns.append(("writer" if "writer" in thread else "readers", conn))
        return conn

    engine.connect = recording_connect  # type: ignore[assignment]
    T.MiniHermes = lambda *a, **kw: MiniHermes(*a, clock=ManualClock(), **kw)

    def counters() -> dict[str, int]:
        out = {"read by the writer": 0, "read by readers": 0, "written": 0}
        for role, conn in conns:
            try:
                conn.total_changes  # noqa: B018  # raises once closed: its sqlite3* is freed then
            except Exception:
                continue
            out[f"read by {'the writer' if role == 'writer' else 'readers'}"] += _status(
                lib, conn, CACHE_MISS
            )
            out["written"] += _status(lib, conn, CACHE_WRITE)
        return out

    async def run() -> dict[str, float]:
        with tempfile.TemporaryDirectory(prefix="mh-cipher-pages-") as d:
            mh = await T.start_mh(d, latency=0.0, shape="sequential", loop_only=False)
            tune_gc()
            try:
                for i in range(warmup):
                    T.check_reply(await mh.chat(T.MESSAGE, session_id=f"w{i}"), "sequential")
                before, cpu0, wall = counters(), time.process_time(), []
                for i in range(turns):
                    t0 = time.perf_counter()
                    T.check_reply(await mh.chat(T.MESSAGE, session_id=f"s{i}"), "sequential")
                    wall.append(time.perf_counter() - t0)
                cpu = time.process_time() - cpu0
                after = counters()
            finally:
                await mh.stop()
        got = {k: (after[k] - before[k]) / turns for k in after}
        return got | {"cpu ms": cpu / turns * 1000, "wall ms": statistics.median(wall) * 1000}

    return asyncio.run(run())


def page_read(variant: str) -> float:
    """Microseconds of CPU per page a fresh connection reads from the file (decrypt, check, SQLite)."""
    import sqlcipher3

    import minihermes.runtime.store._sqlite_keys as keys

    name = (VARIANTS | PAGE_SIZE_VARIANTS)[variant][0]
    with tempfile.TemporaryDirectory(prefix="mh-cipher-page-") as d:
        path = os.path.join(d, "t.db")

        def connect() -> Any:
            conn = sqlcipher3.connect(path, isolation_level=None)
            if name is not None:
                keys.apply_key(conn, f"x'{KEY}'", cipher_profile(name))
            return conn

        conn = connect()
        conn.execute("CREATE TABLE t (x BLOB)")
        conn.execute("BEGIN")
        for _ in range(8_000):
            conn.execute("INSERT INTO t VALUES (randomblob(1000))")
        conn.execute("COMMIT")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.close()
        t0 = time.process_time()
        for _ in range(20):
            conn = connect()  # an empty page cache: every page is read (and decrypted) again
            conn.execute("SELECT count(*) FROM t WHERE substr(x, 1, 1) = x'00'").fetchone()
            conn.close()
        return (time.process_time() - t0) / 20 / pages * 1e6


def pages_table(rounds: int, env: dict[str, str], variants: dict[str, Any]) -> None:
    best: dict[str, float] = {}
    for _ in range(rounds):
        for variant in variants:
            out = subprocess.run(
                [sys.executable, __file__, "--page-child", variant],
                check=True,
                capture_output=True,
                text=True,
                env=env | variants[variant][1],
                cwd=HERE.parent,
            ).stdout
            us = float(out.strip().splitlines()[-1])
            best[variant] = min(best.get(variant, us), us)
    base = best["no key"]
    print()
    print(
        "| one page read from the file (4 KB unless said; lowest of the rounds; no key: sqlcipher3 without one) | us of CPU | added by the cipher |"
    )
    print("|---|---|---|")
    for variant, us in best.items():
        print(f"| {variant} | {us:.2f} | {us - base:+.2f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--pages", action="store_true", help="only the cost of one page read")
    ap.add_argument("--page-sizes", action="store_true", help="also 2 KB and 1 KB pages")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--page-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.turns, args.warmup)))
        return 0
    if args.page_child:
        print(page_read(args.page_child))
        return 0
    rounds, turns, warmup = (1, 20, 5) if args.quick else (args.rounds, args.turns, args.warmup)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MINIHERMES_EVENT_LOOP": "uvloop"}
    variants = VARIANTS | (PAGE_SIZE_VARIANTS if args.page_sizes else {})
    if args.pages:
        pages_table(1 if args.quick else 2 * rounds + 1, env, variants)
        return 0
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    print(
        f"# cipher pages per turn ({turns} turns after {warmup}, {rounds} round(s); load {os.getloadavg()[0]:.2f})"
    )
    for r in range(rounds):
        for variant in variants:  # interleaved: every variant sees the same machine
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    variant,
                    "--turns",
                    str(turns),
                    "--warmup",
                    str(warmup),
                ],
                check=True,
                capture_output=True,
                text=True,
                env=env | variants[variant][1],
                cwd=HERE.parent,
            ).stdout
            results[variant].append(json.loads(out.strip().splitlines()[-1]))
            print(f"  .. round {r + 1}: {variant}: {results[variant][-1]}", file=sys.stderr, flush=True)
    base = min(x["cpu ms"] for x in results["no key"])
    print()
    print(
        "| per turn | pages written (WAL frames) | pages read: writer | pages read: readers "
        "| CPU ms (lowest; runs) | vs no key | wall ms (median of medians) |"
    )
    print("|---|---|---|---|---|---|---|")
    for variant, runs in results.items():
        cpu = min(x["cpu ms"] for x in runs)
        each = " / ".join(f"{x['cpu ms']:.2f}" for x in runs)
        print(
            f"| {variant} | {statistics.median(x['written'] for x in runs):.1f} "
            f"| {statistics.median(x['read by the writer'] for x in runs):.1f} "
            f"| {statistics.median(x['read by readers'] for x in runs):.1f} "
            f"| {cpu:.2f} ({each}) | {(cpu - base) / base * 100:+.1f}% "
            f"| {statistics.median(x['wall ms'] for x in runs):.2f} |"
        )
    pages_table(1 if args.quick else 2 * rounds + 1, env, variants)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
