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

from minihermes.runtime import (
    ActorError,
    Host,
    InvalidArgument,
    NotFound,
    RequestContext,
    reset_context,
    set_context,
)

CHANNEL = "cron:pending"
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
FINAL = ("completed", "failed", "cancelled", "skipped")
DELIVER_KEYS = frozenset({"link", "path", "method"})
MAX_DELIVER_PATH = 2000


def check_job_id(job_id: str, op: str) -> None:
    if not JOB_ID.fullmatch(job_id):
        raise InvalidArgument(
            f"{op}: job_id must be 1-100 letters, digits, '_', '.', '-'", op=op, field="job_id"
        )


def check_deliver(host: Host, deliver: dict[str, str], op: str) -> dict[str, str]:
    """A job's delivery target, checked when the job is made rather than at its first run: a service link the
    node has, a method that link allows, and a path relative to it (no scheme or host, no ``.``/``..``).
    Returns it normalised (``method`` upper-case, default POST; ``path`` default ``/``)."""
    unknown = sorted(set(deliver) - DELIVER_KEYS)
    if unknown:
        raise InvalidArgument(
            f"{op}: deliver takes link, path and method, not {', '.join(map(repr, unknown))}",
            op=op,
            field=f"deliver.{unknown[0]}",
        )
    link = str(deliver.get("link") or "")
    if not link:
        raise InvalidArgument(
            f"{op}: deliver needs a 'link' (a service link name)", op=op, field="deliver.link"
        )
    method = str(deliver.get("method") or "POST").upper()
    path = str(deliver.get("path") or "/")
    if len(path) > MAX_DELIVER_PATH or any(ord(c) < 0x21 or c == "\x7f" for c in path):
        raise InvalidArgument(
            f"{op}: deliver.path must be a relative path of at most {MAX_DELIVER_PATH} characters, without "
            "spaces or control characters",
            op=op,
            field="deliver.path",
        )
    try:
        host.check_link(link, method, path)
    except NotFound:
        raise InvalidArgument(
            f"{op}: deliver.link: this node has no service link named '{link}' (links are declared in the "
            "node's config, [service_links.NAME]: docs/configuration.md)",
            op=op,
            field="deliver.link",
            link=link,
        ) from None
    except ActorError as e:
        field = str(e.details.get("field") or "link")
        raise InvalidArgument(
            f"{op}: deliver.{field}: {e.message}", op=op, field=f"deliver.{field}", link=link
        ) from None
    return {"link": link, "path": path, "method": method}


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
        "action",
        "scheduled_at",
        "status",
        "attempt",
        "result",
        "error",
        "silent",
        "delivered",
        "link_delivered",
        "notification_id",
        "delivery_error",
        "dispatched_at",
        "started_at",
        "finished_at",
        "lateness",
        "manual",
        "session_id",
        "next_attempt_at",
        "not_retried",
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
    """A run acts as the job's owner with the roles the owner had when creating it, never more, and never
    as the runtime itself (``system`` is not a role a job's owner can pass on)."""
    roles = frozenset(job.get("roles") or ()) - {"system"}
    return RequestContext(
        tenant=scope[0],
        namespace=scope[1],
        principal=str(job.get("owner") or "cron"),
        roles=roles or frozenset({"user"}),
        request_id=f"cron:{job.get('job_id', '')}",
    )


@contextmanager
def acting_as(ctx: RequestContext) -> Iterator[None]:
    token = set_context(ctx)
    try:
        yield
    finally:
        reset_context(token)
