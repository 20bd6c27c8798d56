"""Burst benchmark: a real ``minihermes serve`` (loopback, uvloop, SQLite, the offline ``simulated`` model) hit by
issue 17's burst, once with load shedding off and once on, in one run.

    .venv/bin/python bench/burst.py                  # about 2-3 minutes on a 2-core VM
    .venv/bin/python bench/burst.py --quick          # 300 requests over 6 s, for a smoke test
    .venv/bin/python bench/burst.py --modes on       # only the server with shedding on

The burst (the same for both servers): ``--requests`` (2,000) requests sent at an even pace over ``--seconds``
(20), at most ``--concurrency`` (500) in flight from one ``httpx.AsyncClient``; every request is answered or
given up after ``--client-timeout`` (120 s) on the client, so the run is bounded and stops by itself. Tenant
``acme`` sends 95%: agent turns (``agent.chat``, "calculate A * B", one of 400 sessions; the model calls the
calculator and answers) and one read in five (``agent.get_history`` of one of its sessions,
``session_manager.list_sessions``). Tenant ``globex`` sends the other 5% (the same mix): a quiet tenant next
to a busy one. Both authenticate with HS256 JWTs (admin role), as a deployed server would.

The client is ``--concurrency`` workers taking the requests in order, spread over httpx clients of 10
connections each. Meanwhile another process asks ``/healthz`` every 250 ms (2 s timeout per probe). Latency is
measured from the moment a request is sent (a request waits for a free worker before that) to its reply. Each server gets a
fresh data dir and its default timeouts (30 s per request). The server runs in its own process (a child
``minihermes serve --config``), the client in this one; both share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt

from minihermes.app import AGENT_CONFIG
from minihermes.runtime._loop import loop_name
from minihermes.runtime._loop import run as run_main

SECRET = "bench-burst-secret-that-is-long-enough-for-hs256"
REQUEST_TIMEOUT = 30.0
"""The server's default request timeout (``create_app(default_timeout=30)``); the target is p99 <= this."""
SESSIONS = 400


@dataclass
class Result:
    mode: str
    latencies: list[float] = field(default_factory=list)
    by_kind: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    quiet: dict[str, int] = field(default_factory=dict)
    probes: int = 0
    probes_ok: int = 0
    probe_max: float = 0.0
    elapsed: float = 0.0
    after: str = ""
    server_rss_mb: float = 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def token(tenant: str) -> str:
    claims = {"tenant": tenant, "sub": f"{tenant}-bench", "roles": ["admin"], "exp": int(time.time()) + 3600}
    return jwt.encode(claims, SECRET, algorithm="HS256")


def config_text(mode: str, http: list[str]) -> str:
    return (
        AGENT_CONFIG
        + f"\n[http]\nload_shedding = {'true' if mode == 'on' else 'false'}\n"
        + "".join(f"{line}\n" for line in http)
    )


class Server:
    """``minihermes serve`` in a child process on a free loopback port."""

    def __init__(self, mode: str, root: Path, http: list[str]) -> None:
        self.mode = mode
        self.http = http
        self.dir = root / mode
        self.dir.mkdir(parents=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    async def __aenter__(self) -> Server:
        cfg = self.dir / "app.toml"
        cfg.write_text(config_text(self.mode, self.http))
        exe = Path(sys.executable).with_name("minihermes")
        env = {**os.environ, "BENCH_JWT_SECRET": SECRET}
        command = [str(exe), "serve", "--config", str(cfg), "--data-dir", str(self.dir / "data")]
        command += [
            "--port",
            str(self.port),
            "--jwt-secret-env",
            "BENCH_JWT_SECRET",
            "--log-level",
            "warning",
        ]
        self.log = open(self.dir / "serve.log", "wb")  # noqa: ASYNC230  (closed in __aexit__)
        self.proc = subprocess.Popen(  # noqa: ASYNC220  (started once, before the burst)
            command, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        async with httpx.AsyncClient(base_url=self.url, timeout=2) as c:
            for _ in range(600):
                if self.proc.poll() is not None:
                    self.log.close()
                    tail = (self.dir / "serve.log").read_text(errors="replace")[-3000:]
                    raise SystemExit(f"the server exited at start:\n{tail}")
                try:
                    if (await c.get("/readyz")).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise SystemExit("server did not become ready in 60 s")

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():  # type: ignore[union-attr]
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        lines = (self.dir / "serve.log").read_text(errors="replace").splitlines()
        errors = [i for i, line in enumerate(lines) if " ERROR " in line]
        if errors:
            print(f"  [{self.mode}] {len(errors)} errors in the server log, the first:", file=sys.stderr)
            block = [lines[errors[0]]]
            for line in lines[errors[0] + 1 :]:
                if line[:2] == "20":  # the next log record
                    break
                block.append(line)
            for line in block[:1] + block[-12:]:
                print(f"    {line[:300]}", file=sys.stderr)


def plan(n: int, seed: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(tenant, path, body) of every request, in sending order."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tenant = "globex" if rng.random() < 0.05 else "acme"
        session = f"{tenant}-s{rng.randrange(SESSIONS)}"
        pick = rng.random()
        if pick < 0.8:
            a, b = rng.randrange(2, 50), rng.randrange(2, 50)
            out.append(
                (
                    tenant,
                    "/api/v1/actors/agent/chat",
                    {"message": f"calculate {a} * {b}", "session_id": session},
                )
            )
        elif pick < 0.9:
            out.append((tenant, "/api/v1/actors/agent/get_history", {"session_id": session}))
        else:
            out.append((tenant, "/api/v1/actors/session_manager/list_sessions", {}))
    return out


def kind(status: int | None) -> str:
    if status is None:
        return "other"
    if 200 <= status < 300:
        return "2xx"
    return str(status) if status in (429, 503) else "other"


PER_CLIENT = 10
"""Connections per httpx client: the burst spreads over many small pools (one pool of 500 connections costs
the client itself seconds of CPU per second: httpcore matches requests to connections in quadratic time)."""


async def burst(server: Server, args: argparse.Namespace) -> Result:
    result = Result(server.mode)
    headers = {t: {"Authorization": f"Bearer {token(t)}"} for t in ("acme", "globex")}
    requests = plan(args.requests, args.seed)
    pace = args.seconds / len(requests)
    # idle connections are dropped before the server's keep-alive timeout (uvicorn: 5 s) can close them under
    # a request being sent (a ReadError that says nothing about the server)
    limits = httpx.Limits(
        max_connections=PER_CLIENT, max_keepalive_connections=PER_CLIENT, keepalive_expiry=2.0
    )
    timeout = httpx.Timeout(args.client_timeout, connect=args.client_timeout, pool=args.client_timeout)
    clients = [
        httpx.AsyncClient(base_url=server.url, timeout=timeout, limits=limits)
        for _ in range(-(-args.concurrency // PER_CLIENT))
    ]
    queue: asyncio.Queue[tuple[str, str, dict[str, Any]] | None] = asyncio.Queue()
    others: dict[str, int] = {}

    async def worker(client: httpx.AsyncClient) -> None:
        while (item := await queue.get()) is not None:
            tenant, path, body = item
            sent = time.perf_counter()
            status: int | None
            try:
                status = (await client.post(path, json=body, headers=headers[tenant])).status_code
            except httpx.HTTPError as e:
                status = None
                others[type(e).__name__] = others.get(type(e).__name__, 0) + 1
            result.latencies.append(time.perf_counter() - sent)
            k = kind(status)
            result.by_kind.setdefault(k, []).append(result.latencies[-1])
            if k == "other" and status is not None:
                others[str(status)] = others.get(str(status), 0) + 1
            result.statuses[k] = result.statuses.get(k, 0) + 1
            if tenant == "globex":
                result.quiet[k] = result.quiet.get(k, 0) + 1

    stop_file = server.dir / "probe.stop"
    prober = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--probe", server.url, str(stop_file), stdout=subprocess.PIPE
    )
    assert prober.stdout is not None
    await prober.stdout.readline()  # "ready": probing from now on
    workers = [asyncio.ensure_future(worker(clients[i % len(clients)])) for i in range(args.concurrency)]
    start = time.perf_counter()
    for i, item in enumerate(requests):  # an even pace; a request waits only when all workers are busy
        delay = start + i * pace - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait(item)
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    result.elapsed = time.perf_counter() - start
    stop_file.touch()
    out, _ = await prober.communicate()
    probes = json.loads(out)
    result.probes, result.probes_ok, result.probe_max = probes["sent"], probes["ok"], probes["max"]
    # recovery: right after the burst, the next request is answered at once
    t = time.perf_counter()
    r = await clients[0].post(
        "/api/v1/actors/agent/chat",
        json={"message": "calculate 6 * 7", "session_id": "after"},
        headers=headers["acme"],
    )
    result.after = f"{r.status_code} in {1000 * (time.perf_counter() - t):.0f} ms"
    for c in clients:
        await c.aclose()
    if others:
        print(f"  [{server.mode}] other replies: {others}", file=sys.stderr)
    for k, values in sorted(result.by_kind.items()):
        print(
            f"  [{server.mode}] {k}: {len(values)}, p50 {pct(values, 50):.2f} s, p99 {pct(values, 99):.2f} s, "
            f"max {max(values):.2f} s",
            file=sys.stderr,
        )
    result.server_rss_mb = server.rss_mb()
    return result


def probe(url: str, stop_file: str) -> None:
    """``--probe``: ask ``/healthz`` every 250 ms (2 s timeout) until ``stop_file`` exists; print the tally as
    JSON. Its own process, so the burst's client cannot delay it."""
    sent = ok = 0
    worst = 0.0
    with httpx.Client(base_url=url, timeout=2) as c:
        print("ready", flush=True)
        while not os.path.exists(stop_file):
            t = time.perf_counter()
            sent += 1
            try:
                if c.get("/healthz").status_code == 200:
                    ok += 1
                    worst = max(worst, time.perf_counter() - t)
            except httpx.HTTPError:
                pass
            time.sleep(max(0.0, 0.25 - (time.perf_counter() - t)))
    print(json.dumps({"sent": sent, "ok": ok, "max": worst}))


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def render(results: list[Result], args: argparse.Namespace) -> str:
    head = (
        f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} CPUs usable, load avg "
        f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())}; Python {platform.python_version()}, "
        f"client loop {loop_name()}, server: minihermes serve (uvloop), SQLite, simulated model\n"
        f"burst: {args.requests} requests over {args.seconds:g} s, <= {args.concurrency} in flight; "
        f"request timeout {REQUEST_TIMEOUT:g} s; client gives up after {args.client_timeout:g} s; "
        f"[http] {', '.join(args.http) or 'defaults'}\n"
    )
    cols = [
        "shedding",
        "count",
        "2xx",
        "429",
        "503",
        "other",
        "p50 s",
        "p95 s",
        "p99 s",
        "max s",
        "globex 2xx",
        "/healthz ok",
        "/healthz max s",
        "burst s",
        "after",
        "p99 <= 30 s?",
    ]
    rows = []
    for r in results:
        lat = r.latencies
        quiet = sum(r.quiet.values())
        rows.append(
            [
                r.mode,
                str(len(lat)),
                str(r.statuses.get("2xx", 0)),
                str(r.statuses.get("429", 0)),
                str(r.statuses.get("503", 0)),
                str(r.statuses.get("other", 0)),
                f"{pct(lat, 50):.2f}",
                f"{pct(lat, 95):.2f}",
                f"{pct(lat, 99):.2f}",
                f"{max(lat):.2f}",
                f"{r.quiet.get('2xx', 0)}/{quiet}",
                f"{r.probes_ok}/{r.probes}",
                f"{r.probe_max:.3f}",
                f"{r.elapsed:.1f}",
                r.after,
                "yes" if pct(lat, 99) <= REQUEST_TIMEOUT and not r.statuses.get("other") else "NO",
            ]
        )
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) + " |" for row in rows]
    return head + "\n".join([line, sep, *body])


async def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="mh-burst-"))
    results = []
    try:
        for mode in args.modes.split(","):
            print(f"shedding {mode}: starting the server", file=sys.stderr)
            async with Server(mode, root, args.http) as server:
                print(f"shedding {mode}: burst", file=sys.stderr)
                results.append(await burst(server, args))
            print(
                f"shedding {mode}: done ({statistics.fmean(results[-1].latencies):.2f} s mean)",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(render(results, args))


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--probe"]:
        probe(sys.argv[2], sys.argv[3])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--concurrency", type=int, default=500)
    p.add_argument("--client-timeout", type=float, default=120.0)
    p.add_argument("--modes", default="off,on", help="off,on (default), off or on")
    p.add_argument("--seed", type=int, default=17)
    p.add_argument(
        "--http",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an [http] setting for the server with shedding on, e.g. --http max_concurrent_requests=128",
    )
    p.add_argument("--quick", action="store_true", help="300 requests over 6 s")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.seconds = 300, 6.0
    if not set(args.modes.split(",")) <= {"off", "on"}:
        p.error("--modes: off, on or off,on")
    run_main(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
