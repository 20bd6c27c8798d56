"""Cron jobs and goals as LLM tools: the ``schedule`` toolset (``cron_*``) and the ``goals`` toolset
(``goal_*``).

Each tool performs one op of ``cron_scheduler`` or ``goals`` as the turn's caller (the tool executor checks
the op's access class with the turn's context, and the actor narrows a user to what they own), so "remind me
every Monday at 9am to water the plants" becomes a job of the user that runs as the user, never more.

``cron_schedule`` takes a 5-field cron expression only (what a model is taught to write). The job id is made
from the name (or the prompt) and a digest of who asked what, so a turn that repeats the call (a resumed turn,
a model that says it twice) finds the job it already made instead of making a second one. With ``action:
"notify"`` (a reminder: "remind me ...") each run delivers the prompt's text to the user's notifications, with
no model call; with ``action: "run"`` (the default) each run is an agent turn in the job's own session of the
user (``cron:<job_id>``, see ``cron_runner.py``) whose answer is delivered to the user the same way.

Goals belong to the session that sets them: ``goal_set`` and ``goal_list`` work on the calling session's
goals (``goal_list`` with ``all_sessions``: every goal the caller may see); ``goal_complete`` and
``goal_clear`` take any goal id of the caller's.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

from minihermes.context.toolsets import HELP_INTENT
from minihermes.runtime import ActorError, current_context
from minihermes.tools.catalog import Toolset
from minihermes.tools.contract import MUTATING, ON_REQUEST, READ, TRUSTED, Tool, ToolEnv, ToolFailure

from .goals import MAX_GOAL_CHARS
from .schedule import parse_schedule

_JOB_ID = {"type": "string", "minLength": 1, "maxLength": 100, "description": "The job's id (from cron_list)"}
_GOAL_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "The goal's id (from goal_list)",
}
_CRON_HELP = (
    "a 5-field cron expression: minute hour day-of-month month day-of-week, e.g. '0 9 * * 1' (Mondays at "
    "9:00), '30 7 * * *' (every day at 7:30), '0 18 1 * *' (the 1st of each month at 18:00)"
)
_JOB_FIELDS = (
    "job_id",
    "action",
    "prompt",
    "schedule",
    "tz",
    "status",
    "next_run_at",
    "last_fired_at",
    "fired",
    "owner",
)
_ASK_TIMEOUT = 30.0


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


async def _ask(env: ToolEnv, actor: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The op as the caller (the ask carries the turn's context); its refusal is the tool's error."""
    try:
        reply: dict[str, Any] = await env.host.ask(actor, op, payload, timeout=_ASK_TIMEOUT)
    except ActorError as e:
        raise ToolFailure(e.code, e.message) from None
    reply.pop("status", None)
    return reply


def _iso(t: Any) -> str | None:
    return datetime.fromtimestamp(float(t), UTC).isoformat().replace("+00:00", "Z") if t else None


def _job(job: dict[str, Any]) -> dict[str, Any]:
    view = {k: job[k] for k in _JOB_FIELDS if k in job}
    view["next_run"] = _iso(job.get("next_run_at"))
    return view


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)[:40].strip("-") or "job"


def job_id_for(principal: str, name: str, prompt: str, schedule: str, tz: str, action: str = "run") -> str:
    """The id of the job ``principal`` asks for: readable (from ``name`` or the prompt) and the same for the
    same request, different for different principals (ids are the tenant's)."""
    parts = (principal, name, prompt, schedule, tz) + ((action,) if action != "run" else ())
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8]
    return f"{_slug(name or prompt)}-{digest}"


# -- schedule ---------------------------------------------------------------------------------------------


async def _cron_schedule(args: dict[str, Any], env: ToolEnv) -> Any:
    schedule = " ".join(str(args["schedule"]).split())
    tz = str(args.get("timezone") or "UTC")
    prompt = str(args["prompt"]).strip()
    if not prompt:
        raise ToolFailure("invalid_input", "prompt must say what to do when the job runs", field="prompt")
    if len(schedule.split(" ")) != 5:
        raise ToolFailure("invalid_input", f"schedule '{schedule}' is not {_CRON_HELP}", field="schedule")
    try:
        if parse_schedule(schedule, tz).kind != "cron":
            raise ToolFailure("invalid_input", f"schedule '{schedule}' is not {_CRON_HELP}", field="schedule")
    except ActorError as e:  # not a cron expression, or an unknown time zone
        field = "timezone" if e.details.get("field") == "tz" else "schedule"
        hint = "" if field == "timezone" else f"; give {_CRON_HELP}"
        raise ToolFailure("invalid_input", f"{e.message}{hint}", field=field) from None
    action = str(args.get("action") or "run")
    name = str(args.get("name") or "")
    job_id = job_id_for(current_context().principal, name, prompt, schedule, tz, action)
    payload = {"job_id": job_id, "prompt": prompt, "schedule": schedule, "tz": tz, "action": action}
    try:
        made = await env.host.ask("cron_scheduler", "create_job", payload, timeout=_ASK_TIMEOUT)
    except ActorError as e:
        if e.code != "conflict" or e.details.get("job_id") != job_id:
            raise ToolFailure(e.code, e.message) from None
        # The same request again (a repeated or resumed call): the job it made is the answer.
        existing = (await _ask(env, "cron_scheduler", "get_job", {"job_id": job_id}))["job"]
        return {"scheduled": True, "already_scheduled": True, "job": _job(existing)}
    job = (await _ask(env, "cron_scheduler", "get_job", {"job_id": made["job_id"]}))["job"]
    return {"scheduled": True, "job": _job(job)}


async def _cron_list(args: dict[str, Any], env: ToolEnv) -> Any:
    reply = await _ask(env, "cron_scheduler", "list_jobs", {"limit": 200})
    jobs = [_job(j) for j in reply["jobs"]]
    return {"jobs": jobs, "count": len(jobs)}


def _job_op(op: str) -> Any:
    async def run(args: dict[str, Any], env: ToolEnv) -> Any:
        return await _ask(env, "cron_scheduler", op, {"job_id": args["job_id"]})

    return run


_WEEKDAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)days?"
_EVERY = (
    rf"every\s+(?:other\s+|\d+\s+)?(?:{_WEEKDAY}|day|week|month|year|hour|minute|morning|evening|night|"
    r"weekday)s?"
)
"""A recurrence in words ("every Monday", "every other week"): the ``schedule`` toolset's intent."""

SCHEDULE_TOOLSET = Toolset(
    "schedule",
    [
        Tool(
            "cron_schedule",
            "Schedule something recurring for the user. A reminder ('remind me ...'): action 'notify', and "
            "prompt is the reminder's text, delivered to the user's notifications at each time the cron "
            "expression matches (no agent run). Example: 'remind me every Monday at 9am to water the "
            "plants' -> schedule '0 9 * * 1', action 'notify', prompt 'Water the plants'. A routine that "
            "needs work done ('every morning summarize my tasks'): action 'run' (the default), and the "
            "prompt runs as a new turn of the user whose answer is delivered to their notifications.",
            _obj(
                {
                    "schedule": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 200,
                        "description": f"When it runs: {_CRON_HELP}",
                    },
                    "prompt": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 20000,
                        "description": "notify: the reminder's text; run: what the agent does at each run",
                    },
                    "action": {
                        "type": "string",
                        "enum": ["notify", "run"],
                        "description": "'notify' for a reminder (the text is delivered, no agent run); "
                        "'run' (default) to run the prompt as an agent turn",
                    },
                    "name": {"type": "string", "maxLength": 60, "description": "A short name for the job"},
                    "timezone": {
                        "type": "string",
                        "maxLength": 64,
                        "description": "IANA time zone of the schedule, e.g. Europe/Paris (default UTC)",
                    },
                },
                ("schedule", "prompt"),
            ),
            MUTATING,
            TRUSTED,
            handler=_cron_schedule,
            requires="cron_scheduler",
            permission=("cron_scheduler", "create_job"),
        ),
        Tool(
            "cron_list",
            "List the user's scheduled jobs (an admin's: every job of the tenant) with their next run.",
            _obj({}),
            READ,
            TRUSTED,
            handler=_cron_list,
            requires="cron_scheduler",
            permission=("cron_scheduler", "list_jobs"),
        ),
        Tool(
            "cron_pause",
            "Pause a scheduled job (it stays listed and can be resumed).",
            _obj({"job_id": _JOB_ID}, ("job_id",)),
            MUTATING,
            TRUSTED,
            handler=_job_op("pause_job"),
            requires="cron_scheduler",
            permission=("cron_scheduler", "pause_job"),
        ),
        Tool(
            "cron_resume",
            "Resume a paused job from its next scheduled time.",
            _obj({"job_id": _JOB_ID}, ("job_id",)),
            MUTATING,
            TRUSTED,
            handler=_job_op("resume_job"),
            requires="cron_scheduler",
            permission=("cron_scheduler", "resume_job"),
        ),
        Tool(
            "cron_delete",
            "Delete a scheduled job and its run history.",
            _obj({"job_id": _JOB_ID}, ("job_id",)),
            MUTATING,
            TRUSTED,
            handler=_job_op("delete_job"),
            requires="cron_scheduler",
            permission=("cron_scheduler", "delete_job"),
        ),
    ],
    offered=ON_REQUEST,
    intents=[
        HELP_INTENT,
        rf"\bremind|\b{_EVERY}\b|\bschedul|\bcron\b|\bcron_|\brecurring\b|\b(?:daily|weekly|monthly)\b",
    ],
    purpose="reminders, recurring jobs",
)

# -- goals ------------------------------------------------------------------------------------------------

_GOAL_FIELDS = ("goal_id", "text", "status", "session_id", "turns_used", "max_turns", "reason", "owner")


def _goal(goal: dict[str, Any]) -> dict[str, Any]:
    return {k: goal[k] for k in _GOAL_FIELDS if k in goal}


def _session(env: ToolEnv, tool: str) -> str:
    if not env.session_id:
        raise ToolFailure("session_required", f"{tool} works on the goals of an agent session")
    return env.session_id


async def _goal_set(args: dict[str, Any], env: ToolEnv) -> Any:
    payload = {"session_id": _session(env, "goal_set"), "text": args["goal"]}
    return {"goal": _goal((await _ask(env, "goals", "set_goal", payload))["goal"])}


async def _goal_list(args: dict[str, Any], env: ToolEnv) -> Any:
    status = str(args.get("status") or "active")
    session = "" if args.get("all_sessions") else _session(env, "goal_list")
    payload = {"session_id": session, "status": "" if status == "all" else status}
    goals = [_goal(g) for g in (await _ask(env, "goals", "list_goals", payload))["goals"]]
    return {"goals": goals, "count": len(goals)}


async def _goal_complete(args: dict[str, Any], env: ToolEnv) -> Any:
    payload = {"goal_id": args["goal_id"], "reason": str(args.get("reason") or "")}
    return {"goal": _goal((await _ask(env, "goals", "complete_goal", payload))["goal"])}


async def _goal_clear(args: dict[str, Any], env: ToolEnv) -> Any:
    reply = await _ask(env, "goals", "clear_goal", {"goal_id": args["goal_id"]})
    return {"goal_id": args["goal_id"], "cleared": reply["cleared"]}


GOALS_TOOLSET = Toolset(
    "goals",
    [
        Tool(
            "goal_set",
            "Set a goal this conversation works toward across turns (e.g. 'set a goal: finish the report'); "
            "it is judged after each turn and completed when reached.",
            _obj(
                {"goal": {"type": "string", "minLength": 1, "maxLength": MAX_GOAL_CHARS}},
                ("goal",),
            ),
            MUTATING,
            TRUSTED,
            handler=_goal_set,
            requires="goals",
            permission=("goals", "set_goal"),
        ),
        Tool(
            "goal_list",
            "List the goals of this conversation (default: the active ones).",
            _obj(
                {
                    "status": {"type": "string", "enum": ["active", "completed", "exhausted", "all"]},
                    "all_sessions": {
                        "type": "boolean",
                        "description": "The user's goals in every conversation, not just this one",
                    },
                }
            ),
            READ,
            TRUSTED,
            handler=_goal_list,
            requires="goals",
            permission=("goals", "list_goals"),
        ),
        Tool(
            "goal_complete",
            "Mark a goal as reached.",
            _obj(
                {"goal_id": _GOAL_ID, "reason": {"type": "string", "maxLength": 2000}},
                ("goal_id",),
            ),
            MUTATING,
            TRUSTED,
            handler=_goal_complete,
            requires="goals",
            permission=("goals", "complete_goal"),
        ),
        Tool(
            "goal_clear",
            "Drop a goal (it is no longer worked toward).",
            _obj({"goal_id": _GOAL_ID}, ("goal_id",)),
            MUTATING,
            TRUSTED,
            handler=_goal_clear,
            requires="goals",
            permission=("goals", "clear_goal"),
        ),
    ],
    offered=ON_REQUEST,
    intents=[HELP_INTENT, r"\bgoals?\b|\bgoal_"],
    purpose="this chat's goals",
)

__all__ = ["GOALS_TOOLSET", "SCHEDULE_TOOLSET", "job_id_for"]
