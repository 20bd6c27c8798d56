"""Work intents: kanban tasks, reminders (cron jobs) and goals, in their simple forms, and courtesies.

Each is understood only when its tool is in the request's ``tools``; asked for one that is not offered,
the model says it cannot and why. What is not in one of these forms is left to the other intents (and,
if none understands it, to an honest "I can't").
"""

from __future__ import annotations

import re
from typing import Any

from ._plan import Intent, Item, Note, Outcome, ParseContext, Step
from ._text import as_text, strip_quotes

_COURTESY = re.compile(
    r"^(?:hi|hello|hey|hiya|greetings|good\s+(?:morning|afternoon|evening)|thanks|thank\s+you|cheers|thx|"
    r"please|ok|okay|there|bye|goodbye|good\s*bye|see\s+you(?:\s+later)?)(?:\s+(?:there|so\s+much|a\s+lot|very\s+much|mate|minihermes|hermes))?$",
    re.I,
)


class Courtesy(Intent):
    """'hello', 'thanks', 'please': nothing to do, but accounted for (they leave no clause unexplained)."""

    name = "courtesy"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        return [] if _COURTESY.match(clause) else None

    def describe(self, step: Step, outcome: Outcome) -> str:  # pragma: no cover - makes no steps
        return ""


def _sub(data: dict[str, Any], key: str) -> dict[str, Any]:
    """The record a reply holds under ``key``, or the reply itself."""
    inner = data.get(key)
    return inner if isinstance(inner, dict) else data


def _unavailable(what: str, tool: str) -> list[Item]:
    return [Note(f"I can't {what} here: the {tool} tool is not available in this chat.", cannot=True)]


# -- kanban ------------------------------------------------------------------------------------------------

_TASK = r"(?:task|card|ticket|item|todo)"
_KANBAN_CREATE = [
    re.compile(
        rf"^(?:add|create|make|open)\s+(?:a\s+|an\s+|one\s+)?(?:new\s+)?kanban\s+{_TASK}"
        r"(?:\s+(?:called|titled|named|for|to)|\s*:)?\s+(?!\s)(?P<title>.+)$",
        re.I,
    ),
    re.compile(
        rf"^(?:add|create|make|put)\s+(?:a\s+|an\s+)?(?:new\s+)?{_TASK}\s+(?:to|on|in)\s+(?:the\s+|my\s+)?"
        r"(?:kanban(?:\s+board)?|board)(?:\s+(?:called|titled|named|for|to)|\s*:)?\s+(?!\s)(?P<title>.+)$",
        re.I,
    ),
    re.compile(
        r"^(?:add|put)\s+(?!\s)(?P<title>.+?)\s+(?:to|on)\s+(?:the\s+|my\s+)?kanban(?:\s+board)?$", re.I
    ),
]
_KANBAN_LIST = re.compile(
    r"^(?:(?:list|show(?:\s+me)?)\s+(?:all\s+)?(?:the\s+|my\s+)?(?:kanban\s+(?:tasks|cards|board)|board)"
    r"|what(?:'s|\s+is)\s+on\s+(?:the\s+|my\s+)?(?:kanban\s+)?board"
    r"|(?:list|show(?:\s+me)?)\s+(?:all\s+)?(?:the\s+|my\s+)?(?:tasks|cards)\s+on\s+the\s+(?:kanban\s+)?board)$",
    re.I,
)


class Kanban(Intent):
    """'add a kanban task: T', 'add T to the kanban board', 'show the kanban board'."""

    name = "kanban"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        clause = " ".join(clause.split())  # one space between words: every pattern here stays linear
        if _KANBAN_LIST.match(clause):
            tool = ctx.toolbox.find("kanban_list")
            if tool is None:
                return _unavailable("list kanban tasks", "kanban_list")
            return [Step(ctx.key(), self.name, tool.name, {}, subject="list", produces=True)]
        match = next((m for p in _KANBAN_CREATE if (m := p.match(clause))), None)
        if match is None:
            return None
        title = strip_quotes(match.group("title").strip())
        tool = ctx.toolbox.find("kanban_create")
        if tool is None:
            return _unavailable("add kanban tasks", "kanban_create")
        return [Step(ctx.key(), self.name, tool.name, {"title": title}, subject=title, form="create")]

    def describe(self, step: Step, outcome: Outcome) -> str:
        data = outcome.data if isinstance(outcome.data, dict) else {}
        if step.form == "create":
            task = _sub(data, "task")
            task_id = task.get("task_id") or task.get("id")
            status = task.get("status")
            detail = ", ".join(as_text(x) for x in (task_id, status) if x)
            return f"I added the kanban task '{step.subject}'" + (f" ({detail})." if detail else ".")
        tasks = data.get("tasks")
        if not isinstance(tasks, list):
            return f"The {step.tool} tool returned: {outcome.text}."
        if not tasks:
            return "There are no kanban tasks."
        shown = [
            f"{t.get('task_id', '?')} {t.get('title', '')} ({t.get('status', '?')})"
            for t in tasks[:20]
            if isinstance(t, dict)
        ]
        return "Kanban tasks: " + "; ".join(shown) + "."


# -- reminders (cron jobs) ---------------------------------------------------------------------------------

_DAYS = {
    "sunday": 0, "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4, "friday": 5, "saturday": 6,
}  # fmt: skip
_TIME = r"(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?|(?P<word>noon|midday|midnight)"
_WHEN_AT = re.compile(
    rf"^every\s+(?P<days>day|morning|evening|night|weekday|weekend|(?:{'|'.join(_DAYS)})s?)"
    rf"\s+at\s+(?:{_TIME})$",
    re.I,
)
_WHEN_PERIOD = re.compile(
    r"^every\s+(?:(?P<n>\d{1,2})\s+)?(?P<unit>minute|minutes|hour|hours)$",
    re.I,
)
_REMIND = [
    re.compile(r"^remind\s+me\s+(?P<when>every\s+(?!\s).*?)\s+to\s+(?!\s)(?P<what>.+)$", re.I),
    re.compile(r"^remind\s+me\s+to\s+(?!\s)(?P<what>.+?)\s+(?P<when>every\s+(?!\s).+)$", re.I),
    re.compile(
        r"^(?:schedule|set\s+up|create)\s+(?:a\s+)?(?:reminder|cron\s+job)\s+(?P<when>every\s+(?!\s).*?)"
        r"\s+to\s+(?!\s)(?P<what>.+)$",
        re.I,
    ),
]
_REMIND_OTHER = re.compile(r"^(?:remind\s+me|set\s+(?:a\s+)?reminder|schedule\s+a\s+reminder)\b", re.I)
_CRON_LIST = re.compile(
    r"^(?:(?:list|show(?:\s+me)?)\s+(?:all\s+)?(?:my\s+|the\s+)?(?:reminders|cron\s+jobs|scheduled\s+jobs|schedules)"
    r"|what\s+reminders\s+(?:do\s+i\s+have|are\s+(?:there|set))"
    r"|what\s+(?:cron\s+jobs|scheduled\s+jobs)\s+(?:do\s+i\s+have|are\s+there))$",
    re.I,
)
_CRON_OP = re.compile(
    r"^(?P<op>pause|resume|delete|remove|cancel)\s+(?:the\s+|my\s+)?(?:reminder|cron\s+job|job|schedule)\s+"
    r"(?P<id>[\w-]{1,80})$",
    re.I,
)
_CRON_TOOL = {"pause": "cron_pause", "resume": "cron_resume", "delete": "cron_delete"}


def cron_schedule(when: str) -> str | None:
    """A five-field cron expression for "every Monday at 9am", "every day at 7:30", "every hour"."""
    when = " ".join(when.split()).lower()
    period = _WHEN_PERIOD.match(when)
    if period is not None:
        n = int(period.group("n") or 1)
        minutes = period.group("unit").startswith("minute")
        if n < 1 or (minutes and n > 59) or (not minutes and n > 23):
            return None
        if minutes:
            return "* * * * *" if n == 1 else f"*/{n} * * * *"
        return "0 * * * *" if n == 1 else f"0 */{n} * * *"
    at = _WHEN_AT.match(when)
    if at is None:
        return None
    hour_minute = _clock(at)
    if hour_minute is None:
        return None
    hour, minute = hour_minute
    days = at.group("days").lower()
    if days in ("day", "morning", "evening", "night"):
        dow = "*"
    elif days == "weekday":
        dow = "1-5"
    elif days == "weekend":
        dow = "0,6"
    else:
        dow = str(_DAYS[days.rstrip("s") if days.rstrip("s") in _DAYS else days])
    return f"{minute} {hour} * * {dow}"


def _clock(match: re.Match[str]) -> tuple[int, int] | None:
    word = match.group("word")
    if word:
        return (0, 0) if word == "midnight" else (12, 0)
    hour, minute = int(match.group("h")), int(match.group("m") or 0)
    ampm = (match.group("ampm") or "").replace(".", "")
    if minute > 59:
        return None
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    elif hour > 23:
        return None
    return hour, minute


class Reminders(Intent):
    """'remind me every Monday at 9am to water the plants' -> cron_schedule; 'list my reminders'."""

    name = "reminders"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        clause = " ".join(clause.split())  # one space between words: every pattern here stays linear
        if _CRON_LIST.match(clause):
            tool = ctx.toolbox.find("cron_list")
            if tool is None:
                return _unavailable("list reminders", "cron_list")
            return [Step(ctx.key(), self.name, tool.name, {}, subject="list", produces=True, form="list")]
        if op := _CRON_OP.match(clause):
            verb = op.group("op").lower()
            name = _CRON_TOOL.get(verb, "cron_delete")
            tool = ctx.toolbox.find(name)
            if tool is None:
                return _unavailable(f"{verb} reminders", name)
            job_id = op.group("id")
            return [Step(ctx.key(), self.name, tool.name, {"job_id": job_id}, subject=job_id, form=verb)]
        match = next((m for p in _REMIND if (m := p.match(clause))), None)
        if match is None:
            if _REMIND_OTHER.match(clause):
                return [
                    Note(
                        f'I can\'t schedule "{clause}": I understand reminders like "remind me every Monday '
                        'at 9am to water the plants" (every day/weekday/<day> at a time, or every N minutes '
                        "or hours), not one-off or other times.",
                        cannot=True,
                    )
                ]
            return None
        schedule = cron_schedule(match.group("when"))
        what = strip_quotes(match.group("what").strip())
        if schedule is None:
            return [
                Note(
                    f'I can\'t read the time "{match.group("when")}": I understand every day/weekday/'
                    "weekend/<day> at a time (e.g. every Monday at 9am), and every N minutes or hours.",
                    cannot=True,
                )
            ]
        tool = ctx.toolbox.find("cron_schedule")
        if tool is None:
            return _unavailable("set reminders", "cron_schedule")
        args: dict[str, Any] = {"schedule": schedule, "prompt": what}
        return [Step(ctx.key(), self.name, tool.name, args, subject=what, form="schedule")]

    def describe(self, step: Step, outcome: Outcome) -> str:
        data = outcome.data if isinstance(outcome.data, dict) else {}
        job = _sub(data, "job")
        if step.form == "schedule":
            schedule = as_text(step.args.get("schedule", ""))
            job_id = job.get("job_id") or job.get("id")
            return f"I scheduled '{step.subject}' (cron {schedule}" + (
                f", job {job_id})." if job_id else ")."
            )
        if step.form == "list":
            jobs = next(
                (data[k] for k in ("jobs", "items", "results") if isinstance(data.get(k), list)), None
            )
            if jobs is None:
                return f"The {step.tool} tool returned: {outcome.text}."
            if not jobs:
                return "You have no reminders (cron jobs)."
            shown = [
                f"{j.get('job_id') or j.get('id') or '?'}: {j.get('prompt') or j.get('name') or ''} "
                f"({j.get('schedule', '?')}{', paused' if j.get('paused') or j.get('enabled') is False else ''})"
                for j in jobs[:20]
                if isinstance(j, dict)
            ]
            return "Your reminders: " + "; ".join(shown) + "."
        done = {"pause": "paused", "resume": "resumed"}.get(step.form, "deleted")
        return f"I {done} the reminder {step.subject}."


# -- goals -------------------------------------------------------------------------------------------------

_GOAL_SET = [
    re.compile(
        r"^(?:set|add|create|make)\s+(?:a\s+|a\s+new\s+|new\s+)?goal\s*(?::|to|of)?\s+(?!\s)(?P<goal>.+)$",
        re.I,
    ),
    re.compile(r"^my\s+(?:new\s+)?goal\s+is(?:\s+to)?\s+(?!\s)(?P<goal>.+)$", re.I),
    re.compile(r"^(?:new\s+)?goal\s*:\s*(?!\s)(?P<goal>.+)$", re.I),
]
_GOAL_LIST = re.compile(
    r"^(?:(?:list|show(?:\s+me)?)\s+(?:all\s+)?(?:my\s+|the\s+)?(?P<which>active\s+|completed\s+|done\s+)?goals"
    r"|what(?:'s|\s+is|\s+are)\s+my\s+(?P<which2>active\s+|completed\s+)?goals?)$",
    re.I,
)
_GOAL_OP = re.compile(
    r"^(?:(?P<verb>complete|finish|clear|delete|remove|drop)\s+(?:the\s+|my\s+)?goal\s+(?P<id>[\w-]{1,80})"
    r"|mark\s+(?:the\s+|my\s+)?goal\s+(?P<id2>[\w-]{1,80})\s+(?:as\s+)?(?:done|complete|completed|achieved))$",
    re.I,
)


class Goals(Intent):
    """'set a goal: G', 'my goal is G', 'list my goals', 'complete goal g1', 'clear goal g1'."""

    name = "goals"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        clause = " ".join(clause.split())  # one space between words: every pattern here stays linear
        if listed := _GOAL_LIST.match(clause):
            tool = ctx.toolbox.find("goal_list")
            if tool is None:
                if clause.lower().startswith("what"):
                    return None  # "what are my goals" may be a remembered fact
                return _unavailable("list goals", "goal_list")
            which = (listed.group("which") or listed.group("which2") or "").strip().lower()
            args = {"status": {"done": "completed"}.get(which, which)} if which else {}
            return [Step(ctx.key(), self.name, tool.name, args, subject="list", produces=True, form="list")]
        if op := _GOAL_OP.match(clause):
            verb = (op.group("verb") or "complete").lower()
            name = "goal_complete" if verb in ("complete", "finish") else "goal_clear"
            tool = ctx.toolbox.find(name)
            if tool is None:
                return _unavailable(f"{verb} goals", name)
            goal_id = op.group("id") or op.group("id2")
            form = "complete" if name == "goal_complete" else "clear"
            return [Step(ctx.key(), self.name, tool.name, {"goal_id": goal_id}, subject=goal_id, form=form)]
        match = next((m for p in _GOAL_SET if (m := p.match(clause))), None)
        if match is None:
            return None
        goal = strip_quotes(match.group("goal").strip())
        tool = ctx.toolbox.find("goal_set")
        if tool is None:
            return _unavailable("set goals", "goal_set")
        return [Step(ctx.key(), self.name, tool.name, {"goal": goal}, subject=goal, form="set")]

    def describe(self, step: Step, outcome: Outcome) -> str:
        data = outcome.data if isinstance(outcome.data, dict) else {}
        goal = _sub(data, "goal")
        if step.form == "set":
            goal_id = goal.get("goal_id") or goal.get("id")
            # Not echoed: a goal is judged against each answer, and its own words would close it at once.
            return "I set that goal" + (f" ({goal_id})" if goal_id else "") + "; 'list my goals' shows it."
        if step.form == "list":
            goals = next(
                (data[k] for k in ("goals", "items", "results") if isinstance(data.get(k), list)), None
            )
            if goals is None:
                return f"The {step.tool} tool returned: {outcome.text}."
            if not goals:
                return "You have no goals."
            shown = [
                f"{g.get('goal_id') or g.get('id') or '?'}: {g.get('goal') or g.get('text') or g.get('title') or ''}"
                + (f" ({g['status']})" if g.get("status") else "")
                for g in goals[:20]
                if isinstance(g, dict)
            ]
            return "Your goals: " + "; ".join(shown) + "."
        return f"I {'completed' if step.form == 'complete' else 'cleared'} the goal {step.subject}."
