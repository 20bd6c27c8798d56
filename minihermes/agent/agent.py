"""The agent: one durable actor per session running the bounded loop LLM -> guardrails -> tools -> LLM.

The turn is state, not a stack frame: the user message, every LLM reply and every tool result are appended to
the durable history and checkpointed as they happen. If the process dies between two tool calls, the next
activation (the node re-activates sessions that had a turn running) continues from the last completed step
and never runs a completed tool call again. A tool call that needs a person's approval pauses the turn in the
same way; ``resume`` (sent by ``guardrails`` on approve/deny) continues it; ``cancel_turn`` stops it
(``_cancel``).

Each turn starts by gathering its context concurrently (``minihermes.context.assembly``: the tools offered,
``_toolsets``, and the prompt's parts) and compressing the history when it nears the token budget
(``_compressing``); the prompt is a stable prefix (``SOUL.md``, project context, core memory; byte-identical
while those do not change) plus a per-turn section. A finished turn is indexed for ``session_search``
(``SessionIndexer``, owned by the agent) and published as one ``turn_completed`` record (``_turn_record``) to
the turn listeners (``minihermes.turn_event``), without waiting. Everything the session stores is redacted of
recognisable secrets first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from minihermes.audit import fire_audit, sees_own_only
from minihermes.context import find_tools as finder
from minihermes.context import forget as forgetting
from minihermes.context import search_tool
from minihermes.context.redact import redact_text
from minihermes.context.session_indexer import SessionIndexer
from minihermes.runtime import (
    ActorError,
    ActorNotFound,
    Conflict,
    GenServer,
    InvalidArgument,
    PermissionDenied,
    call,
    cast,
    current_context,
    reset_context,
    set_context,
    state,
)
from minihermes.tools import ToolFailure
from minihermes.turn_event import listeners, publish

from . import _caller, _tool_calls, _turn_record
from ._args import AgentArgs, identity_reader
from ._cancel import STOPPED_CALL, STOPPED_NOTE, TurnStop, stop_reply, stop_tools, withdraw_approvals
from ._history import HistoryViews
from ._inputs import TurnInputs
from ._turn_record import MAX_INSTRUCTIONS_CHARS, MAX_MESSAGE_CHARS

__all__ = ["MAX_INSTRUCTIONS_CHARS", "MAX_MESSAGE_CHARS", "STOPPED_NOTE", "Agent", "session_topic"]


def session_topic(session_id: str) -> str:
    """The live-progress topic of a session: ``turn_started``, ``text_delta`` (from the gateway),
    ``tool_call_start``, ``tool_call_end`` and ``final`` (with the reply) events."""
    return f"session:{session_id}"


class Agent(GenServer):
    """Per-session agent (virtual actor keyed by ``session_id``); its arguments: ``AgentArgs``."""

    Args = AgentArgs

    state_version = 1

    history: list[dict[str, Any]] = state(default_factory=list, append_only=True)
    """Saved by what each step appended (a tool result filled in before its step's save); compression and
    clearing replace the whole list."""
    turn: dict[str, Any] | None = state(default=None)
    last_reply: dict[str, Any] | None = state(default=None)
    stats: dict[str, int] = state(default_factory=lambda: {"turns": 0, "tool_calls": 0, "iterations": 0})
    owner: str = state(default="")
    turn_meta_written: bool = state(default=False)
    session_toolsets: list[str] = state(default_factory=list)
    """Toolsets this session offers besides the agent's and its tenant's (``set_toolsets``)."""
    unembedded: list[dict[str, Any]] = state(default_factory=list)
    """Finished turns whose vectors for session search are not written yet (the semantic extra): what
    ``TurnDocs`` is built from. Saved with the turn's end and kept until the vectors are in, with the session
    marked for resumption meanwhile, so an embedding a crash cut off runs again at start-up."""

    def preload(self, actor_id: str, args: dict[str, Any]) -> Callable[[], tuple[str, str]]:
        """The session's identity texts (``identity_reader``), read with its state."""
        return identity_reader(actor_id.partition("/")[2], args)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.session_id = actor_id.partition("/")[2]
        self.stream_topic = session_topic(self.session_id)
        self.max_iterations = int(args.get("max_iterations", 8))
        self.llm_timeout = float(args.get("llm_timeout", 120))
        self.tool_timeout = float(args.get("tool_timeout", 120))
        self.episodic = bool(args.get("episodic", True))
        self.index_sessions = bool(args.get("index_sessions", True))
        semantic, embedder = str(args.get("semantic", "auto")), args.get("embedder")
        self._indexer = SessionIndexer(
            self.host, self.session_id, self, self._embedded, semantic=semantic, embedder=embedder
        )
        self._starting: asyncio.Task[Any] | None = None
        """The turn's start-up writes (resume marker, session owner) while they run beside its first
        LLM call; every step with effects (a tool call, the turn's end) waits for them (``_started``)."""
        self._start_task: asyncio.Task[Any] | None = None
        """The running turn's start-up writes, kept until the next turn (a stopped turn waits for them)."""
        self._inputs = TurnInputs(self.host, self.session_id, args, self.preloaded)
        self._offer = self._inputs.offer
        self._views = HistoryViews()
        """The history's views for the model and their token count, kept up to date (``_complete``)."""
        self._listeners = listeners(self.host)
        """The turn listeners (``turn_event``): the actor types on this node that take ``turn_completed``."""
        self._stop = TurnStop()
        self._resuming: asyncio.Task[Any] | None = None
        if self.turn is not None and not self.turn.get("paused"):
            # The process died mid-turn: finish it from the last completed step.
            self._resuming = self.host.spawn(self._continue_turn())
        self._indexer.resume()  # the turns a crash or a stop left without their vectors, if any

    @property
    def _embedding(self) -> asyncio.Task[Any] | None:
        """The last turn's embedding for session search, while it runs in the background."""
        return self._indexer.task

    # -- ops ----------------------------------------------------------------------------------------------

    @call(access="write")
    async def chat(
        self,
        message: str,
        session_id: str,
        user_id: str = "",
        max_iterations: int = 0,
        allowed_tools: list[str] | None = None,
        delegation_depth: int = 0,
        cron_job: str = "",
        channel: str = "",
        instructions: str = "",
        kanban_card: str = "",
    ) -> dict[str, Any]:
        """Run one turn. Reply: status, response, session_id, tool_calls (count), iterations, turn_id.

        ``max_iterations`` lowers the loop bound for this turn (0: the configured one; never above it);
        ``allowed_tools`` limits the tools listed (a call to another is a tool error); ``delegation_depth``
        and ``cron_job`` are kept on the turn (tools read them with ``turn_info``; the gateway attributes
        usage to ``cron_job``); ``channel`` names the door for the session's entry in ``session_manager``.
        ``instructions`` (at most ``MAX_INSTRUCTIONS_CHARS``): what the door asks of this turn (the kanban
        worker's protocol, a cron run's context), put in the turn's system prompt marked as the door's, never
        in the history; kept on the turn, so a turn resumed after an approval or a restart has them.

        The caller's request context (tenant, namespace, principal, roles, request id, and ``channel``) is
        kept with the turn too: every resume of it (after a restart, on another node, after an approval) runs
        as that caller (``_caller.turn_caller``). ``cron_job`` is taken only from the job's owner (its
        scheduled runs act as the owner) or an admin: anybody else's turns are not charged to a job's budget.
        ``kanban_card``: the turn works on that card, and its usage counts for the ``kanban_worker`` budget
        too; taken only when this session holds the card's claim (the kanban worker's session) or from an
        admin, so a session merely named ``kanban:...`` is not charged to the worker."""
        asked = _turn_record.Asked(
            user_id,
            max_iterations,
            allowed_tools,
            delegation_depth,
            cron_job,
            channel,
            instructions,
            kanban_card,
        )
        asked.check(message)
        if cron_job:
            await _caller.check_cron_job(self.host, cron_job)
        if kanban_card:
            await _caller.check_kanban_card(self.host, kanban_card, self.session_id)
        await self._wait_resumed()
        if self.turn is not None:
            raise Conflict(
                "this session has a turn waiting for approval",
                approval_id=(self.turn.get("paused") or {}).get("approval_id"),
            )
        self._stop.preparing = True
        try:
            return await self._start_turn(message, asked)
        finally:
            self._stop.ready_done()

    async def _start_turn(self, message: str, asked: _turn_record.Asked) -> dict[str, Any]:
        caller = current_context()
        user = asked.user_id or caller.principal
        message = redact_text(message)
        instructions = redact_text(asked.instructions.strip())
        door = _caller.door(self.session_id, asked.channel, asked.cron_job) if instructions else ""
        ctx = await self._inputs.gather(
            self.host, message, user, self.history, self.session_toolsets, instructions, door
        )
        tools = self._offer.allowed(ctx.tools, asked.allowed_tools)  # with find_tools (``gather``)
        await self._compress_if_needed((ctx.prefix, ctx.section, tools), user)
        self.turn = _turn_record.new_turn(
            asked,
            message=message,
            user=user,
            door=door,
            start=len(self.history),
            cap=self.max_iterations,
            instructions=instructions,
            prompt=(ctx.prefix, ctx.section),
            skill_ids=ctx.ids.get("skills", []),  # the skills the prompt gives (their part's ids)
            caller=caller,
        )
        self.history.append({"role": "user", "content": message})
        new_owner = "" if self.owner else user
        self.owner = self.owner or user
        # Saved, and the start-up writes begun, while the first LLM call runs: nothing has effects before the
        # first tool call or the reply, and both wait for them. A crash before then loses a turn that was
        # never answered (and, saved without its resume marker, it resumes on the session's next message).
        self.host.save_soon()
        self._starting = self._start_task = self.host.spawn(self._start_writes(new_owner))
        self._fsm("processing")
        self._audit("turn_started", f"turn={self.turn['turn_id']}")
        if self.host.has_actor("session_manager"):  # the session's entry (owner, channel, title, activity)
            hint = {"session_id": self.session_id, "channel": asked.channel, "title_hint": message[:1000]}
            self._send("session_manager", "record_turn", hint)
        self._publish({"type": "turn_started", "turn_id": self.turn["turn_id"]})
        return await self._in_task(self._steps())

    @call(access="admin")
    async def resume(self, approval_id: str, decision: str) -> dict[str, Any]:
        """Continue a turn paused for approval (sent by guardrails)."""
        if decision not in ("approved", "denied"):
            raise InvalidArgument("decision must be 'approved' or 'denied'", field="decision")
        turn = self.turn
        paused = (turn or {}).get("paused")
        if not turn or not paused or paused.get("approval_id") != approval_id:
            raise Conflict("no turn of this session waits for that approval", approval_id=approval_id)
        call_ = paused["tool_call"]
        turn["paused"] = None
        # The rest of the turn runs as its caller, whoever decided (reset before the next message).
        token = set_context(_caller.turn_caller(self.turn, self.owner))
        self._stop.preparing = True
        try:
            return await self._in_task(self._steps(self._decided(call_, decision)))
        finally:
            self._stop.ready_done()
            reset_context(token)

    @call(access="write", concurrent=True)
    async def cancel_turn(self, session_id: str = "") -> dict[str, Any]:
        """Stop the session's running or paused turn: its steps are cancelled wherever they wait (an LLM call,
        a tool call: the tool executor kills a running sandboxed process), a pending approval is withdrawn,
        and the turn is recorded ``cancelled`` (its final event too) before this replies, so a restart does
        not resume it. The history keeps what ran, then a note the next turn's model reads; nothing is
        learned or remembered from it (no ``turn_completed`` record). The session's owner or an admin.

        Reply: ``cancelled`` (whether a turn was stopped), ``turn_id`` and ``reply`` (the stopped turn's
        final reply); with nothing to stop, ``cancelled`` false and the last turn's ``reply``. Handled
        beside the running turn, not behind it in the mailbox (``concurrent``)."""
        _caller.check_may_stop(self.owner, self.turn)
        paused = self._stop.paused(self.turn)
        stopped = await self._stop.stop(
            paused, self._record_stopped, lambda: stop_tools(self.host, self.session_id)
        )
        return stop_reply(self.session_id, stopped, self.last_reply)

    async def _in_task(self, steps: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
        """Run a turn's steps in a task of their own: ``cancel_turn`` cancels that task, never the actor's
        (a handler cancelled in the actor's own task would take the actor down)."""
        return await asyncio.ensure_future(steps)

    def _steps(self, first: Coroutine[Any, Any, None] | None = None) -> Coroutine[Any, Any, dict[str, Any]]:
        """The turn's steps (``first``, then the loop), stopped by ``cancel_turn`` (``TurnStop.steps``)."""
        return self._stop.steps(first, self._run_loop, self._record_stopped)

    async def _record_stopped(self) -> dict[str, Any]:
        """End the turn as ``cancelled``: every call without a result answered as stopped, the note for the
        next turn, the reply; saved with the resume marker cleared, its approvals withdrawn, then the final
        event. Not indexed, and no ``turn_completed`` record: nothing is learned from a stopped turn."""
        self._stop.cancellable = False
        turn = self.turn
        assert turn is not None
        start = self._start_task
        if start is not None and not start.done():
            await asyncio.wait({start})  # its resume marker lands before this one clears it
        self._starting = None
        for call_ in _tool_calls.pending(self.history):
            self._tool_result(call_, {"error": {"code": "cancelled", "message": STOPPED_CALL}}, True)
            end = {"type": "tool_call_end", "id": call_["id"], "name": call_["name"], "is_error": True}
            self._publish({**end, "result": self.history[-1]["content"], "duration_ms": None})
        self.history.append({"role": "assistant", "content": STOPPED_NOTE, "tool_calls": []})
        reply = _turn_record.reply("cancelled", STOPPED_NOTE, self.session_id, turn)
        reply["cancelled_by"] = self._stop.by
        self._ended(turn, reply)
        self._send(f"agent_fsm/{self.session_id}", "reset", {"reason": "turn cancelled"})
        self._audit("turn_cancelled", f"turn={reply['turn_id']} tool_calls={turn['tool_calls']}")
        await asyncio.gather(
            self._save_turn_state(running=bool(self.unembedded)),
            withdraw_approvals(self.host, self.session_id, turn["turn_id"]),
        )
        self._publish({"type": "final", "reply": reply})
        return reply

    async def _decided(self, call_: dict[str, Any], decision: str) -> None:
        """The paused call, run (approved) or answered with the reviewer's refusal (denied)."""
        if decision == "approved":
            await self._execute(call_)
            return
        # In words a person can act on: which call, on what (the input is redacted already).
        denied = f"a reviewer denied {call_['name']}{_tool_calls.subject(call_['input'])}: nothing was done"
        self._tool_result(call_, {"error": {"code": "denied", "reason": "reviewer", "message": denied}}, True)
        self._audit("tool_denied", f"tool={call_['name']} by=reviewer")
        await self.host.checkpoint()

    @call(access="read")
    def get_history(self, session_id: str = "") -> dict[str, Any]:
        return {"status": "ok", "session_id": self.session_id, "messages": list(self.history)}

    @call(access="write")
    async def clear_history(self, session_id: str = "") -> dict[str, Any]:
        await self._wait_resumed()
        if self.turn is not None:
            raise Conflict("a turn is in progress or waiting for approval")
        n = len(self.history)
        self.history = []
        self.last_reply = None
        self.unembedded = []
        return {"status": "ok", "session_id": self.session_id, "cleared": n}

    @call(access="read")
    def get_stats(self, session_id: str = "") -> dict[str, Any]:
        return {
            "status": "ok",
            "session_id": self.session_id,
            "messages": len(self.history),
            "turn_in_progress": self.turn is not None,
            "paused": bool(self.turn and self.turn.get("paused")),
            "unembedded": len(self.unembedded),
            **self.stats,
        }

    @call(access="read")
    def last_turn(self, session_id: str = "") -> dict[str, Any]:
        """The reply of the last finished turn (e.g. one completed after a restart)."""
        return self.last_reply or {"status": "none", "session_id": self.session_id}

    @call(access="read")
    async def session_search(
        self, query: str, session_id: str = "", limit: int = 10, user_id: str = "", in_session: str = ""
    ) -> dict[str, Any]:
        """Search finished turns' transcripts: ``{hits: [{session_id, turn_id, role, score, snippet, at}],
        sessions, count}``. End users search their own sessions; admins the tenant (or one user's sessions
        with ``user_id``). ``in_session`` keeps the hits of one session."""
        if not query.strip() or len(query) > 1000:
            raise InvalidArgument("session_search: query must be 1..1000 characters", field="query")
        if not 1 <= limit <= search_tool.MAX_LIMIT:
            raise InvalidArgument(f"session_search: limit must be 1..{search_tool.MAX_LIMIT}", field="limit")
        if user_id and sees_own_only(current_context()) and user_id != current_context().principal:
            raise PermissionDenied("session_search: another user's sessions", field="user_id")
        await self._indexer.wait()  # this session's own last turn is searchable by meaning
        found = await search_tool.search_visible(
            self.host,
            query,
            limit,
            user_id=user_id,
            session_filter=in_session,
            semantic=self._indexer.semantic != "off",
            embedder=self._indexer.embedder,
        )
        return {"status": "ok", "query": query, **found}

    @call(access="write")
    async def set_toolsets(self, toolsets: list[str], session_id: str = "") -> dict[str, Any]:
        """The toolsets this session offers the model besides the agent's and its tenant's (names from the
        tool executor's toolsets, ``core`` or ``all``; ``[]`` drops them), from its next turn on. Reply:
        ``toolsets`` (the session's) and ``configured`` (agent, tenant and session). An unknown name is an
        ``invalid_argument``. Offering is not permission: a tool's call is authorized as always."""
        names = await self._offer.known(self.host, self.tool_timeout, toolsets)
        self.session_toolsets = list(names)
        configured = self._offer.choice(self.session_toolsets).configured
        return {
            "status": "ok",
            "session_id": self.session_id,
            "toolsets": list(names),
            "configured": list(dict.fromkeys(configured)),
        }

    @cast
    def forget_session(self, session_id: str = "") -> None:
        """Drop everything this session holds (sent by ``memory.forget``), a paused turn included."""
        self.history = []
        self.turn = None
        self.last_reply = None
        self.stats = {"turns": 0, "tool_calls": 0, "iterations": 0}
        self.owner = ""
        self.unembedded = []

    @cast
    def __resume__(self) -> None:
        """Sent by the node at start-up to re-activate a session whose turn was running (on_init resumes)."""

    # -- the loop -----------------------------------------------------------------------------------------

    async def _wait_resumed(self) -> None:
        """Until a turn resumed at activation has run, and a stop in progress (``cancel_turn``) is recorded."""
        task = self._resuming
        if task is not None and not task.done():
            await asyncio.wait({task})
        stopping = self._stop.stopping
        if stopping is not None and not stopping.done():
            await asyncio.wait({stopping})

    async def _continue_turn(self) -> None:
        # Spawned by on_init, which runs as the runtime (``system``): the turn goes on as its caller. This
        # task has its own copy of the context, so setting it here reaches nothing else.
        set_context(_caller.turn_caller(self.turn, self.owner))
        # The FSM may have been saved at rest before the crash, or still be mid-turn: start it over.
        self._send(f"agent_fsm/{self.session_id}", "reset", {"reason": "turn resumed"})
        self._fsm("tool_executing" if _tool_calls.pending(self.history) else "processing")
        try:
            await self._steps()
        except ActorError as e:
            self.host.log.warning("resumed turn of %s failed: %s", self.session_id, e.message)

    async def _run_loop(self) -> dict[str, Any]:
        turn = self.turn
        assert turn is not None
        try:
            # Tool calls of the last assistant message that have no result yet (after a crash or a pause).
            pending = _tool_calls.pending(self.history)
            while True:
                for call_ in pending:
                    outcome = await self._run_tool_call(call_)
                    if outcome == "paused":
                        reply = _turn_record.paused_reply(self.session_id, turn)
                        self._publish({"type": "final", "reply": reply})
                        return reply
                if pending:
                    self._fsm("processing")
                if turn["iterations"] >= turn.get("max_iterations", self.max_iterations):
                    return await self._finish("max_iterations", _turn_record.last_text(self.history))
                # Asked each round: a find_tools call of the last one may have added toolsets.
                offer = await self._offer.offer(
                    self.host, self.tool_timeout, turn, self.history, self.session_toolsets
                )
                tools = self._offer.allowed(offer, turn.get("allowed_tools"))
                response = await self._complete(tools)
                turn["iterations"] += 1
                calls = _tool_calls.requested(response)
                content = redact_text(str(response.get("content") or ""))
                self.history.append({"role": "assistant", "content": content, "tool_calls": calls})
                if response.get("stop_reason") != "tool_use" or not calls:
                    return await self._finish("ok", content)  # saves it with the end
                # Saved while the next step starts: a tool call waits for it (see _execute), the reply too.
                self.host.save_soon()
                self._fsm("tool_executing")
                pending = calls
        except ActorError as e:
            await self._failed(e)
            raise

    async def _failed(self, e: ActorError) -> None:
        """The turn cannot go on (LLM unavailable, budget): it ends here, the history keeps what happened.
        Checkpointed before the error leaves, since an error reply rolls state back to the last checkpoint."""
        self._stop.cancellable = False
        await self._started()
        self.turn = None
        self.last_reply = {"status": "error", "session_id": self.session_id, "error": e.to_dict()["error"]}
        await self._save_turn_state(running=bool(self.unembedded))
        self._fsm("idle")
        self._publish({"type": "final", "reply": self.last_reply})

    async def _run_tool_call(self, call_: dict[str, Any]) -> str:
        turn = self.turn
        assert turn is not None
        await self._started()
        allowed = turn.get("allowed_tools")
        if allowed is not None and call_["name"] not in allowed:
            message = f"tool {call_['name']!r} is not available in this turn"
            self._tool_result(call_, {"error": {"code": "tool_not_allowed", "message": message}}, True)
            await self.host.checkpoint()
            return "denied"
        if call_["name"] == finder.NAME and await self._find_tools(call_):
            return "done"
        decision = await _tool_calls.check(self.host, call_, self.session_id, turn)
        verdict = decision.get("decision", "deny")
        if verdict == "deny":
            reason = str(decision.get("reason") or "policy")
            message = str(decision.get("message") or f"denied by guardrails ({reason})")
            self._tool_result(
                call_, {"error": {"code": "denied", "reason": reason, "message": message}}, True
            )
            self._audit("tool_denied", f"tool={call_['name']} reason={reason}")
            await self.host.checkpoint()
            return "denied"
        if verdict == "review":
            turn["paused"] = await _tool_calls.request_approval(
                self.host, call_, decision, self.session_id, turn
            )
            await self.host.checkpoint()
            self._audit(
                "approval_requested", f"tool={call_['name']} approval={turn['paused']['approval_id']}"
            )
            return "paused"
        await self._execute(call_)
        return "done"

    async def _find_tools(self, call_: dict[str, Any]) -> bool:
        """Answer ``find_tools`` when the turn offers it (``ToolOffer.find_tools``); with ``keep``, its toolsets
        join the session's too (as ``set_toolsets``). False when the turn does not answer it."""
        turn = self.turn
        assert turn is not None
        args = (self.host, self.tool_timeout, turn, self.history, self.session_toolsets)
        try:
            found = await self._offer.find_tools(*args, call_["input"])
        except ToolFailure as e:
            self._call_started(call_)
            self._call_done(call_, {"error": e.to_error()}, True, None)
        else:
            if found is None:
                return False
            reply, names = found
            if "kept" in reply:
                self.session_toolsets = list(dict.fromkeys([*self.session_toolsets, *names]))
            self._call_started(call_)
            self._call_done(call_, reply, False, None)
        self.host.save_soon()  # with the turn's added toolsets, before the next LLM call
        return True

    async def _execute(self, call_: dict[str, Any]) -> None:
        turn = self.turn
        assert turn is not None
        # Everything before this call (the LLM reply asking for it, earlier results) is durable before it
        # runs: after a crash the turn resumes here and never runs a completed call again.
        await self.host.wait_saved()
        started = self.host.now()
        self._call_started(call_)
        # What the call writes is stamped with where its content comes from (``RequestContext.provenance``).
        token = set_context(_tool_calls.stamped(turn))
        try:
            request = _tool_calls.execute_request(call_, self.session_id, turn)
            result = await self.host.ask("tool_executor", "execute", request, timeout=self.tool_timeout)
        except ActorError as e:
            result = {"status": "error", "error": {"code": e.code, "message": e.message}}
        finally:
            reset_context(token)
        untrusted = bool(result.get("untrusted"))
        if untrusted:
            _tool_calls.saw_untrusted(turn, call_["name"])
        is_error = result.get("status") == "error"
        payload = {"error": result.get("error")} if is_error else result.get("result")
        duration = round((self.host.now() - started) * 1000, 3)
        self._call_done(call_, payload, is_error, duration, untrusted=untrusted)
        self.host.incr_counter("agent_tool_calls_total")
        self.host.save_soon()  # durable before the next call runs and before the reply

    def _call_started(self, call_: dict[str, Any]) -> None:
        self._publish(
            {"type": "tool_call_start", "id": call_["id"], "name": call_["name"], "input": call_["input"]}
        )

    def _call_done(
        self,
        call_: dict[str, Any],
        payload: Any,
        is_error: bool,
        ms: float | None,
        *,
        untrusted: bool = False,
    ) -> None:
        """A call's result in the history (with its duration, ``ms``, when it ran), its end event, the counts."""
        self._tool_result(call_, payload, is_error, untrusted=untrusted)
        if ms is not None:
            self.history[-1]["duration_ms"] = ms
        end = {"type": "tool_call_end", "id": call_["id"], "name": call_["name"], "is_error": is_error}
        self._publish({**end, "result": self.history[-1]["content"][:2000], "duration_ms": ms or 0.0})
        assert self.turn is not None
        self.turn["tool_calls"] += 1
        self.stats["tool_calls"] += 1

    def _tool_result(
        self, call_: dict[str, Any], payload: Any, is_error: bool, *, untrusted: bool = False
    ) -> None:
        self.history.append(_tool_calls.result_message(call_, payload, is_error, untrusted=untrusted))

    async def _complete(self, tools: list[dict[str, Any]]) -> dict[str, Any]:
        turn = self.turn
        assert turn is not None
        prefix = turn.get("prefix") or await self._inputs.fallback_prefix()
        messages: list[dict[str, Any]] = [self._views.system(prefix)]
        if turn.get("section"):
            messages.append(self._views.system(turn["section"]))
        # One read-only view per message, made once and reused at every later step (the gateway validates
        # each view once).
        messages.extend(self._views.views(self.history))
        stream = self.stream_topic if self.host.has_subscribers(self.stream_topic) else ""
        request = _turn_record.completion_request(turn, messages, tools, self.session_id, stream)
        reply = await self.host.ask("llm_gateway", "completion", request, timeout=self.llm_timeout)
        _turn_record.add_usage(turn, reply)  # the turn's tokens and cost, for its reply
        response: dict[str, Any] = reply["response"]
        return response

    # -- context ------------------------------------------------------------------------------------------

    async def _compress_if_needed(self, fixed: tuple[str, str, list[dict[str, Any]]], user: str) -> None:
        """The history compressed when it nears the budget left by the prompt and tools (``_compressing``)."""
        reply = await self._inputs.compression.check(self.host, self._views, self.history, fixed, user)
        if reply is not None:
            self.history = list(reply["messages"])
            sizes = f"before={reply.get('tokens_before')} after={reply.get('tokens_after')}"
            self._audit("history_compressed", sizes)

    # -- the turn's end -----------------------------------------------------------------------------------

    async def _finish(self, status: str, response: str) -> dict[str, Any]:
        turn = self.turn
        assert turn is not None
        self._stop.cancellable = False  # finishing: a stop asked now is too late
        await self._started()
        self._fsm("responding")
        reply = _turn_record.reply(status, response, self.session_id, turn)
        if self.index_sessions:
            # Before the checkpoint: a crash in between re-finishes the turn and re-indexes the same ids. A
            # turn kept for embedding is in ``unembedded``, saved with the turn's end below.
            await self._indexer.index_turn(turn["turn_id"], turn["user_id"], self.history, turn["start"])
        previous = str((self.last_reply or {}).get("turn_id") or "")  # the session's last finished turn
        self._ended(turn, reply)
        # The FSM's rest and the audit event first, so that their writes join the turn's last commit (one
        # group commit the reply waits for) instead of following it.
        self._fsm("idle")
        self._audit(
            "turn_completed", f"turn={reply['turn_id']} status={status} tool_calls={turn['tool_calls']}"
        )
        await self._save_turn_state(running=bool(self.unembedded))
        self.host.incr_counter("agent_chats_total")
        self._publish({"type": "final", "reply": reply})
        if self._listeners:
            record = _turn_record.turn_completed(
                self.history,
                turn,
                reply,
                session_id=self.session_id,
                previous=previous,
                episodic=self.episodic,
            )
            publish(self.host, self._listeners, record)
        return reply

    def _ended(self, turn: dict[str, Any], reply: dict[str, Any]) -> None:
        """The turn is over (finished or stopped): counted, its reply kept, no turn running."""
        self.stats["turns"] += 1
        self.stats["iterations"] += turn["iterations"]
        self.last_reply = reply
        self.turn = None

    async def _embedded(self) -> None:
        """Every finished turn has its vectors (``SessionIndexer``): saved, and no longer marked for
        resumption, unless a turn runs (it saves the session at its end)."""
        if self.turn is None:
            await self._save_turn_state(running=False)

    async def _start_writes(self, new_owner: str) -> None:
        writes = [self.host.mark_durable(True)]
        if new_owner:
            writes.append(forgetting.record_session(self.host, self.session_id, new_owner))
        await asyncio.gather(*writes)

    async def _started(self) -> None:
        """Until the turn's start-up writes are done (a failed one raises here, before any effect)."""
        task, self._starting = self._starting, None
        if task is not None:
            await asyncio.shield(task)  # a stopped turn still lets them land (``_record_stopped`` waits)

    async def _save_turn_state(self, *, running: bool) -> None:
        """Checkpoint, and (un)mark this session for resumption after a restart, in one group commit where
        the store allows: the two are independent (a resume marker without a turn resumes nothing, and a
        turn without its marker resumes on the session's next message)."""
        self.host.save_soon()  # registered now, in the same group commit as what this pass wrote
        await asyncio.gather(self.host.wait_saved(), self.host.mark_durable(running))

    # -- fire-and-forget hooks ----------------------------------------------------------------------------

    def _publish(self, event: dict[str, Any]) -> None:
        """Live progress for whoever watches this session (SSE, dashboard); costs nothing when no one does."""
        self.host.publish(self.stream_topic, event)

    def _fsm(self, to: str) -> None:
        self._send(f"agent_fsm/{self.session_id}", "transition", {"to": to})

    def _audit(self, event_type: str, detail: str) -> None:
        if self.host.has_actor("audit_event"):
            fire_audit(self.host, event_type, detail, session_id=self.session_id)

    def _send(self, target: str, op: str, payload: dict[str, Any]) -> None:
        """A cast to an optional collaborator: nothing when the node does not run it."""
        if not self.host.has_actor(target.partition("/")[0]):
            return
        try:
            self.host.send(target, op, payload)
        except (ActorNotFound, ActorError) as e:
            self.host.log.debug("hook %s.%s not delivered: %s", target, op, e.message)
