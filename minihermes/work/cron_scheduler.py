"""The cron scheduler (one per tenant): recurring and one-shot agent prompts that survive node failures.

Distributed cron, each scheduled time dispatched once. A durable reminder ticks the scheduler; each tick takes the
tenant's ``cron_leader`` lock (TTL longer than the tick), so with several nodes on one store only one
schedules; it reads the due index earliest first, and sends each due run to the ``cron:pending`` channel
with its run id (``<job_id>@<scheduled ms>``) as the dedup key. A leader that dies after sending but before
advancing the job makes the next leader send the same run id again, which the channel drops: a scheduled
time is dispatched once. The ``cron_runner`` consumes the channel (``cron_runner.py``).

After downtime, fire times missed by more than ``misfire_grace`` follow the job's policy: ``run_once`` fires
the latest of them once, ``skip`` fires none; either way the job goes on from the next time in the future.
Failed runs come back through ``cron:retry:`` entries with exponential backoff up to ``max_retries``.

A job belongs to the principal that created it (``owner``, from the request context) and runs as that owner
with the roles it had then, never more (``_cronstore.run_context``). Users create, see, pause, resume, run and
delete only their own jobs (the ops are ``write``; another user's job is ``not_found`` to them); admins and the
system see and change every job. Only an admin sets a ``deliver`` link, and it is checked when the job is made
(``_cronstore.check_deliver``). The prompt is stored with recognisable secrets redacted.

A job's ``action`` says what a run does: ``run`` (the default) runs the prompt as an agent turn and delivers
its answer to the owner; ``notify`` (a reminder) delivers the prompt's text itself, with no model call.
Delivered means a notification in the owner's inbox (``notifications.py``), once per run.

Forgetting a user (``forget_subject``, asked by ``memory.forget``) deletes the jobs they own with their runs,
due and retry entries (a run already queued is cancelled when picked up, as after ``delete_job``);
forgetting the tenant, every job. A job is its owner's, not a session's: forgetting a session leaves it.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any, Literal

from minihermes.audit import fire_audit
from minihermes.context.forget import session_owner, subject
from minihermes.runtime import (
    MAX_KEY_CHARS,
    ActorArgs,
    Conflict,
    GenServer,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RequestContext,
    call,
    cast,
    current_context,
    valid_key,
)

from ._cronstore import (
    CHANNEL,
    acting_as,
    check_deliver,
    check_job_id,
    due_at,
    due_key,
    job_key,
    retry_key,
    run_id_for,
    run_key,
    run_view,
    update_run,
)
from ._owner import is_admin, scrub
from .schedule import MAX_YEARS_BETWEEN_FIRES, parse_schedule

Misfire = Literal["run_once", "skip"]
Action = Literal["notify", "run"]
MAX_PROMPT_CHARS = 20_000
DEFAULT_TICK = 1.0
BATCH = 200
MAX_RUNS_KEPT = 200
RESUME = "cron:resume:"
"""Jobs paused at their spend cap, by when the next period starts: ``cron:resume:<ms>:<job_id>``."""
DUE_SLACK = 0.005
"""A fire time this close ahead of the clock is due now (timer and float rounding, not lateness)."""
_WRITERS = frozenset({"admin", "system", "user"})
_RUN_ROLES = frozenset({"admin", "user"})


def _require_writer(op: str) -> None:
    if not current_context().roles & _WRITERS:
        raise PermissionDenied(f"{op}: a read-only role cannot change cron jobs", op=op)


def _check_session_id(op: str, session_id: str) -> None:
    """A job's runs are turns of the session ``cron:<session_id>``, an actor key: the runtime's rule for one
    (printable, bounded), checked when the job is created rather than at every run."""
    if session_id and not valid_key(f"cron:{session_id}"):
        raise InvalidArgument(
            f"{op}: session_id must be 1-{MAX_KEY_CHARS - len('cron:')} printable characters",
            op=op,
            field="session_id",
        )


def _job_view(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if k != "roles"}


def _visible(job: dict[str, Any]) -> bool:
    """Users see their own jobs; admins and the system every job."""
    return is_admin() or job.get("owner") == current_context().principal


def _resumed(job: dict[str, Any], now: float) -> dict[str, Any]:
    """A paused job going on from the next fire time after now (what was missed while paused is not run)."""
    sched = parse_schedule(job["schedule"], job["tz"])
    anchor = job.get("next_run_at") or job["created_at"]
    nxt = sched.at if sched.kind == "once" else sched.following(anchor, now)
    return {
        "status": "active" if nxt is not None else "done",
        "next_run_at": nxt,
        "paused_by": None,
        "paused_reason": None,
        "resume_at": None,
    }


class CronScheduler(GenServer):
    """Per-tenant scheduler. Args: ``tick_interval`` (s), ``lock_ttl`` (s, default 3 ticks, at least 5 s),
    ``misfire_grace`` (s), ``run_timeout`` (s, handed to runs), ``batch`` (due jobs per store round)."""

    class Args(ActorArgs):
        tick_interval: float = DEFAULT_TICK
        lock_ttl: float | None = None
        """None: 3 ticks, at least 5 s."""
        misfire_grace: float | None = None
        """None: 5 ticks, at least 60 s."""
        run_timeout: float = 300
        batch: int = BATCH

    state_version = 1

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.tick_interval = float(args.get("tick_interval", DEFAULT_TICK))
        self.lock_ttl = float(args.get("lock_ttl", max(5.0, 3 * self.tick_interval)))
        self.misfire_grace = float(args.get("misfire_grace", max(60.0, 5 * self.tick_interval)))
        self.batch = int(args.get("batch", BATCH))
        # The lease holder is this instance, not the node: a restarted process must not inherit a lease it
        # cannot know it still holds, and two processes started with one node id stay two holders.
        self.holder = f"{self.host.node_id}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._ticking = False
        self._tick_again = False
        """A tick came while this instance was leading one: the leader makes another pass before it lets go."""
        self._stats = {"ticks": 0, "led": 0, "dispatched": 0, "missed": 0, "retries": 0}
        self._audit = self.host.has_actor("audit_event")
        ctx = current_context()
        tick_ctx = RequestContext(
            tenant=ctx.tenant, namespace=ctx.namespace, principal="cron", roles=frozenset({"system"})
        )
        with acting_as(tick_ctx):
            # Durable: after a restart the tick re-activates this tenant's scheduler by itself.
            await self.host.set_reminder("cron_tick", "tick", every=self.tick_interval)
            # A run handed to a runner that dies with its node comes back after the visibility timeout (at
            # once if that node restarts): longer than a run may take, so a slow run is not run twice.
            await self.host.channels.declare(
                CHANNEL, max_deliveries=10, visibility_timeout=float(args.get("run_timeout", 300)) + 60
            )
        self.host.join("svc:cron_scheduler")

    # -- jobs ---------------------------------------------------------------------------------------------

    @call(access="write")
    async def create_job(
        self,
        job_id: str,
        prompt: str,
        schedule: str,
        session_id: str = "",
        tz: str = "UTC",
        misfire: Misfire = "run_once",
        max_retries: int = 3,
        retry_backoff: float = 30.0,
        deliver: dict[str, str] | None = None,
        replace: bool = False,
        action: Action = "run",
    ) -> dict[str, Any]:
        """Create (or with ``replace`` redefine) a job. ``action``: ``run`` (the agent runs ``prompt`` in
        the cron session ``cron:<session_id or job_id>`` and its answer goes to the owner's notifications)
        or ``notify`` (a reminder: ``prompt`` is the text delivered to the owner, no model call).
        ``deliver``: ``{link, path, method}`` of a service link that also gets each non-silent result,
        checked here (the link exists, allows the method, and the path is relative to it)."""
        op = "create_job"
        _require_writer(op)
        check_job_id(job_id, op)
        _check_session_id(op, session_id)
        if not prompt.strip() or len(prompt) > MAX_PROMPT_CHARS:
            raise InvalidArgument(f"{op}: prompt must be 1..{MAX_PROMPT_CHARS} characters", field="prompt")
        if not 0 <= max_retries <= 20:
            raise InvalidArgument(f"{op}: max_retries must be 0..20", op=op, field="max_retries")
        if not 0 < retry_backoff <= 86400:
            raise InvalidArgument(f"{op}: retry_backoff must be in (0, 86400]", op=op, field="retry_backoff")
        if deliver is not None and not is_admin():
            # A delivery is a call through a service link with no person's review: an admin's to set up.
            raise PermissionDenied(f"{op}: only an admin sets a job's delivery link", op=op, field="deliver")
        target = check_deliver(self.host, deliver, op) if deliver is not None else None
        sched = parse_schedule(schedule, tz)
        now = self.host.now()
        first = sched.first_fire(now)
        if first is None and sched.kind == "cron":
            raise InvalidArgument(
                f"{op}: the schedule '{schedule}' never fires (no date within {MAX_YEARS_BETWEEN_FIRES} "
                "years matches it; check the day of the month against the month)",
                op=op,
                field="schedule",
                schedule=schedule,
            )
        key = job_key(job_id)
        existing = await self.host.kv.get_entry(key)
        if existing is not None and not replace:
            raise Conflict(f"{op}: job '{job_id}' exists (give replace=true to redefine it)", job_id=job_id)
        if existing is not None and isinstance(existing.value, dict) and not _visible(existing.value):
            raise PermissionDenied(
                f"{op}: job '{job_id}' belongs to another user; choose another job_id", op=op, job_id=job_id
            )
        ctx = current_context()
        cron_session = f"cron:{session_id or job_id}"
        if not is_admin():
            await self._check_session(op, job_id, cron_session, ctx.principal)
        job = {
            "job_id": job_id,
            "prompt": scrub(prompt),
            "schedule": sched.spec,
            "schedule_input": schedule,
            "kind": sched.kind,
            "tz": sched.tz,
            "session_id": session_id or job_id,
            "cron_session": cron_session,
            "status": "active" if first is not None else "done",
            "misfire": misfire,
            "max_retries": max_retries,
            "retry_backoff": retry_backoff,
            "action": action,
            "deliver": target,
            "owner": ctx.principal,
            # The roles its runs act with: the creator's, never the runtime's own (``system``).
            "roles": sorted(ctx.roles & _RUN_ROLES) or ["user"],
            "created_at": now,
            "next_run_at": first,
            "last_fired_at": None,
            "fired": 0,
            "missed": 0,
        }
        version = existing.version if existing is not None else None
        if await self.host.kv.cas(key, version, job) is None:
            raise Conflict(f"{op}: job '{job_id}' changed meanwhile; try again", job_id=job_id)
        if existing is not None and isinstance(existing.value, dict):
            await self._drop_due(existing.value)
        if first is not None:
            await self.host.kv.put(due_key(first, job_id), {"job_id": job_id})
        self._audit_event("cron_job_created", f"job_id={job_id} schedule={sched.spec}")
        return {
            "status": "ok",
            "job_id": job_id,
            "action": action,
            "schedule": sched.spec,
            "next_run_at": first,
        }

    @call(access="read")
    async def list_jobs(self, status: str = "", limit: int = 100) -> dict[str, Any]:
        """Jobs sorted by id: ``jobs: [{job_id, prompt, schedule, status, next_run_at, ...}]``."""
        if not 1 <= limit <= 10_000:
            raise InvalidArgument("list_jobs: limit must be 1..10000", op="list_jobs", field="limit")
        rows = await self.host.kv.list("cron:job:")
        jobs = [
            _job_view(v)
            for _, v in rows
            if isinstance(v, dict) and (not status or v["status"] == status) and _visible(v)
        ]
        return {"status": "ok", "jobs": jobs[:limit], "count": min(len(jobs), limit), "total": len(jobs)}

    @call(access="read")
    async def get_job(self, job_id: str) -> dict[str, Any]:
        """The job and its latest run (``last_run``, None before the first)."""
        job = await self._job("get_job", job_id)
        runs = await self._runs(job_id, 1)
        return {"status": "ok", "job": _job_view(job), "last_run": runs[0] if runs else None}

    @call(access="write")
    async def pause_job(self, job_id: str) -> dict[str, Any]:
        _require_writer("pause_job")
        # A person's pause stands: a pause at a spend cap no longer resumes by itself.
        person = {"status": "paused", "paused_by": current_context().principal, "resume_at": None}
        job = await self._change("pause_job", job_id, lambda j: person)
        await self._drop_due(job)
        return {"status": "ok", "job_id": job_id, "job_status": "paused"}

    @call(access="admin")
    async def budget_pause(self, job_id: str, reason: str, resume_at: float | None = None) -> dict[str, Any]:
        """Pause a job at its spend cap (the ``llm_gateway`` asks, as the system): ``paused_reason`` says why,
        and with ``resume_at`` (the next period) the scheduler resumes it then, unless a person paused or
        resumed it meanwhile. A job a person paused stays as it is."""
        if not is_admin():
            raise PermissionDenied("budget_pause: for the runtime and admins", op="budget_pause")
        check_job_id(job_id, "budget_pause")
        job = await self.host.kv.get(job_key(job_id))
        if not isinstance(job, dict) or job["status"] not in ("active", "paused"):
            return {"status": "ok", "job_id": job_id, "job_status": job["status"] if job else None}
        if job["status"] == "paused" and job.get("paused_by") != "budget":
            return {"status": "ok", "job_id": job_id, "job_status": "paused"}
        paused = {
            "status": "paused",
            "paused_by": "budget",
            "paused_reason": reason[:1000],
            "resume_at": resume_at,
        }
        job = await self._change("budget_pause", job_id, lambda j: paused)
        await self._drop_due(job)
        if resume_at is not None:
            await self.host.kv.put(f"{RESUME}{round(resume_at * 1000):015d}:{job_id}", {"job_id": job_id})
        self._audit_event(
            "cron_budget_paused", f"job_id={job_id} resume_at={resume_at} reason={reason[:200]}"
        )
        return {"status": "ok", "job_id": job_id, "job_status": "paused", "resume_at": resume_at}

    @call(access="write")
    async def resume_job(self, job_id: str) -> dict[str, Any]:
        """Resume from the next fire time after now (what was missed while paused is not run)."""
        _require_writer("resume_job")
        now = self.host.now()

        def change(job: dict[str, Any]) -> dict[str, Any]:
            if job["status"] != "paused":
                raise Conflict(f"resume_job: job '{job_id}' is {job['status']}, not paused", job_id=job_id)
            return _resumed(job, now)

        job = await self._change("resume_job", job_id, change)
        if job["next_run_at"] is not None:
            await self.host.kv.put(due_key(job["next_run_at"], job_id), {"job_id": job_id})
        return {
            "status": "ok",
            "job_id": job_id,
            "job_status": job["status"],
            "next_run_at": job["next_run_at"],
        }

    @call(access="write")
    async def delete_job(self, job_id: str) -> dict[str, Any]:
        """Delete a job and its run history. A run already dispatched is cancelled when it is picked up."""
        _require_writer("delete_job")
        job = await self._job("delete_job", job_id)
        await self._drop_due(job)
        await self.host.kv.delete(job_key(job_id))
        runs = await self.host.kv.list(f"cron:run:{job_id}:")
        await asyncio.gather(*(self.host.kv.delete(k) for k, _ in runs))
        self._audit_event("cron_job_deleted", f"job_id={job_id}")
        return {"status": "ok", "job_id": job_id, "deleted": True}

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Delete a user's jobs or (admin) the tenant's, with their runs and schedule entries: ``cleared:
        {cron_jobs, cron_runs}``. Nothing is audited per job (a job id is the user's own words)."""
        who = subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        if who.session_id:
            return {"status": "ok", "cleared": {"cron_jobs": 0, "cron_runs": 0}}
        jobs = [
            v
            for _, v in await self.host.kv.list("cron:job:")
            if isinstance(v, dict) and (who.tenant or v.get("owner") == who.user_id)
        ]
        gone = {str(j["job_id"]) for j in jobs}
        runs = 0
        for job in jobs:
            await self.host.kv.delete(job_key(job["job_id"]))
            for key, _ in await self.host.kv.list(f"cron:run:{job['job_id']}:"):
                runs += await self.host.kv.delete(key)
            # the runs' turn markers keep each run's reply (``cron_runner``: ``cron:<run_id>#<attempt>``,
            # a run id is ``<job_id>@<ms>``)
            for key, _ in await self.host.kv.list(f"work:turn:cron:{job['job_id']}@"):
                await self.host.kv.delete(key)
        for prefix in ("cron:due:", "cron:retry:"):
            for key, value in await self.host.kv.list(prefix):
                if isinstance(value, dict) and value.get("job_id") in gone:
                    await self.host.kv.delete(key)
        return {"status": "ok", "cleared": {"cron_jobs": len(jobs), "cron_runs": runs}}

    @call(access="write")
    async def run_now(self, job_id: str) -> dict[str, Any]:
        """Dispatch one run at once (a paused job too); its schedule is unchanged."""
        _require_writer("run_now")
        job = await self._job("run_now", job_id)
        now = self.host.now()
        run_id = run_id_for(job_id, now)
        msg_id = await self._dispatch(job, now, now, manual=True)
        self._wake_runner()
        return {"status": "ok", "job_id": job_id, "run_id": run_id, "msg_id": msg_id}

    @call(access="read")
    async def job_runs(self, job_id: str, limit: int = 20) -> dict[str, Any]:
        """Runs newest first: ``runs: [{run_id, scheduled_at, status, attempt, result, error, ...}]``."""
        if not 1 <= limit <= MAX_RUNS_KEPT:
            raise InvalidArgument(f"job_runs: limit must be 1..{MAX_RUNS_KEPT}", field="limit")
        check_job_id(job_id, "job_runs")
        if not is_admin():
            await self._job("job_runs", job_id)  # users read the runs of their own jobs only
        runs = await self._runs(job_id, limit)
        return {"status": "ok", "job_id": job_id, "runs": runs, "count": len(runs)}

    @call(access="read")
    def get_stats(self) -> dict[str, Any]:
        return {"status": "ok", "holder": self.holder, **self._stats}

    # -- the tick -----------------------------------------------------------------------------------------

    @cast
    async def tick(self) -> None:
        """Fired by the durable reminder: lead this tick or stand by."""
        self._stats["ticks"] += 1
        self._wake_runner()
        if self._ticking:
            self._tick_again = True  # not dropped: what fell due meanwhile is dispatched by this leader
            return
        token = await self.host.locks.try_acquire("cron_leader", self.lock_ttl, holder=self.holder)
        if token is None:
            return
        self._ticking = True
        self._stats["led"] += 1
        # Dispatching a large due batch takes a while: it runs beside the mailbox, so job ops are served
        # meanwhile (everything it touches is in KV, none of it in this actor's state).
        self.host.spawn(self._lead(token))

    async def _lead(self, token: int) -> None:
        try:
            while True:
                self._tick_again = False
                await self._resume_due()
                await self._dispatch_due()
                await self._dispatch_retries()
                if not self._tick_again:
                    break
        finally:
            self._ticking = False
            # Lead one tick at a time: whichever node's scheduler the next tick reaches leads it (the
            # tenant's tick reminder fires on one node, not always this one). Held on, the lock would make a
            # tick that lands elsewhere dispatch nothing until it expired; so would a tick that failed, were
            # it not let go here. A leader that dies mid-tick leaves it to expire.
            await self._let_go(token)

    async def _let_go(self, token: int) -> None:
        try:
            await self.host.locks.release("cron_leader", token, holder=self.holder)
        except Exception:
            # Not raised: in a failed tick it would hide the tick's own error; the lease expires anyway.
            self.host.log.exception("cron_leader: release failed; the lease expires in %.0f s", self.lock_ttl)

    async def _dispatch_due(self) -> None:
        while True:
            now = self.host.now()
            rows = await self.host.kv.list("cron:due:", limit=self.batch)
            due = [(k, due_at(k)) for k, _ in rows if due_at(k) <= now + DUE_SLACK]
            if not due:
                return
            await asyncio.gather(*(self._fire(k, at, now) for k, at in due))
            if len(due) < self.batch:
                return
            if not await self._still_leading():
                return

    async def _resume_due(self) -> None:
        """Jobs paused at a spend cap whose next period has begun go on (from their next fire time)."""
        now = self.host.now()
        for key, _ in await self.host.kv.list(RESUME, limit=self.batch):
            _, _, at_ms, job_id = key.split(":", 3)
            at = int(at_ms) / 1000
            if at > now + DUE_SLACK:
                break
            job = await self.host.kv.get(job_key(job_id))
            if isinstance(job, dict) and job["status"] == "paused" and job.get("paused_by") == "budget":
                job = await self._change("budget_resume", job_id, lambda j: _resumed(j, now))
                if job["next_run_at"] is not None:
                    await self.host.kv.put(due_key(job["next_run_at"], job_id), {"job_id": job_id})
                self._audit_event("cron_budget_resumed", f"job_id={job_id}")
            await self.host.kv.delete(key)

    async def _still_leading(self) -> bool:
        lock = await self.host.locks.get("cron_leader")
        if lock is None or lock.holder != self.holder:
            return False
        return await self.host.locks.renew("cron_leader", lock.token, self.lock_ttl, holder=self.holder)

    async def _fire(self, dkey: str, at: float, now: float) -> None:
        job_id = dkey.split(":", 3)[3]
        entry = await self.host.kv.get_entry(job_key(job_id))
        job = entry.value if entry is not None and isinstance(entry.value, dict) else None
        if job is None or job["status"] != "active" or job.get("next_run_at") is None:
            await self.host.kv.delete(dkey)
            return
        if abs(job["next_run_at"] - at) > 0.0005:
            await self.host.kv.delete(dkey)  # stale index entry (the job was redefined or resumed)
            return
        sched = parse_schedule(job["schedule"], job["tz"])
        now = max(now, at)  # a fire within the slack counts as on time, never as before its time
        candidates = [at, *sched.advance(at, now)]
        on_time = [t for t in candidates if now - t <= self.misfire_grace]
        late = [t for t in candidates if now - t > self.misfire_grace]
        fires = list(on_time)
        if late and not on_time and job["misfire"] == "run_once":
            fires = [late[-1]]
        missed = len(candidates) - len(fires)
        for t in fires:
            await self._dispatch(job, t, now)
        nxt = sched.following(candidates[-1], now)
        assert entry is not None
        changed = {
            **job,
            "next_run_at": nxt,
            "status": "active" if nxt is not None else "done",
            "last_fired_at": fires[-1] if fires else job.get("last_fired_at"),
            "fired": job["fired"] + len(fires),
            "missed": job["missed"] + missed,
        }
        if await self.host.kv.cas(job_key(job_id), entry.version, changed) is None:
            return  # changed by an op meanwhile; its due entry is authoritative, ours is dropped next tick
        await self.host.kv.delete(dkey)
        if nxt is not None:
            await self.host.kv.put(due_key(nxt, job_id), {"job_id": job_id})
        self._stats["missed"] += missed
        if missed:
            self._audit_event("cron_misfire", f"job_id={job_id} missed={missed} policy={job['misfire']}")

    async def _dispatch(self, job: dict[str, Any], at: float, now: float, *, manual: bool = False) -> str:
        run_id = run_id_for(job["job_id"], at)
        run = {
            "run_id": run_id,
            "job_id": job["job_id"],
            "scheduled_at": at,
            "status": "pending",
            "attempt": 0,
            "dispatched_at": now,
            "lateness": round(max(0.0, now - at), 6),
            "manual": manual,
        }
        # The record first (only if absent): a run that exists is never reset by a second dispatch.
        await self.host.kv.cas(run_key(run_id), None, run)
        msg_id = await self.host.channels.send(
            CHANNEL, "cron_run", {"run_id": run_id, "job_id": job["job_id"], "attempt": 0}, dedup_key=run_id
        )
        self._stats["dispatched"] += 1
        self.host.incr_counter("cron_runs_dispatched_total")
        if job["fired"] % 50 == 0:
            await self._trim_runs(job["job_id"])
        return msg_id

    async def _dispatch_retries(self) -> None:
        now = self.host.now()
        rows = await self.host.kv.list("cron:retry:", limit=self.batch)
        for key, value in rows:
            if int(key.split(":", 3)[2]) / 1000 > now + DUE_SLACK:
                break
            run_id = str(value["run_id"])
            attempt = int(value["attempt"])
            await self.host.channels.send(
                CHANNEL,
                "cron_run",
                {"run_id": run_id, "job_id": value["job_id"], "attempt": attempt},
                dedup_key=f"{run_id}#{attempt}",
            )
            await self.host.kv.delete(key)
            self._stats["retries"] += 1

    # -- helpers ------------------------------------------------------------------------------------------

    def _wake_runner(self) -> None:
        if self.host.has_actor("cron_runner"):
            self.host.send("cron_runner", "wake", {})

    async def _job(self, op: str, job_id: str) -> dict[str, Any]:
        """The job, if the caller may see it (another user's job is not found, like a missing one)."""
        check_job_id(job_id, op)
        job = await self.host.kv.get(job_key(job_id))
        if not isinstance(job, dict) or not _visible(job):
            raise NotFound(f"{op}: no job '{job_id}'", op=op, job_id=job_id)
        return job

    async def _check_session(self, op: str, job_id: str, cron_session: str, owner: str) -> None:
        """A user's job runs in a cron session no other principal's job or chat uses: the session's history
        is in every turn's prompt."""
        recorded = await session_owner(self.host, cron_session)
        clash = recorded is not None and recorded != owner
        if not clash:
            rows = await self.host.kv.list("cron:job:")
            clash = any(
                isinstance(v, dict)
                and v.get("cron_session") == cron_session
                and v.get("job_id") != job_id
                and v.get("owner") != owner
                for _, v in rows
            )
        if clash:
            raise Conflict(
                f"{op}: the session '{cron_session}' belongs to another user; give another session_id",
                op=op,
                field="session_id",
            )

    async def _change(self, op: str, job_id: str, fn: Any) -> dict[str, Any]:
        check_job_id(job_id, op)
        for _ in range(10):
            entry = await self.host.kv.get_entry(job_key(job_id))
            if entry is None or not isinstance(entry.value, dict) or not _visible(entry.value):
                raise NotFound(f"{op}: no job '{job_id}'", op=op, job_id=job_id)
            job = {**entry.value, **fn(entry.value)}
            if await self.host.kv.cas(job_key(job_id), entry.version, job) is not None:
                return job
        raise Conflict(f"{op}: job '{job_id}' keeps changing; try again", job_id=job_id)

    async def _drop_due(self, job: dict[str, Any]) -> None:
        if job.get("next_run_at") is not None:
            await self.host.kv.delete(due_key(job["next_run_at"], job["job_id"]))

    async def _runs(self, job_id: str, limit: int) -> list[dict[str, Any]]:
        rows = await self.host.kv.list(f"cron:run:{job_id}:")
        return [run_view(v) for _, v in reversed(rows[-limit:]) if isinstance(v, dict)]

    async def _trim_runs(self, job_id: str) -> None:
        rows = await self.host.kv.list(f"cron:run:{job_id}:")
        for key, _ in rows[: max(0, len(rows) - MAX_RUNS_KEPT)]:
            await self.host.kv.delete(key)

    def _audit_event(self, event_type: str, detail: str) -> None:
        if self._audit:
            fire_audit(self.host, event_type, detail)


__all__ = ["CronScheduler", "retry_key", "update_run"]
