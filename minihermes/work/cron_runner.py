"""The cron runner (one per tenant): consumes ``cron:pending`` and runs each due job: a reminder (``action:
notify``) delivers its text to its owner; any other job runs its prompt through the agent.

Each run executes in the job's own cron session (``cron:<session_id>``), never in a user's live
conversation, as the job's owner with the roles the owner had. The message is acked only after the run's
outcome is stored; a redelivered run (crash, visibility timeout) whose record is final is acked without
running, and one that was mid-turn is finished from the agent's durable turn (``_turns.run_turn_once``),
so a run's prompt is executed once in effect. The job's prompt is the turn's message; what the run is (the
job, its schedule, that no one is there to answer or approve in real time) goes with it as the turn's
``instructions`` (``run_instructions``), in its system prompt, not in the message.

A failed run is recorded with its error and scheduled again (``cron:retry:``) with exponential backoff up to
the job's ``max_retries``; then it is ``failed`` and audited. A run refused for its budget (``budget_exceeded``,
``price_unknown``: nothing was sent) is ``failed`` at once, with ``not_retried`` saying why. A response starting with ``[SILENT]`` is
stored but not delivered; other responses, and a run's final failure in words, are delivered to the job's
owner: a notification in their inbox (``notifications.notify``, as the runtime's own hop, with the run id as
dedupe key), and the job's ``deliver`` service link too, if it has one. Delivery comes before the run's
record is final and the message acked, so a crash in between runs the delivery again, which the dedupe key
(and the link's ``Idempotency-Key``) makes the same delivery: once per run, whatever crashes. A reminder
run makes no model call at all, so it never costs a turn or a token.
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
from ._owner import system_context
from ._turns import run_turn_once

SILENT = "[SILENT]"
MAX_RESULT_CHARS = 20_000
BUDGET_REFUSALS = frozenset({"budget_exceeded", "price_unknown"})
"""Errors of a run refused before anything was sent because of a spend cap: final, never retried (a retry
would be refused the same way; a job at its own cap is paused by the gateway and the scheduler)."""
MAX_NOTICE_CHARS = 4_000
"""A run's answer in its owner's inbox at most (the whole answer is on the run record)."""


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
        "- Your answer is stored as the run's result and delivered to the owner as a notification (and to "
        f"the job's delivery link, if it has one); start it with {SILENT} when there is nothing worth "
        "delivering."
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
        self._stats = {
            "completed": 0,
            "failed": 0,
            "retried": 0,
            "skipped_duplicates": 0,
            "delivered": 0,
            "notified": 0,
        }
        self._audit = self.host.has_actor("audit_event")
        self._inbox = self.host.has_actor("notifications")
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
        if job.get("action") == "notify":
            await self._remind(job, run_id, attempt)
            return "completed"
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

    async def _remind(self, job: dict[str, Any], run_id: str, attempt: int) -> None:
        """A reminder's run: its text goes to the owner (and the job's link), no model call."""
        now = self.host.now()
        text = str(job["prompt"])
        await update_run(
            self.host, run_id, status="running", action="notify", attempt=attempt, started_at=now
        )
        delivery = await self._deliver(job, run_id, text, text)
        await update_run(
            self.host,
            run_id,
            status="completed",
            outcome="notified",
            result=text[:MAX_RESULT_CHARS],
            silent=False,
            finished_at=self.host.now(),
            error=None,
            **delivery,
        )
        self._count_completed(job, run_id)

    async def _completed(self, job: dict[str, Any], run_id: str, reply: dict[str, Any]) -> None:
        text = str(reply.get("response") or "")
        silent = text.lstrip().startswith(SILENT)
        delivery: dict[str, Any] = {"delivered": False, "link_delivered": False, "delivery_error": None}
        if not silent:
            notice = text.strip() or _no_answer(job, reply)
            delivery = await self._deliver(job, run_id, notice, text)
        await update_run(
            self.host,
            run_id,
            status="completed",
            action="run",
            outcome=reply.get("status"),
            result=text[:MAX_RESULT_CHARS],
            silent=silent,
            finished_at=self.host.now(),
            error=None,
            **delivery,
        )
        self._count_completed(job, run_id)

    def _count_completed(self, job: dict[str, Any], run_id: str) -> None:
        self._stats["completed"] += 1
        self.host.incr_counter("cron_runs_completed_total")
        if self._audit:
            fire_audit(self.host, "cron_executed", f"job_id={job['job_id']} run_id={run_id}")

    async def _deliver(
        self, job: dict[str, Any], run_id: str, notice: str, text: str | None
    ) -> dict[str, Any]:
        """The run's outcome to its owner's inbox (``notice``) and, unless ``text`` is None, to the job's
        link: the run record's ``delivered``, ``notification_id``, ``link_delivered`` and
        ``delivery_error``. Both are idempotent per run id, so a redelivered run that delivers again changes
        nothing. A failure to reach the inbox raises: the run is not final, and its redelivery tries again."""
        out: dict[str, Any] = {"delivered": False, "link_delivered": False, "delivery_error": None}
        owner = str(job.get("owner") or "")
        if self._inbox and owner:
            ctx = system_context(run_context(job, self._scope), "cron")
            with acting_as(ctx):  # the runtime's own hop: a user cannot write into an inbox
                got = await self.host.ask(
                    "notifications",
                    "notify",
                    {
                        "user_id": owner,
                        "text": _clip(notice),
                        "source": f"cron:{job['job_id']}",
                        "dedupe_key": f"cron:{run_id}",
                    },
                )
            out.update(delivered=True, notification_id=got.get("id"))
            self._stats["notified"] += int(bool(got.get("created")))
        target = job.get("deliver")
        if target and text is not None:
            try:
                await self.host.http_fetch(
                    str(target["link"]),
                    str(target.get("method") or "POST"),
                    str(target.get("path") or "/"),
                    json={"job_id": job["job_id"], "run_id": run_id, "response": text},
                    headers={"Idempotency-Key": run_id},
                )
                out["link_delivered"] = True
                self._stats["delivered"] += 1
            except Exception as e:  # a delivery failure is recorded on the run, never lost silently
                out["delivery_error"] = f"{type(e).__name__}: {e}"
        return out

    async def _failed(self, job: dict[str, Any], run_id: str, attempt: int, error: dict[str, Any]) -> None:
        now = self.host.now()
        refused = str(error.get("code") or "") in BUDGET_REFUSALS
        if not refused and attempt < int(job.get("max_retries", 0)):
            at = now + float(job.get("retry_backoff", 30.0)) * 2**attempt
            await update_run(
                self.host, run_id, status="retrying", error=error, next_attempt_at=at, finished_at=now
            )
            value = {"run_id": run_id, "job_id": job["job_id"], "attempt": attempt + 1}
            await self.host.kv.put(retry_key(at, run_id), value)
            self._stats["retried"] += 1
            return
        message = str(error.get("message") or error.get("code") or "an error")
        notice = f"Your scheduled job {job['job_id']} failed after {attempt + 1} attempt(s): {message}"
        final: dict[str, Any] = {}
        if refused:
            notice = f"Your scheduled job {job['job_id']} did not run: {message}"
            final["not_retried"] = _not_retried(error)
        delivery = await self._deliver(job, run_id, notice, None)  # the link gets answers only
        await update_run(
            self.host, run_id, status="failed", error=error, finished_at=now, **final, **delivery
        )
        self._stats["failed"] += 1
        self.host.incr_counter("cron_runs_failed_total")
        if self._audit:
            fire_audit(
                self.host,
                "cron_run_failed",
                f"job_id={job['job_id']} run_id={run_id} error={error.get('code')}",
                data={"error": error},
            )


def _not_retried(error: dict[str, Any]) -> str:
    """Why a run refused for its budget is final (the run record's ``not_retried``)."""
    if error.get("code") == "price_unknown":
        return "refused before sending: a money cap applies and the model's price is unknown; a retry would be too"
    if error.get("scope") == "cron_job":
        return "refused before sending: the job is at its cap and paused until the budget resets"
    return "refused before sending: the budget is spent; a retry would be refused too until it resets"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_NOTICE_CHARS else text[: MAX_NOTICE_CHARS - 1] + "…"


def _no_answer(job: dict[str, Any], reply: dict[str, Any]) -> str:
    """What the owner is told when a run ended without an answer to pass on."""
    if reply.get("status") == "paused":
        return (
            f"Your scheduled job {job['job_id']} is waiting for a person to approve a tool call "
            "(see Approvals)."
        )
    return f"Your scheduled job {job['job_id']} ran and gave no answer."
