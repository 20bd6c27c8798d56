"""Instructions per turn along a range of commits (``bench/turn_instructions.py``'s measure, one tree at a time),
split into the event loop's thread and the store's threads: which commit a per-turn cost came in with.

    .venv/bin/python bench/turn_bisect.py 5f5e9cb 604b246 6d2a541            # loop mode, one run each
    .venv/bin/python bench/turn_bisect.py --modes loop,full --runs 2 A B C

Each commit is checked out with ``git worktree add`` under ``--dir`` (default ``/tmp/turn_bisect``; kept for the
next run, removed with ``git worktree remove``); an existing directory is used as it is, so a tree can also be
a path. ``--fill PATH=COMMIT``: take a file missing from the picked commits from COMMIT (a commit that forgot
to add a module breaks the ones after it until the one that adds it).

Why the split: the store's writer thread takes whatever writes are queued when it wakes, so how many write
batches (transactions) a turn makes depends on thread timing, and under valgrind (which runs one thread at a
time and switches at system calls) a change that adds or removes a system call on the writer moves the
number of batches, and the total with it, by a few hundred thousand instructions. The loop thread's count,
where nearly every change to the turn's own Python code lands, moves much less with it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "bench"))

from turn_instructions import callgrind  # noqa: E402


def tree_for(spec: str, root: Path, fills: list[tuple[str, str]]) -> Path:
    if Path(spec).is_dir():
        return Path(spec).resolve()
    path = root / spec
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(path), spec], cwd=HERE, check=True)
    for file, commit in fills:
        target = path / file
        if not target.exists():
            shown = subprocess.run(
                ["git", "show", f"{commit}:{file}"], cwd=HERE, check=True, capture_output=True
            )
            target.write_bytes(shown.stdout)
    return path


def instructions(tree: Path, n: int, mode: str, python: str) -> tuple[int, int]:
    """(loop thread, other threads) instructions of one child process running ``n`` turns from ``tree``."""
    totals = callgrind(tree, n, mode, python, separate_threads=True)
    main = sum(v for name, v in totals.items() if name.endswith("-01"))  # thread 1 is the event loop's
    return main, sum(totals.values()) - main


def per_turn(tree: Path, mode: str, low: int, high: int, python: str) -> tuple[float, float]:
    a, b = instructions(tree, low, mode, python), instructions(tree, high, mode, python)
    return (b[0] - a[0]) / (high - low), (b[1] - a[1]) / (high - low)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trees", nargs="+", help="commits (checked out under --dir) or tree paths")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/turn_bisect"))
    parser.add_argument("--modes", default="loop")
    parser.add_argument("--low", type=int, default=20)
    parser.add_argument("--high", type=int, default=60)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--fill", action="append", default=[], help="PATH=COMMIT")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    fills = [tuple(f.split("=", 1)) for f in args.fill]
    trees = [(spec, tree_for(spec, args.dir, fills)) for spec in args.trees]  # type: ignore[arg-type]
    print("| tree | mode | total | loop thread | store threads |")
    print("|---|---|---|---|---|")
    for mode in args.modes.split(","):
        for spec, tree in trees:
            runs = [per_turn(tree, mode, args.low, args.high, args.python) for _ in range(args.runs)]
            fmt = lambda xs: " / ".join(f"{x / 1e6:.2f}M" for x in xs)  # noqa: E731
            total = [m + o for m, o in runs]
            row = f"| {spec} | {mode} | {fmt(total)} | {fmt([m for m, _ in runs])} | {fmt([o for _, o in runs])} |"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
