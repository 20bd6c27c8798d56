"""MiniHermes cluster benchmark, in one run:

1. Throughput of concurrent agent sessions on 1, 2 and 3 nodes (separate processes on loopback, one NATS
   server, one shared store): S sessions each take one turn at once; the LLM (``cluster_echo``, one call per
   turn) sleeps ``--latency`` seconds (500 ms by default). Every turn enters the cluster through a node other
   than the one its session is active on when there are several nodes (what a load balancer does), so the
   forwarding is in the numbers.
2. Ask latency of a trivial actor: in a node without a cluster, in a clustered node holding the actor, and
   from another clustered node (request/reply over NATS), sequential (p50/p95) and with 64 callers (asks/s).

    .venv/bin/python bench/cluster.py                 # about 1-2 minutes on a 2-core VM
    .venv/bin/python bench/cluster.py --quick         # smaller, for a smoke test

NATS: the server in $MINIHERMES_NATS_URL (``eval "$(scripts/nats.sh)"``), else one started for the run.
Store: SQLite in a temp dir shared by the node processes (PostgreSQL when $MINIHERMES_PG_DSN is set and the
postgres backend is installed). All processes share this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from minihermes.app import prepare_data_dir
from minihermes.cluster import Cluster, ClusterSettings, local_nats
from minihermes.cluster.process import NodeProcess
from minihermes.cluster.testing import drop_pg_schema, uses_postgres
from minihermes.runtime import ActorSpec, GenServer, Node, NodeOptions, RequestContext, SupervisorSpec, call
from minihermes.runtime.store import open_store

NATS_KEYS = ("MINIHERMES_NATS_URL", "MINIHERMES_NATS_PASSWORD", "MINIHERMES_CLUSTER_SECRET")


def progress(msg: str) -> None:
    print(f"  .. {msg}", file=sys.stderr, flush=True)


def q(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


# ------------------------------------------------------------------------------------- 1. sessions on N nodes


async def sessions_on(
    n_nodes: int, sessions: int, tenants: int, latency: float, env: dict[str, str]
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mh-bench-cluster-"))
    data = tmp / "data"
    prepare_data_dir(data)
    cluster = "b" + uuid.uuid4().hex[:8]
    nodes = list(
        await asyncio.gather(*(NodeProcess.start(f"n{i}", data, cluster, env) for i in range(n_nodes)))
    )
    try:
        for t in range(tenants):
            for name, delay in (("echo0", 0.0), ("echo", latency)):
                await nodes[0].ask(
                    "llm_gateway",
                    "register_provider",
                    {"name": name, "kind": "cluster_echo", "model": "echo", "options": {"latency": delay}},
                    tenant=f"t{t}",
                )
            await nodes[0].ask("llm_gateway", "switch_provider", {"provider": "echo0"}, tenant=f"t{t}")

        async def turn(i: int, via: int, text: str) -> float:
            t0 = time.perf_counter()
            reply = await nodes[via % n_nodes].ask(
                "agent",
                "chat",
                {"session_id": f"s{i}", "message": text},
                timeout=120,
                tenant=f"t{i % tenants}",
            )
            if reply.get("status") != "ok" or reply.get("response") != f"echo: {text}":
                raise RuntimeError(f"bad reply {reply}")
            return time.perf_counter() - t0

        # Warm-up (no latency): session i becomes active on node i % N.
        await asyncio.gather(*(turn(i, i, "warm") for i in range(sessions)))
        for t in range(tenants):
            await nodes[0].ask("llm_gateway", "switch_provider", {"provider": "echo"}, tenant=f"t{t}")
        t0 = time.perf_counter()
        times = await asyncio.gather(*(turn(i, i + 1, "go") for i in range(sessions)))
        wall = time.perf_counter() - t0
        fwd = sum([(await n.status()).get("forwarded", 0) for n in nodes])
        return {
            "nodes": n_nodes,
            "sessions": sessions,
            "wall": wall,
            "tps": sessions / wall,
            "p50": q(times, 0.5),
            "p95": q(times, 0.95),
            "forwarded": fwd,
        }
    finally:
        await asyncio.gather(*(n.stop() for n in nodes))
        if uses_postgres():
            await drop_pg_schema(cluster)


# ------------------------------------------------------------------------------------------ 2. ask latency


class Echo(GenServer):
    @call
    def ping(self) -> int:
        return 1


def bench_tree() -> SupervisorSpec:
    return SupervisorSpec(name="root", children=[ActorSpec("echo", Echo, virtual=True)])


async def ask_latency(asks: int, env: dict[str, str]) -> list[dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="mh-bench-ask-"))
    cluster = "b" + uuid.uuid4().hex[:8]
    ctx = RequestContext(tenant="acme")

    def settings() -> ClusterSettings:
        return ClusterSettings(
            nats_url=env["MINIHERMES_NATS_URL"],
            secret=env["MINIHERMES_CLUSTER_SECRET"].encode(),
            name=cluster,
            user=env.get("MINIHERMES_NATS_USER", "node"),
            password=env["MINIHERMES_NATS_PASSWORD"],
        )

    alone = Node(
        open_store("sqlite", data_dir=str(tmp / "alone")), bench_tree(), options=NodeOptions("alone")
    )
    a = Node(open_store("sqlite", data_dir=str(tmp / "shared")), bench_tree(), options=NodeOptions("a"))
    b = Node(open_store("sqlite", data_dir=str(tmp / "shared")), bench_tree(), options=NodeOptions("b"))
    a.fabric, b.fabric = Cluster(settings()), Cluster(settings())
    for node in (alone, a, b):
        await node.start()
    rows = []
    try:
        await alone.ask("echo/k", "ping", ctx=ctx)
        await a.ask("echo/k", "ping", ctx=ctx)  # a holds the lease: b forwards to it
        for label, node in (
            ("in-node, no cluster", alone),
            ("in-node, clustered (actor here)", a),
            ("cross-node (NATS request/reply)", b),
        ):
            for _ in range(min(200, asks)):
                await node.ask("echo/k", "ping", ctx=ctx)
            samples = []
            for _ in range(asks):
                t0 = time.perf_counter()
                await node.ask("echo/k", "ping", ctx=ctx)
                samples.append(time.perf_counter() - t0)
            callers, per = 64, max(1, asks // 64)

            async def caller(node: Node = node, per: int = per) -> None:
                for _ in range(per):
                    await node.ask("echo/k", "ping", ctx=ctx)

            t0 = time.perf_counter()
            await asyncio.gather(*(caller() for _ in range(callers)))
            rate = callers * per / (time.perf_counter() - t0)
            rows.append(
                {
                    "label": label,
                    "p50": q(samples, 0.5) * 1e6,
                    "p95": q(samples, 0.95) * 1e6,
                    "mean": statistics.fmean(samples) * 1e6,
                    "rate": rate,
                }
            )
            progress(f"{label}: p50 {rows[-1]['p50']:.0f} us")
    finally:
        for node in (b, a, alone):
            await node.stop()
    return rows


# ------------------------------------------------------------------------------------------------- report


def render(sess: list[dict[str, Any]], lat: list[dict[str, Any]], args: argparse.Namespace) -> str:
    out = [
        "",
        f"MiniHermes cluster benchmark - {platform.python_version()} on {os.cpu_count()} cores "
        f"({platform.machine()}), nats-server 2.15, store: {'PostgreSQL' if uses_postgres() else 'SQLite (one data dir)'}",
        "",
        f"Concurrent sessions, one turn each, {args.latency * 1000:g} ms per LLM call (ideal: {args.latency:g} s), "
        f"{args.tenants} tenant(s)",
        f"{'nodes':>5} | {'sessions':>8} | {'wall s':>7} | {'turns/s':>8} | {'p50 s':>6} | {'p95 s':>6} | forwarded",
        "-" * 66,
    ]
    for r in sess:
        out.append(
            f"{r['nodes']:>5} | {r['sessions']:>8} | {r['wall']:>7.2f} | {r['tps']:>8.1f} | {r['p50']:>6.2f} | "
            f"{r['p95']:>6.2f} | {r['forwarded']}"
        )
    out += [
        "",
        "Ask latency of a trivial actor (sequential) and throughput with 64 concurrent callers",
        f"{'path':<34} | {'p50 us':>7} | {'p95 us':>7} | {'mean us':>7} | {'asks/s':>8}",
        "-" * 74,
    ]
    for r in lat:
        out.append(
            f"{r['label']:<34} | {r['p50']:>7.0f} | {r['p95']:>7.0f} | {r['mean']:>7.0f} | {r['rate']:>8.0f}"
        )
    return "\n".join(out)


async def run(args: argparse.Namespace, env: dict[str, str]) -> None:
    sess = []
    for n in args.nodes:
        progress(f"{args.sessions} sessions on {n} node(s)")
        sess.append(await sessions_on(n, args.sessions, args.tenants, args.latency, env))
    progress("ask latency")
    lat = await ask_latency(args.asks, env)
    print(render(sess, lat, args))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--tenants", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    ap.add_argument("--asks", type=int, default=2000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.sessions, args.asks = 60, 300
    env = {k: v for k, v in os.environ.items() if k.startswith("MINIHERMES_")}
    # No failover here: a long heartbeat TTL keeps overloaded nodes from fencing themselves mid-run.
    env.setdefault("MINIHERMES_DEMO_NODE_TTL", "20s")
    started = None
    if not all(env.get(k) for k in NATS_KEYS):
        if local_nats.find_server() is None:
            print("nats-server not found: run scripts/nats.sh first", file=sys.stderr)
            return 1
        started = tempfile.mkdtemp(prefix="mh-bench-nats-")
        env.update(local_nats.up(started).exports())
    try:
        asyncio.run(run(args, env))
    finally:
        if started:
            local_nats.down(started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
