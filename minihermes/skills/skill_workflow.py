"""``skill_workflow``: learn a skill from one finished turn, durably, off the reply's path.

One workflow instance per turn (``skill_workflow/learn-<hash of turn id>``), started by ``skill_store`` on
``evaluate_for_learning``. Steps, each checkpointed before the next starts, so a crash or SIGKILL resumes at
the first unfinished one: ``turn`` (the turn's tool calls, from the agent's history), ``name`` (name and
description), ``procedure``, ``triggers`` (triggers and tags), ``propose`` (to the store: a new candidate or
a new version of a near-duplicate), ``evaluate`` (the dry-run replay with and without the procedure, and
the verdict to the store). ``signal cancel`` stops it; ``query status`` shows the finished steps.

The store starts it only for a turn that was a success (``TurnCompleted.success``). When the user corrects
that turn in their next message, the store cancels it; a proposal that still arrives is refused
(``retracted``) and the run ends ``skipped``, so no skill from a corrected turn is ever in use.

The instance's durable state keeps the turn's request and tool calls after it ends (``query`` shows the
steps). Forgetting the person (``skill_store.forget_subject``) casts ``forget``: the run is cancelled if it
still goes, and the request, calls, steps and result leave the state (its status stays, so it is not run
again).
"""

from __future__ import annotations

from typing import Any

from minihermes.llm.protocol import CompletionReply
from minihermes.runtime import ActorArgs, ActorError, Workflow, cast

from . import _evaluate as evaluation
from . import _extract as extract
from ._access import as_service

PRINCIPAL = "skill_workflow"


def _calls(turn: dict[str, Any]) -> list[extract.TurnCall]:
    return [extract.TurnCall(c["name"], c["input"], c["ok"]) for c in turn["calls"]]


class SkillWorkflow(Workflow):
    """Args: ``use_llm`` (default true: ask the gateway first, fall back to the deterministic extraction)."""

    class Args(ActorArgs):
        use_llm: bool = True

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.use_llm = bool(args.get("use_llm", True))
        await super().on_init(actor_id, args)

    async def execute(
        self, session_id: str, turn_id: str, user_intent: str, user_id: str = ""
    ) -> dict[str, Any]:
        turn = await self.step("turn", self._read_turn, session_id, user_intent)
        calls = _calls(turn)
        if not extract.collapse(calls):
            return {"status": "skipped", "reason": "no successful tool calls in the turn"}
        named = await self.step("name", self._part, "name", user_intent, calls, user_id)
        procedure = await self.step("procedure", self._part, "procedure", user_intent, calls, user_id)
        words = await self.step("triggers", self._part, "triggers", user_intent, calls, user_id)
        proposal = await self.step(
            "propose",
            self._propose,
            {**named, **words, "procedure": procedure["procedure"]},
            {"session_id": session_id, "user_id": user_id, "turn_id": turn_id},
        )
        if proposal.get("retracted"):
            return {"status": "skipped", "reason": "corrected by the user"}
        verdict = await self.step("evaluate", self._evaluate, proposal, user_intent, user_id)
        return {
            "status": "ok",
            "skill_id": proposal["skill_id"],
            "created": proposal["created"],
            "patched": proposal["patched"],
            "version": proposal["version"],
            "passed": verdict["passed"],
            "skill_status": verdict.get("skill_status"),
        }

    @cast
    async def forget(self) -> None:
        """Forget the turn this learned from (sent by ``skill_store`` when its person is forgotten)."""
        if self.wf_status == "running":
            await self.signal("cancel", "forgotten")
        self.wf_args = {}
        self.wf_steps = {}
        self.wf_result = None
        self.wf_signals = []
        if self.wf_error:
            self.wf_error = {"code": self.wf_error.get("code", "failed"), "message": "(forgotten)"}
        await self.host.checkpoint()

    # -- steps --------------------------------------------------------------------------------------------

    async def _read_turn(self, session_id: str, user_intent: str) -> dict[str, Any]:
        history = await self.host.ask("agent", "get_history", {"session_id": session_id})
        calls = extract.turn_calls(history.get("messages") or [], user_intent)
        return {"calls": [{"name": c.name, "input": c.input, "ok": c.ok} for c in calls]}

    async def _part(
        self, part: str, intent: str, calls: list[extract.TurnCall], user_id: str
    ) -> dict[str, Any]:
        content = await self._ask_llm(extract.prompt(part, intent, calls), user_id) if self.use_llm else None
        values = extract.varying(intent, calls)  # what no part may name: the next request brings its own
        if part == "name":
            named = extract.parse_name(content, values) if content else None
            return {**(named or extract.fallback_name(intent, calls)), "by": "llm" if named else "fallback"}
        if part == "procedure":
            text = extract.parse_procedure(content, calls, values) if content else None
            return {
                "procedure": text or extract.fallback_procedure(calls, intent),
                "by": "llm" if text else "fallback",
            }
        words = extract.parse_triggers(content, values) if content else None
        return {**(words or extract.fallback_triggers(intent, calls)), "by": "llm" if words else "fallback"}

    async def _ask_llm(self, messages: list[dict[str, Any]], user_id: str) -> str | None:
        """The model's answer, or None when no gateway answers (the deterministic version is used)."""
        if not self.host.has_actor("llm_gateway"):
            return None
        try:
            reply: CompletionReply = await self.host.ask(
                "llm_gateway",
                "completion",
                {
                    "messages": messages,
                    "tools": [],
                    "session_id": f"skill-learning:{self.key}",
                    "user_id": user_id,
                },
                timeout=120,
            )
        except ActorError as e:
            self.host.log.info("skill extraction falls back to the tool sequence: %s", e.message)
            return None
        return str((reply.get("response") or {}).get("content") or "")

    async def _propose(self, fields: dict[str, Any], provenance: dict[str, str]) -> dict[str, Any]:
        payload = {
            "name": fields["name"],
            "description": fields["description"],
            "procedure": fields["procedure"],
            "triggers": fields["triggers"],
            "tags": fields["tags"],
            "skill_id": f"skill-{self.key.removeprefix('learn-')[:16]}",
            **provenance,
        }
        with as_service(PRINCIPAL):
            reply: dict[str, Any] = await self.host.ask("skill_store", "propose_skill", payload)
        return reply

    async def _evaluate(self, proposal: dict[str, Any], intent: str, user_id: str) -> dict[str, Any]:
        with as_service(PRINCIPAL):
            got = await self.host.ask("skill_store", "get_skill", {"skill_id": proposal["skill_id"]})
            skill = got["skill"]
            tools = await evaluation.offered_tools(self.host)
            session = f"skill-eval:{proposal['skill_id']}"
            base = await evaluation.replay(
                self.host, intent, tools, None, session_id=session, user_id=user_id
            )
            with_skill = await evaluation.replay(
                self.host, intent, tools, skill, session_id=session, user_id=user_id
            )
            verdict = evaluation.verdict(base, with_skill)
            reply = await self.host.ask(
                "skill_store",
                "record_evaluation",
                {
                    "skill_id": skill["skill_id"],
                    "version": skill["version"],
                    "passed": verdict["passed"],
                    "details": {k: verdict[k] for k in ("baseline", "with_skill")},
                },
            )
        return {**verdict, "skill_status": reply.get("skill_status")}

    @property
    def key(self) -> str:
        return self.actor_id.rpartition("/")[2]
