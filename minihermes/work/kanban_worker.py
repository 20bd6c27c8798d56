"""The kanban worker (one per tenant): agents that pick up ready cards and follow the worker protocol.

On each poll (a durable reminder, and a nudge from ``kanban`` when a card becomes ready) it claims ready
cards assigned to an agent (assignee ``agent`` or ``agent:<profile>``) and, for each, runs an agent turn in
the session ``kanban:<task_id>:<attempt>``, which is also the claim's holder. The turn's message is the card
itself (title, body, and the summaries of the cards it depends on: the hand-off); the worker keeps the
protocol (orient, work, heartbeat, block if stuck, finish with a summary) and tells the model its part as
the turn's ``instructions`` (``worker_instructions``: the card's id and title, what "done" means, to answer
with a short summary of what was done or say plainly that it cannot), which the agent puts in the turn's
system prompt, marked as the kanban worker's, not in its message. A message that carried the protocol made
the offline model read it as requests: "kanban_show has more" and "work on exactly this task" became a
``kanban_show`` call with "exactly this task ..." as the task id, whose error was then stored as the card's
summary.

The worker judges the turn, and the card ends the way the turn did (``judge``):

- **done** (``complete``, the final answer as the summary) only when the turn ended ``ok`` with an answer,
  no tool call failed, and the answer neither says the agent cannot do it nor contradicts the tool results;
- **failed** (``fail`` with ``final``: blocked at once with ``failed: <reason>``, since another attempt would
  end the same way) when a tool call failed, the turn did not end ``ok`` (the step limit), it gave no answer,
  the answer says it cannot ("I can't ...", "I cannot ...") or contradicts the turn's tool results
  (``minihermes.context.consistency``: an internal wrapper shown, "no files" after a listing found some, a
  result no tool gave);
- **waiting** (blocked with the approval to decide) when the turn paused for an approval; once it is
  decided and the resumed turn has ended, the worker's next poll ends the card the way that turn did (done
  or failed); a card unblocked by hand meanwhile takes that outcome on its next claim, never a second run;
- a turn that raised (LLM unavailable, timeout) reports an ordinary ``fail``: the board retries the card and
  blocks it on the second failure. A worker that dies stops heartbeating, so the board reclaims its cards.

Each outcome is reported to whoever created the card: a comment on it by ``kanban_worker`` ("Done: ...",
"Failed: ...", "Waiting for approval ..."), seen in the card's comments and history, and an audit event
``kanban_worker_outcome`` naming the card, the outcome and its author. An agent that completed or blocked the
card itself is left as it did.

**At a spend cap.** A turn refused before anything was sent because of a budget (``budget_exceeded``, or
``price_unknown`` under a money cap) is not the card's failure: the worker is *paused at its cap* with the
reason, kept durably (``kanban_worker:paused:<scope>/<key>``), the card goes back to ``ready`` with a comment
("Paused: ..."), and the worker claims no more cards that cap covers (the kanban worker's or the tenant's
cap: none; a user's: that author's cards; a session's: that card) until the period rolls over: the error's
``resets_at``, read on the actor's clock at each poll. A cap with no next period (``total``, an unknown
price) holds until an admin resumes. An admin overrides either way: ``pause_worker`` keeps it paused past
the period, ``resume_worker`` resumes now (a cap still spent pauses it again at the next refused card).

The worker claims, heartbeats, completes and fails cards as the runtime (``system``, whoever nudged it); the
agent turn in between runs as the card's author with the ``user`` role, so the kanban tools it calls may
change that card (its author's) and nothing its author could not change.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from minihermes.audit import fire_audit
from minihermes.context.consistency import ToolOutcome, contradiction
from minihermes.runtime import (
    ActorArgs,
    ActorError,
    GenServer,
    InvalidArgument,
    PermissionDenied,
    RequestContext,
    call,
    cast,
    current_context,
)

from ._cronstore import acting_as
from ._owner import is_admin, system_context
from ._turns import run_turn_once

PAUSED = "kanban_worker:paused:"
"""kv: a hold on claiming, per cap (``<scope>/<key>``) or ``admin``: what it covers, why, and until when."""
BUDGET_REFUSALS = frozenset({"budget_exceeded", "price_unknown"})
"""Errors of a turn refused for a spend cap before anything was sent: the worker pauses, the card waits."""
WAITING = "kanban_worker:waiting:"
"""kv: the session of a card's turn that paused for an approval (its outcome is taken on the next claim)."""
_CANNOT = re.compile(
    r"(?:^|[.!?:]\s+|\n)(?:sorry,?\s+)?i(?:\s+(?:can['\u2019]?t|cannot|can\s+not|am\s+(?:unable|not\s+able)|"
    r"do\s+not\s+know\s+how|don['\u2019]t\s+know\s+how)|['\u2019]m\s+(?:unable|not\s+able))\b",
    re.IGNORECASE,
)
"""An answer saying the agent cannot do (part of) what it was asked, at the start of a sentence."""
Outcome = Literal["done", "failed", "waiting"]


def worker_prompt(card: dict[str, Any], deps: list[dict[str, Any]]) -> str:
    """The turn's message: the card's request itself (title, then body), then the hand-off from the cards it
    depends on. No protocol text: that is the turn's ``instructions`` (``worker_instructions``), and any
    model, the offline one included, reads the message as what it is asked to do."""
    lines = [card["title"]]
    if card.get("body"):
        lines += ["", card["body"]]
    if deps:
        lines += ["", "Hand-off from the cards this one depends on:"]
        lines += [f"- {d['task_id']} ({d['title']}): {d.get('summary') or '(no summary)'}" for d in deps]
    return "\n".join(lines)


def worker_instructions(card: dict[str, Any]) -> str:
    """The worker's protocol for the card's turn, given as the turn's ``instructions`` (its system prompt),
    never as part of the message."""
    title = " ".join(str(card["title"]).split())[:300]
    return (
        f"This turn works on kanban card {card['task_id']} ({title}) for its author; the user message is "
        "the card (title, body, and what the cards it depends on handed off).\n"
        "- Do what the card asks, and only that: do not widen its scope.\n"
        "- Done means the card's request is carried out; the kanban worker then completes the card itself, "
        "with your answer as its summary, so do not complete or fail it with the kanban tools.\n"
        "- If you are stuck on something only a person can resolve, block the card with the reason "
        "(kanban_block) and stop.\n"
        "- Answer with a short summary of what was done (results, names, values), which the cards that "
        "depend on this one read; if you cannot do it, say plainly that you cannot, and why."
    )


def _tool_error(message: dict[str, Any]) -> str:
    """``name: code: message`` of a failed tool result (its error may sit in the untrusted-content envelope,
    which never reaches a person as such)."""
    content = str(message.get("content") or "")
    try:
        payload = json.loads(content)
    except ValueError:
        payload = content
    if isinstance(payload, dict) and "untrusted_content" in payload:
        payload = payload["untrusted_content"]
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(error, dict):
        text = ": ".join(str(error[k]) for k in ("code", "message") if error.get(k)) or json.dumps(error)
    else:
        text = str(error)
    return f"{message.get('name') or 'a tool'}: {text[:300]}"


def _paused_view(reply: dict[str, Any]) -> dict[str, Any]:
    """What a paused turn's reply says about the approval it waits for (kept for the next claim)."""
    return {k: reply[k] for k in ("approval_id", "pending_tool") if reply.get(k)}


def _outcomes(turn: list[dict[str, Any]]) -> list[ToolOutcome]:
    """The turn's tool calls with their results (``minihermes.context.consistency``)."""
    results = {m.get("tool_call_id"): m for m in turn if m.get("role") == "tool"}
    found = []
    for m in turn:
        for c in m.get("tool_calls") or []:
            result = results.get(c.get("id")) or {}
            found.append(
                ToolOutcome(
                    str(c.get("name") or ""),
                    dict(c.get("input") or {}),
                    bool(result.get("is_error")),
                    str(result.get("content") or ""),
                )
            )
    return found


def judge(reply: dict[str, Any], turn: list[dict[str, Any]], request: str = "") -> tuple[Outcome, str]:
    """How the card ends after its turn: ``(done, summary)``, ``(failed, reason)`` or ``(waiting, reason)``.
    ``turn``: the turn's messages after its user message (from the session's history); ``request``: that
    message."""
    status = str(reply.get("status") or "")
    if status == "paused":
        tool = (reply.get("pending_tool") or {}).get("name") or "a tool call"
        approval = reply.get("approval_id") or "an approval"
        return "waiting", f"waiting for approval {approval} of {tool}; the card ends when it is decided"
    failed = [_tool_error(m) for m in turn if m.get("role") == "tool" and m.get("is_error")]
    if failed:
        return "failed", "a tool call failed: " + "; ".join(failed)
    if status != "ok":
        return "failed", f"the turn ended with status {status or 'unknown'}"
    text = str(reply.get("response") or "").strip()
    if not text:
        return "failed", "the turn gave no answer"
    if _CANNOT.search(text):
        return "failed", f"the agent could not do it: {text[:1500]}"
    if wrong := contradiction(text, _outcomes(turn), request):
        return "failed", f"the answer contradicts the turn's tool results: {wrong}"
    return "done", text


def hold_for(error: ActorError, principal: str, task_id: str) -> str:
    """What a budget refusal holds back: ``all`` (the kanban worker's or the tenant's cap), ``user:<name>``
    (the card author's own cap) or ``card:<id>`` (the turn's session cap)."""
    scope = str(error.details.get("scope") or "")
    if scope == "user":
        return f"user:{error.details.get('key') or principal}"
    if scope == "session":
        return f"card:{task_id}"
    return "all"


def held(holds: list[dict[str, Any]], principal: str, task_id: str) -> dict[str, Any] | None:
    """The hold that keeps the worker from claiming this card now, if any."""
    covers = {"all", f"user:{principal}", f"card:{task_id}"}
    return next((h for h in holds if h.get("hold") in covers), None)


def _require_admin(op: str) -> None:
    """The worker's pause and resume are an admin's (or the runtime's), whoever reaches the op."""
    if not is_admin():
        raise PermissionDenied(f"{op}: for admins", op=op)


def _turn_principal(card: dict[str, Any]) -> str:
    """Whom a card's turn runs as (its author), and so whose user budget it spends."""
    return str(card.get("created_by") or card.get("assignee") or "kanban_worker")


class KanbanWorker(GenServer):
    """Args: ``max_concurrent`` (2), ``claim_ttl`` (s, 120), ``turn_timeout`` (s, 600), ``poll`` (s, 5),
    ``assignee_prefix`` ("agent")."""

    class Args(ActorArgs):
        max_concurrent: int = 2
        claim_ttl: float = 120
        turn_timeout: float = 600
        assignee_prefix: str = "agent"
        poll: float = 5

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.max_concurrent = int(args.get("max_concurrent", 2))
        self.claim_ttl = float(args.get("claim_ttl", 120))
        self.turn_timeout = float(args.get("turn_timeout", 600))
        self.prefix = str(args.get("assignee_prefix", "agent"))
        self._running: dict[str, Any] = {}
        self._scope = current_context().scope
        self._stats = {"completed": 0, "failed": 0, "blocked_by_agent": 0, "waiting": 0, "put_back": 0}
        await self.host.set_reminder("kanban_worker_poll", "poll", every=float(args.get("poll", 5)))

    @call
    async def get_stats(self) -> dict[str, Any]:
        """Counts, the cards running, and ``paused``: the holds on claiming (why, until when)."""
        holds = await self._holds()
        return {"status": "ok", "running": sorted(self._running), "paused": holds, **self._stats}

    @call(access="admin")
    async def pause_worker(self, reason: str = "") -> dict[str, Any]:
        """Claim no card until ``resume_worker``, past any period's end: an admin keeping it paused."""
        _require_admin("pause_worker")
        if not isinstance(reason, str) or len(reason) > 1000:
            raise InvalidArgument("pause_worker: reason is at most 1000 characters", field="reason")
        who = current_context().principal
        hold = {
            "hold": "all",
            "paused_by": "admin",
            "by": who,
            "reason": reason or f"paused by {who}",
            "resume_at": None,
            "since": self.host.now(),
        }
        await self.host.kv.put(PAUSED + "admin", hold)
        fire_audit(self.host, "kanban_worker_paused", f"by={who} reason={reason[:200]}", data=hold)
        return {"status": "ok", "paused": await self._holds()}

    @call(access="admin")
    async def resume_worker(self) -> dict[str, Any]:
        """Resume now: every hold goes (an admin's and the caps'); a cap still spent pauses it again at the
        next card it refuses."""
        _require_admin("resume_worker")
        gone = [k for k, _ in await self.host.kv.list(PAUSED)]
        for key in gone:
            await self.host.kv.delete(key)
        who = current_context().principal
        fire_audit(
            self.host, "kanban_worker_resumed", f"by={who} holds={len(gone)}", data={"by": who, "holds": gone}
        )
        self.host.send("kanban_worker", "poll", {})  # claim what waited, now rather than at the next poll
        return {"status": "ok", "resumed": [k[len(PAUSED) :] for k in gone], "paused": []}

    @cast
    async def poll(self) -> None:
        """Claim ready agent cards up to the concurrency limit."""
        # A nudge carries the context of whoever made a card ready: the worker's own hops are the system's.
        with acting_as(system_context(current_context(), "kanban_worker")):
            await self._poll()

    async def _poll(self) -> None:
        for key, waiting in await self.host.kv.list(WAITING):
            task_id = key[len(WAITING) :]
            if task_id not in self._running and isinstance(waiting, dict):
                await self._settle_waiting(task_id, waiting)
        free = self.max_concurrent - len(self._running)
        if free <= 0:
            return
        holds = await self._holds()
        if held(holds, "", ""):
            return  # paused at the worker's (or the tenant's) cap, or by an admin
        ready = (await self.host.ask("kanban", "list", {"status": "ready", "limit": 100}))["tasks"]
        for card in ready:
            if free <= 0:
                break
            assignee = str(card.get("assignee") or "")
            if not (assignee == self.prefix or assignee.startswith(self.prefix + ":")):
                continue
            if card["task_id"] in self._running or held(holds, _turn_principal(card), card["task_id"]):
                continue
            session = f"kanban:{card['task_id']}:{card['attempts'] + 1}"
            try:
                claimed = await self.host.ask(
                    "kanban", "start", {"task_id": card["task_id"], "worker": session, "ttl": self.claim_ttl}
                )
            except ActorError:
                continue  # another worker (or node) won the claim
            free -= 1
            self._running[card["task_id"]] = self.host.spawn(self._work(claimed["task"], session))

    async def _work(self, card: dict[str, Any], session: str) -> None:
        task_id = card["task_id"]
        ctx = RequestContext(
            tenant=self._scope[0],
            namespace=self._scope[1],
            principal=_turn_principal(card),
            roles=frozenset({"user"}),
            request_id=f"kanban:{task_id}",
        )
        beat = self.host.spawn(self._heartbeat(task_id, session))
        try:
            waiting = await self.host.kv.get(WAITING + task_id)
            turn_session = str(waiting["session"]) if isinstance(waiting, dict) else session
            try:
                if isinstance(waiting, dict) and turn_session != session:
                    reply = await self._paused_turn(waiting)
                else:
                    shown = await self.host.ask("kanban", "show", {"task_id": task_id})
                    prompt = worker_prompt(card, shown["dependencies"])
                    # The turn's usage counts for the kanban worker's budget too (the agent checks that
                    # this session holds the card's claim).
                    extra = {"instructions": worker_instructions(card), "kanban_card": task_id}
                    with acting_as(ctx):
                        reply = await run_turn_once(
                            self.host, session, session, prompt, extra=extra, timeout=self.turn_timeout
                        )
            except ActorError as e:
                if e.code in BUDGET_REFUSALS:
                    await self._pause(card, session, e)
                    return
                reason = f"{e.code}: {e.message}"
                status = await self._report_failure(task_id, session, reason)
                retried = " (the card will be retried)" if status == "ready" else ""
                await self._report(card, "failed", reason + retried)
                return
            await self._finish(card, session, turn_session, reply)
        finally:
            beat.cancel()
            self._running.pop(task_id, None)

    async def _holds(self) -> list[dict[str, Any]]:
        """The holds on claiming now; a cap's hold whose period has rolled over (the actor's clock) goes,
        with an audit event."""
        now = self.host.now()
        out = []
        for key, hold in await self.host.kv.list(PAUSED):
            if not isinstance(hold, dict):
                continue
            resume_at = hold.get("resume_at")
            if hold.get("paused_by") == "budget" and isinstance(resume_at, int | float) and now >= resume_at:
                await self.host.kv.delete(key)
                fire_audit(
                    self.host,
                    "kanban_worker_resumed",
                    f"cap={key[len(PAUSED) :]} resume_at={resume_at}",
                    data={"by": "budget", "holds": [key], "resume_at": resume_at},
                )
                continue
            out.append({**hold, "id": key[len(PAUSED) :]})
        return out

    async def _pause(self, card: dict[str, Any], session: str, error: ActorError) -> None:
        """A turn refused for a spend cap: hold what that cap covers until it resets (durable), put the card
        back in ``ready`` (not a failed attempt) and say why on it."""
        task_id = card["task_id"]
        details = error.details
        cap = f"{details.get('scope') or 'budget'}/{details.get('key') or ''}"
        resets = details.get("resets_at")
        hold = {
            "hold": hold_for(error, _turn_principal(card), task_id),
            "paused_by": "budget",
            "code": error.code,
            "reason": error.message[:1000],
            "scope": details.get("scope"),
            "key": details.get("key"),
            "period": details.get("period"),
            "resume_at": float(resets) if isinstance(resets, int | float) else None,
            "since": self.host.now(),
        }
        await self.host.kv.put(PAUSED + cap, hold)
        now = (await self.host.ask("kanban", "show", {"task_id": task_id}))["task"]
        if now["status"] == "in_progress" and (now.get("claim") or {}).get("worker") == session:
            await self.host.ask("kanban", "move", {"task_id": task_id, "status": "ready"})
        self._stats["put_back"] += 1
        until = (
            "when the budget resets"
            if hold["resume_at"] is not None
            else "when an admin resumes the worker (kanban_worker.resume_worker)"
        )
        text = f"Paused: {error.message}. Nothing was sent; the card goes back to ready and runs {until}."
        try:
            await self.host.ask("kanban", "comment", {"task_id": task_id, "text": text[:4000]})
        except ActorError as e:
            self.host.log.info("kanban %s: pause not commented (%s)", task_id, e.message)
        fire_audit(
            self.host,
            "kanban_worker_paused",
            f"cap={cap} task_id={task_id} resume_at={hold['resume_at']}",
            data={**hold, "task_id": task_id},
        )

    async def _settle_waiting(self, task_id: str, waiting: dict[str, Any]) -> None:
        """A card blocked while its turn waits for an approval: once the approval is decided and the turn has
        ended, the card ends the way the turn did, without waiting to be unblocked (an unblocked card is
        claimed again and takes the same outcome in ``_work``)."""
        reply = await self._paused_turn(waiting)
        if reply.get("status") == "paused":
            return
        try:
            card = (await self.host.ask("kanban", "show", {"task_id": task_id}))["task"]
        except ActorError:
            card = None  # deleted
        if card is None or card["status"] in ("done", "cancelled"):
            await self.host.kv.delete(WAITING + task_id)
            return
        if card["status"] != "blocked" or not card["blocked_reason"].startswith("waiting for approval"):
            return  # unblocked (its next claim takes the outcome) or blocked for another reason by now
        outcome, text = judge(reply, *await self._turn_messages(str(waiting["session"])))
        if outcome == "done":
            await self.host.ask("kanban", "complete", {"task_id": task_id, "summary": text[:20000]})
            self._stats["completed"] += 1
        else:
            await self.host.ask("kanban", "block", {"task_id": task_id, "reason": f"failed: {text}"[:2000]})
            self._stats["failed"] += 1
        await self.host.kv.delete(WAITING + task_id)
        await self._report(card, outcome, text)

    async def _paused_turn(self, waiting: dict[str, Any]) -> dict[str, Any]:
        """The reply of a turn that paused for an approval: still paused, or how it ended once decided."""
        session = str(waiting["session"])
        stats = await self.host.ask("agent", "get_stats", {"session_id": session})
        if stats.get("paused") or stats.get("turn_in_progress"):
            return {**waiting.get("reply", {}), "status": "paused", "session_id": session}
        reply: dict[str, Any] = await self.host.ask("agent", "last_turn", {"session_id": session})
        return reply

    async def _turn_messages(self, session: str) -> tuple[list[dict[str, Any]], str]:
        """The messages of the session's last turn after its user message, and that message."""
        history = (await self.host.ask("agent", "get_history", {"session_id": session}))["messages"]
        last_user = max((i for i, m in enumerate(history) if m.get("role") == "user"), default=-1)
        request = str(history[last_user].get("content") or "") if last_user >= 0 else ""
        return [m for m in history[last_user + 1 :] if isinstance(m, dict)], request

    async def _finish(
        self, card: dict[str, Any], session: str, turn_session: str, reply: dict[str, Any]
    ) -> None:
        task_id = card["task_id"]
        now = (await self.host.ask("kanban", "show", {"task_id": task_id}))["task"]
        claim = now.get("claim") or {}
        if now["status"] != "in_progress" or claim.get("worker") != session:
            # the agent completed or blocked it itself, or the claim was lost
            self._stats["blocked_by_agent"] += now["status"] == "blocked"
            if now["status"] in ("done", "blocked"):
                await self.host.kv.delete(WAITING + task_id)
                text = now["summary"] if now["status"] == "done" else now["blocked_reason"]
                await self._report(now, "done" if now["status"] == "done" else "failed", text)
            return
        outcome, text = judge(reply, *await self._turn_messages(turn_session))
        if outcome == "waiting":
            await self.host.kv.put(WAITING + task_id, {"session": turn_session, "reply": _paused_view(reply)})
            await self.host.ask("kanban", "block", {"task_id": task_id, "reason": text[:2000]})
            self._stats["waiting"] += 1
        elif outcome == "failed":
            await self.host.kv.delete(WAITING + task_id)
            await self._report_failure(task_id, session, text[:2000], final=True)
        else:
            await self.host.kv.delete(WAITING + task_id)
            await self.host.ask(
                "kanban", "complete", {"task_id": task_id, "summary": text[:20000], "worker": session}
            )
            self._stats["completed"] += 1
        await self._report(card, outcome, text)

    async def _report_failure(self, task_id: str, session: str, reason: str, *, final: bool = False) -> str:
        """Fail the attempt; the card's status after it ("" when the board refused)."""
        self._stats["failed"] += 1
        try:
            reply = await self.host.ask(
                "kanban", "fail", {"task_id": task_id, "worker": session, "reason": reason, "final": final}
            )
        except ActorError as e:
            self.host.log.info("kanban %s: fail not recorded (%s)", task_id, e.message)
            return ""
        return str(reply["task"]["status"])

    async def _report(self, card: dict[str, Any], outcome: Outcome, text: str) -> None:
        """Tell the card's author how it ended: a comment on the card and an audit event."""
        task_id = card["task_id"]
        label = {"done": "Done", "failed": "Failed", "waiting": "Waiting"}[outcome]
        author = str(card.get("created_by") or "")
        comment = f"{label}: {text}"
        if len(comment) > 4000:
            comment = comment[:3999] + "\u2026"
        try:
            await self.host.ask("kanban", "comment", {"task_id": task_id, "text": comment})
        except ActorError as e:
            self.host.log.info("kanban %s: outcome not commented (%s)", task_id, e.message)
        fire_audit(
            self.host,
            "kanban_worker_outcome",
            f"task_id={task_id} outcome={outcome} for={author}",
            data={"task_id": task_id, "outcome": outcome, "created_by": author, "detail": text[:500]},
        )

    async def _heartbeat(self, task_id: str, session: str) -> None:
        while True:
            await self.host.clock.sleep(self.claim_ttl / 3)
            try:
                await self.host.ask(
                    "kanban", "heartbeat", {"task_id": task_id, "worker": session, "ttl": self.claim_ttl}
                )
            except ActorError:
                return  # claim lost: the board has moved on
