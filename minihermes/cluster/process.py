"""Demo nodes (``minihermes.cluster.testing``) as child processes, driven over their stdin/stdout: used by
tests/cluster, bench/cluster.py and anyone trying a cluster from Python."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from minihermes.runtime import ActorError

ROOT = Path(__file__).resolve().parents[2]
"""The repository (the child runs ``python -m minihermes.cluster.testing`` from it)."""


class NodeProcess:
    """One node process: ``ask`` sends a command line and awaits its answer line."""

    def __init__(self, node_id: str, proc: asyncio.subprocess.Process) -> None:
        self.node_id = node_id
        self.proc = proc
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None
        self.ready = asyncio.get_running_loop().create_future()
        self.dead = False

    @classmethod
    async def start(cls, node_id: str, data_dir: Path, cluster: str, env: dict[str, str]) -> NodeProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "minihermes.cluster.testing",
            node_id,
            str(data_dir),
            cluster,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=open(data_dir / f"{node_id}.log", "ab"),  # noqa: ASYNC230 - opening a log file is instant
            env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
            cwd=str(ROOT),
        )
        self = cls(node_id, proc)
        self._reader = asyncio.ensure_future(self._read())
        await asyncio.wait_for(self.ready, 60)
        return self

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            if "ready" in msg:
                self.ready.set_result(True)
                continue
            fut = self._waiting.pop(msg["id"], None)
            if fut is not None and not fut.done():
                if "err" in msg:
                    fut.set_exception(ActorError.from_dict({"error": msg["err"]}))
                else:
                    fut.set_result(msg["ok"])
        self.dead = True
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(ActorError(f"node {self.node_id} exited", code="node_exited"))
        self._waiting.clear()
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(f"node {self.node_id} exited before it was ready"))

    async def ask(
        self, target: str, op: str, payload: dict[str, Any] | None = None, *, timeout: float = 30.0, **kw: Any
    ) -> Any:
        if self.dead:
            raise ActorError(f"node {self.node_id} exited", code="node_exited")
        assert self.proc.stdin is not None
        cid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = fut
        cmd = {
            "id": cid,
            "cmd": "ask",
            "target": target,
            "op": op,
            "payload": payload or {},
            "timeout": timeout,
        }
        self.proc.stdin.write((json.dumps({**cmd, **kw}) + "\n").encode())
        return await asyncio.wait_for(fut, timeout + 5)

    async def status(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        cid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = fut
        self.proc.stdin.write((json.dumps({"id": cid, "cmd": "status"}) + "\n").encode())
        result: dict[str, Any] = await asyncio.wait_for(fut, 10)
        return result

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._reader is not None:
            await self._reader
