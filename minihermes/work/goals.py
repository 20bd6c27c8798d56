"""Goals (one per tenant): persistent objectives a session works toward across turns.

A goal belongs to a session (or, set for session ``*``, to every session of the tenant) and lives in the tenant's KV, so it survives restarts and is there in every
later turn of that session (the agent lists the active ones into its prompt before each turn). After each
turn the agent casts ``turn_completed``; every active goal of the session is then judged against the turn:

- with an LLM provider, by a short judge completion that must answer ``{"done": true|false, "reason"}``;
- with the simulated provider, deterministically: the response carries ``[GOAL DONE]``, or it contains every
  content word of the goal.

Only a turn that relates to a goal uses one of its ``max_turns`` (a goal of the session is not worked on by
every turn of it: "what is 2 + 2" in a session whose goal is to plan a trip is not a step of the trip). A turn
relates to a goal when the judge says so: the LLM judge answers ``"related"`` beside ``"done"`` (a turn that
reaches the goal relates to it; an answer without ``"related"`` counts, as before it was asked); the
deterministic judge, and any turn that fell short (judged without a completion), when the user's message or
the answer shares a content word of the goal (``relates``). An unrelated turn leaves the goal as it was. A goal
still open when its turns are used up becomes ``exhausted``. Completion (by the judge or by ``complete_goal``)
and exhaustion are audited.

A goal belongs to its session and to the principal that set it (``owner``, from the request context; an
admin may set one for a user with ``user_id``). A user lists, completes, clears, and has judged and put into
their prompts, only their own goals and the tenant's (session ``*``, which only admins set); another user's
goal is ``not_found`` to them, and a session another user owns takes no goal of theirs. Admins and the
system see every goal. The text is stored with recognisable secrets redacted.

Forgetting (``forget_subject``, asked by ``memory.forget``) deletes the goals of a session, the goals a user
set (the tenant's goals, session ``*``, are an admin's and stay), or every goal of the tenant.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Literal
from urllib.parse import quote, unquote

from minihermes.audit import fire_audit
from minihermes.context import prompt
from minihermes.context.assembly import context_part
from minihermes.context.forget import session_owner, subject
from minihermes.runtime import (
    MAX_KEY_CHARS,
    ActorArgs,
    ActorError,
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

from ._owner import acting_principal, is_admin, scrub

MAX_GOAL_CHARS = 2_000
MAX_GOALS_PER_SESSION = 20
DEFAULT_MAX_TURNS = 20
DONE_MARKER = "[GOAL DONE]"
GOALS_PRIORITY = 100
"""The active goals' place in a turn's per-turn section (``turn_context``): last, after memories (200)."""
_MARK = "goal_active:"
"""KV prefix of the sessions that may have an active goal (a superset: a marker may outlive its goals)."""
_MARKS_BUILT = "goal_active_index:v1"
EVERY_SESSION = "*"
"""``set_goal(session_id="*")``: a goal of the tenant, injected into and judged in every session."""
GoalStatus = Literal["active", "completed", "exhausted", "cleared"]
StatusFilter = Literal["", "active", "completed", "exhausted", "cleared"]
_STOP = frozenset(
    "the a an and or of to in on for with my me i you your it this that be is are was were by at from as "
    "please make sure get find out about into all any some can could would should will".split()
)
JUDGE_PROMPT = (
    "You judge whether a goal has been reached. Read the goal and the latest exchange. Answer with JSON "
    'only: {"done": true or false, "related": true or false, "reason": "<one short sentence>"}. Say done '
    "only when the exchange shows the goal is fully achieved. Say related when the exchange works toward "
    "the goal (a step of it, a question about it, progress or a setback on it); an exchange about something "
    "else is not related."
)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2 and w not in _STOP}


def _stem(word: str) -> str:
    """A crude stem, for relatedness only: "plants" and "planting" meet "plant"."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def relates(goal: str, user_message: str, response: str) -> bool:
    """The deterministic judge's relatedness: the user's message or the answer shares a content word of the
    goal (by a crude stem)."""
    needed = {_stem(w) for w in _words(goal)}
    said = {_stem(w) for w in _words(f"{user_message}\n{response}")}
    return bool(needed & said)


GOAL_TOOLS = frozenset({"goal_set", "goal_list", "goal_complete", "goal_clear"})
"""The agent's goal tools (``minihermes.work.time_tools``): a turn that called one managed goals."""


def judge_deterministic(goal: str, response: str) -> tuple[bool, str]:
    """The simulated provider's judge: same inputs, same verdict."""
    if DONE_MARKER.lower() in response.lower():
        return True, "the response marks the goal done"
    needed = _words(goal)
    missing = sorted(needed - _words(response))
    if needed and not missing:
        return True, "the response covers every part of the goal"
    return False, f"not yet covered: {', '.join(missing[:5])}" if missing else "nothing to judge"


def parse_verdict(text: str) -> tuple[bool, str]:
    """Read a judge's answer; anything that is not a clear yes is a no."""
    done, _related, reason = parse_judgement(text)
    return done, reason


def parse_judgement(text: str) -> tuple[bool, bool, str]:
    """Read a judge's answer: (done, related, reason). ``done`` only on a clear yes; ``related`` unless the
    judge clearly says no (an answer without it counts, as before the judge was asked), and always when done."""
    match = re.search(r"\{.*\}", text, re.S)
    if match:
        try:
            data = json.loads(match.group(0))
        except ValueError:
            data = None
        if isinstance(data, dict):
            done = data.get("done") is True
            return done, done or data.get("related") is not False, str(data.get("reason") or "")[:500]
    return False, True, "the judge gave no verdict"


MAX_QUOTED_SESSION = 2048
"""Longest session id once percent-encoded into a key (any ASCII id of ``MAX_KEY_CHARS`` fits): with a goal id
of at most ``MAX_KEY_CHARS`` a goal's key stays within what every store holds."""


def _check_session_id(op: str, session_id: str) -> None:
    """Session ids are keys (of the session's actors, and here of its goals): the runtime's rule for a key,
    checked before one reaches the store (a NUL or 5000 characters were a crash there, HTTP 500)."""
    if session_id and not (valid_key(session_id) and len(quote(session_id, safe="")) <= MAX_QUOTED_SESSION):
        raise InvalidArgument(
            f"{op}: session_id must be 1-{MAX_KEY_CHARS} printable characters (fewer outside ASCII)",
            op=op,
            field="session_id",
        )


def _key(session_id: str, goal_id: str) -> str:
    return f"goal:{quote(session_id, safe='')}:{goal_id}"


class Goals(GenServer):
    """Per-tenant goals. Args: ``max_turns`` (default budget per goal), ``judge_timeout`` (s)."""

    class Args(ActorArgs):
        max_turns: int = DEFAULT_MAX_TURNS
        judge_timeout: float = 60

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.default_max_turns = int(args.get("max_turns", DEFAULT_MAX_TURNS))
        self.judge_timeout = float(args.get("judge_timeout", 60))
        self._audit = self.host.has_actor("audit_event")
        self._llm = self.host.has_actor("llm_gateway")
        # The sessions that may have an active goal (``*``: the tenant), so the agent's two questions per turn
        # (list_goals before it, turn_completed after) cost no store read for every other session. Complete:
        # this instance is the tenant's only writer of goals (one per tenant, leased in a cluster), a session
        # is marked before its first goal is written, and a marker is dropped only once a read found no
        # active goal of its session.
        self._marked: set[str] = await self._load_marks()

    @call(access="write")
    async def set_goal(
        self, session_id: str, text: str, max_turns: int = 0, user_id: str = ""
    ) -> dict[str, Any]:
        """Add an active goal to a session: ``{status, goal_id, goal}``. It belongs to the caller (an admin
        may name the user with ``user_id``)."""
        op = "set_goal"
        if not session_id.strip():
            raise InvalidArgument(f"{op}: session_id must not be empty", op=op, field="session_id")
        _check_session_id(op, session_id)
        if not text.strip() or len(text) > MAX_GOAL_CHARS:
            raise InvalidArgument(f"{op}: text must be 1..{MAX_GOAL_CHARS} characters", op=op, field="text")
        if not 0 <= max_turns <= 1000:
            raise InvalidArgument(f"{op}: max_turns must be 0..1000 (0: default)", op=op, field="max_turns")
        owner = acting_principal(user_id)
        if not is_admin():
            if session_id == EVERY_SESSION:
                raise PermissionDenied(
                    f"{op}: only an admin sets a goal for every session ('*')", op=op, field="session_id"
                )
            recorded = await session_owner(self.host, session_id)
            if recorded is not None and recorded != owner:
                raise PermissionDenied(
                    f"{op}: session '{session_id}' belongs to another user", op=op, field="session_id"
                )
        active = await self._goals(session_id, "active")
        if len(active) >= MAX_GOALS_PER_SESSION:
            raise Conflict(f"{op}: this session has {MAX_GOALS_PER_SESSION} active goals already")
        goal: dict[str, Any] = {
            "goal_id": uuid.uuid4().hex[:12],
            "session_id": session_id,
            "owner": owner,
            "text": scrub(text.strip()),
            "status": "active",
            "max_turns": max_turns or self.default_max_turns,
            "turns_used": 0,
            "created_at": self.host.now(),
            "completed_at": None,
            "reason": "",
            "judged_turns": [],
        }
        if session_id not in self._marked:
            await self.host.kv.put(_MARK + quote(session_id, safe=""), True)
            self._marked.add(session_id)
        await self.host.kv.put(_key(session_id, goal["goal_id"]), goal)
        self._fire("goal_set", f"goal_id={goal['goal_id']}", session_id, goal)
        return {"status": "ok", "goal_id": goal["goal_id"], "goal": _view(goal)}

    @call(access="read")
    async def list_goals(self, session_id: str = "", status: StatusFilter = "active") -> dict[str, Any]:
        """Goals of one session (or of every session with ``session_id=""``), oldest first: a user's own and
        the tenant's."""
        _check_session_id("list_goals", session_id)
        goals = await self._mine(await self._goals(session_id, status))
        return {"status": "ok", "goals": [_view(g) for g in goals], "count": len(goals)}

    @call(access="read")
    async def turn_context(
        self, message: str = "", session_id: str = "", user_id: str = "", limits: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Goals' part of a turn's prompt (``minihermes.context.assembly``): the session's active goals
        (``list_goals``), as ``## Active goals``, last in the per-turn section. Reply: ``parts``."""
        if not session_id:
            return {"status": "ok", "parts": []}
        goals = (await self.list_goals(session_id, "active"))["goals"]
        text = prompt.goals_section(goals)
        part = context_part(
            "goals", text, priority=GOALS_PRIORITY, ids=[str(g.get("goal_id", "")) for g in goals]
        )
        return {"status": "ok", "parts": [part] if text else []}

    @call(access="write")
    async def complete_goal(self, goal_id: str, session_id: str = "", reason: str = "") -> dict[str, Any]:
        """Mark a goal done by hand (audited like a judged completion)."""
        _check_session_id("complete_goal", session_id)
        goal = await self._goal("complete_goal", goal_id, session_id)
        if goal["status"] != "active":
            raise Conflict(f"complete_goal: goal {goal_id} is {goal['status']}", goal_id=goal_id)
        await self._complete(goal, scrub(reason) or "completed by request", by="request")
        return {"status": "ok", "goal": _view(goal)}

    @call(access="write")
    async def clear_goal(self, goal_id: str = "", session_id: str = "") -> dict[str, Any]:
        """Drop one goal, or with only ``session_id`` every active goal of that session (its own)."""
        _check_session_id("clear_goal", session_id)
        if goal_id:
            goals = [await self._goal("clear_goal", goal_id, session_id)]
        elif session_id:
            # The session's own goals: tenant-wide ones are cleared by naming them (or session "*").
            goals = [g for g in await self._goals(session_id, "active") if g["session_id"] == session_id]
            goals = await self._mine(goals, changing=True)
        else:
            raise InvalidArgument("clear_goal: give goal_id or session_id", op="clear_goal", field="goal_id")
        for g in goals:
            await self.host.kv.delete(_key(g["session_id"], g["goal_id"]))
            self._fire("goal_cleared", f"goal_id={g['goal_id']}", g["session_id"], g)
        return {"status": "ok", "cleared": len(goals)}

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Delete the goals of a session, of a user (the goals they set) or of the tenant (admin), as far as
        the caller may change them: ``cleared: {goals}``. Nothing is audited per goal (its text would be)."""
        who = subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        goals = await self._read_goals("", "")
        if who.session_id:
            goals = [g for g in goals if g["session_id"] == who.session_id]
        elif who.user_id:
            goals = [g for g in goals if g["session_id"] != EVERY_SESSION]
            sessions = {g["session_id"] for g in goals if g.get("owner") is None}
            owners = {sid: await session_owner(self.host, sid) for sid in sessions}
            goals = [g for g in goals if (g.get("owner") or owners.get(g["session_id"])) == who.user_id]
        goals = await self._mine(goals, changing=True)
        for g in goals:
            await self.host.kv.delete(_key(g["session_id"], g["goal_id"]))
        return {"status": "ok", "cleared": {"goals": len(goals)}}

    @cast
    async def turn_completed(
        self,
        session_id: str,
        turn_id: str,
        user_message: str,
        response: str,
        success: bool = True,
        fell_short: str = "",
        tool_calls: list[dict[str, Any]] | None = None,
        **_record: Any,
    ) -> None:
        """Judge every active goal of the session against this turn (a turn listener: the agent publishes
        each finished turn, ``minihermes.turn_event``): those of the turn's user and the tenant's. A turn
        that fell short (a failed tool call, an answer its tool results contradict) completes no goal: it
        counts as a turn used, with the reason it fell short. A turn that managed goals (``goal_set``,
        ``goal_list``, ...) is not work toward them: its answer names the goals, which is no sign that any
        is reached, so it judges none."""
        if not valid_key(session_id):
            return  # no session has such an id, so no goal either
        if any(str(c.get("name", "")) in GOAL_TOOLS for c in tool_calls or () if isinstance(c, dict)):
            return
        for goal in await self._mine(await self._goals(session_id, "active")):
            if turn_id in goal["judged_turns"]:
                continue  # a repeated notification for a turn already judged
            if success:
                done, related, reason = await self._judge(goal, user_message, response, session_id)
            else:
                done, reason = False, f"the turn fell short: {fell_short or 'a tool call failed'}"
                related = relates(goal["text"], user_message, response)
            goal["judged_turns"] = [*goal["judged_turns"][-19:], turn_id]
            if not related:
                # Another matter of the session: no turn of the goal's used, its last verdict kept.
                await self.host.kv.put(_key(goal["session_id"], goal["goal_id"]), goal)
                continue
            reason = scrub(reason)
            goal["turns_used"] += 1
            goal["reason"] = reason
            if done:
                await self._complete(goal, reason, by="judge", turn_id=turn_id)
                continue
            if goal["turns_used"] >= goal["max_turns"]:
                goal["status"] = "exhausted"
                self._fire("goal_exhausted", f"goal_id={goal['goal_id']}", session_id, goal)
            await self.host.kv.put(_key(goal["session_id"], goal["goal_id"]), goal)

    # -- helpers ------------------------------------------------------------------------------------------

    async def _judge(
        self, goal: dict[str, Any], user_message: str, response: str, session_id: str
    ) -> tuple[bool, bool, str]:
        """(done, related, reason) of this turn for the goal."""
        if not self._llm or await self._simulated():
            done, reason = judge_deterministic(goal["text"], response)
            return done, done or relates(goal["text"], user_message, response), reason
        exchange = f"Goal: {goal['text']}\n\nUser: {user_message[:4000]}\n\nAssistant: {response[:8000]}"
        try:
            reply = await self.host.ask(
                "llm_gateway",
                "completion",
                {
                    "messages": [
                        {"role": "system", "content": JUDGE_PROMPT},
                        {"role": "user", "content": exchange},
                    ],
                    "session_id": session_id,
                    "max_tokens": 200,
                },
                timeout=self.judge_timeout,
            )
        except ActorError as e:
            return False, True, f"judge unavailable: {e.code}"
        return parse_judgement(str(reply["response"].get("content") or ""))

    async def _simulated(self) -> bool:
        providers = await self.host.ask("llm_gateway", "list_providers", {})
        active = providers.get("active", {}).get("provider")
        kinds = {p["name"]: p.get("kind") for p in providers.get("providers", [])}
        return kinds.get(active) == "simulated"

    async def _complete(self, goal: dict[str, Any], reason: str, *, by: str, turn_id: str = "") -> None:
        goal.update(status="completed", completed_at=self.host.now(), reason=reason, completed_by=by)
        await self.host.kv.put(_key(goal["session_id"], goal["goal_id"]), goal)
        detail = f"goal_id={goal['goal_id']} by={by}" + (f" turn={turn_id}" if turn_id else "")
        self._fire("goal_completed", detail, goal["session_id"], goal)

    async def _goals(self, session_id: str, status: str) -> list[dict[str, Any]]:
        if status != "active" or not session_id:
            return await self._read_goals(session_id, status)
        if not self._marked & {session_id, EVERY_SESSION}:
            return []
        goals = await self._read_goals(session_id, status)
        for sid in (session_id, EVERY_SESSION):
            if sid in self._marked and not any(g["session_id"] == sid for g in goals):
                await self.host.kv.delete(_MARK + quote(sid, safe=""))  # its goals are all done
                self._marked.discard(sid)
        return goals

    async def _load_marks(self) -> set[str]:
        if await self.host.kv.get(_MARKS_BUILT):
            return {unquote(k[len(_MARK) :]) for k, _ in await self.host.kv.list(_MARK)}
        # Goals written before the markers existed: mark their sessions once.
        marked = {g["session_id"] for g in await self._read_goals("", "active")}
        for sid in marked:
            await self.host.kv.put(_MARK + quote(sid, safe=""), True)
        await self.host.kv.put(_MARKS_BUILT, True)
        return marked

    async def _read_goals(self, session_id: str, status: str) -> list[dict[str, Any]]:
        if session_id:
            # A session sees its own goals and the tenant-wide ones (set with session_id "*").
            rows = await self.host.kv.list(f"goal:{quote(session_id, safe='')}:")
            if session_id != EVERY_SESSION:
                rows += await self.host.kv.list(f"goal:{quote(EVERY_SESSION, safe='')}:")
        else:
            rows = await self.host.kv.list("goal:")
        goals = [
            v
            for _, v in rows
            if isinstance(v, dict)
            and (not status or v["status"] == status)
            and (not session_id or v["session_id"] in (session_id, EVERY_SESSION))
        ]
        return sorted(goals, key=lambda g: (g["created_at"], g["goal_id"]))

    async def _goal(self, op: str, goal_id: str, session_id: str) -> dict[str, Any]:
        """A goal the caller may change (another user's, or a tenant-wide one for a user, is not found)."""
        if not valid_key(goal_id):  # no goal has such an id (they are 12 hex digits)
            raise NotFound(f"{op}: no goal {goal_id[:80]}", op=op, goal_id=goal_id[:80])
        goal = await self.host.kv.get(_key(session_id, goal_id)) if session_id else None
        if not isinstance(goal, dict):
            goal = next((g for g in await self._goals("", "") if g["goal_id"] == goal_id), None)
        if not isinstance(goal, dict) or not await self._mine([goal], changing=True):
            raise NotFound(f"{op}: no goal {goal_id}", op=op, goal_id=goal_id)
        return goal

    async def _mine(self, goals: list[dict[str, Any]], *, changing: bool = False) -> list[dict[str, Any]]:
        """The goals the caller may see (``changing``: may change): all for admins and the system; for anyone
        else their own and (to see) the tenant's. A goal set before goals had owners belongs to the owner
        of its session."""
        if is_admin():
            return goals
        me = current_context().principal
        owners: dict[str, str | None] = {}
        out = []
        for g in goals:
            if g["session_id"] == EVERY_SESSION:
                if not changing:
                    out.append(g)
                continue
            owner = g.get("owner")
            if owner is None:
                if g["session_id"] not in owners:
                    owners[g["session_id"]] = await session_owner(self.host, g["session_id"])
                owner = owners[g["session_id"]]
            if owner == me:
                out.append(g)
        return out

    def _fire(self, event_type: str, detail: str, session_id: str, goal: dict[str, Any]) -> None:
        if self._audit:
            data = {"goal_id": goal["goal_id"], "text": goal["text"][:200], "status": goal["status"]}
            fire_audit(self.host, event_type, detail, session_id=session_id, data=data)


def _view(goal: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in goal.items() if k != "judged_turns"}
