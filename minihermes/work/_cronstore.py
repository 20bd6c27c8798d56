"""Where cron jobs and their runs live: the tenant's KV, shared by every node on the store.

Jobs are not actor state on purpose: two nodes on one store each run a scheduler instance, and only KV (with
compare-and-set) is shared between them. Keys:

- ``cron:job:<job_id>``: the job;
- ``cron:due:<ms>:<job_id>``: the due index, ordered by fire time (zero-padded ms), read earliest first;
- ``cron:run:<job_id>:<ms>``: one run (``run_id`` is ``<job_id>@<ms>``), status and result;
- ``cron:retry:<ms>:<run_id>``: a failed run waiting for its next attempt.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from minihermes.runtime import Host, InvalidArgument, RequestContext, reset_context, set_context

CHANNEL = "cron:pending"
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
FINAL = ("completed", "failed", "cancelled", "skipped")


def check_job_id(job_id: str, op: str) -> None:
    if not JOB_ID.fullmatch(job_id):
        raise InvalidArgument(
            f"{op}: job_id must be 1-100 letters, digits, '_', '.', '-'", op=op, field="job_id"
        )


def ms(t: float) -> int:
    return round(t * 1000)


def job_key(job_id: str) -> str:
    return f"cron:job:{job_id}"


def due_key(at: float, job_id: str) -> str:
    return f"cron:due:{ms(at):015d}:{job_id}"


def due_at(key: str) -> float:
    return int(key.split(":", 3)[2]) / 1000


def run_id_for(job_id: str, at: float) -> str:
    return f"{job_id}@{ms(at)}"


def run_key(run_id: str) -> str:
    job_id, _, stamp = run_id.rpartition("@")
    return f"cron:run:{job_id}:{int(stamp):015d}"


def retry_key(at: float, run_id: str) -> str:
    return f"cron:retry:{ms(at):015d}:{run_id}"


def run_view(run: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "run_id",
        "job_id",
        "scheduled_at",
        "status",
        "attempt",
        "result",
        "error",
        "silent",
        "delivered",
        "delivery_error",
        "dispatched_at",
        "started_at",
        "finished_at",
        "lateness",
        "manual",
        "session_id",
        "next_attempt_at",
    )
    return {k: run[k] for k in keys if k in run}


async def update_run(host: Host, run_id: str, **changes: Any) -> dict[str, Any] | None:
    """Merge changes into a run record (compare-and-set, retried): the scheduler and runners on several
    nodes write runs concurrently."""
    key = run_key(run_id)
    for _ in range(20):
        entry = await host.kv.get_entry(key)
        if entry is None or not isinstance(entry.value, dict):
            return None
        merged = {**entry.value, **changes}
        if await host.kv.cas(key, entry.version, merged) is not None:
            return merged
    raise RuntimeError(f"run {run_id}: too many concurrent updates")


def run_context(job: dict[str, Any], scope: tuple[str, str]) -> RequestContext:
    """A run acts as the job's owner with the roles the owner had when creating it, never more."""
    return RequestContext(
        tenant=scope[0],
        namespace=scope[1],
        principal=str(job.get("owner") or "cron"),
        roles=frozenset(job.get("roles") or ("user",)),
        request_id=f"cron:{job.get('job_id', '')}",
    )


@contextmanager
def acting_as(ctx: RequestContext) -> Iterator[None]:
    token = set_context(ctx)
    try:
        yield
    finally:
        reset_context(token)
