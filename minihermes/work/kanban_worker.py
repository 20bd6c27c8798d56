"""The kanban worker (one per tenant): agents that pick up ready cards and follow the worker protocol.

On each poll (a durable reminder, and a nudge from ``kanban`` when a card becomes ready) it claims ready
cards assigned to an agent (assignee ``agent`` or ``agent:<profile>``) and, for each, runs an agent turn in
the session ``kanban:<task_id>:<attempt>``, which is also the claim's holder. The prompt carries the worker
protocol and the hand-off (the summaries of the cards it depends on):

1. orient (the card and its dependencies are in the prompt; ``kanban_show`` has more),
2. work, 3. heartbeat (this worker renews the claim while the turn runs), 4. block with the reason if stuck
(``kanban_block``), 5. complete with a summary the next card can read: the turn's final answer is the
summary unless the agent completed or blocked the card itself.

A turn that fails reports ``fail``; the board blocks a card on its second failure. A worker that dies stops
heartbeating, so the board reclaims its cards.

The worker claims, heartbeats, completes and fails cards as the runtime (``system``, whoever nudged it); the
agent turn in between runs as the card's author with the ``user`` role, so the kanban tools it calls may
change that card (its author's) and nothing its author could not change.
"""

from __future__ import annotations

from typing import Any

from minihermes.runtime import ActorArgs, ActorError, GenServer, RequestContext, call, cast, current_context

from ._cronstore import acting_as
from ._owner import system_context
from ._turns import run_turn_once

PROTOCOL = """You are a kanban worker. Follow this protocol for the task below:
1. Orient: read the task and the hand-off from the tasks it depends on (kanban_show has more).
2. Work on exactly this task; do not widen its scope.
3. If you are stuck, call kanban_block with the reason and stop.
4. Finish with a short summary of what you did and what the next task needs to know; it is stored as the
   task's summary."""


def worker_prompt(card: dict[str, Any], deps: list[dict[str, Any]]) -> str:
    lines = [PROTOCOL, "", f"Task {card['task_id']}: {card['title']}"]
    if card.get("body"):
        lines += ["", card["body"]]
    if deps:
        lines += ["", "Hand-off from the tasks this one depends on:"]
        lines += [f"- {d['task_id']} ({d['title']}): {d.get('summary') or '(no summary)'}" for d in deps]
    return "\n".join(lines)


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
        self._stats = {"completed": 0, "failed": 0, "blocked_by_agent": 0}
        await self.host.set_reminder("kanban_worker_poll", "poll", every=float(args.get("poll", 5)))

    @call
    def get_stats(self) -> dict[str, Any]:
        return {"status": "ok", "running": sorted(self._running), **self._stats}

    @cast
    async def poll(self) -> None:
        """Claim ready agent cards up to the concurrency limit."""
        # A nudge carries the context of whoever made a card ready: the worker's own hops are the system's.
        with acting_as(system_context(current_context(), "kanban_worker")):
            await self._poll()

    async def _poll(self) -> None:
        free = self.max_concurrent - len(self._running)
        if free <= 0:
            return
        ready = (await self.host.ask("kanban", "list", {"status": "ready", "limit": 100}))["tasks"]
        for card in ready:
            if free <= 0:
                break
            assignee = str(card.get("assignee") or "")
            if not (assignee == self.prefix or assignee.startswith(self.prefix + ":")):
                continue
            if card["task_id"] in self._running:
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
            principal=str(card.get("created_by") or card.get("assignee") or "kanban_worker"),
            roles=frozenset({"user"}),
            request_id=f"kanban:{task_id}",
        )
        beat = self.host.spawn(self._heartbeat(task_id, session))
        try:
            shown = await self.host.ask("kanban", "show", {"task_id": task_id})
            prompt = worker_prompt(card, shown["dependencies"])
            try:
                with acting_as(ctx):
                    reply = await run_turn_once(
                        self.host, session, session, prompt, timeout=self.turn_timeout
                    )
            except ActorError as e:
                await self._report_failure(task_id, session, f"{e.code}: {e.message}")
                return
            await self._finish(task_id, session, reply)
        finally:
            beat.cancel()
            self._running.pop(task_id, None)

    async def _finish(self, task_id: str, session: str, reply: dict[str, Any]) -> None:
        card = (await self.host.ask("kanban", "show", {"task_id": task_id}))["task"]
        claim = card.get("claim") or {}
        if card["status"] != "in_progress" or claim.get("worker") != session:
            self._stats["blocked_by_agent"] += card["status"] == "blocked"
            return  # the agent completed or blocked it itself, or the claim was lost
        text = str(reply.get("response") or "").strip()
        if reply.get("status") != "ok" or not text:
            await self._report_failure(task_id, session, f"the turn ended with status {reply.get('status')}")
            return
        await self.host.ask(
            "kanban", "complete", {"task_id": task_id, "summary": text[:20000], "worker": session}
        )
        self._stats["completed"] += 1

    async def _report_failure(self, task_id: str, session: str, reason: str) -> None:
        self._stats["failed"] += 1
        try:
            await self.host.ask("kanban", "fail", {"task_id": task_id, "worker": session, "reason": reason})
        except ActorError as e:
            self.host.log.info("kanban %s: fail not recorded (%s)", task_id, e.message)

    async def _heartbeat(self, task_id: str, session: str) -> None:
        while True:
            await self.host.clock.sleep(self.claim_ttl / 3)
            try:
                await self.host.ask(
                    "kanban", "heartbeat", {"task_id": task_id, "worker": session, "ttl": self.claim_ttl}
                )
            except ActorError:
                return  # claim lost: the board has moved on
