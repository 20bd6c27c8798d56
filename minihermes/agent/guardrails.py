"""Guardrails (one per tenant, a GenFSM): the gate every tool call passes before it runs.

``check_tool`` answers allow, deny or review. In order:

1. loop breaker: the same tool with the same input more than ``max_repeats`` times in one turn is denied
   (reason ``loop``);
2. the gate's mode (the FSM state): ``open`` (normal), ``supervised`` (every mutating call goes to review),
   ``lockdown`` (every mutating or unknown tool is denied, whatever the policies say);
3. an explicit per-tool policy (``set_policy``: allow / deny / review), which wins over every default;
4. defaults, from the tool's classification (asked from ``tool_executor.describe_tool``): unknown tools are
   denied; read-only tools are allowed; a mutating call after untrusted content in the same turn goes to
   review (prompt-injection defence); tools that are reviewed by default (terminal, write_file, mutating
   service-link and http_request calls, self-written tools: each tool's ``review`` fact, never its name) go
   to review; other mutating tools (memory_store) are allowed. A tenant's promoted self-written tool is
   reviewed too unless an admin sets an explicit policy for it (``set_policy(name, "allow")``).

``review`` is real: ``request_approval`` stores a durable approval record, an admin lists and approves or
denies it (never their own request), and the paused turn is resumed by asking the session's ``agent`` to
``resume``, as the person who asked for the call. Who decides is policy too: ``set_approval_policy`` with
``self_approve: true`` (for one tool, or with no tool name for every tool without a setting of its own) lets
the requester decide on their own paused call; admins still decide on anyone's. Where nobody else could decide,
the requester who is an admin decides on their own call anyway, never left stuck: a one-owner node
(``self_approval``), or a tenant whose only admin they are by the node's edge (``set_approvers``, reported from
its API keys; docs/security.md, Approvals). Policies, mode and approvals are durable state: they survive restarts.
An approval keeps the call's input: forgetting a person (``forget_subject``, asked by ``memory.forget``) drops
the approvals they requested or their sessions' calls made, pending or decided.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Literal, NotRequired, TypedDict

from minihermes.agent.audit_event import fire_audit
from minihermes.context import forget as forgetting
from minihermes.runtime import (
    ActorArgs,
    ActorError,
    ActorNotFound,
    Conflict,
    Deferred,
    GenFSM,
    InvalidArgument,
    NotFound,
    Overloaded,
    PermissionDenied,
    RequestContext,
    call,
    cast,
    current_context,
    reset_context,
    set_context,
    state,
)
from minihermes.tools.contract import TOOL_NAME

Decision = Literal["allow", "deny", "review"]
Mode = Literal["open", "supervised", "lockdown"]
ApprovalStatus = Literal["pending", "approved", "denied", "withdrawn", "all"]

MAX_REPEATS = 2
MAX_TRACKED_TURNS = 4096
MAX_PENDING = 1000
MAX_DECIDED = 500
"""Decided approvals kept in state (the audit trail keeps every decision)."""
MAX_APPROVAL_INPUT_BYTES = 256 * 1024
RESUME_TIMEOUT = 300.0
DESCRIBE_TIMEOUT = 10.0
CLASSIFICATION_TTL = 60.0
MAX_CLASSIFIED = 1000
_ADMIN_ROLES = frozenset({"admin", "system"})
_WRITER_ROLES = _ADMIN_ROLES | {"user"}
_OPERATOR_ROLES = _ADMIN_ROLES | {"viewer"}
"""Who sees every approval of the tenant; a user sees only the approvals of their own turns."""
_UNAUTHENTICATED = RequestContext().principal
"""Without auth every request is the local owner: that principal names nobody in particular."""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _require_admin(op: str) -> None:
    if not current_context().roles & _ADMIN_ROLES:
        raise PermissionDenied(f"{op} needs the admin role", op=op)


def _check_tool_name(op: str, name: str) -> None:
    if not TOOL_NAME.match(name):
        raise InvalidArgument(
            f"{op}: tool_name must start with a letter and use 1-64 letters, digits, '_' or '-'",
            op=op,
            field="tool_name",
        )


class ToolDecision(TypedDict):
    """The reply of ``check_tool``: whether one intended call may run (``allow``), may not (``deny``), or
    waits for a person (``review``); ``effects`` and ``trust`` where the tool was described."""

    status: Literal["ok"]
    decision: Decision
    reason: str
    message: str
    effects: NotRequired[str]
    trust: NotRequired[str]


def _verdict(decision: str, reason: str, message: str, **extra: Any) -> ToolDecision:
    return {"status": "ok", "decision": decision, "reason": reason, "message": message, **extra}  # type: ignore[typeddict-item]


class Guardrails(GenFSM):
    """Per-tenant tool gate (see the module docstring).

    Args: ``max_repeats`` (loop breaker), ``resume_timeout`` (seconds to wait for a resumed turn).
    """

    class Args(ActorArgs):
        max_repeats: int = MAX_REPEATS
        resume_timeout: float = RESUME_TIMEOUT
        self_approval: bool = False

    states = ("open", "supervised", "lockdown")
    initial = "open"
    transitions = {
        "open": {"supervised", "lockdown"},
        "supervised": {"open", "lockdown"},
        "lockdown": {"open", "supervised"},
    }
    state_version = 1

    policies: dict[str, str] = state(default_factory=dict)
    approvals: dict[str, dict[str, Any]] = state(default_factory=dict)
    approval_policy: dict[str, bool] = state(default_factory=dict)
    """tool name ("" for the default) -> whether the requester may decide on their own paused call."""
    approvers: dict[str, float | None] | None = state(default=None)
    """Every admin of this tenant and namespace, as the edge knows them (principal -> when their last admin
    credential expires, None: never); None: not known (JWTs, or nothing reported): nobody is the only one."""
    deny_count: int = state(default=0)
    review_count: int = state(default=0)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.max_repeats = int(args.get("max_repeats", MAX_REPEATS))
        self.resume_timeout = float(args.get("resume_timeout", RESUME_TIMEOUT))
        # A one-person deployment (no auth: every request is the local owner) has nobody else to review:
        # there the owner may decide on their own requests. Off everywhere else.
        self.self_approval = bool(args.get("self_approval", False))
        # (session_id, turn_id) -> {call fingerprint: times seen}. Turns are short-lived: kept in memory.
        self._calls: OrderedDict[tuple[str, str], dict[str, int]] = OrderedDict()
        # (session_id, tool) -> (reason, message) of the last "review" verdict: why the approval that the
        # turn requests next was needed (request_approval stores it on the record).
        self._reviews: OrderedDict[tuple[str, str], tuple[str, str]] = OrderedDict()
        self._allow_count = 0
        self._classified: dict[str, tuple[float, dict[str, Any]]] = {}
        self._audit_on = self.host.has_actor("audit_event")
        self.host.join("svc:guardrails")

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Drop the approvals (with the tool inputs they keep) a user requested or their sessions' calls
        made, those of a session (the caller's own), or (admin) every one: ``cleared: {approvals}``. A pending
        one goes too: the paused turn waiting for it is forgotten with its session."""
        who = forgetting.subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        sessions = await forgetting.subject_sessions(self.host, who) if who.user_id else set()

        def theirs(a: dict[str, Any]) -> bool:
            if who.tenant:
                return True
            if who.session_id:
                return a["session_id"] == who.session_id and forgetting.may_forget(a["requested_by"])
            return who.user_id in (a["requested_by"], a["requester"]) or a["session_id"] in sessions

        gone = [aid for aid, a in self.approvals.items() if theirs(a)]
        for aid in gone:
            del self.approvals[aid]
        if gone:
            await self.host.checkpoint()  # the old state, inputs and all, overwritten now
        return {"status": "ok", "cleared": {"approvals": len(gone)}}

    # -- the gate -----------------------------------------------------------------------------------------

    @call(access="admin")
    def check_tool(
        self,
        tool_name: str,
        input: Any = None,
        session_id: str = "",
        turn_id: str = "",
        after_untrusted: bool = False,
    ) -> ToolDecision | Deferred:
        """``{decision: allow | deny | review, reason, message}`` (a ``ToolDecision``) for one intended call."""
        if not TOOL_NAME.match(tool_name):  # an LLM's malformed call is denied, not an error
            return self._decided(
                tool_name, session_id, _verdict("deny", "unknown_tool", "not a valid tool name")
            )
        if turn_id and self._repeats(session_id, turn_id, tool_name, input) > self.max_repeats:
            return self._decided(
                tool_name,
                session_id,
                _verdict(
                    "deny",
                    "loop",
                    f"{tool_name} was already called {self.max_repeats} times with this input in this turn",
                ),
            )
        mode = self.fsm_state
        policy = self.policies.get(tool_name)
        if policy is not None and mode == "open":
            return self._decided(
                tool_name, session_id, _verdict(policy, "policy", f"{tool_name}: policy is {policy}")
            )
        cached = self._classified.get(tool_name)
        if cached is not None and self.host.now() - cached[0] < CLASSIFICATION_TTL:
            # The usual case, answered at once (and inline: no task for the gate on a turn's hot path).
            return self._judge(tool_name, session_id, mode, policy, cached[1], after_untrusted)
        # The tool must be described by the executor first: replied to later, the gate goes on meanwhile.
        return Deferred(
            self.host.spawn(
                self._check_described(tool_name, input, session_id, mode, policy, after_untrusted)
            )
        )

    async def _check_described(
        self,
        tool_name: str,
        args: Any,
        session_id: str,
        mode: str,
        policy: str | None,
        after_untrusted: bool,
    ) -> ToolDecision:
        info = await self._describe(tool_name, args)
        verdict = self._judge(tool_name, session_id, mode, policy, info, after_untrusted)
        self.host.save_soon()  # the counters it moved, outside a handler: saved (and rolled back to) now
        return verdict

    def _judge(
        self,
        tool_name: str,
        session_id: str,
        mode: str,
        policy: str | None,
        info: dict[str, Any] | None,
        after_untrusted: bool,
    ) -> ToolDecision:
        effects = info["effects"] if info else "mutating"
        extra = {"effects": effects, "trust": info["trust"]} if info else {}
        if mode == "lockdown" and effects == "mutating":
            verdict = _verdict(
                "deny", "lockdown", "the gate is in lockdown: no tool that changes things runs", **extra
            )
        elif policy is not None:
            verdict = _verdict(policy, "policy", f"{tool_name}: policy is {policy}", **extra)
        elif info is None:
            verdict = _verdict("deny", "unknown_tool", f"no tool named '{tool_name}'")
        elif mode == "supervised" and effects == "mutating":
            verdict = _verdict(
                "review",
                "supervised",
                "the gate is supervised: calls that change things need approval",
                **extra,
            )
        elif effects == "read":
            verdict = _verdict("allow", "read_only", f"{tool_name} only reads", **extra)
        elif after_untrusted:
            verdict = _verdict(
                "review",
                "after_untrusted",
                "a call that changes things, after untrusted content entered this turn, needs approval",
                **extra,
            )
        elif info.get("review_by_default"):
            verdict = _verdict(
                "review", "review_by_default", f"{tool_name} needs approval by default", **extra
            )
        else:
            verdict = _verdict("allow", "default", f"{tool_name} is allowed", **extra)
        return self._decided(tool_name, session_id, verdict)

    def _repeats(self, session_id: str, turn_id: str, tool_name: str, args: Any) -> int:
        key = (session_id, turn_id)
        seen = self._calls.get(key)
        if seen is None:
            seen = self._calls[key] = {}
            if len(self._calls) > MAX_TRACKED_TURNS:
                self._calls.popitem(last=False)
        else:
            self._calls.move_to_end(key)
        fingerprint = hashlib.sha256(f"{tool_name}\0{_canonical(args)}".encode()).hexdigest()
        seen[fingerprint] = seen.get(fingerprint, 0) + 1
        return seen[fingerprint]

    async def _describe(self, tool_name: str, args: Any) -> dict[str, Any] | None:
        """The tool's classification, or None when it is unknown (or nobody can say: the gate fails closed).
        Classifications that do not depend on the input are cached; ``tool_executor`` sends
        ``tools_changed`` when a tool is registered or removed, and entries expire after a while anyway."""
        cached = self._classified.get(tool_name)
        if cached is not None and self.host.now() - cached[0] < CLASSIFICATION_TTL:
            return cached[1]
        try:
            info: dict[str, Any] = await self.host.ask(
                "tool_executor", "describe_tool", {"name": tool_name, "input": args}, timeout=DESCRIBE_TIMEOUT
            )
        except (NotFound, ActorNotFound):
            return None
        except ActorError as e:
            self.host.log.warning("cannot classify %s (%s): treating it as unknown", tool_name, e.message)
            return None
        if not info.get("input_dependent"):
            if len(self._classified) >= MAX_CLASSIFIED:
                self._classified.clear()
            self._classified[tool_name] = (self.host.now(), info)
        return info

    @cast(access="admin")
    def tools_changed(self, name: str = "") -> None:
        """Forget a cached tool classification (all of them without a name)."""
        if name:
            self._classified.pop(name, None)
        else:
            self._classified.clear()

    def _decided(self, tool_name: str, session_id: str, verdict: ToolDecision) -> ToolDecision:
        decision = verdict["decision"]
        tool_name = tool_name[:100]  # the LLM wrote it: bounded before it reaches the audit trail
        self.host.incr_counter("guardrail_decisions_total", decision=decision, reason=verdict["reason"])
        if decision == "allow":
            self._allow_count += 1
            return verdict
        if decision == "deny":
            self.deny_count += 1
            self.host.incr_counter("tool_denials_total")
        else:
            self.review_count += 1
            self._reviews[(session_id, tool_name)] = (verdict["reason"], verdict["message"])
            self._reviews.move_to_end((session_id, tool_name))
            if len(self._reviews) > MAX_TRACKED_TURNS:
                self._reviews.popitem(last=False)
        self._audit(
            "guardrail_decision",
            f"tool={tool_name} decision={decision} reason={verdict['reason']}",
            session_id,
            {"tool": tool_name, "decision": decision, "reason": verdict["reason"]},
        )
        return verdict

    # -- policies and mode --------------------------------------------------------------------------------

    @call(access="admin")
    def set_policy(self, tool_name: str, decision: Decision) -> dict[str, Any]:
        """Set a tool's policy (the tool need not exist yet). Admin only; takes effect on the next check."""
        _require_admin("set_policy")
        _check_tool_name("set_policy", tool_name)
        previous = self.policies.get(tool_name)
        self.policies[tool_name] = decision
        self._audit(
            "policy_set",
            f"tool={tool_name} decision={decision}",
            "",
            {"tool": tool_name, "decision": decision, "previous": previous},
        )
        return {"status": "ok", "tool_name": tool_name, "decision": decision, "previous": previous}

    @call(access="admin")
    def clear_policy(self, tool_name: str) -> dict[str, Any]:
        """Back to the defaults for one tool. Admin only."""
        _require_admin("clear_policy")
        _check_tool_name("clear_policy", tool_name)
        previous = self.policies.pop(tool_name, None)
        if previous is not None:
            self._audit("policy_cleared", f"tool={tool_name}", "", {"tool": tool_name, "previous": previous})
        return {"status": "ok", "tool_name": tool_name, "previous": previous}

    @call(access="read")
    def get_policies(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "policies": dict(sorted(self.policies.items())),
            "mode": self.fsm_state,
            "approval_policy": dict(sorted(self.approval_policy.items())),
        }

    @call(access="admin")
    def set_mode(self, mode: Mode) -> dict[str, Any]:
        """Move the gate to open, supervised or lockdown. Admin only."""
        _require_admin("set_mode")
        previous = self.fsm_state
        if mode != previous:
            self.transition_to(mode)
            self._audit(
                "guardrails_mode",
                f"mode={mode} previous={previous}",
                "",
                {"mode": mode, "previous": previous},
            )
        return {"status": "ok", "mode": mode, "previous": previous}

    @call(access="admin")
    def transition(self, to: str) -> dict[str, Any]:
        """The FSM's own op, admin only here: it moves the gate like ``set_mode``."""
        _require_admin("transition")
        previous = self.transition_to(to)
        self._audit(
            "guardrails_mode", f"mode={to} previous={previous}", "", {"mode": to, "previous": previous}
        )
        return {"status": "ok", "from": previous, "to": to}

    @call(access="read")
    def get_state(self) -> dict[str, Any]:
        pending = sum(1 for a in self.approvals.values() if a["status"] == "pending")
        return {
            "status": "ok",
            "state": self.fsm_state,
            "fsm_state": self.fsm_state,
            "mode": self.fsm_state,
            "transitions": self.transition_count,
            "allowed": sorted(self.transitions.get(self.fsm_state, ())),
            "policies": dict(sorted(self.policies.items())),
            "pending_approvals": pending,
            "deny_count": self.deny_count,
            "review_count": self.review_count,
            "allow_count": self._allow_count,
        }

    # -- approvals ----------------------------------------------------------------------------------------

    @call(access="admin")
    def request_approval(
        self,
        tool_name: str,
        input: Any = None,
        session_id: str = "",
        requested_by: str = "",
        turn_id: str = "",
        reason: str = "",
        reason_message: str = "",
    ) -> dict[str, Any]:
        """Store a pending approval for a reviewed call. The same pending request again gets the same id.
        ``reason`` / ``reason_message``: why review was needed (``check_tool``'s verdict); left out, the
        gate's own last "review" verdict for this session and tool."""
        ctx = current_context()
        if not ctx.roles & _WRITER_ROLES:
            raise PermissionDenied("request_approval: a read-only role cannot request tool calls")
        _check_tool_name("request_approval", tool_name)
        args = {} if input is None else input
        encoded = _canonical(args)
        if len(encoded.encode()) > MAX_APPROVAL_INPUT_BYTES:
            raise InvalidArgument("request_approval: input is too large to review", field="input")
        for a in self.approvals.values():
            if (
                a["status"] == "pending"
                and (a["tool"], a["session_id"], a["turn_id"]) == (tool_name, session_id, turn_id)
                and _canonical(a["input"]) == encoded
            ):
                return {
                    "status": "ok",
                    "approval_id": a["approval_id"],
                    "existing": True,
                    "self_approve": self._requester_decides(tool_name, ctx.roles, ctx.principal),
                }
        if sum(1 for a in self.approvals.values() if a["status"] == "pending") >= MAX_PENDING:
            raise Overloaded(f"request_approval: {MAX_PENDING} approvals are already pending")
        approval_id = f"apr-{uuid.uuid4().hex}"
        if not reason:
            reason, reason_message = self._reviews.pop((session_id, tool_name[:100]), ("", ""))
        self.approvals[approval_id] = {
            "approval_id": approval_id,
            "tool": tool_name,
            "input": json.loads(encoded),
            "session_id": session_id,
            "turn_id": turn_id,
            "requested_by": requested_by or ctx.principal,
            "requester": ctx.principal,
            "requester_roles": sorted(ctx.roles),
            "status": "pending",
            "created_at": self.host.now(),
            "decided_at": None,
            "decided_by": None,
            "note": "",
            "reason": reason[:100],
            "reason_message": reason_message[:1000],
        }
        self.host.incr_counter("approvals_requested_total")
        return {
            "status": "ok",
            "approval_id": approval_id,
            "existing": False,
            "self_approve": self._requester_decides(tool_name, ctx.roles, ctx.principal),
        }

    @call(access="admin")
    def set_approval_policy(self, self_approve: bool, tool_name: str = "") -> dict[str, Any]:
        """Who decides on a paused call of ``tool_name`` (empty: the default for every tool without a setting
        of its own): ``self_approve`` lets its requester decide; otherwise only admins, never on their own
        request (four eyes). Admin only; takes effect for pending approvals too."""
        _require_admin("set_approval_policy")
        if tool_name:
            _check_tool_name("set_approval_policy", tool_name)
        previous = self.approval_policy.get(tool_name)
        self.approval_policy[tool_name] = bool(self_approve)
        self._audit(
            "approval_policy_set",
            f"tool={tool_name or '*'} self_approve={bool(self_approve)}",
            "",
            {"tool": tool_name, "self_approve": bool(self_approve), "previous": previous},
        )
        return {
            "status": "ok",
            "tool_name": tool_name,
            "self_approve": bool(self_approve),
            "previous": previous,
            "approval_policy": dict(sorted(self.approval_policy.items())),
        }

    @call(access="admin")
    def set_approvers(self, admins: dict[str, float | None] | None) -> dict[str, Any]:
        """The tenant's admins as the node's edge knows them (``{principal: expires_at or None}``; None: not
        known). Reported by the edge alone (the runtime's ``system`` role), from its credential store: an
        admin's word would be no evidence."""
        if "system" not in current_context().roles:
            raise PermissionDenied("set_approvers: only the node's edge reports the tenant's admins")
        if admins is not None and (len(admins) > MAX_PENDING or not all(admins)):
            raise InvalidArgument("set_approvers: admins must name at most 1000 principals", field="admins")
        self.approvers = None if admins is None else dict(admins)
        return {"status": "ok", "admins": None if admins is None else sorted(admins)}

    def _self_approves(self, tool_name: str) -> bool:
        return bool(self.approval_policy.get(tool_name, self.approval_policy.get("", False)))

    def _only_admin(self, principal: str) -> bool:
        """Nobody but ``principal`` could decide: the node is one owner's (``self_approval``: no auth, or an
        embedding program), or the edge reported every admin of the tenant and ``principal`` is the only one
        whose credential is still valid."""
        if self.self_approval:
            return True
        if self.approvers is None:
            return False
        now = self.host.now()
        return {p for p, until in self.approvers.items() if until is None or until > now} == {principal}

    def _requester_decides(self, tool_name: str, roles: Iterable[str], principal: str) -> bool:
        """Whether the requester may decide on their own call: the policy says so for the tool, or they are an
        admin and nobody else could decide (``_only_admin``)."""
        if self._self_approves(tool_name):
            return True
        return bool(_ADMIN_ROLES & set(roles)) and self._only_admin(principal)

    # "read": admins and viewers see the tenant's approvals; a user only those of their own turns.
    @call(access="read")
    def list_approvals(
        self, status: ApprovalStatus = "pending", session_id: str = "", limit: int = 100
    ) -> dict[str, Any]:
        """Approvals, oldest first: ``{approval_id, tool, input, session_id, requested_by, status, created_at}``.
        Admins and viewers get every approval of the tenant, a user the ones they requested."""
        if not 1 <= limit <= 1000:
            raise InvalidArgument("list_approvals: limit must be 1..1000", field="limit")
        ctx = current_context()
        everyone = bool(ctx.roles & _OPERATOR_ROLES)
        chosen = [
            self._public(a)
            for a in self.approvals.values()  # insertion order: the order they were requested
            if (status == "all" or a["status"] == status)
            and (not session_id or a["session_id"] == session_id)
            and (everyone or a["requester"] == ctx.principal)
        ]
        return {"status": "ok", "approvals": chosen[:limit], "count": len(chosen[:limit])}

    @call(access="read")
    def get_approval(self, approval_id: str) -> dict[str, Any]:
        """One approval; ``not_found`` for a user asking for one they did not request (as for an unknown id)."""
        record = self._approval(approval_id)
        ctx = current_context()
        if not ctx.roles & _OPERATOR_ROLES and record["requester"] != ctx.principal:
            raise NotFound(f"no approval {approval_id}", field="approval_id")
        return {"status": "ok", **self._public(record)}

    # "write": admins decide others' requests, the requester their own where the policy lets them (checked
    # in ``_decide``).
    @call(access="write")
    def approve(self, approval_id: str, note: str = "") -> Any:
        """Approve a pending call and resume its turn; the reply carries the resumed turn's reply."""
        return self._decide(approval_id, "approved", note)

    @call(access="write")
    def deny(self, approval_id: str, note: str = "") -> Any:
        """Deny a pending call; the turn resumes and the LLM reads that a reviewer refused it."""
        return self._decide(approval_id, "denied", note)

    @call(access="admin")
    def withdraw_approvals(self, session_id: str, turn_id: str = "") -> dict[str, Any]:
        """The pending approvals of a session's turn (every turn's without ``turn_id``), withdrawn because the
        turn was stopped (``agent.cancel_turn``): status ``withdrawn``, so approving or denying one resumes
        nothing (``conflict``). The runtime's and admins' op: ``withdrawn`` lists the ids."""
        ctx = current_context()
        if not ctx.roles & _ADMIN_ROLES:
            raise PermissionDenied("withdraw_approvals: the runtime's op", op="withdraw_approvals")
        if not session_id:
            raise InvalidArgument("withdraw_approvals: session_id must not be empty", field="session_id")
        gone = [
            a
            for a in self.approvals.values()
            if a["status"] == "pending"
            and a["session_id"] == session_id
            and (not turn_id or a["turn_id"] == turn_id)
        ]
        for a in gone:
            a.update(status="withdrawn", decided_at=self.host.now(), decided_by=ctx.principal)
            self._audit(
                "approval_withdrawn",
                f"approval={a['approval_id']} tool={a['tool']} (its turn was stopped)",
                session_id,
                {"approval_id": a["approval_id"], "tool": a["tool"], "decision": "withdrawn"},
            )
        if gone:
            self._prune()
        return {"status": "ok", "withdrawn": [a["approval_id"] for a in gone]}

    def _refusal(self, record: dict[str, Any], ctx: RequestContext) -> str:
        """Why ``ctx`` may not decide on ``record`` ("": they may): ``role`` (a viewer, or a user on another's
        call), ``decided`` (not pending), ``own`` (their own request while someone else could decide)."""
        if not ctx.roles & _WRITER_ROLES:  # viewers only read
            return "role"
        # The policy may let the requester (the principal whose turn paused) decide on their own call.
        by_requester = ctx.principal == record["requester"] and self._self_approves(record["tool"])
        if not by_requester and not ctx.roles & _ADMIN_ROLES:
            # Users own their sessions, not other people's: reviewing is an admin's job.
            return "role"
        if record["status"] != "pending":
            return "decided"
        requesters = {record["requested_by"]}
        if record["requester"] != _UNAUTHENTICATED:
            requesters.add(record["requester"])
        if ctx.principal in requesters and not (by_requester or self._only_admin(ctx.principal)):
            return "own"  # four eyes, where a second pair exists
        return ""

    def _decide(self, approval_id: str, decision: str, note: str) -> Any:
        ctx = current_context()
        op = "approve" if decision == "approved" else "deny"
        if not ctx.roles & _WRITER_ROLES:
            raise PermissionDenied(f"{op}: deciding approvals needs the admin role", op=op)
        record = self._approval(approval_id)
        refusal = self._refusal(record, ctx)
        if refusal == "role":
            raise PermissionDenied(f"{op}: deciding approvals needs the admin role", op=op)
        if refusal == "decided":
            raise Conflict(f"approval {approval_id} was already {record['status']}", approval_id=approval_id)
        if refusal == "own":
            raise PermissionDenied(
                f"{op}: nobody decides on their own request", op=op, approval_id=approval_id
            )
        record.update(status=decision, decided_at=self.host.now(), decided_by=ctx.principal, note=note[:1000])
        self._prune()
        self.host.incr_counter("approvals_decided_total", decision=decision)
        self._audit(
            f"approval_{decision}",
            f"approval={approval_id} tool={record['tool']} by={ctx.principal}",
            record["session_id"],
            {
                "approval_id": approval_id,
                "tool": record["tool"],
                "decision": decision,
                "decided_by": ctx.principal,
            },
        )
        # The resumed turn calls back into this actor (check_tool): reply later, keep serving the mailbox.
        return Deferred(self.host.spawn(self._resume(dict(record), ctx)))

    async def _resume(self, record: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        """Ask the session's agent to continue the turn, as the person who asked for the call."""
        turn: Any = None
        if record["session_id"]:
            requester = RequestContext(
                tenant=ctx.tenant,
                namespace=ctx.namespace,
                principal=record["requester"],
                roles=frozenset(record["requester_roles"]),
                request_id=ctx.request_id,
            )
            token = set_context(requester)
            try:
                turn = await self.host.ask(
                    f"agent/{record['session_id']}",
                    "resume",
                    {"approval_id": record["approval_id"], "decision": record["status"]},
                    timeout=self.resume_timeout,
                )
            except ActorNotFound:
                turn = None  # no agent on this node: the decision is recorded, nothing to resume
            except ActorError as e:
                turn = {"status": "error", "error": {"code": e.code, "message": e.message}}
            finally:
                reset_context(token)
        return {
            "status": "ok",
            "approval_id": record["approval_id"],
            "decision": record["status"],
            "turn": turn,
        }

    def _approval(self, approval_id: str) -> dict[str, Any]:
        record = self.approvals.get(approval_id)
        if record is None:
            raise NotFound(f"no approval {approval_id}", field="approval_id")
        return record

    def _public(self, record: dict[str, Any]) -> dict[str, Any]:
        """An approval as callers see it: who asked, never the requester's roles; ``reason`` and
        ``reason_message`` say why review was needed ("" for approvals stored before they were kept), and
        ``requester_may_decide`` whether the requester may decide on it, ``you_may_decide`` whether the caller
        may (what ``approve`` and ``deny`` will do for them)."""
        public = {k: v for k, v in record.items() if k not in ("requester", "requester_roles")}
        public.setdefault("reason", "")
        public.setdefault("reason_message", "")
        public["requester_may_decide"] = self._requester_decides(
            record["tool"], record.get("requester_roles") or (), record["requester"]
        )
        public["you_may_decide"] = not self._refusal(record, current_context())
        return public

    def _prune(self) -> None:
        decided = [a for a in self.approvals.values() if a["status"] != "pending"]
        if len(decided) > MAX_DECIDED:
            decided.sort(key=lambda a: a["decided_at"] or 0.0)
            for a in decided[: len(decided) - MAX_DECIDED]:
                del self.approvals[a["approval_id"]]

    def _audit(self, event_type: str, detail: str, session_id: str, data: dict[str, Any]) -> None:
        if self._audit_on:
            fire_audit(self.host, event_type, detail, session_id=session_id, data=data)
