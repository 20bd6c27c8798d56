"""Work intents: kanban tasks, reminders (cron jobs) and goals, in their simple forms, and courtesies.

Each is understood only when its tool is in the request's ``tools``; asked for one that is not offered,
the model says it cannot and why. What is not in one of these forms is left to the other intents (and,
if none understands it, to an honest "I can't").
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from ._arith import words_to_numbers
from ._plan import Intent, Item, Note, Outcome, ParseContext, Step
from ._text import FINDER, as_text, strip_quotes

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


def _unavailable(what: str, tool: str, ctx: ParseContext | None = None) -> list[Item]:
    """A tool the request needs is not offered: found through ``find_tools`` when it can be (the turn then
    goes on with the tool offered), else an honest "I can't"."""
    toolset = ctx.toolbox.findable(tool) if ctx is not None else None
    if ctx is not None and toolset is not None:
        return [Step(ctx.key(), FindTools.name, FINDER, {"toolsets": [toolset]}, subject=what, form=tool)]
    return [Note(f"I can't {what} here: the {tool} tool is not available in this chat.", cannot=True)]


class FindTools(Intent):
    """The step that asks ``find_tools`` for a toolset the request needs (made by the work intents, never
    parsed from words). Once it has run, the plan has the real step; if it is still planned, the toolset did
    not come, and the turn says it cannot."""

    name = "find-tools"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        return None

    def describe(self, step: Step, outcome: Outcome) -> str:
        return (
            f"I can't {step.subject} here: the {_toolsets(step)} tools are not available in this chat, even "
            "after asking for them."
        )

    def explain(self, step: Step, outcome: Outcome) -> str | None:
        return f"I can't {step.subject} here: asking for the {_toolsets(step)} tools failed: {outcome.error}."


def _toolsets(step: Step) -> str:
    names = step.args.get("toolsets")
    return " and ".join(str(n) for n in names) if isinstance(names, list) else "needed"


# -- kanban ------------------------------------------------------------------------------------------------

_TASK = r"(?:task|card|ticket|item|todo)"
_TODO_LIST = r"(?:(?:to-?\s?do|todo)(?:\s+list|s)?|task\s+list|tasks)"
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
        r"^(?:add|put)\s+(?!\s)(?P<title>.+?)\s+(?:to|on)\s+(?:the\s+|my\s+)?(?:kanban(?:\s+board)?|board)$",
        re.I,
    ),
    # The board is the person's to-do list: "add renew insurance to my todo list", "put X on my to-do list".
    re.compile(
        rf"^(?:add|put|write)\s+(?!\s)(?P<title>.+?)\s+(?:to|on|onto|in)\s+(?:the\s+|my\s+|our\s+)?{_TODO_LIST}$",
        re.I,
    ),
    re.compile(
        r"^(?:(?:add|create|make)\s+(?:a\s+|an\s+|one\s+)?(?:new\s+)?(?:to-?\s?do|task)(?:\s+item)?"
        r"(?:\s+(?:called|titled|named|for|to)|\s*:)|(?:new\s+)?(?:to-?\s?do|task)\s*:)\s*(?!\s)(?P<title>.+)$",
        re.I,
    ),
]
_KANBAN_LIST = re.compile(
    r"^(?:(?:list|show(?:\s+me)?)\s+(?:all\s+)?(?:the\s+|my\s+)?(?:kanban\s+(?:tasks|cards|board)|board)"
    r"|what(?:'s|\s+is)\s+on\s+(?:the\s+|my\s+)?(?:kanban\s+)?board"
    r"|(?:list|show(?:\s+me)?)\s+(?:all\s+)?(?:the\s+|my\s+)?(?:tasks|cards)\s+on\s+the\s+(?:kanban\s+)?board"
    rf"|(?:(?:list|show(?:\s+me)?)\s+(?:all\s+)?|what(?:'s|\s+is|\s+are)\s+(?:on\s+)?)(?:the\s+|my\s+|our\s+){_TODO_LIST})$",
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
                return _unavailable("list kanban tasks", "kanban_list", ctx)
            return [Step(ctx.key(), self.name, tool.name, {}, subject="list", produces=True)]
        match = next((m for p in _KANBAN_CREATE if (m := p.match(clause))), None)
        if match is None:
            return None
        title = strip_quotes(match.group("title").strip())
        tool = ctx.toolbox.find("kanban_create")
        if tool is None:
            return _unavailable("add kanban tasks", "kanban_create", ctx)
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
_PART = r"morning|afternoon|evening|night"
_WHEN_AT = re.compile(
    rf"^every\s+(?:(?P<days>day|weekdays?|weekends?|(?:{'|'.join(_DAYS)})s?)(?:\s+(?P<part>{_PART}))?"
    rf"|(?P<part0>{_PART}))\s+at\s+(?:{_TIME})$",
    re.I,
)
_WHEN_PERIOD = re.compile(
    r"^every\s+(?:(?P<n>\d{1,2})\s+)?(?P<unit>minute|minutes|hour|hours)$",
    re.I,
)
_WHEN_WORD = r"(?:every|each|daily|weekdays|weekends|on|at)"
_REMIND_ME = re.compile(
    r"^(?:remind\s+me|(?:set|schedule|set\s+up|create)\s+(?:a\s+)?(?:reminder|cron\s+job)(?:\s+for)?)\s+(?!\s)"
    r"(?P<rest>.+)$",
    re.I,
)
_WHEN_FIRST = re.compile(rf"^{_WHEN_WORD}\s", re.I)
_WHAT_FIRST = re.compile(r"^(?P<link>to|that|about)\s+(?!\s)(?P<body>.+)$", re.I)
_LINK = re.compile(r"(?<!\s)\s+(?P<link>to|that|about)\s+(?!\s)", re.I)
_WHEN_START = re.compile(rf"(?<!\s)\s+(?={_WHEN_WORD}\s)", re.I)
_SPLITS = 6
"""How many places a reminder's time may start (or its text begin) that are tried: the first that reads."""
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
_CLOCK = r"\d{1,2}(?::\d{2})?"
_WHEN_WORDS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\s*\bo'?clock\b", re.I), ""),
    (re.compile(rf"\b({_CLOCK})\s+in\s+the\s+morning\b", re.I), r"\1am"),
    (re.compile(rf"\b({_CLOCK})\s+in\s+the\s+(?:afternoon|evening)\b", re.I), r"\1pm"),
    (re.compile(r"\beach\b", re.I), "every"),
    (re.compile(r"^daily\b", re.I), "every day"),
    (re.compile(r"^(?:on\s+)?(weekdays|weekends)\b", re.I), r"every \1"),
    (
        re.compile(rf"^on\s+((?:{'|'.join(_DAYS)})s)\b", re.I),
        r"every \1",
    ),  # "on Mondays"; "on Monday" is once
    (re.compile(r"\bhalf\s+(?:an\s+)?hour\b", re.I), "30 minutes"),
]
_AT_FIRST = re.compile(
    rf"^(?P<at>at\s+(?:{_CLOCK}\s*(?:am|pm)?|noon|midday|midnight))\s+(?P<every>every\s.+)$", re.I
)


def _normal_when(when: str) -> str:
    """Everyday ways to say a time, as the forms ``cron_schedule`` reads: "each Monday at nine in the
    morning" -> "every monday at 9am", "at 9am every day" -> "every day at 9am", "daily" -> "every day"."""
    when = words_to_numbers(" ".join(when.split()).lower())
    for pattern, replacement in _WHEN_WORDS:
        when = pattern.sub(replacement, when)
    when = " ".join(when.split())
    if (first := _AT_FIRST.match(when)) is not None:
        when = f"{first.group('every')} {first.group('at')}"
    return when


def cron_schedule(when: str) -> str | None:
    """A five-field cron expression for "every Monday at 9am", "every day at 7:30", "every hour" (and the
    everyday forms ``_normal_when`` reads)."""
    when = _normal_when(when)
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
    part = (at.group("part") or at.group("part0") or "").lower()
    hour_minute = _clock(at, part)
    if hour_minute is None:
        return None
    hour, minute = hour_minute
    days = (at.group("days") or "day").lower()
    if days == "day":
        dow = "*"
    elif days.startswith("weekday"):
        dow = "1-5"
    elif days.startswith("weekend"):
        dow = "0,6"
    else:
        dow = str(_DAYS[days.rstrip("s") if days.rstrip("s") in _DAYS else days])
    return f"{minute} {hour} * * {dow}"


def _clock(match: re.Match[str], part: str = "") -> tuple[int, int] | None:
    """(hour, minute) of a time; a part of the day settles a bare hour ("every evening at 7" is 19:00) and
    one that contradicts the time ("every morning at 7pm") reads as no time at all."""
    word = match.group("word")
    if word:
        hour = 0 if word == "midnight" else 12
        fits = not part or part == ("night" if hour == 0 else "afternoon")
        return (hour, 0) if fits else None
    hour, minute = int(match.group("h")), int(match.group("m") or 0)
    ampm = (match.group("ampm") or "").replace(".", "")
    if minute > 59:
        return None
    if ampm:
        if not 1 <= hour <= 12:
            return None
        if (part == "morning" and ampm == "pm") or (part in ("afternoon", "evening") and ampm == "am"):
            return None
        return hour % 12 + (12 if ampm == "pm" else 0), minute
    if hour > 23:
        return None
    if part in ("afternoon", "evening") and 1 <= hour <= 11:
        return hour + 12, minute
    if part == "night":
        if 6 <= hour <= 11:
            return hour + 12, minute
        if hour == 12:
            return None  # noon or midnight: say which
    if part == "morning" and hour >= 12:
        return None
    return hour, minute


def split_reminder(rest: str) -> tuple[str, str, str] | None:
    """(when, link, what) of what follows "remind me": "every Monday at 9am to water the plants" or "to water
    the plants every Monday at 9am". Of the places the time could start, the first that reads wins (so "to
    look at the report every Monday at 9" is about "look at the report"); when none reads, the first place,
    for an honest "I can't read the time"."""
    rest = " ".join(rest.split())
    if _WHEN_FIRST.match(rest):
        found: list[tuple[str, str, str]] = []
        for joint in itertools.islice(_LINK.finditer(rest), _SPLITS):
            found.append((rest[: joint.start()], joint.group("link").lower(), rest[joint.end() :]))
            if cron_schedule(found[-1][0]) is not None:
                return found[-1]
        return found[0] if found else None
    what_first = _WHAT_FIRST.match(rest)
    if what_first is None:
        return None
    body, link = what_first.group("body"), what_first.group("link").lower()
    starts = list(_WHEN_START.finditer(body))[-_SPLITS:]
    for start in reversed(starts):
        when, what = body[start.end() :], body[: start.start()]
        if cron_schedule(when) is not None:
            return when, link, what
    if starts:
        return body[starts[0].end() :], link, body[: starts[0].start()]
    return None


class Reminders(Intent):
    """'remind me every Monday at 9am to water the plants' -> cron_schedule; 'list my reminders'."""

    name = "reminders"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        clause = " ".join(clause.split())  # one space between words: every pattern here stays linear
        if _CRON_LIST.match(clause):
            tool = ctx.toolbox.find("cron_list")
            if tool is None:
                return _unavailable("list reminders", "cron_list", ctx)
            return [Step(ctx.key(), self.name, tool.name, {}, subject="list", produces=True, form="list")]
        if op := _CRON_OP.match(clause):
            verb = op.group("op").lower()
            name = _CRON_TOOL.get(verb, "cron_delete")
            tool = ctx.toolbox.find(name)
            if tool is None:
                return _unavailable(f"{verb} reminders", name, ctx)
            job_id = op.group("id")
            return [Step(ctx.key(), self.name, tool.name, {"job_id": job_id}, subject=job_id, form=verb)]
        remind = _REMIND_ME.match(clause)
        parts = split_reminder(remind.group("rest")) if remind is not None else None
        if parts is None:
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
        when, _, what = parts
        what = strip_quotes(what.strip())
        schedule = cron_schedule(when)
        if schedule is None:
            return [
                Note(
                    f'I can\'t read the time "{when}": I understand every day/weekday/'
                    "weekend/<day> at a time (e.g. every Monday at 9am), and every N minutes or hours.",
                    cannot=True,
                )
            ]
        tool = ctx.toolbox.find("cron_schedule")
        if tool is None:
            return _unavailable("set reminders", "cron_schedule", ctx)
        args: dict[str, Any] = {"schedule": schedule, "prompt": what}
        # A reminder delivers its text to the person (no model run), where the tool can say so.
        notify = "action" in ctx.toolbox.properties(tool)
        if notify:
            args["action"] = "notify"
        # ``owner`` holds the time as the person said it, for the answer.
        return [
            Step(
                ctx.key(),
                self.name,
                tool.name,
                args,
                subject=what,
                owner=when,
                form="notify" if notify else "schedule",
            )
        ]

    def describe(self, step: Step, outcome: Outcome) -> str:
        data = outcome.data if isinstance(outcome.data, dict) else {}
        job = _sub(data, "job")
        if step.form in ("schedule", "notify"):
            schedule = as_text(step.args.get("schedule", ""))
            job_id = job.get("job_id") or job.get("id")
            cron = f"cron {schedule}" + (f", job {job_id}" if job_id else "")
            if step.form == "notify":
                return (
                    f"I'll remind you {step.owner}: '{step.subject}' ({cron}). It will appear in your "
                    "notifications."
                )
            return f"I scheduled '{step.subject}' ({cron})."
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
                return _unavailable("list goals", "goal_list", ctx)
            which = (listed.group("which") or listed.group("which2") or "").strip().lower()
            args = {"status": {"done": "completed"}.get(which, which)} if which else {}
            return [Step(ctx.key(), self.name, tool.name, args, subject="list", produces=True, form="list")]
        if op := _GOAL_OP.match(clause):
            verb = (op.group("verb") or "complete").lower()
            name = "goal_complete" if verb in ("complete", "finish") else "goal_clear"
            tool = ctx.toolbox.find(name)
            if tool is None:
                return _unavailable(f"{verb} goals", name, ctx)
            goal_id = op.group("id") or op.group("id2")
            form = "complete" if name == "goal_complete" else "clear"
            return [Step(ctx.key(), self.name, tool.name, {"goal_id": goal_id}, subject=goal_id, form=form)]
        match = next((m for p in _GOAL_SET if (m := p.match(clause))), None)
        if match is None:
            return None
        goal = strip_quotes(match.group("goal").strip())
        tool = ctx.toolbox.find("goal_set")
        if tool is None:
            return _unavailable("set goals", "goal_set", ctx)
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
