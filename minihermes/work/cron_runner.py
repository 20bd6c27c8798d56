"""The cron runner (one per tenant): consumes ``cron:pending`` and runs each due prompt through the agent.

Each run executes in the job's own cron session (``cron:<session_id>``), never in a user's live
conversation, as the job's owner with the roles the owner had. The message is acked only after the run's
outcome is stored; a redelivered run (crash, visibility timeout) whose record is final is acked without
running, and one that was mid-turn is finished from the agent's durable turn (``_turns.run_turn_once``),
so a run's prompt is executed once in effect. The job's prompt is the turn's message; what the run is (the
job, its schedule, that no one is there to answer or approve in real time) goes with it as the turn's
``instructions`` (``run_instructions``), in its system prompt, not in the message.

A failed run is recorded with its error and scheduled again (``cron:retry:``) with exponential backoff up to
the job's ``max_retries``; then it is ``failed`` and audited. A response starting with ``[SILENT]`` is
stored but not delivered; other responses go to the job's ``deliver`` service link, if it has one.
Runs of one cron session go one at a time (a session has one turn at a time); different sessions run
concurrently up to ``max_concurrent``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from minihermes.audit import fire_audit
from minihermes.runtime import ActorArgs, ActorError, GenServer, call, cast, current_context
from minihermes.runtime.store import ChannelMessage

from ._cronstore import (
    CHANNEL,
    FINAL,
    acting_as,
    job_key,
    retry_key,
    run_context,
    run_key,
    update_run,
)
from ._turns import run_turn_once

SILENT = "[SILENT]"
MAX_RESULT_CHARS = 20_000


def run_instructions(job: dict[str, Any], run_id: str) -> str:
    """The context of a scheduled run, given as the turn's ``instructions`` (its system prompt)."""
    schedule = " ".join(str(job.get("schedule_input") or job.get("schedule") or "").split())[:200]
    return (
        f"This is a scheduled run (run {run_id}) of cron job {job.get('job_id', '')}"
        + (f" (schedule: {schedule})" if schedule else "")
        + ", on behalf of its owner; the user message is the job's prompt.\n"
        "- No one is present: nobody reads questions or answers them in real time, so do not ask for "
        "clarification; do what the prompt asks with what you have, or say plainly that you cannot, and why.\n"
        "- A tool call that needs a person's approval waits until someone decides it; prefer what needs none.\n"
        "- Your answer is stored as the run's result (and delivered, if the job has a delivery link); "
        f"start it with {SILENT} when there is nothing worth delivering."
    )


class ConsumerLoop:
    """Receive from a channel and hand each message to ``handle`` in its own task, at most ``limit`` at
    a time. Shared by the runners of this package. Messages are received under the actor's own receipt: they
    go back to the channel at once when it dies, or when its node does (the cluster releases a dead node's
    receipts)."""

    def __init__(
        self,
        actor: GenServer,
        channel: str,
        limit: int,
        poll: float,
        visibility_timeout: float | None = None,
    ) -> None:
        self.actor = actor
        self.channel = channel
        self.slots = asyncio.Semaphore(limit)
        self.limit = limit
        self.poll = poll
        self.visibility_timeout = visibility_timeout
        """Per receive; None: the channel's own."""
        self.busy: set[str] = set()

    async def run(self, handle: Any) -> None:
        host = self.actor.host
        while True:
            await self.slots.acquire()
            self.slots.release()
            free = self.limit - len(self.busy)
            try:
                got: list[ChannelMessage] = await host.channels.receive(
                    self.channel,
                    timeout=self.poll,
                    max_messages=max(1, free),
                    visibility_timeout=self.visibility_timeout,
                )
            except Exception as e:  # the loop outlives a store hiccup; what it held is redelivered anyway
                host.log.warning("consumer of %s: receive failed (%s); retrying", self.channel, e)
                await host.clock.sleep(1.0)
                continue
            for msg in got:
                await self.slots.acquire()
                self.busy.add(msg.msg_id)
                host.spawn(self._one(handle, msg))

    async def _one(self, handle: Any, msg: ChannelMessage) -> None:
        try:
            await handle(msg)
        finally:
            self.busy.discard(msg.msg_id)
            self.slots.release()


class CronRunner(GenServer):
    """Per-tenant consumer of ``cron:pending``. Args: ``max_concurrent`` (runs at once), ``run_timeout`` (s),
    ``poll`` (s between channel polls for sends from other processes)."""

    class Args(ActorArgs):
        run_timeout: float = 300
        max_concurrent: int = 8
        poll: float = 0.5

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.run_timeout = float(args.get("run_timeout", 300))
        self._loop = ConsumerLoop(
            self, CHANNEL, int(args.get("max_concurrent", 8)), float(args.get("poll", 0.5))
        )
        self._session_locks: dict[str, asyncio.Lock] = {}
        self._stats = {"completed": 0, "failed": 0, "retried": 0, "skipped_duplicates": 0, "delivered": 0}
        self._audit = self.host.has_actor("audit_event")
        self._scope = current_context().scope
        self.host.spawn(self._loop.run(self._handle))

    @cast
    def wake(self) -> None:
        """Sent by the scheduler on each tick: activating this actor is what starts its consumer loop."""

    @call
    def get_stats(self) -> dict[str, Any]:
        return {"status": "ok", "running": len(self._loop.busy), **self._stats}

    async def _handle(self, msg: ChannelMessage) -> None:
        payload = msg.payload if isinstance(msg.payload, dict) else {}
        run_id = str(payload.get("run_id", ""))
        attempt = int(payload.get("attempt", 0))
        outcome = await self._execute(run_id, str(payload.get("job_id", "")), attempt)
        if outcome == "duplicate":
            self._stats["skipped_duplicates"] += 1
        await self.host.channels.ack(CHANNEL, msg.msg_id)

    async def _execute(self, run_id: str, job_id: str, attempt: int) -> str:
        run = await self.host.kv.get(run_key(run_id)) if run_id else None
        if not isinstance(run, dict):
            return "cancelled"  # the job was deleted with its runs
        done_attempt = int(run.get("attempt", 0))
        if (
            run["status"] in FINAL
            or done_attempt > attempt
            or (run["status"] == "retrying" and done_attempt >= attempt)
        ):
            return "duplicate"
        job = await self.host.kv.get(job_key(job_id))
        if not isinstance(job, dict):
            await update_run(self.host, run_id, status="cancelled", error={"code": "job_deleted"})
            return "cancelled"
        session = str(job["cron_session"])
        lock = self._session_locks.setdefault(session, asyncio.Lock())
        async with lock:
            await update_run(
                self.host,
                run_id,
                status="running",
                attempt=attempt,
                started_at=self.host.now(),
                session_id=session,
                node=self.host.node_id,
            )
            with acting_as(run_context(job, self._scope)):
                try:
                    reply = await run_turn_once(
                        self.host,
                        f"cron:{run_id}#{attempt}",
                        session,
                        str(job["prompt"]),
                        user_id=str(job.get("owner") or ""),
                        extra={"cron_job": job_id, "instructions": run_instructions(job, run_id)},
                        timeout=self.run_timeout,
                    )
                except ActorError as e:
                    await self._failed(job, run_id, attempt, e.to_dict()["error"])
                    return "failed"
                await self._completed(job, run_id, reply)
        return "completed"

    async def _completed(self, job: dict[str, Any], run_id: str, reply: dict[str, Any]) -> None:
        text = str(reply.get("response") or "")
        silent = text.lstrip().startswith(SILENT)
        delivered, delivery_error = False, None
        target = job.get("deliver")
        if target and not silent:
            try:
                await self.host.http_fetch(
                    str(target["link"]),
                    str(target.get("method") or "POST"),
                    str(target.get("path") or "/"),
                    json={"job_id": job["job_id"], "run_id": run_id, "response": text},
                    headers={"Idempotency-Key": run_id},
                )
                delivered = True
                self._stats["delivered"] += 1
            except Exception as e:  # a delivery failure is recorded on the run, never lost silently
                delivery_error = f"{type(e).__name__}: {e}"
        await update_run(
            self.host,
            run_id,
            status="completed",
            outcome=reply.get("status"),
            result=text[:MAX_RESULT_CHARS],
            silent=silent,
            delivered=delivered,
            delivery_error=delivery_error,
            finished_at=self.host.now(),
            error=None,
        )
        self._stats["completed"] += 1
        self.host.incr_counter("cron_runs_completed_total")
        if self._audit:
            fire_audit(self.host, "cron_executed", f"job_id={job['job_id']} run_id={run_id}")

    async def _failed(self, job: dict[str, Any], run_id: str, attempt: int, error: dict[str, Any]) -> None:
        now = self.host.now()
        if attempt < int(job.get("max_retries", 0)):
            at = now + float(job.get("retry_backoff", 30.0)) * 2**attempt
            await update_run(
                self.host, run_id, status="retrying", error=error, next_attempt_at=at, finished_at=now
            )
            value = {"run_id": run_id, "job_id": job["job_id"], "attempt": attempt + 1}
            await self.host.kv.put(retry_key(at, run_id), value)
            self._stats["retried"] += 1
            return
        await update_run(self.host, run_id, status="failed", error=error, finished_at=now)
        self._stats["failed"] += 1
        self.host.incr_counter("cron_runs_failed_total")
        if self._audit:
            fire_audit(
                self.host,
                "cron_run_failed",
                f"job_id={job['job_id']} run_id={run_id} error={error.get('code')}",
                data={"error": error},
            )
