"""MiniHermes runtime benchmark: ask latency/throughput against a bare asyncio actor, Pykka and Ray, plus
durable (checkpointed) message throughput and channel round trips on the SQLite store.

    .venv/bin/python bench/runtime.py                      # full run (about a minute, plus Ray's start-up)
    .venv/bin/python bench/runtime.py --quick --skip-ray   # smoke test, a few seconds

Every measurement runs on a fresh event loop (and, where a store is involved, a fresh temp data dir) with the
real SystemClock; times are time.perf_counter(). The loop and collector settings are those `minihermes serve`
runs with (uvloop, frozen start-up objects and its gc thresholds; ``--loop`` and ``--gc`` choose); the best
durable configuration is measured once more on asyncio's own loop with Python's default gc, for comparison. Latencies are per request, measured one at a time after a
warm-up; throughputs are requests completed per wall-clock second with many callers in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from minihermes.runtime import (
    ActorSpec,
    GenServer,
    Node,
    NodeOptions,
    SupervisorSpec,
    SystemClock,
    call,
    state,
)
from minihermes.runtime._loop import CHOICES as LOOP_CHOICES
from minihermes.runtime._loop import ENV as LOOP_ENV
from minihermes.runtime._loop import loop_factory, tune_gc
from minihermes.runtime._loop import run as run_loop
from minihermes.runtime.store import open_store

# ------------------------------------------------------------------------------------------------ sizes


@dataclass(frozen=True)
class Sizes:
    warmup: int
    ask_seq: int  # sequential asks for the latency percentiles
    ask_callers: int  # concurrent callers for throughput
    ask_tput: int  # total asks for throughput
    pykka_seq: int
    pykka_tput: int
    ray_seq: int
    ray_tput: int
    durable_actors: int
    durable_msgs: int
    durable_seq: int  # one actor, sequential asks
    durable_fanin: int  # callers per actor in the second durable configuration
    durable_repeats: int  # runs per durable configuration (the median is reported: 2 shared cores are noisy)
    chan_seq: int  # sequential send+receive+ack round trips
    chan_pairs: int  # producer/consumer pairs (one channel each)
    chan_pairs_msgs: int
    chan_batch_msgs: int  # batched configuration
    chan_batch_producers: int
    chan_batch_consumers: int
    chan_batch_size: int


FULL = Sizes(
    warmup=2_000,
    ask_seq=20_000,
    ask_callers=100,
    ask_tput=50_000,
    pykka_seq=20_000,
    pykka_tput=20_000,
    ray_seq=2_000,
    ray_tput=5_000,
    durable_actors=200,
    durable_msgs=50_000,
    durable_seq=3_000,
    durable_fanin=5,
    durable_repeats=3,
    chan_seq=3_000,
    chan_pairs=50,
    chan_pairs_msgs=20_000,
    chan_batch_msgs=40_000,
    chan_batch_producers=200,
    chan_batch_consumers=4,
    chan_batch_size=100,
)

QUICK = Sizes(
    warmup=200,
    ask_seq=2_000,
    ask_callers=100,
    ask_tput=5_000,
    pykka_seq=1_000,
    pykka_tput=2_000,
    ray_seq=200,
    ray_tput=500,
    durable_actors=200,
    durable_msgs=4_000,
    durable_seq=300,
    durable_fanin=5,
    durable_repeats=1,
    chan_seq=300,
    chan_pairs=50,
    chan_pairs_msgs=2_000,
    chan_batch_msgs=4_000,
    chan_batch_producers=200,
    chan_batch_consumers=4,
    chan_batch_size=100,
)

SCOPE = ("bench", "default")
RAY_INIT_TIMEOUT = 60.0
RAY_RUN_TIMEOUT = 120.0


# ------------------------------------------------------------------------------------------------ results


@dataclass
class Row:
    section: str
    name: str
    system: str
    p50_us: float | None = None
    p99_us: float | None = None
    rate: float | None = None  # per second
    workload: str = ""
    target: str = ""
    met: bool | None = None


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) in microseconds of samples given in seconds."""
    s = sorted(samples)
    n = len(s)

    def q(p: float) -> float:
        return s[min(n - 1, max(0, round(p * (n - 1))))] * 1e6

    return q(0.50), q(0.99)


async def seq_latency(
    ask: Callable[[int], Awaitable[Any]], n: int, warmup: int
) -> tuple[float, float, float]:
    """n requests one after another (after warmup ones): (p50 µs, p99 µs, requests/s)."""
    for i in range(warmup):
        await ask(i)
    gc.collect()
    lat: list[float] = []
    append = lat.append
    clock = time.perf_counter
    start = clock()
    for i in range(n):
        t0 = clock()
        await ask(i)
        append(clock() - t0)
    rate = n / (clock() - start)
    return (*percentiles(lat), rate)


async def timed_callers(ask: Callable[[int], Awaitable[Any]], per: int, callers: int) -> float:
    """Seconds for `callers` concurrent callers to make `per` sequential asks each."""

    async def caller() -> None:
        for i in range(per):
            await ask(i)

    gc.collect()
    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return time.perf_counter() - t0


async def concurrent_rate(ask: Callable[[int], Awaitable[Any]], total: int, callers: int) -> float:
    per = total // callers
    return per * callers / await timed_callers(ask, per, callers)


# ------------------------------------------------------------------------------------------------ (a) bare asyncio


class BareActor:
    """The honest minimal baseline: an asyncio.Queue of (msg, future) and one task that answers them."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[Any, asyncio.Future[Any] | None]] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        queue = self.queue
        while True:
            msg, fut = await queue.get()
            if fut is None:
                return
            fut.set_result(msg)  # the "handler": echo

    async def ask(self, msg: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((msg, fut))
        return await fut

    async def stop(self) -> None:
        self.queue.put_nowait((None, None))
        await self.task


# ------------------------------------------------------------------------------------------------ (b) our runtime


class Echo(GenServer):
    """Stateless: no state() fields, so the runtime never writes a checkpoint for it."""

    @call
    def echo(self, value: Any = None) -> Any:
        return value


class DurableCounter(GenServer):
    """One durable field changed by every message; default checkpoint_interval=1 (committed before reply)."""

    count: int = state(default=0)

    @call
    def add(self, amount: int = 1) -> int:
        self.count += amount
        return self.count


async def start_node(data_dir: str, *children: ActorSpec, inline_calls: bool = True) -> Node:
    clock = SystemClock()
    store = open_store("sqlite", data_dir=data_dir, clock=clock)
    node = Node(
        store,
        SupervisorSpec(name="root", children=list(children)),
        options=NodeOptions(inline_calls=inline_calls),
        clock=clock,
    )
    await node.start()
    return node


@dataclass
class AskResult:
    p50_us: float
    p99_us: float
    rate: float


async def bench_ask_side_by_side(sz: Sizes) -> tuple[AskResult, AskResult, AskResult, float]:
    """(a) bare asyncio actor, (b) our stateless GenServer as nodes run it (a plain call to an idle actor
    runs in the caller's task) and (c) the same with ``inline_calls`` off (every ask through the actor's
    mailbox and task, as (a) does), measured interleaved in one process and loop: rotating blocks of
    sequential asks, then rotating rounds of concurrent asks, so that all see the same machine conditions
    (this 2-core VM is shared). Returns (bare, ours, mailbox, checkpoints written by ours)."""
    rounds = max(3, min(9, sz.ask_tput // 5_000))
    with tempfile.TemporaryDirectory(prefix="mh-bench-") as d:
        node = await start_node(os.path.join(d, "a"), ActorSpec("echo", Echo))
        node2 = await start_node(os.path.join(d, "b"), ActorSpec("echo", Echo), inline_calls=False)
        bare = BareActor()
        try:

            async def ours(i: int) -> Any:
                return await node.ask("echo", "echo", {"value": i})

            async def mailbox(i: int) -> Any:
                return await node2.ask("echo", "echo", {"value": i})

            assert await ours(7) == 7 and await bare.ask(7) == 7 and await mailbox(7) == 7
            systems: dict[str, Callable[[int], Awaitable[Any]]] = {
                "bare": bare.ask,
                "ours": ours,
                "mailbox": mailbox,
            }
            orders = [("bare", "ours", "mailbox"), ("ours", "mailbox", "bare"), ("mailbox", "bare", "ours")]
            for fn in systems.values():
                for i in range(sz.warmup):
                    await fn(i)
                await concurrent_rate(fn, sz.warmup * 2, sz.ask_callers)
            lat: dict[str, list[float]] = {k: [] for k in systems}
            count = dict.fromkeys(systems, 0)
            spent = dict.fromkeys(systems, 0.0)
            clock = time.perf_counter
            block = sz.ask_seq // rounds
            per_round = sz.ask_tput // rounds
            for r in range(rounds):
                for name in orders[r % 3]:
                    fn = systems[name]
                    out = lat[name]
                    gc.collect()
                    for i in range(block):
                        t0 = clock()
                        await fn(i)
                        out.append(clock() - t0)
            per = per_round // sz.ask_callers
            for r in range(rounds):
                for name in orders[r % 3]:
                    spent[name] += await timed_callers(systems[name], per, sz.ask_callers)
                    count[name] += per * sz.ask_callers
            checkpoints = node.metrics.counter("checkpoints_total")
        finally:
            await bare.stop()
            await node.stop(deadline=10)
            await node2.stop(deadline=10)
    res = {k: AskResult(*percentiles(lat[k]), count[k] / spent[k]) for k in systems}
    return res["bare"], res["ours"], res["mailbox"], checkpoints


# ------------------------------------------------------------------------------------------------ (c) Pykka


def bench_pykka(sz: Sizes) -> tuple[float, float, float]:
    import pykka

    class PykkaEcho(pykka.ThreadingActor):
        def on_receive(self, message: Any) -> Any:
            return message

    ref = PykkaEcho.start()
    try:
        for i in range(sz.warmup):
            ref.ask(i)
        gc.collect()
        lat: list[float] = []
        clock = time.perf_counter
        for i in range(sz.pykka_seq):
            t0 = clock()
            ref.ask(i)
            lat.append(clock() - t0)
        p50, p99 = percentiles(lat)

        callers = sz.ask_callers
        per = sz.pykka_tput // callers
        barrier = threading.Barrier(callers + 1)

        def caller() -> None:
            barrier.wait()
            for i in range(per):
                ref.ask(i)

        threads = [threading.Thread(target=caller, daemon=True) for _ in range(callers)]
        for t in threads:
            t.start()
        gc.collect()
        t0 = time.perf_counter()
        barrier.wait()
        for t in threads:
            t.join()
        rate = per * callers / (time.perf_counter() - t0)
    finally:
        ref.stop()
    return p50, p99, rate


# ------------------------------------------------------------------------------------------------ (d) Ray


def ray_child(sz: Sizes) -> int:
    """Runs in a child process (--ray-child): ray.init in the main thread, then the Ray measurements, reported as
    tagged lines on stdout. A separate process because ray.init must run in a main thread (the head processes it
    starts die with the thread that started them), and because a Ray failure may abort the whole process."""
    t0 = time.perf_counter()
    try:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except BaseException as e:
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"RAY_INIT_FAILED {type(e).__name__}: {first}", flush=True)
        return 1
    print(f"RAY_INIT_OK {time.perf_counter() - t0:.1f}", flush=True)
    try:
        p50, p99, rate = bench_ray(sz)
        print("RAY_RESULT " + json.dumps({"p50": p50, "p99": p99, "rate": rate}), flush=True)
    except BaseException as e:
        print(f"RAY_FAILED {type(e).__name__}: {e}", flush=True)
    finally:
        ray.shutdown()
    return 0


def run_ray(
    quick: bool, init_timeout: float, run_timeout: float
) -> tuple[tuple[float, float, float] | None, str]:
    """Start the --ray-child process and collect its results. Returns (p50, p99, rate) or None, and a note or
    the reason Ray was skipped. The child runs in its own session; on a timeout that session is killed."""
    import queue
    import signal
    import subprocess

    try:
        import ray  # noqa: F401  (only checks that it is installed)
    except Exception as e:
        return None, f"cannot import ray: {type(e).__name__}: {e}"
    cmd = [sys.executable, os.path.abspath(__file__), "--ray-child"] + (["--quick"] if quick else [])
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()

    def next_line(deadline: float) -> str | None:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            line = lines.get(timeout=left)  # queue.Empty on timeout
            if line is None or line.startswith("RAY_"):
                return line

    def stop_child() -> None:
        if proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)  # the child's own session: the child and what Ray started in it
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue

    def stderr_tail() -> str:
        err.seek(0)
        tail = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
        return tail[-1][:200] if tail else "no output"

    try:
        try:
            line = next_line(time.monotonic() + init_timeout)
        except (TimeoutError, queue.Empty):
            return None, f"ray.init did not finish within {init_timeout:.0f} s"
        if line is None:
            return None, f"ray child exited with {proc.wait()}: {stderr_tail()}"
        if line.startswith("RAY_INIT_FAILED"):
            return None, line.split(" ", 1)[1]
        init_s = line.split(" ", 1)[1]
        try:
            line = next_line(time.monotonic() + run_timeout)
        except (TimeoutError, queue.Empty):
            return None, f"ray benchmark did not finish within {run_timeout:.0f} s"
        if line is None:
            return None, f"ray child exited with {proc.wait()}: {stderr_tail()}"
        if not line.startswith("RAY_RESULT "):
            return None, line.split(" ", 1)[1] if " " in line else line
        r = json.loads(line.split(" ", 1)[1])
        return (r["p50"], r["p99"], r["rate"]), f"ray.init took {init_s} s (not included)"
    finally:
        try:
            proc.wait(timeout=30)  # ray.shutdown() in the child
        except subprocess.TimeoutExpired:
            pass
        stop_child()
        err.close()


def bench_ray(sz: Sizes) -> tuple[float, float, float]:
    import ray

    @ray.remote
    class RayEcho:
        def echo(self, value: Any) -> Any:
            return value

    actor = RayEcho.remote()  # type: ignore[attr-defined]
    try:
        for i in range(max(50, sz.warmup // 10)):
            ray.get(actor.echo.remote(i))
        lat: list[float] = []
        clock = time.perf_counter
        for i in range(sz.ray_seq):
            t0 = clock()
            ray.get(actor.echo.remote(i))
            lat.append(clock() - t0)
        p50, p99 = percentiles(lat)

        # "100 concurrent callers" for Ray: keep 100 requests in flight from the driver (Ray's own idiom).
        window = sz.ask_callers
        total = sz.ray_tput
        t0 = time.perf_counter()
        pending = [actor.echo.remote(i) for i in range(min(window, total))]
        sent = len(pending)
        done = 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            ray.get(ready)
            done += len(ready)
            while sent < total and len(pending) < window:
                pending.append(actor.echo.remote(sent))
                sent += 1
        rate = done / (time.perf_counter() - t0)
    finally:
        ray.kill(actor)
    return p50, p99, rate


# ------------------------------------------------------------------------------------------------ durable messages


async def bench_durable_many(sz: Sizes, callers_per_actor: int = 1) -> tuple[float, float]:
    """Many virtual actors, each driven by callers_per_actor concurrent callers; every message changes the
    actor's state and is checkpointed (committed) before its reply. Afterwards the store is reopened and every
    actor's committed count is read back: the total must equal the number of replies received."""
    actors = sz.durable_actors
    callers = actors * callers_per_actor
    per = sz.durable_msgs // callers
    total = per * callers
    with tempfile.TemporaryDirectory(prefix="mh-bench-") as d:
        node = await start_node(d, ActorSpec("c", DurableCounter, virtual=True))
        try:
            # activate every actor (restore + first checkpoint) before timing
            await asyncio.gather(*(node.ask(f"c/{i}", "add", {"amount": 0}) for i in range(actors)))
            before = node.metrics.counter("checkpoints_total")

            async def caller(i: int) -> None:
                addr = f"c/{i % actors}"
                for _ in range(per):
                    await node.ask(addr, "add", {"amount": 1})

            gc.collect()
            t0 = time.perf_counter()
            await asyncio.gather(*(caller(i) for i in range(callers)))
            elapsed = time.perf_counter() - t0
            checkpoints = node.metrics.counter("checkpoints_total") - before
        finally:
            await node.stop(deadline=30)
        store = open_store("sqlite", data_dir=d, clock=SystemClock())
        await store.open()
        try:
            committed = 0
            for i in range(actors):
                cp = await store.checkpoints.load(("default", "default"), f"c/{i}")
                assert cp is not None, f"no checkpoint for c/{i}"
                committed += json.loads(cp.data)["count"]
        finally:
            await store.close()
    assert committed == total, f"committed total {committed} != {total} replied messages"
    return total / elapsed, checkpoints


async def bench_durable_single(sz: Sizes) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(prefix="mh-bench-") as d:
        node = await start_node(d, ActorSpec("c", DurableCounter, virtual=True))
        try:

            async def ask(i: int) -> Any:
                return await node.ask("c/solo", "add", {"amount": 1})

            result = await seq_latency(ask, sz.durable_seq, warmup=max(20, sz.durable_seq // 20))
            count = await node.ask("c/solo", "add", {"amount": 0})
            assert count == sz.durable_seq + max(20, sz.durable_seq // 20), count
        finally:
            await node.stop(deadline=10)
    return result


# ------------------------------------------------------------------------------------------------ channels


async def open_bench_store(d: str) -> Any:
    store = open_store("sqlite", data_dir=d, clock=SystemClock())
    await store.open()
    return store


async def bench_chan_seq(sz: Sizes) -> tuple[float, float, float]:
    """One coroutine: send, receive(max_messages=1), ack; one message at a time."""
    with tempfile.TemporaryDirectory(prefix="mh-bench-") as d:
        store = await open_bench_store(d)
        ch = store.channels
        try:

            async def round_trip(i: int) -> None:
                await ch.send(SCOPE, "seq", "m", {"i": i})
                (m,) = await ch.receive(SCOPE, "seq")
                assert await ch.ack(SCOPE, "seq", m.msg_id, m.receipt)

            p50, p99, rate = await seq_latency(round_trip, sz.chan_seq, warmup=max(20, sz.chan_seq // 20))
            depth = await ch.depth(SCOPE, "seq")
            assert (depth.ready, depth.in_flight) == (0, 0), depth
        finally:
            await store.close()
    return p50, p99, rate


async def bench_chan_pairs(sz: Sizes) -> float:
    """N concurrent producer/consumer pairs, each on its own channel; each pair is one closed loop of
    send -> receive(max_messages=1) -> ack (the producer waits for its message's ack before sending the next)."""
    pairs = sz.chan_pairs
    per = sz.chan_pairs_msgs // pairs
    with tempfile.TemporaryDirectory(prefix="mh-bench-") as d:
        store = await open_bench_store(d)
        ch = store.channels
        try:

            async def pair(k: int) -> None:
                name = f"pair-{k}"
                for i in range(per):
                    await ch.send(SCOPE, name, "m", {"i": i})
                    (m,) = await ch.receive(SCOPE, name)
                    assert await ch.ack(SCOPE, name, m.msg_id, m.receipt)

            gc.collect()
            t0 = time.perf_counter()
            await asyncio.gather(*(pair(k) for k in range(pairs)))
            rate = pairs * per / (time.perf_counter() - t0)
        finally:
            await store.close()
    return rate


async def bench_chan_batched(sz: Sizes, producers: int, consumers: int, batch: int) -> float:
    """Producers send concurrently to one channel; consumers receive(max_messages=batch) and ack every message
    of the batch concurrently. Rate = messages sent, received and acked per second, end to end."""
    total = sz.chan_batch_msgs
    per = total // producers
    total = per * producers
    with tempfile.TemporaryDirectory(prefix="mh-bench-") as d:
        store = await open_bench_store(d)
        ch = store.channels
        try:
            seen: set[str] = set()
            acked = 0
            finished = asyncio.Event()

            async def producer(k: int) -> None:
                for i in range(per):
                    await ch.send(SCOPE, "work", "m", {"p": k, "i": i})

            async def consumer() -> None:
                nonlocal acked
                while not finished.is_set():
                    msgs = await ch.receive(SCOPE, "work", max_messages=batch)
                    if not msgs:
                        await asyncio.sleep(0.0005)  # nothing ready yet: poll again shortly
                        continue
                    oks = await asyncio.gather(*(ch.ack(SCOPE, "work", m.msg_id, m.receipt) for m in msgs))
                    assert all(oks)
                    seen.update(m.msg_id for m in msgs)
                    acked += len(msgs)
                    if acked >= total:
                        finished.set()

            gc.collect()
            t0 = time.perf_counter()
            await asyncio.gather(
                *(producer(k) for k in range(producers)), *(consumer() for _ in range(consumers))
            )
            rate = total / (time.perf_counter() - t0)
            assert acked == total == len(seen), (acked, total, len(seen))
            depth = await ch.depth(SCOPE, "work")
            assert (depth.ready, depth.in_flight) == (0, 0), depth
        finally:
            await store.close()
    return rate


async def bench_chan_batch_api(sz: Sizes, consumers: int, batch: int) -> float:
    """One producer sends with send_batch (one durable write per batch); consumers receive(max_messages=batch)
    and ack the whole batch with ack_batch (one durable write). Rate = messages per second, end to end."""
    total = sz.chan_batch_msgs
    with tempfile.TemporaryDirectory(prefix="mh-bench-") as d:
        store = await open_bench_store(d)
        ch = store.channels
        try:
            seen: set[str] = set()
            acked = 0
            finished = asyncio.Event()

            async def producer() -> None:
                for start in range(0, total, batch):
                    await ch.send_batch(
                        SCOPE, "bulk", [("m", {"i": i}) for i in range(start, min(total, start + batch))]
                    )

            async def consumer(k: int) -> None:
                nonlocal acked
                receipt = f"consumer-{k}"
                while not finished.is_set():
                    msgs = await ch.receive(SCOPE, "bulk", max_messages=batch, receipt=receipt)
                    if not msgs:
                        await asyncio.sleep(0.0005)  # nothing ready yet: poll again shortly
                        continue
                    n = await ch.ack_batch(SCOPE, "bulk", [m.msg_id for m in msgs], receipt=receipt)
                    assert n == len(msgs)
                    seen.update(m.msg_id for m in msgs)
                    acked += n
                    if acked >= total:
                        finished.set()

            gc.collect()
            t0 = time.perf_counter()
            await asyncio.gather(producer(), *(consumer(k) for k in range(consumers)))
            rate = total / (time.perf_counter() - t0)
            assert acked == total == len(seen), (acked, total, len(seen))
            depth = await ch.depth(SCOPE, "bulk")
            assert (depth.ready, depth.in_flight) == (0, 0), depth
        finally:
            await store.close()
    return rate


# ------------------------------------------------------------------------------------------------ output


def fmt_us(v: float | None) -> str:
    return "" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def fmt_rate(v: float | None) -> str:
    return "" if v is None else f"{v:,.0f}"


def fmt_met(v: bool | None) -> str:
    return "" if v is None else ("yes" if v else "NO")


DEFAULT_GC = gc.get_threshold()


def use_settings(loop: str, gc_mode: str) -> str:
    """Apply the collector settings for what follows (process-wide) and describe loop and gc for the report."""
    if gc_mode == "serve":
        tune_gc()  # as `minihermes serve` does once its node runs
    else:
        gc.unfreeze()
        gc.set_threshold(*DEFAULT_GC)
    name = "uvloop" if loop_factory(loop) is not None else "asyncio loop"
    return f"{name}, {'gc as serve' if gc_mode == 'serve' else 'default gc'}"


def machine_lines(settings: str) -> list[str]:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        affinity = os.cpu_count() or 0
    try:
        load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        load = "n/a"
    versions = []
    for pkg in ("pykka", "ray"):
        try:
            from importlib.metadata import version

            versions.append(f"{pkg} {version(pkg)}")
        except Exception:
            versions.append(f"{pkg} (not installed)")
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return [
        f"machine: {os.cpu_count()} cores ({affinity} usable), {cpu}",
        f"python {platform.python_version()} ({platform.python_implementation()}), {platform.system()} "
        f"{platform.release()}, {settings}; {', '.join(versions)}",
        f"load average at start (1/5/15 min): {load}",
    ]


def render(report: Report, header: list[str], elapsed: float, quick: bool) -> None:
    title = "MiniHermes runtime benchmark" + (" (--quick: small samples, numbers are rough)" if quick else "")
    cols = ["Measurement", "System", "p50 µs", "p99 µs", "Throughput /s", "Workload", "Target", "Met?"]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain-text fallback
        Console = None  # type: ignore[assignment,misc]

    if Console is not None:
        console = Console(width=max(160, int(os.environ.get("COLUMNS", "0") or 0)), highlight=False)
        for line in header:
            console.print(line)
        table = Table(title=title, show_lines=False)
        for c in cols:
            table.add_column(
                c,
                justify="right" if c in ("p50 µs", "p99 µs", "Throughput /s") else "left",
                no_wrap=c not in ("Workload",),
                overflow="fold",
            )
        section = None
        for r in report.rows:
            if section is not None and r.section != section:
                table.add_section()
            section = r.section
            met = fmt_met(r.met)
            table.add_row(
                r.name,
                r.system,
                fmt_us(r.p50_us),
                fmt_us(r.p99_us),
                fmt_rate(r.rate),
                r.workload,
                r.target,
                f"[green]{met}[/]" if r.met else f"[bold red]{met}[/]" if r.met is False else met,
            )
        console.print(table)
        for s in report.skipped:
            console.print(s)
        for n in report.notes:
            console.print(f"note: {n}")
        console.print(f"total benchmark time: {elapsed:.1f} s")
        return

    for line in header:  # pragma: no cover - rich is a dependency
        print(line)
    print(title)
    data = [cols] + [
        [
            r.name,
            r.system,
            fmt_us(r.p50_us),
            fmt_us(r.p99_us),
            fmt_rate(r.rate),
            r.workload,
            r.target,
            fmt_met(r.met),
        ]
        for r in report.rows
    ]
    widths = [max(len(row[i]) for row in data) for i in range(len(cols))]
    for row in data:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    for s in report.skipped:
        print(s)
    for n in report.notes:
        print(f"note: {n}")
    print(f"total benchmark time: {elapsed:.1f} s")


# ------------------------------------------------------------------------------------------------ main


def progress(msg: str) -> None:
    print(f"  .. {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="small sample counts (a smoke test of a few seconds)"
    )
    ap.add_argument("--skip-ray", action="store_true", help="do not start Ray")
    ap.add_argument(
        "--loop",
        choices=LOOP_CHOICES,
        default=os.environ.get(LOOP_ENV, "auto"),
        help="event loop (auto: uvloop when installed, as `minihermes serve` runs)",
    )
    ap.add_argument(
        "--gc",
        choices=("serve", "default"),
        default="serve",
        help="collector settings: as `minihermes serve` (frozen start-up objects, its thresholds) or Python's",
    )
    ap.add_argument("--ray-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sz = QUICK if args.quick else FULL
    if args.ray_child:
        return ray_child(sz)
    settings = use_settings(args.loop, args.gc)
    header = machine_lines(settings)

    def run(coro: Any) -> Any:
        return run_loop(coro, choice=args.loop)

    report = Report()
    started = time.perf_counter()
    c = sz.ask_callers

    # 1. ask round trip -------------------------------------------------------------------------------
    sec = "ask"
    work = f"{sz.ask_seq:,} seq; {sz.ask_tput:,} by {c} callers"
    progress("bare asyncio actor and MiniHermes stateless GenServer, inline and through the mailbox")
    bare, ours, mailbox, ocp = run(bench_ask_side_by_side(sz))
    b50, brate = bare.p50_us, bare.rate
    report.add(
        Row(
            sec, "ask round trip", "bare asyncio actor", bare.p50_us, bare.p99_us, bare.rate, work, "baseline"
        )
    )
    report.add(
        Row(
            sec,
            "ask round trip",
            "MiniHermes stateless GenServer",
            ours.p50_us,
            ours.p99_us,
            ours.rate,
            f"{work}; {ocp:.0f} checkpoints; idle actor: the call runs in the caller's task",
        )
    )
    report.add(
        Row(
            sec,
            "ask round trip",
            "same, through the mailbox",
            mailbox.p50_us,
            mailbox.p99_us,
            mailbox.rate,
            f"{work}; inline_calls off: every ask wakes the actor's task, as the bare actor does",
        )
    )

    progress("Pykka")
    try:
        k50, k99, krate = bench_pykka(sz)
        report.add(
            Row(
                sec,
                "ask round trip",
                "Pykka ThreadingActor",
                k50,
                k99,
                krate,
                f"{sz.pykka_seq:,} seq; {sz.pykka_tput:,} by {c} threads",
            )
        )
    except ImportError as e:
        report.skipped.append(f"pykka: skipped ({e})")

    # Ray runs last (after the store benchmarks): its raylet/GCS/worker processes keep using CPU once started
    # and would disturb everything measured after them on a 2-core machine. Its row is inserted here.
    ray_index = len(report.rows)
    if args.skip_ray:
        report.skipped.append("ray: skipped (--skip-ray)")

    # 2. target check -----------------------------------------------------------------------------------
    sec = "target"
    for label, res in (("", ours), (", mailbox", mailbox)):
        lat_ratio = res.p50_us / b50
        tput_ratio = res.rate / brate
        report.add(
            Row(
                sec,
                f"target: ask p50, ours/bare{label}",
                "MiniHermes vs bare asyncio",
                workload=f"{res.p50_us:.1f} / {b50:.1f} µs = {lat_ratio:.2f}x",
                target="<= 2.0x",
                met=lat_ratio <= 2.0,
            )
        )
        report.add(
            Row(
                sec,
                f"target: ask tput, ours/bare{label}",
                "MiniHermes vs bare asyncio",
                workload=f"{res.rate:,.0f} / {brate:,.0f} = {tput_ratio:.2f}x",
                target=">= 0.5x",
                met=tput_ratio >= 0.5,
            )
        )

    # 3. durable messages ---------------------------------------------------------------------------------
    sec = "durable"
    a = sz.durable_actors
    repeats = sz.durable_repeats
    rows = []
    committed: list[float] = []
    for callers in (1, sz.durable_fanin):
        progress(f"durable messages: {a} virtual actors x {callers} caller(s), {repeats} runs")
        runs = [run(bench_durable_many(sz, callers)) for _ in range(repeats)]
        rates = [r for r, _ in runs]
        committed.append(min(c for _, c in runs))
        rate = statistics.median(rates)
        each = ", ".join(f"{r:,.0f}" for r in rates)
        rows.append(
            report.add(
                Row(
                    sec,
                    "durable msgs (ckpt each msg)",
                    "MiniHermes GenServer + SQLite",
                    rate=rate,
                    workload=f"{sz.durable_msgs:,} msgs, {a} virtual actors x {callers} caller"
                    + ("s" if callers > 1 else "")
                    + (f"; median of {repeats} runs ({each})" if repeats > 1 else ""),
                    target=">= 20,000/s",
                    met=rate >= 20_000,
                )
            )
        )
    d1, d2 = rows
    best = max((d1, d2), key=lambda r: r.rate or 0.0)
    best.name += " *best"
    best_callers = 1 if best is d1 else sz.durable_fanin
    plain = use_settings("asyncio", "default")
    progress(f"durable messages, best configuration on {plain}, {repeats} runs")
    plain_rates = [
        run_loop(bench_durable_many(sz, best_callers), choice="asyncio")[0] for _ in range(repeats)
    ]
    use_settings(args.loop, args.gc)
    report.add(
        Row(
            sec,
            "durable msgs (ckpt each msg)",
            f"same, {plain}",
            rate=statistics.median(plain_rates),
            workload=f"as *best; median of {repeats} runs ("
            + ", ".join(f"{r:,.0f}" for r in plain_rates)
            + ")",
            target="(comparison)",
        )
    )
    progress("durable messages: 1 actor, sequential")
    s50, s99, srate = run(bench_durable_single(sz))
    report.add(
        Row(
            sec,
            "durable msgs, latency-bound",
            "MiniHermes GenServer + SQLite",
            s50,
            s99,
            srate,
            f"1 actor, {sz.durable_seq:,} sequential asks",
            "(no target)",
        )
    )
    report.notes.append(
        f"durable: state field changed by every message, default checkpoint_interval=1, so each reply waits for "
        f"its checkpoint's commit (at least {committed[0]:,.0f} and {committed[1]:,.0f} checkpoints committed in "
        "each run of the two configurations); after each "
        "run the store is reopened and the committed counts are summed: they equal the replies received."
    )

    # 4. channels -----------------------------------------------------------------------------------------
    sec = "channels"
    progress("channels: sequential")
    c50, c99, crate = run(bench_chan_seq(sz))
    report.add(
        Row(
            sec,
            "channel send+recv+ack",
            "store.channels, sequential",
            c50,
            c99,
            crate,
            f"1 msg at a time, {sz.chan_seq:,} round trips",
            ">= 10,000/s",
            crate >= 10_000,
        )
    )
    progress(f"channels: {sz.chan_pairs} pairs")
    prate = run(bench_chan_pairs(sz))
    pairs_row = report.add(
        Row(
            sec,
            "channel send+recv+ack",
            f"store.channels, {sz.chan_pairs} pairs",
            rate=prate,
            workload=f"closed send>recv>ack loops, 1 channel each, max_messages=1, {sz.chan_pairs_msgs:,} msgs",
            target=">= 10,000/s",
            met=prate >= 10_000,
        )
    )
    progress("channels: batched")
    p, k, bs = sz.chan_batch_producers, sz.chan_batch_consumers, sz.chan_batch_size
    brate2 = run(bench_chan_batched(sz, p, k, bs))
    batch_row = report.add(
        Row(
            sec,
            "channel send+recv+ack",
            "store.channels, batched",
            rate=brate2,
            workload=f"{p} producers > 1 channel > {k} consumers, max_messages={bs}, "
            f"{sz.chan_batch_msgs:,} msgs",
            target=">= 10,000/s",
            met=brate2 >= 10_000,
        )
    )
    progress("channels: batch API")
    brate3 = run(bench_chan_batch_api(sz, 2, 50))
    batch_api_row = report.add(
        Row(
            sec,
            "channel send+recv+ack",
            "store.channels, batch API",
            rate=brate3,
            workload=f"send_batch(50) > 1 channel > 2 consumers, max_messages=50, ack_batch, {sz.chan_batch_msgs:,} msgs",
            target=">= 10,000/s",
            met=brate3 >= 10_000,
        )
    )
    max((pairs_row, batch_row, batch_api_row), key=lambda r: r.rate or 0.0).name += " *best"
    report.notes.append(
        "channels: every message is sent, received (leased with a receipt) and acked (deleted) through "
        "store.channels; batched consumers ack the messages of a batch concurrently (one ack call each)."
    )

    # 1d. Ray (last, see above) ---------------------------------------------------------------------------------
    ray_rows: list[Row] = []
    if not args.skip_ray:
        progress(f"Ray (child process; ray.init gets up to {RAY_INIT_TIMEOUT:.0f} s)")
        result, why = run_ray(args.quick, RAY_INIT_TIMEOUT, RAY_RUN_TIMEOUT)
        if result is None:
            report.skipped.append(f"ray: skipped ({why})")
        else:
            r50, r99, rrate = result
            ray_rows.append(
                Row(
                    "ask",
                    "ask round trip",
                    "Ray actor",
                    r50,
                    r99,
                    rrate,
                    f"{sz.ray_seq:,} seq; {sz.ray_tput:,}, {c} in flight",
                )
            )
            report.notes.append(
                f"ray: {why}; run in a child process after the store benchmarks, so that its "
                "processes do not disturb them."
            )
    report.rows[ray_index:ray_index] = ray_rows

    report.notes.append(
        "ask: bare asyncio and MiniHermes (inline and through the mailbox) are measured interleaved (rotating "
        "blocks in one event loop) so all see the same machine conditions; Pykka and Ray run on their own."
    )
    report.notes.append(
        "ask: p50/p99 from sequential asks after a warm-up; throughput = asks completed per second with "
        f"{c} concurrent callers (Pykka: {c} OS threads, its model; Ray: {c} requests in flight from the driver)."
    )
    report.notes.append(
        "2-core VM: numbers move by tens of percent between runs when anything else runs on the machine "
        "(see the load average above)."
    )
    render(report, header, time.perf_counter() - started, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
