"""The examples in examples/ run as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_runtime_counter_example():
    out = subprocess.run(
        [sys.executable, "examples/runtime_counter.py"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "first run: {'count': 2}" in out.stdout
    assert "after restart: {'count': 5}" in out.stdout
    assert "invalid_argument" in out.stdout and "'field': 'amount'" in out.stdout


@pytest.mark.slow
def test_embed_agent_example_keeps_history_across_runs(tmp_path):
    runs = [
        subprocess.run(
            [sys.executable, "examples/embed_agent.py", str(tmp_path / "data")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert "714" in r.stdout
        assert "word_count({'text': 'the quick brown fox'}) -> 4" in r.stdout
    first = int(runs[0].stdout.rsplit("messages in the session:", 1)[1])
    second = int(runs[1].stdout.rsplit("messages in the session:", 1)[1])
    assert second > first
