"""What encryption at rest costs: durable messages/s and instructions per agent turn, with and without a key.

    .venv/bin/python bench/store_encryption.py                  # both parts (a few minutes: callgrind)
    .venv/bin/python bench/store_encryption.py --skip-instructions
    .venv/bin/python bench/store_encryption.py --quick          # smoke test

Durable messages: ``bench/runtime.py``'s workload (200 virtual actors, each message changes the actor's state
and is checkpointed before its reply; the store is reopened afterwards and every committed count checked) on
three stores, interleaved (a round of each, ``--rounds`` times; the median is reported): the standard
library's sqlite3 (what a store without a key runs), the same store through sqlcipher3 without a key (its
newer SQLite, no encryption), and sqlcipher3 with a raw 256-bit key (every page AES-256-CBC + an HMAC: SHA-256
on a CPU with SHA-256 instructions, else SHA-512).
The loop and gc are those of ``minihermes serve``.

A turn's wall-clock time: ``bench/turn.py``'s turn in-process, 200 fresh-session turns after 20 of warm-up, median,
without and with the key, interleaved. Instructions per turn: ``bench/turn_instructions.py``'s callgrind count of one fresh-session turn of
``bench/turn.py`` (full agent, 4 LLM calls, 3 tool calls, every step durable), for this tree without and with
``MINIHERMES_DB_KEY`` set; and callgrind's instructions per durable message of each of the three stores
(the durable workload at 2,000 and 12,000 messages, the difference divided by 10,000), which a busy 2-core
VM does not blur as it blurs messages/s. Needs valgrind.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import runtime as R  # noqa: E402  (bench/runtime.py)
import turn_instructions as TI  # noqa: E402

import minihermes.runtime.store._sqlite_engine as engine  # noqa: E402
from minihermes.runtime.store._sqlite_keys import cipher_versions  # noqa: E402

KEY = "3c" * 32
STD_SQLITE3 = engine.sqlite3


def configure(variant: str) -> None:
    """Make the stores opened from now on run ``variant``."""
    import sqlcipher3

    os.environ.pop("MINIHERMES_DB_KEY", None)
    engine.sqlite3 = STD_SQLITE3  # type: ignore[attr-defined]
    if variant == "sqlcipher3, no key":
        engine.sqlite3 = sqlcipher3  # type: ignore[attr-defined]  # the driver of keyless connections
    elif variant == "sqlcipher3, key":
        os.environ["MINIHERMES_DB_KEY"] = KEY


VARIANTS = ("stdlib sqlite3", "sqlcipher3, no key", "sqlcipher3, key")


def durable(sz: Any, rounds: int, loop: str) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for variant in VARIANTS:
            configure(variant)
            rate, _ = R.run_loop(R.bench_durable_many(sz, 1), choice=loop)
            rates[variant].append(rate)
            print(f"  .. round {r + 1}: {variant}: {rate:,.0f}/s", file=sys.stderr, flush=True)
    configure("stdlib sqlite3")
    return rates


DURABLE_CHILD = r"""
import dataclasses, os, sys
sys.path.insert(0, sys.argv[1])
import store_encryption as E
E.configure(sys.argv[3])
sz = dataclasses.replace(E.R.QUICK, durable_msgs=int(sys.argv[2]))
E.R.tune_gc()
E.R.run_loop(E.R.bench_durable_many(sz, 1), choice="uvloop")
sys.stdout.flush()
os._exit(0)
"""


def callgrind_total(args: list[str]) -> int:
    """Instructions (every thread) of ``python -c <args>`` under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                "--separate-threads=no",
                sys.executable,
                "-c",
                *args,
            ],
            check=True,
            cwd=HERE.parent,
            env={k: v for k, v in os.environ.items() if k != "MINIHERMES_DB_KEY"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        text = Path(out).read_text(errors="replace")
    found = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
    if found is None:
        raise RuntimeError("callgrind wrote no totals")
    return int(found.group(1))


def durable_instructions(low: int, high: int) -> dict[str, float]:
    """callgrind's instructions per durable message for each variant: (N=high - N=low) / (high - low)."""
    out = {}
    for variant in VARIANTS:
        counts = [callgrind_total([DURABLE_CHILD, str(HERE), str(n), variant]) for n in (low, high)]
        out[variant] = (counts[1] - counts[0]) / (high - low)
        print(
            f"  .. {variant}: {out[variant]:,.0f} instructions per durable message",
            file=sys.stderr,
            flush=True,
        )
    return out


async def _turns(key: str | None, warmup: int, turns: int) -> float:
    """Median wall-clock ms of one fresh-session turn of bench/turn.py (full agent, no LLM latency)."""
    import turn as T

    os.environ.pop("MINIHERMES_DB_KEY", None)
    if key is not None:
        os.environ["MINIHERMES_DB_KEY"] = key
    with tempfile.TemporaryDirectory(prefix="mh-enc-turn-") as d:
        mh = await T.start_mh(d, latency=0.0, shape="sequential", loop_only=False)
        try:
            times = []
            for i in range(warmup + turns):
                t0 = time.perf_counter()
                reply = await mh.chat(T.MESSAGE, session_id=f"s{i}")
                times.append(time.perf_counter() - t0)
                T.check_reply(reply, "sequential")
        finally:
            await mh.stop()
    os.environ.pop("MINIHERMES_DB_KEY", None)
    return statistics.median(times[warmup:]) * 1000


def turn_times(rounds: int, warmup: int, turns: int, loop: str) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {"no key": [], "key": []}
    for r in range(rounds):
        for name, key in (("no key", None), ("key", KEY)):
            got[name].append(R.run_loop(_turns(key, warmup, turns), choice=loop))
            print(f"  .. round {r + 1}: turn, {name}: {got[name][-1]:.2f} ms", file=sys.stderr, flush=True)
    return got


def instructions(low: int, high: int) -> dict[str, float]:
    out = {}
    for name, key in (("no key", None), ("key", KEY)):
        os.environ.pop("MINIHERMES_DB_KEY", None)
        if key is not None:
            os.environ["MINIHERMES_DB_KEY"] = key
        out[name] = TI.per_turn(HERE.parent, "full", low, high, sys.executable)
        print(f"  .. {name}: {out[name] / 1e6:.2f}M instructions per turn", file=sys.stderr, flush=True)
    os.environ.pop("MINIHERMES_DB_KEY", None)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-instructions", action="store_true")
    ap.add_argument("--low", type=int, default=20)
    ap.add_argument("--high", type=int, default=60)
    ap.add_argument("--loop", default=os.environ.get(R.LOOP_ENV, "auto"))
    args = ap.parse_args(argv)
    sz = R.QUICK if args.quick else R.FULL
    settings = R.use_settings(args.loop, "serve")
    started = time.perf_counter()
    cipher, cipher_sqlite = cipher_versions()
    print(f"# store encryption ({settings}; stdlib SQLite {STD_SQLITE3.sqlite_version}, ", end="")
    print(f"SQLCipher {cipher} with SQLite {cipher_sqlite}; load {os.getloadavg()[0]:.2f})")
    rates = durable(sz, 1 if args.quick else args.rounds, args.loop)
    base = statistics.median(rates["stdlib sqlite3"])
    print()
    print(
        f"| durable messages/s ({sz.durable_msgs:,} msgs, {sz.durable_actors} actors) | median | runs | vs stdlib |"
    )
    print("|---|---|---|---|")
    for variant, runs in rates.items():
        med = statistics.median(runs)
        print(
            f"| {variant} | {med:,.0f} | {' / '.join(f'{x:,.0f}' for x in runs)} | {(med - base) / base * 100:+.1f}% |"
        )
    turns = turn_times(
        1 if args.quick else args.rounds, 5 if args.quick else 20, 20 if args.quick else 200, args.loop
    )
    base_t = statistics.median(turns["no key"])
    print()
    print(
        "| one fresh-session turn, wall clock (bench/turn.py's, no LLM latency) | median ms | runs | vs no key |"
    )
    print("|---|---|---|---|")
    for name, runs in turns.items():
        med = statistics.median(runs)
        print(
            f"| {name} | {med:.2f} | {' / '.join(f'{x:.2f}' for x in runs)} | {(med - base_t) / base_t * 100:+.1f}% |"
        )
    if not args.skip_instructions:
        low, high = (1_000, 3_000) if args.quick else (2_000, 12_000)
        per_message = durable_instructions(low, high)
        base_i = per_message["stdlib sqlite3"]
        print()
        print(
            f"| instructions per durable message (callgrind, {high:,} - {low:,} msgs) | per message | vs stdlib |"
        )
        print("|---|---|---|")
        for variant, n in per_message.items():
            print(f"| {variant} | {n:,.0f} | {(n - base_i) / base_i * 100:+.1f}% |")
        low, high = (2, 6) if args.quick else (args.low, args.high)
        got = instructions(low, high)
        print()
        print("| instructions per turn (callgrind, full agent) | per turn | vs no key |")
        print("|---|---|---|")
        for name, n in got.items():
            print(f"| {name} | {n / 1e6:.2f}M | {(n - got['no key']) / got['no key'] * 100:+.1f}% |")
    print(f"\ntotal benchmark time: {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
