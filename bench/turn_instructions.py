"""Instructions per agent turn (callgrind), side by side for two source trees: what a change costs a turn,
free of the VM's timing noise.

    .venv/bin/python bench/turn_instructions.py --base /tmp/base            # base tree vs this one
    .venv/bin/python bench/turn_instructions.py --base /tmp/base --runs 3   # the spread of 3 runs each

``/tmp/base`` is another checkout (e.g. ``git worktree add /tmp/base <commit>``). For each tree and mode
(``full``: the whole agent; ``loop``: the same loop without memory, learning and the session index, as in
``bench/turn.py``), a child process imports that tree's ``minihermes`` and ``bench/turn.py``, runs N fresh-session
turns of the bench turn (4 LLM calls, 3 calculator calls, every step durable) on a manual clock under
``valgrind --tool=callgrind``, once with N = ``--low`` and once with N = ``--high``; the difference divided by
``high - low`` is one turn's instructions with start-up and warm-up taken out. Every reply is checked.
Needs valgrind (Debian's ``valgrind`` package).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHILD = r"""
import asyncio, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
import turn as T
from minihermes.embed import MiniHermes
from minihermes.runtime import ManualClock
from minihermes.runtime._loop import tune_gc  # every tree has it here; newer ones export it too

# A manual clock: no periodic timer (health polls, gateway ticks) fires, so a run slowed down by callgrind
# does not count more of them than a fast one.
T.MiniHermes = lambda *a, **kw: MiniHermes(*a, clock=ManualClock(), **kw)

async def main(n: int, loop_only: bool) -> None:
    mh = await T.start_mh(tempfile.mkdtemp(prefix="instr-"), latency=0.0, shape="sequential", loop_only=loop_only)
    tune_gc()  # as `minihermes serve` (and bench/turn.py) do once the node runs: start-up objects frozen
    for i in range(n):
        reply = await mh.chat(T.MESSAGE, session_id=f"s{i}")
        T.check_reply(reply, "sequential")
    sys.stdout.flush()
    os._exit(0)  # the same exit for every n: shutting down is not a turn's cost

asyncio.run(main(int(sys.argv[2]), sys.argv[3] == "loop"))
"""


def callgrind(
    tree: Path, n: int, mode: str, python: str, *, separate_threads: bool = False
) -> dict[str, int]:
    """Instructions of one child process running ``n`` turns from ``tree``, by callgrind's output file: one
    file (``cg.out``), or with ``separate_threads`` one per thread (``cg.out-<thread id>``, 01 the main one)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        env = {**os.environ, "PYTHONPATH": str(tree), "MINIHERMES_EVENT_LOOP": "uvloop"}
        env.pop("MINIHERMES_CHECK_APPEND_ONLY", None)
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                f"--separate-threads={'yes' if separate_threads else 'no'}",
                python,
                "-c",
                CHILD,
                str(tree / "bench"),
                str(n),
                mode,
            ],
            check=True,
            env=env,
            cwd=tree,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        totals: dict[str, int] = {}
        for file in Path(tmp).glob("cg.out*"):
            found = re.search(r"^(?:summary|totals):\s+(\d+)", file.read_text(errors="replace"), re.M)
            if found is not None:
                totals[file.name] = int(found.group(1))
    if not totals:
        raise RuntimeError("callgrind wrote no totals")
    return totals


def instructions(tree: Path, n: int, mode: str, python: str) -> int:
    """Total instructions (every thread) of one child process running ``n`` turns from ``tree``."""
    return sum(callgrind(tree, n, mode, python).values())


def per_turn(tree: Path, mode: str, low: int, high: int, python: str) -> float:
    return (instructions(tree, high, mode, python) - instructions(tree, low, mode, python)) / (high - low)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", type=Path, required=True, help="the tree to compare against")
    parser.add_argument("--head", type=Path, default=HERE, help="the tree measured (default: this one)")
    parser.add_argument("--modes", default="full,loop")
    parser.add_argument("--low", type=int, default=20)
    parser.add_argument("--high", type=int, default=60)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    rows = []
    for mode in args.modes.split(","):
        got: dict[str, list[float]] = {"base": [], "head": []}
        for _ in range(args.runs):  # alternate, so both trees see the same machine
            for name, tree in (("base", args.base), ("head", args.head)):
                got[name].append(per_turn(tree.resolve(), mode, args.low, args.high, args.python))
        base, head = statistics.median(got["base"]), statistics.median(got["head"])
        rows.append((mode, got["base"], got["head"], (head - base) / base * 100))
    print(f"| mode | base ({args.base}) | head ({args.head}) | change |")
    print("|---|---|---|---|")
    for mode, base_runs, head_runs, change in rows:
        fmt = lambda xs: " / ".join(f"{x / 1e6:.2f}M" for x in xs)  # noqa: E731
        print(f"| {mode} | {fmt(base_runs)} | {fmt(head_runs)} | {change:+.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
