"""The README's embedding snippet runs as written, pasted into a file of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def snippet(section: str) -> str:
    """The first ```python block after the README heading ``section``."""
    text = (ROOT / "README.md").read_text()
    after = text.split(f"\n## {section}\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", after, re.S)
    assert found, f"no python block under '## {section}'"
    return found.group(1)


@pytest.mark.slow
def test_the_embedding_snippet_runs_as_a_file(tmp_path):
    program = tmp_path / "agent.py"
    program.write_text(snippet("Embedding it"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIHERMES_")}
    out = subprocess.run(
        [sys.executable, str(program)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "'tool': 'word_count'" in out.stdout and "'output': 4" in out.stdout
    assert (tmp_path / "agent-data" / "minihermes.db").exists()  # the data dir it names, beside the file
