"""``minihermes backup`` of a serving node under a 20-client write load, ``restore`` into a new data dir, and
``serve`` from it; a damaged page named by ``doctor`` and shown by ``/healthz`` and ``/metrics``."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from .._server import ROOT, serve_process

CLIENTS = 20


def minihermes(*args: str) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own, as an operator (or cron) runs it."""
    return subprocess.run(
        [sys.executable, "-m", "minihermes.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def call(client: httpx.Client, url: str, actor: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
    reply = client.post(f"{url}/api/v1/actors/{actor}/{op}", json=payload, timeout=60)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def memories(url: str) -> set[str]:
    keys: set[str] = set()
    with httpx.Client() as client:
        while True:
            page = call(client, url, "memory", "list_memories", {"limit": 100, "offset": len(keys)})
            got = {m["key"] for m in page["memories"]}
            if not got:
                return keys
            keys |= got


def test_backup_under_write_load_then_restore_and_serve(tmp_path: Path) -> None:
    data = tmp_path / "node" / "data"
    data.parent.mkdir()
    acked: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    enough = threading.Event()

    def client_loop(url: str, c: int) -> None:
        with httpx.Client() as client:
            n = 0
            while not stop.is_set():
                key = f"c{c}-{n}"
                call(client, url, "memory", "store_memory", {"key": key, "value": f"value {n} of client {c}"})
                with lock:
                    acked.append(key)
                    if len(acked) >= 150:
                        enough.set()
                n += 1

    with serve_process(data, []) as url:
        threads = [threading.Thread(target=client_loop, args=(url, c)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        try:
            assert enough.wait(120)
            with lock:
                before = set(acked)  # acknowledged before the backup started
            done = minihermes("backup", str(tmp_path / "bk-1"), "--data-dir", str(data), "--json")
            with lock:
                during = len(acked) - len(before)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert done.returncode == 0, done.stderr
        manifest = json.loads(done.stdout)
        with httpx.Client() as client:
            trail = call(client, url, "audit_event", "verify", {})
    assert during > 0  # the node went on serving writes while the backup ran
    assert trail["ok"], trail
    assert manifest["reason"] == "manual" and manifest["quick_check"] == ["ok"]
    assert "minihermes.db" in {f["path"] for f in manifest["files"]}
    assert not {"node.lock", "node.json"} & {f["path"] for f in manifest["files"]}

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "something").write_text("x")
    refused = minihermes("restore", str(tmp_path / "bk-1"), "--data-dir", str(tmp_path / "taken"))
    assert refused.returncode == 1 and "exists and is not an empty folder" in refused.stderr

    new = tmp_path / "restored" / "data"
    restored = minihermes("restore", str(tmp_path / "bk-1"), "--data-dir", str(new))
    assert restored.returncode == 0, restored.stderr
    assert f"minihermes serve --data-dir {new}" in restored.stdout
    with serve_process(new, []) as url:
        assert before <= memories(url)
        with httpx.Client() as client:
            trail = call(client, url, "audit_event", "verify", {})
            assert trail["ok"] and trail["checked"] > 0, trail
            assert client.get(f"{url}/healthz").json() == {"status": "ok"}


def test_a_corrupted_backup_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_process(data, []) as url, httpx.Client() as client:
        call(client, url, "memory", "store_memory", {"key": "k", "value": "v"})
    assert minihermes("backup", str(tmp_path / "bk"), "--data-dir", str(data)).returncode == 0
    left = {p.name for p in data.iterdir()}  # a stopped node's data dir is left as it was
    assert not left & {"minihermes.db-wal", "minihermes.db-shm", "node.json"}, left
    notes = tmp_path / "bk" / "manifest.json"
    manifest = json.loads(notes.read_text())
    manifest["files"][0]["sha256"] = "0" * 64
    notes.write_text(json.dumps(manifest))
    refused = minihermes("restore", str(tmp_path / "bk"), "--data-dir", str(tmp_path / "new"))
    assert refused.returncode == 1
    assert "corrupted backup" in refused.stderr and "does not match its checksum" in refused.stderr
    assert not (tmp_path / "new").exists()


def damage_a_page(db: Path, table: str) -> int:
    """Garble the cell pointers of one leaf page of ``table``; returns its page number."""
    with sqlite3.connect(db) as conn:
        page = conn.execute(
            "SELECT max(pageno) FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,)
        ).fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    with db.open("r+b") as f:
        f.seek((page - 1) * size + 8)
        f.write(b"\xff\xf0\xff\xf0")
    return int(page)


def test_a_damaged_page_is_named_by_doctor_and_healthz_says_degraded(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_process(data, []) as url, httpx.Client() as client:
        for i in range(60):
            call(client, url, "memory", "store_memory", {"key": f"k{i}", "value": "x" * 200})
    page = damage_a_page(data / "minihermes.db", "kv")

    doctor = minihermes("doctor", "--data-dir", str(data), "--port", "0", "--json")
    checks = {(c["group"], c["name"]): c for c in json.loads(doctor.stdout)["checks"]}
    integrity = checks[("storage", "integrity")]
    assert doctor.returncode == 1 and integrity["status"] == "fail"
    assert f"page {page} of table kv" in integrity["detail"]

    with serve_process(data, []) as url, httpx.Client() as client:
        health = _wait_degraded(client, url)
        assert health["status"] == "degraded" and f"page {page} of table kv" in health["reason"]
        metrics = client.get(f"{url}/metrics").text
        assert "minihermes_store_healthy 0.0" in metrics
        remote = minihermes("doctor", "--url", url, "--json")
        checks = {(c["group"], c["name"]): c for c in json.loads(remote.stdout)["checks"]}
        assert remote.returncode == 1 and checks[("server", "health")]["status"] == "fail"
        assert f"page {page} of table kv" in checks[("storage", "server store")]["detail"]


def _wait_degraded(client: httpx.Client, url: str) -> dict[str, Any]:
    """``/healthz`` once the node's open-time check found the damage (it runs beside serving, not before)."""
    for _ in range(200):
        health: dict[str, Any] = client.get(f"{url}/healthz").json()
        if health["status"] != "ok":
            return health
        threading.Event().wait(0.05)
    raise AssertionError(f"the store check never finished: {health}")


def test_a_backup_through_the_node_goes_to_its_backups_folder_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_process(data, []) as url, httpx.Client() as client:  # one owner, no auth: backups on
        call(client, url, "memory", "store_memory", {"key": "k", "value": "v"})
        made = call(client, url, "health_monitor", "backup", {"label": "nightly"})
        for label in ("../../etc", "/tmp/x", "a/b"):
            bad = client.post(f"{url}/api/v1/actors/health_monitor/backup", json={"label": label})
            assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_argument", bad.text
        dest = client.post(f"{url}/api/v1/actors/health_monitor/backup", json={"dest": str(tmp_path / "x")})
        assert dest.status_code == 422, dest.text  # no argument names a path
    path = Path(made["path"])
    assert path.parent == data / "backups" and path.name.startswith("scheduled-")
    assert path.name.endswith("-nightly") and made["quick_check"] == ["ok"] and made["removed"] == []
    assert sorted(p.name for p in (data / "backups").iterdir()) == [path.name]
    restored = minihermes("restore", str(path), "--data-dir", str(tmp_path / "new"))
    assert restored.returncode == 0, restored.stderr


def test_backups_through_the_node_are_off_with_auth_unless_the_operator_allows_them(
    tmp_path_factory: Any,
) -> None:
    from ._served import TOKENS, served

    with served(tmp_path_factory, "bk-auth") as url:
        reply = httpx.post(
            f"{url}/api/v1/actors/health_monitor/backup",
            json={},
            headers={"Authorization": f"Bearer {TOKENS['CLI_ADMIN']}"},
            timeout=30,
        )
    assert reply.status_code == 403 and reply.json()["error"]["code"] == "permission_denied", reply.text
    assert "backups through the node are off" in reply.json()["error"]["message"]


def test_keep_removes_the_oldest_backups_named_like_dest(tmp_path: Path) -> None:
    import asyncio

    from typer.testing import CliRunner

    from minihermes.cli.main import app
    from minihermes.runtime.store import open_store

    async def make() -> None:
        async with open_store("sqlite", data_dir=str(tmp_path / "data")) as store:
            await store.kv.put(("acme", "main"), "k", 1)

    asyncio.run(make())
    (tmp_path / "bk" / "other-1").mkdir(parents=True)  # not named like DEST: left alone
    for n in range(1, 5):
        done = CliRunner().invoke(
            app,
            ["backup", str(tmp_path / "bk" / f"mh-{n}"), "--data-dir", str(tmp_path / "data"), "--keep", "2"],
        )
        assert done.exit_code == 0, done.output
    assert sorted(p.name for p in (tmp_path / "bk").iterdir()) == ["mh-3", "mh-4", "other-1"]
