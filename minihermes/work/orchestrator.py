"""The orchestrator (a Workflow per ``task_id``): decompose a task, delegate the parts, combine the results.

``workflow_run(task, task_id)`` plans the task into sub-tasks with dependencies (an LLM plan through the
gateway; with the simulated provider, or when the LLM's plan is unusable, the deterministic planner in
``plan.py``), runs every sub-task whose dependencies are done concurrently, each in its own agent session
(``orch:<task_id>:<n>``), and checkpoints each result as a workflow step. After a crash or a SIGKILL the node
re-activates the workflow: finished sub-tasks return their saved results, and a sub-task whose agent turn
was running is finished from that turn rather than started again (``_turns.run_turn_once``).

A run acts for whoever started it: their request context is kept with the run (``run_as``) and ``execute``
runs under it, also when the node resumes the run after a restart (which it does as the runtime, ``system``).
So the plan, every sub-task's turn and the tools those turns call are authorized as that caller. A run saved
before contexts were kept fails on resume (``permission_denied``: start it again) rather than go on as
``system``.
``status(task_id)`` reports progress; ``cancel(task_id)`` stops it (the workflow's ``cancel`` signal).

A run's checkpoint keeps the task, the plan and every sub-task's answer, and the turn markers keep the
sub-tasks' replies. Each run started is recorded with whom it acts for (a tuple ``orchestration, task_id,
principal``), so forgetting that person (``forget_orchestrations``, asked through ``task_queue``'s
``forget_subject``) finds their runs; ``forget(task_id)`` (theirs, or an admin's) cancels a run still going
and clears the task, steps, result, signals and caller from its state and deletes its markers. The run keeps
its status, so it is not run again; its ``task_id`` is its name and stays. The sub-tasks' sessions are the
caller's, forgotten with them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from minihermes.audit import fire_audit
from minihermes.context.forget import Subject, may_forget
from minihermes.llm.protocol import CompletionReply, ProviderList
from minihermes.runtime import (
    ActorArgs,
    ActorError,
    Host,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RequestContext,
    Workflow,
    call,
    current_context,
    set_context,
    state,
)

from ._turns import run_turn_once
from .plan import PLAN_PROMPT, SubTask, plan_deterministic, plan_from_llm

SUB_TIMEOUT = 600.0
RUN = "orchestration"
"""The tuple recording a run and whom it acts for: ``[RUN, task_id, principal]``."""


def marker_prefix(task_id: str) -> str:
    """``_turns.run_turn_once``'s markers of a run's sub-tasks (their sessions are ``orch:<task_id>:<n>``)."""
    return f"work:turn:orch:{task_id}:"


async def forget_orchestrations(host: Host, who: Subject) -> int:
    """Forget the runs a user started, or (admin) every run of the tenant (``Orchestrator.forget``); a
    session started none. Returns how many."""
    if who.session_id or not host.has_actor("orchestrator"):
        return 0
    runs = await host.tuples.read_all([RUN, None, None if who.tenant else who.user_id])
    for task_id in sorted({str(r[1]) for r in runs}):
        await host.ask(f"orchestrator/{task_id}", "forget", {"task_id": task_id}, timeout=SUB_TIMEOUT)
    return len(runs)


class Orchestrator(Workflow):
    """Virtual, keyed by ``task_id``. Args: ``sub_timeout`` (s per sub-task turn), ``max_subtasks``."""

    class Args(ActorArgs):
        sub_timeout: float = SUB_TIMEOUT
        max_subtasks: int = 8

    run_as: dict[str, Any] | None = state(default=None)
    """The request context of whoever started the run (``RequestContext.to_dict``); ``execute`` runs as it."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.sub_timeout = float(args.get("sub_timeout", SUB_TIMEOUT))
        self.max_subtasks = int(args.get("max_subtasks", 8))
        await super().on_init(actor_id, args)

    async def execute(self, task: str, task_id: str) -> dict[str, Any]:
        # The run's own task (its copy of the context): resumed at start-up it would run as ``system``.
        set_context(self._run_context())
        raw = await self.step("decompose", self._decompose, task)
        plan = [SubTask.from_dict(s) for s in raw]
        results: dict[int, dict[str, Any]] = {}
        while len(results) < len(plan):
            wave = [s for s in plan if s.n not in results and all(d in results for d in s.after)]
            outs = await asyncio.gather(
                *(
                    self.step(
                        f"sub:{s.n}", self._run_sub, task_id, s.to_dict(), [results[d] for d in s.after]
                    )
                    for s in wave
                )
            )
            for s, out in zip(wave, outs, strict=True):
                results[s.n] = out
        subs = [results[s.n] for s in plan]
        failed = [r for r in subs if r["status"] != "ok"]
        summary = "\n\n".join(f"{r['n'] + 1}. {r['task']}: {r['response']}" for r in subs)
        if self.host.has_actor("audit_event"):
            fire_audit(self.host, "orchestrator_completed", f"task_id={task_id} subtasks={len(subs)}")
        return {
            "status": "ok" if not failed else "partial",
            "task_id": task_id,
            "result": summary,
            "sub_results": subs,
            "sub_tasks": len(subs),
            "failed": len(failed),
        }

    def _run_context(self) -> RequestContext:
        """Whom the run acts for, in this actor's tenant and namespace."""
        here = current_context()
        if isinstance(self.run_as, dict):
            ctx = RequestContext.from_dict(self.run_as)
            if ctx.scope == here.scope:
                return ctx
        raise PermissionDenied(
            "this orchestration does not record who started it (saved by an older version): start it again",
            op="execute",
        )

    async def _claim(self) -> None:
        """A run about to start acts for its caller (one that joins a running run does not change that)."""
        if self.wf_status == "idle":
            ctx = current_context()
            self.run_as = ctx.to_dict()
            await self.host.tuples.write([RUN, self._task_id, ctx.principal])

    @property
    def _task_id(self) -> str:
        return self.actor_id.partition("/")[2]

    # -- steps --------------------------------------------------------------------------------------------

    async def _decompose(self, task: str) -> list[dict[str, Any]]:
        plan: list[SubTask] | None = None
        source = "deterministic"
        if self.host.has_actor("llm_gateway") and not await self._simulated():
            try:
                reply: CompletionReply = await self.host.ask(
                    "llm_gateway",
                    "completion",
                    {
                        "messages": [
                            {"role": "system", "content": PLAN_PROMPT},
                            {"role": "user", "content": task},
                        ],
                        "max_tokens": 800,
                    },
                    timeout=120,
                )
                plan = plan_from_llm(str(reply["response"].get("content") or ""), self.max_subtasks)
                source = "llm"
            except ActorError as e:
                self.host.log.info(
                    "orchestrator: LLM plan unavailable (%s); planning deterministically", e.code
                )
        if not plan:
            plan, source = plan_deterministic(task, self.max_subtasks), "deterministic"
        self.host.log.debug("orchestrator plan (%s): %s", source, [s.task for s in plan])
        return [s.to_dict() | {"source": source} for s in plan]

    async def _simulated(self) -> bool:
        providers: ProviderList = await self.host.ask("llm_gateway", "list_providers", {})
        active = providers.get("active", {}).get("provider")
        return any(
            p["name"] == active and p.get("kind") == "simulated" for p in providers.get("providers", [])
        )

    async def _run_sub(
        self, task_id: str, sub: dict[str, Any], inputs: list[dict[str, Any]]
    ) -> dict[str, Any]:
        n = int(sub["n"])
        session = f"orch:{task_id}:{n}"
        message = sub["task"]
        if inputs:
            handoff = "\n".join(f"- {i['task']}: {i['response']}" for i in inputs)
            message = f"{sub['task']}\n\nResults of the steps before this one:\n{handoff}"
        out = {"n": n, "task": sub["task"], "session_id": session}
        try:
            reply = await run_turn_once(self.host, session, session, message, timeout=self.sub_timeout)
        except ActorError as e:
            return {**out, "status": "error", "response": "", "error": e.to_dict()["error"]}
        return {**out, "status": str(reply.get("status")), "response": str(reply.get("response") or "")}

    # -- ops ----------------------------------------------------------------------------------------------

    @call
    async def run(self, **args: Any) -> Any:
        """Start (or join) the run as the caller and reply when it finishes (``Workflow.run``)."""
        await self._claim()
        return await super().run(**args)

    @call
    async def start(self, **args: Any) -> dict[str, Any]:
        """Start the run as the caller and reply at once (``Workflow.start``)."""
        await self._claim()
        return await super().start(**args)

    @call
    async def workflow_run(self, task: str, task_id: str) -> Any:
        """Run (or join) the orchestration and reply with its result."""
        if not task.strip():
            raise InvalidArgument("workflow_run: task must not be empty", field="task")
        return await self.run(task=task, task_id=task_id)

    @call
    def status(self, task_id: str) -> dict[str, Any]:
        """Progress: sub-tasks planned and done, percent, the workflow's status and error."""
        if self.wf_status == "idle":
            raise NotFound(f"status: no orchestration {task_id}", task_id=task_id)
        planned = self.wf_steps.get("decompose", {}).get("result") or []
        done = [k for k in self.wf_step_order if k.startswith("sub:")]
        total = len(planned)
        return {
            "status": self.wf_status,
            "task_id": task_id,
            "task": self.wf_args.get("task"),
            "sub_tasks": [s["task"] for s in planned],
            "completed_sub_tasks": len(done),
            "progress": (100 * len(done) // total) if total else 0,
            "attempt": self.wf_attempt,
            "error": self.wf_error,
        }

    @call
    async def cancel(self, task_id: str) -> dict[str, Any]:
        """Stop the orchestration (sub-tasks already running in agent sessions finish there)."""
        return await self.signal("cancel")

    @call(access="write")
    async def forget(self, task_id: str) -> dict[str, Any]:
        """Forget this run (its caller's or an admin's request; see the module): ``{forgotten}``."""
        if not (self.run_as or self.wf_args or self.wf_steps or self.wf_result):
            return {"status": "ok", "task_id": self._task_id, "forgotten": False}
        # A run from before callers were kept is nobody's: an admin's to forget (or the tenant's forget).
        if not may_forget(str((self.run_as or {}).get("principal") or "")):
            raise PermissionDenied("forget: only who started a run, or an admin, can forget it", op="forget")
        if self.wf_status == "running":
            await self.signal("cancel", "forgotten")
        self.wf_args = {}
        self.wf_steps = {}
        self.wf_result = None
        self.wf_signals = []
        self.run_as = None
        if self.wf_error:
            self.wf_error = {"code": self.wf_error.get("code", "failed"), "message": "(forgotten)"}
        await self.host.checkpoint()
        for key, _ in await self.host.kv.list(marker_prefix(self._task_id)):
            await self.host.kv.delete(key)
        await self.host.tuples.take_all([RUN, self._task_id, None])
        return {"status": "ok", "task_id": self._task_id, "forgotten": True}

    @call
    def workflow_query(self, task_id: str, name: str = "status") -> Any:
        return self.status(task_id) if name == "status" else self.query(name)

    @call
    async def workflow_signal(self, task_id: str, name: str, payload: Any = None) -> dict[str, Any]:
        return await self.signal(name, payload)
