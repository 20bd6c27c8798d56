"""The kanban board (one per tenant): durable tasks that agents and people share.

Cards live in the tenant's KV (``kanban:task:<id>``) and every change is a compare-and-set on the card, so
two nodes on one store never both win a claim. Each card has an event stream (``kanban:<id>`` in the
hash-chained event log): created, assigned, moved, commented, claimed, heartbeat-expired, blocked,
completed, ...

Statuses: ``todo`` (waiting for dependencies), ``ready``, ``in_progress`` (claimed), ``blocked``, ``done``,
``cancelled``; ``archived`` is a flag on done or cancelled cards. ``start(task_id, worker, ttl)`` claims a
ready card atomically for ``ttl`` seconds; ``heartbeat`` extends the claim. A claim that is not renewed in
time is reclaimed by the sweep (a durable reminder): the card goes back to ``ready``, counted as a failure.
``fail`` reports a failed attempt; the second failure blocks the card with the reason. ``complete`` stores
the worker's summary, which the cards depending on it read as their hand-off (``show``), and makes them
ready when all their dependencies are done.

Ownership: the board is the tenant's, so everyone reads every card and may comment; a card records its
author (``created_by``, from the request context) and every change to it (update, assign, move, block,
unblock, start, heartbeat, complete, fail, cancel, archive, delete) is refused (``PermissionDenied``) unless
the caller is its author, its assignee, an admin or the runtime (``system``). A comment's author is the
caller; admins and the system may name another. Free text (title, body, comments, reasons, summaries,
metadata) is stored with recognisable secrets redacted.

Forgetting a user (``forget_subject``, asked by ``memory.forget``) deletes the cards they created (their
event streams' content too: ``events.forget``) and the comments they wrote on other cards (the rest of another's card is that author's: its assignee, and what a
worker wrote into it, stay); forgetting the tenant, every card. A card whose dependency was deleted no longer
waits for it. Cards are not tied to sessions: forgetting a session leaves the board as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from minihermes.audit import fire_audit
from minihermes.context.forget import subject
from minihermes.runtime import (
    ActorArgs,
    Conflict,
    GenServer,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    call,
    cast,
    current_context,
    valid_key,
)

from ._owner import acting_principal, is_admin, principal, scrub, scrub_value
from .kanban_worker import WAITING

Status = Literal["todo", "ready", "in_progress", "blocked", "done", "cancelled"]
StatusFilter = Literal["", "todo", "ready", "in_progress", "blocked", "done", "cancelled"]
OPEN = ("todo", "ready", "in_progress", "blocked")
MAX_FAILURES = 2
MAX_TITLE = 300
MAX_BODY = 20_000
DEFAULT_TTL = 300.0
MOVE_CLAIM_TTL = 86400.0
"""How long a claim made by moving a card to ``in_progress`` by hand lasts (a person does not heartbeat)."""
Mutation = Callable[[dict[str, Any]], str]
"""Changes a card in place and returns the event type to record (empty: no change)."""


def _text(op: str, field: str, value: str, limit: int, *, required: bool = False) -> str:
    if required and not value.strip():
        raise InvalidArgument(f"{op}: {field} must not be empty", op=op, field=field)
    if len(value) > limit:
        raise InvalidArgument(f"{op}: {field} is longer than {limit} characters", op=op, field=field)
    return value


def _key(task_id: str) -> str:
    return f"kanban:task:{task_id}"


def _check_task_id(op: str, task_id: str) -> None:
    """No card has an id the store cannot key on (ids are ``t<n>``): such an id is not found, before it reaches
    the store's own checks (a NUL was a crash there, HTTP 500)."""
    if not valid_key(task_id):
        raise NotFound(f"{op}: no task {task_id[:80]!r}", op=op, task_id=task_id[:80])


def _require_owner(op: str, card: dict[str, Any]) -> None:
    """Changing a card: its author, its assignee, an admin or the system."""
    if is_admin():
        return
    who = principal()
    if who and who in (card.get("created_by"), card.get("assignee")):
        return
    raise PermissionDenied(
        f"{op}: only the author or the assignee of {card['task_id']}, or an admin, may change it",
        op=op,
        task_id=card["task_id"],
    )


class Kanban(GenServer):
    """Per-tenant board. Args: ``sweep_interval`` (s between reclaim sweeps, 10)."""

    class Args(ActorArgs):
        sweep_interval: float = 10

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self._audit = self.host.has_actor("audit_event")
        await self.host.set_reminder("kanban_sweep", "sweep", every=float(args.get("sweep_interval", 10)))

    # -- cards --------------------------------------------------------------------------------------------

    @call(access="write")
    async def create(
        self,
        title: str,
        body: str = "",
        assignee: str = "",
        depends_on: list[str] | None = None,
        priority: int = 0,
        created_by: str = "",
    ) -> dict[str, Any]:
        """A new card: ``{status, task_id, task}``; ``ready`` at once unless it waits for dependencies.
        The author is the caller (``created_by`` names another only for admins and the system)."""
        op = "create"
        _text(op, "title", title, MAX_TITLE, required=True)
        _text(op, "body", body, MAX_BODY)
        _text(op, "assignee", assignee, 200)
        deps = list(dict.fromkeys(depends_on or []))
        dep_cards = [await self._card(op, d) for d in deps]
        task_id = await self._next_id()
        now = self.host.now()
        card = {
            "task_id": task_id,
            "title": scrub(title.strip()),
            "body": scrub(body),
            "assignee": assignee,
            "priority": priority,
            "depends_on": deps,
            "status": "ready" if all(d["status"] == "done" for d in dep_cards) else "todo",
            "archived": False,
            "created_by": acting_principal(created_by),
            "created_at": now,
            "updated_at": now,
            "claim": None,
            "attempts": 0,
            "failures": 0,
            "last_error": "",
            "blocked_reason": "",
            "summary": "",
            "metadata": {},
            "comments": [],
        }
        if await self.host.kv.cas(_key(task_id), None, card) is None:
            raise Conflict(f"{op}: task id {task_id} taken; try again")
        await self._event(task_id, "created", title=card["title"], status=card["status"])
        self._nudge()
        return {"status": "ok", "task_id": task_id, "task": card}

    @call(access="read")
    async def show(self, task_id: str) -> dict[str, Any]:
        """The card, its recent events and its dependencies with their summaries (the hand-off)."""
        card = await self._card("show", task_id)
        events = await self.host.events.read(f"kanban:{task_id}", limit=100)
        deps = []
        for dep_id in card["depends_on"]:
            dep = await self.host.kv.get(_key(dep_id))
            if isinstance(dep, dict):
                deps.append({k: dep[k] for k in ("task_id", "title", "status", "summary")})
        return {
            "status": "ok",
            "task": card,
            "dependencies": deps,
            "events": [{"seq": e.seq, "at": e.ts, **e.data} for e in events],
        }

    @call(name="list", access="read")
    async def list_tasks(
        self,
        status: StatusFilter = "",
        assignee: str = "",
        include_archived: bool = False,
        limit: int = 100,
    ) -> dict[str, Any]:
        """Cards by priority (high first) then age; ``status="ready"`` is what workers pick from."""
        if not 1 <= limit <= 1000:
            raise InvalidArgument("list: limit must be 1..1000", op="list", field="limit")
        cards = [
            c
            for c in await self._all()
            if (not status or c["status"] == status)
            and (not assignee or c["assignee"] == assignee)
            and (include_archived or not c["archived"])
        ]
        cards.sort(key=lambda c: (-c["priority"], c["created_at"], c["task_id"]))
        return {"status": "ok", "tasks": cards[:limit], "count": min(len(cards), limit), "total": len(cards)}

    @call(access="write")
    async def update(
        self, task_id: str, title: str | None = None, body: str | None = None, priority: int | None = None
    ) -> dict[str, Any]:
        def change(c: dict[str, Any]) -> str:
            if title is not None:
                c["title"] = scrub(_text("update", "title", title, MAX_TITLE, required=True).strip())
            if body is not None:
                c["body"] = scrub(_text("update", "body", body, MAX_BODY))
            if priority is not None:
                c["priority"] = priority
            return "updated"

        return await self._change("update", task_id, change, guard=True)

    @call(access="admin")
    async def delete(self, task_id: str) -> dict[str, Any]:
        """Delete a card nobody depends on (cancel or archive it otherwise)."""
        _require_owner("delete", await self._card("delete", task_id))
        users = [c["task_id"] for c in await self._all() if task_id in c["depends_on"]]
        if users:
            raise Conflict(f"delete: {', '.join(users)} depend on {task_id}", task_id=task_id)
        await self.host.kv.delete(_key(task_id))
        await self._event(task_id, "deleted")
        return {"status": "ok", "task_id": task_id, "deleted": True}

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Delete the cards a user created (with their event streams: the entries stay, unreadable, and the
        chain verifies) and the comments they wrote elsewhere, or (admin) every card: ``cleared: {kanban,
        kanban_comments, kanban_events}``."""
        who = subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        if who.session_id:
            return {"status": "ok", "cleared": {"kanban": 0, "kanban_comments": 0, "kanban_events": 0}}
        cards = await self._all()
        doomed = [c for c in cards if who.tenant or c.get("created_by") == who.user_id]
        gone = {c["task_id"] for c in doomed}
        events = 0
        for card in doomed:
            await self.host.kv.delete(_key(card["task_id"]))
            # the worker's turn markers (sessions ``kanban:<id>:<attempt>``) keep each turn's reply, and a
            # paused turn's record the call waiting for approval
            for key, _ in await self.host.kv.list(f"work:turn:kanban:{card['task_id']}:"):
                await self.host.kv.delete(key)
            await self.host.kv.delete(f"{WAITING}{card['task_id']}")
            # Its history: the title is in "created"; a reason or summary in others.
            events += (await self.host.events.forget(f"kanban:{card['task_id']}", None)).forgotten
        comments = 0
        for card in cards:
            if card["task_id"] in gone:
                continue
            theirs = sum(1 for m in card["comments"] if m.get("author") == who.user_id)
            if theirs:

                def change(c: dict[str, Any]) -> str:
                    c["comments"] = [m for m in c["comments"] if m.get("author") != who.user_id]
                    return "comments_forgotten"

                await self._change("forget_subject", card["task_id"], change)
                comments += theirs
            if card["status"] == "todo" and gone & set(card["depends_on"]) and await self._deps_done(card):

                def release(c: dict[str, Any]) -> str:
                    if c["status"] != "todo":
                        return ""
                    c["status"] = "ready"
                    return "ready"

                await self._change("forget_subject", card["task_id"], release)
                self._nudge()
        cleared = {"kanban": len(doomed), "kanban_comments": comments, "kanban_events": events}
        return {"status": "ok", "cleared": cleared}

    @call(access="write")
    async def assign(self, task_id: str, assignee: str) -> dict[str, Any]:
        _text("assign", "assignee", assignee, 200)

        def change(c: dict[str, Any]) -> str:
            c["assignee"] = assignee
            return "assigned"

        return await self._change("assign", task_id, change, guard=True, assignee=assignee)

    @call(access="write")
    async def move(self, task_id: str, status: Status) -> dict[str, Any]:
        """Put a card in a column by hand. A claim ends when the card leaves ``in_progress``; ``ready``
        needs every dependency done. Moving a ready card to ``in_progress`` claims it for the caller, as
        ``start(task_id, worker=<caller>, ttl=86400)`` does (a person's claim lasts a day); a card that is
        not ready cannot be claimed (the error names ``start``)."""
        deps_done = await self._deps_done(await self._card("move", task_id))
        who = current_context().principal
        if status == "in_progress":
            card = await self._card("move", task_id)
            if card["status"] == "ready":
                if not who:
                    raise Conflict(
                        "move: in_progress means claimed, and this caller has no name to claim it with; "
                        "use start(task_id, worker)",
                        task_id=task_id,
                    )
                return await self.start(task_id, worker=who, ttl=MOVE_CLAIM_TTL)

        def change(c: dict[str, Any]) -> str:
            if status == "ready" and not deps_done:
                raise Conflict(f"move: {task_id} waits for its dependencies", task_id=task_id)
            if status == "in_progress" and c["claim"] is None:
                raise Conflict(
                    f"move: {task_id} is {c['status']}; only a ready card can be claimed "
                    "(in_progress means claimed: start(task_id, worker))",
                    task_id=task_id,
                )
            if status != "in_progress":
                c["claim"] = None
            c["status"] = status
            return "moved"

        return await self._change("move", task_id, change, guard=True, to=status)

    @call(access="write")
    async def comment(self, task_id: str, text: str, author: str = "") -> dict[str, Any]:
        """Anyone may comment; the author is the caller (``author`` names another only for admins and the
        system)."""
        _text("comment", "text", text, 5000, required=True)
        who = acting_principal(author)
        clean = scrub(text)

        def change(c: dict[str, Any]) -> str:
            c["comments"] = [*c["comments"][-49:], {"author": who, "text": clean, "at": self.host.now()}]
            return "commented"

        return await self._change("comment", task_id, change, author=who)

    @call(access="write")
    async def block(self, task_id: str, reason: str) -> dict[str, Any]:
        _text("block", "reason", reason, 2000, required=True)
        reason = scrub(reason)

        def change(c: dict[str, Any]) -> str:
            self._require_open("block", c)
            c.update(status="blocked", blocked_reason=reason, claim=None)
            return "blocked"

        return await self._change("block", task_id, change, guard=True, reason=reason)

    @call(access="write")
    async def unblock(self, task_id: str) -> dict[str, Any]:
        """Back to ready (or todo while dependencies are open); the failure count starts again."""
        deps_done = await self._deps_done(await self._card("unblock", task_id))

        def change(c: dict[str, Any]) -> str:
            if c["status"] != "blocked":
                raise Conflict(f"unblock: {task_id} is {c['status']}, not blocked", task_id=task_id)
            c.update(status="ready" if deps_done else "todo", blocked_reason="", failures=0)
            return "unblocked"

        reply = await self._change("unblock", task_id, change, guard=True)
        self._nudge()
        return reply

    # the claim protocol (start, heartbeat, fail): write, and the actor keeps it to the card's author,
    # assignee or an admin, like complete
    @call(access="write")
    async def start(self, task_id: str, worker: str, ttl: float = DEFAULT_TTL) -> dict[str, Any]:
        """Claim a ready card for ``ttl`` seconds (atomic: one worker wins). Reply has the ``claim``."""
        _text("start", "worker", worker, 200, required=True)
        if not 1 <= ttl <= 86400:
            raise InvalidArgument("start: ttl must be 1..86400 seconds", op="start", field="ttl")
        now = self.host.now()

        def change(c: dict[str, Any]) -> str:
            if c["status"] != "ready":
                raise Conflict(f"start: {task_id} is {c['status']}, not ready", task_id=task_id)
            c["attempts"] += 1
            c.update(
                status="in_progress",
                claim={"worker": worker, "attempt": c["attempts"], "since": now, "expires_at": now + ttl},
            )
            return "claimed"

        return await self._change("start", task_id, change, guard=True, worker=worker)

    @call(access="write")
    async def heartbeat(self, task_id: str, worker: str, ttl: float = DEFAULT_TTL) -> dict[str, Any]:
        """Extend a live claim; ``conflict`` when the worker lost it (reclaimed, blocked, done)."""
        now = self.host.now()

        def change(c: dict[str, Any]) -> str:
            self._require_claim("heartbeat", c, worker, now)
            c["claim"] = {**c["claim"], "expires_at": now + ttl}
            return ""  # heartbeats are not worth an event each

        return await self._change("heartbeat", task_id, change, guard=True)

    @call(access="write")
    async def complete(
        self, task_id: str, summary: str, metadata: dict[str, Any] | None = None, worker: str = ""
    ) -> dict[str, Any]:
        """Done, with a summary the dependent cards read. With ``worker``, only while it holds the claim."""
        _text("complete", "summary", summary, MAX_BODY, required=True)
        summary = scrub(summary)
        meta = scrub_value(dict(metadata or {}))
        now = self.host.now()

        def change(c: dict[str, Any]) -> str:
            if worker:
                self._require_claim("complete", c, worker, now)
            self._require_open("complete", c)
            c.update(status="done", summary=summary, metadata=meta, claim=None)
            c["completed_at"] = now
            return "completed"

        reply = await self._change("complete", task_id, change, guard=True, summary=summary[:500])
        reply["unblocked"] = await self._release_dependents(task_id)
        return reply

    @call(access="write")
    async def fail(self, task_id: str, worker: str, reason: str, final: bool = False) -> dict[str, Any]:
        """A worker gives up on its attempt: back to ready, or blocked with the reason after the second.
        ``final``: blocked at once (another attempt would end the same way, e.g. the agent cannot do it)."""
        _text("fail", "reason", reason, 2000, required=True)
        reason = scrub(reason)
        now = self.host.now()

        def change(c: dict[str, Any]) -> str:
            self._require_claim("fail", c, worker, now)
            return self._failure(c, reason, final=final)

        return await self._change("fail", task_id, change, guard=True, reason=reason)

    @call(access="write")
    async def cancel(self, task_id: str, reason: str = "") -> dict[str, Any]:
        reason = scrub(reason)

        def change(c: dict[str, Any]) -> str:
            self._require_open("cancel", c)
            c.update(status="cancelled", claim=None, blocked_reason=reason)
            return "cancelled"

        return await self._change("cancel", task_id, change, guard=True, reason=reason)

    @call(access="write")
    async def archive(self, task_id: str) -> dict[str, Any]:
        """Hide a done or cancelled card from lists (kept, never deleted)."""

        def change(c: dict[str, Any]) -> str:
            if c["status"] not in ("done", "cancelled"):
                raise Conflict(f"archive: {task_id} is {c['status']}; finish or cancel it first")
            c["archived"] = True
            return "archived"

        return await self._change("archive", task_id, change, guard=True)

    @call(access="read")
    async def stats(self) -> dict[str, Any]:
        """Cards per status, archived, claimed, and claims past their expiry (about to be reclaimed)."""
        cards = await self._all()
        now = self.host.now()
        by_status = {s: 0 for s in ("todo", "ready", "in_progress", "blocked", "done", "cancelled")}
        for c in cards:
            by_status[c["status"]] += 1
        return {
            "status": "ok",
            "total": len(cards),
            "by_status": by_status,
            "archived": sum(1 for c in cards if c["archived"]),
            "claimed": sum(1 for c in cards if c["claim"] is not None),
            "expired_claims": sum(1 for c in cards if c["claim"] and c["claim"]["expires_at"] < now),
        }

    @cast
    async def sweep(self) -> None:
        """Reclaim cards whose worker stopped heartbeating (durable reminder)."""
        now = self.host.now()
        for card in await self._all():
            claim = card["claim"]
            if card["status"] != "in_progress" or not claim or claim["expires_at"] >= now:
                continue

            def change(c: dict[str, Any], expected: dict[str, Any] = claim) -> str:
                if c["claim"] != expected:
                    return ""  # renewed or finished meanwhile
                return self._failure(c, f"claim of {expected['worker']} expired (no heartbeat)")

            await self._change("sweep", card["task_id"], change)

    # -- helpers ------------------------------------------------------------------------------------------

    def _failure(self, c: dict[str, Any], reason: str, *, final: bool = False) -> str:
        c["failures"] += 1
        c["last_error"] = reason
        c["claim"] = None
        if final:
            c["status"] = "blocked"
            c["blocked_reason"] = f"failed: {reason}"
            return "blocked"
        if c["failures"] >= MAX_FAILURES:
            c["status"] = "blocked"
            c["blocked_reason"] = f"failed {c['failures']} times; last: {reason}"
            return "blocked"
        c["status"] = "ready"
        return "reclaimed"

    @staticmethod
    def _require_open(op: str, c: dict[str, Any]) -> None:
        if c["status"] not in OPEN:
            raise Conflict(f"{op}: {c['task_id']} is {c['status']}", task_id=c["task_id"])

    @staticmethod
    def _require_claim(op: str, c: dict[str, Any], worker: str, now: float) -> None:
        claim = c["claim"]
        if c["status"] != "in_progress" or not claim or claim["worker"] != worker:
            raise Conflict(f"{op}: {worker} does not hold the claim on {c['task_id']}", task_id=c["task_id"])
        if claim["expires_at"] < now:
            raise Conflict(f"{op}: the claim on {c['task_id']} expired", task_id=c["task_id"])

    async def _change(
        self, op: str, task_id: str, fn: Mutation, *, guard: bool = False, **detail: Any
    ) -> dict[str, Any]:
        """Apply ``fn`` to the card (compare-and-set, retried). ``guard``: a caller's change, allowed to the
        card's author, assignee, an admin or the system (checked on the version being changed)."""
        _check_task_id(op, task_id)
        for _ in range(20):
            entry = await self.host.kv.get_entry(_key(task_id))
            if entry is None or not isinstance(entry.value, dict):
                raise NotFound(f"{op}: no task {task_id}", op=op, task_id=task_id)
            card = dict(entry.value)
            if guard:
                _require_owner(op, card)
            event = fn(card)
            if not event and op != "heartbeat":
                return {"status": "ok", "task_id": task_id, "task": entry.value, "changed": False}
            card["updated_at"] = self.host.now()
            if await self.host.kv.cas(_key(task_id), entry.version, card) is not None:
                if event:
                    await self._event(task_id, event, by=current_context().principal, **detail)
                return {"status": "ok", "task_id": task_id, "task": card}
        raise Conflict(f"{op}: {task_id} keeps changing; try again", task_id=task_id)

    async def _release_dependents(self, task_id: str) -> list[str]:
        released = []
        cards = await self._all()
        done = {c["task_id"] for c in cards if c["status"] == "done"}
        for c in cards:
            if c["status"] == "todo" and task_id in c["depends_on"] and set(c["depends_on"]) <= done:

                def change(card: dict[str, Any]) -> str:
                    if card["status"] != "todo":
                        return ""
                    card["status"] = "ready"
                    return "ready"

                await self._change("complete", c["task_id"], change, after=task_id)
                released.append(c["task_id"])
        if released:
            self._nudge()
        return released

    async def _deps_done(self, card: dict[str, Any]) -> bool:
        for dep_id in card["depends_on"]:
            dep = await self.host.kv.get(_key(dep_id))
            if isinstance(dep, dict) and dep["status"] != "done":
                return False
        return True

    async def _card(self, op: str, task_id: str) -> dict[str, Any]:
        _check_task_id(op, task_id)
        card = await self.host.kv.get(_key(task_id))
        if not isinstance(card, dict):
            raise NotFound(f"{op}: no task {task_id}", op=op, task_id=task_id)
        return card

    async def _all(self) -> list[dict[str, Any]]:
        return [v for _, v in await self.host.kv.list("kanban:task:") if isinstance(v, dict)]

    async def _next_id(self) -> str:
        for _ in range(50):
            entry = await self.host.kv.get_entry("kanban:seq")
            n = int(entry.value) + 1 if entry is not None else 1
            if await self.host.kv.cas("kanban:seq", entry.version if entry else None, n) is not None:
                return f"t{n}"
        raise Conflict("create: could not allocate a task id; try again")

    def _nudge(self) -> None:
        """Tell this tenant's kanban worker that a card may have become ready."""
        if self.host.has_actor("kanban_worker"):
            self.host.send("kanban_worker", "poll", {})

    async def _event(self, task_id: str, event_type: str, **data: Any) -> None:
        await self.host.events.append(f"kanban:{task_id}", {"type": event_type, **data})
        if self._audit:
            fire_audit(self.host, f"kanban_{event_type}", f"task_id={task_id}")
