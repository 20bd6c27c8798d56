"""The sandbox when the server does not run as root: user namespaces instead of a uid drop.

Run for real by starting a second "server" as uid 65534 (only possible when the tests run as root), with
its own data dir that the sandbox shares a uid with, so only namespaces and landlock can protect it.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534

SERVER = """
import asyncio, json, sys
from minihermes.tools.sandbox import isolation_report, run_python, SandboxLimits

workspace, secret, port = sys.argv[1], sys.argv[2], int(sys.argv[3])

async def main():
    read = await run_python(
        "import sys\\ntry:\\n    print(open(sys.argv[1]).read())\\nexcept OSError as e:\\n    print('refused')",
        workspace, args=[secret])
    net = await run_python(
        "import socket, sys\\ntry:\\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2)\\n"
        "    print('connected')\\nexcept OSError:\\n    print('refused')", workspace, args=[str(port)])
    forks = await run_python(
        "import os, time\\nn = 0\\nfor _ in range(100):\\n    try:\\n        pid = os.fork()\\n"
        "    except OSError:\\n        break\\n    if pid == 0:\\n        time.sleep(30)\\n        os._exit(0)\\n"
        "    n += 1\\nprint(n)", workspace, SandboxLimits(max_processes=10))
    print(json.dumps({
        "report": isolation_report(),
        "read": read.stdout_text.strip(),
        "net": net.stdout_text.strip(),
        "forks": forks.stdout_text.strip(),
        "isolation": sorted(read.isolation),
    }))

asyncio.run(main())
"""


def _reachable_by_others(path: Path) -> bool:
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


@pytest.fixture
def unprivileged_python() -> str:
    if os.geteuid() != 0:
        pytest.skip("starting a server as another uid needs root")
    for candidate in (sys.executable, "/usr/bin/python3"):
        real = Path(os.path.realpath(candidate))
        if real.exists() and _reachable_by_others(real.parent):
            version = subprocess.run(
                [str(real), "-c", "import sys; print(sys.version_info >= (3, 11))"],
                capture_output=True,
                text=True,
                check=False,
            )
            if version.stdout.strip() == "True":
                return str(real)
    pytest.skip("no Python >= 3.11 reachable by an unprivileged uid")


def test_unprivileged_server_still_isolates(
    unprivileged_python: str, workspace: Path, data_dir: Path
) -> None:
    if not _reachable_by_others(REPO):
        pytest.skip("the repository is not readable by an unprivileged uid")
    # The server's own data dir: same uid as the sandbox now, so file permissions protect nothing.
    for path in (workspace, data_dir, data_dir / "credentials.json"):
        os.chown(path, NOBODY, NOBODY)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    try:
        proc = subprocess.run(
            [unprivileged_python, "-c", SERVER, str(workspace), str(data_dir / "credentials.json"),
             str(server.getsockname()[1])],
            user=NOBODY, group=NOBODY, extra_groups=[], env={"PYTHONPATH": str(REPO)}, cwd="/",
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        outcome = json.loads(proc.stdout)
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
    report = outcome["report"]
    assert report["running_as_root"] is False
    assert report["layers"]["user_drop"]["available"] is False
    if not report["filesystem_confined"]:
        pytest.skip("neither mount namespaces nor landlock available to an unprivileged process here")
    assert outcome["read"] == "refused"
    assert outcome["net"] == "refused"
    assert int(outcome["forks"]) < 10
    if report["layers"]["user_namespace"]["available"]:
        assert "user_namespace" in outcome["isolation"]
