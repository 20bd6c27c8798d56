"""Cron schedules: parsing and "when does it fire next", as pure functions (no actor, no clock of their own).

Forms accepted (``parse_schedule``):

- a 5-field cron expression (``"0 9 * * 1-5"``), evaluated in the job's time zone (IANA name, default UTC);
- the intervals ``every_1m`` / ``every_5m`` / ``every_1h`` / ``every_24h`` and the general
  ``every_<n><unit>``, ``every <n><unit>`` (``every 2h``, ``every 90 s``) and a bare ``30m``; units s, m, h, d;
- a one-shot ISO 8601 time (``2026-05-01T09:00:00+02:00``; a naive time is read in the job's time zone).

An interval schedule fires first one period after it is created, then every period. Anything else is an
``InvalidArgument`` naming the ``schedule`` field and the accepted forms. A cron expression that no date
matches (``0 0 30 2 *``, 30 February) has no next fire time: the search for one stops after
``MAX_YEARS_BETWEEN_FIRES`` years, ``next_after`` answers None, and a job is refused with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from minihermes.runtime import InvalidArgument

ScheduleKind = Literal["cron", "interval", "once"]
MIN_INTERVAL = 1.0
MAX_INTERVAL = 366 * 86400.0
MAX_YEARS_BETWEEN_FIRES = 50
"""How far ahead the next fire time of a cron expression is searched (croniter walks years one by one: a
bound on the CPU one schedule costs); an expression with no date in that span never fires."""
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_INTERVAL = re.compile(
    r"^(?:every[_ ]\s*)?(?P<n>\d{1,6})\s*(?P<unit>s|sec|secs|seconds?|m|min|mins|minutes?|h|hr|hrs|hours?|d|days?)$"
)
_TZ_NAME = re.compile(r"[A-Za-z0-9_+-]{1,32}(?:/[A-Za-z0-9_+-]{1,32}){0,3}")
"""What an IANA zone name looks like (``Etc/GMT+5``, ``America/Argentina/Buenos_Aires``): no dots, no empty
or absolute path, at most 131 characters (the longest name is 32)."""
_FORMS = (
    "a 5-field cron expression ('0 9 * * *'), every_1m / every_5m / every_1h / every_24h, 'every 2h', "
    "'30m', or a one-shot ISO time ('2026-05-01T09:00:00Z')"
)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule. ``spec`` is its canonical text (stored with the job)."""

    kind: ScheduleKind
    spec: str
    tz: str = "UTC"
    interval: float = 0.0
    at: float = 0.0

    def first_fire(self, created_at: float) -> float | None:
        """When a job created at ``created_at`` fires first."""
        if self.kind == "interval":
            return created_at + self.interval
        if self.kind == "once":
            return self.at
        return self.next_after(created_at)

    def next_after(self, t: float) -> float | None:
        """The first fire time strictly after ``t`` (None: a one-shot schedule has no more, or no date within
        ``MAX_YEARS_BETWEEN_FIRES`` years matches the cron expression)."""
        if self.kind == "once":
            return None
        if self.kind == "interval":
            raise ValueError("interval schedules advance from their last fire: use advance()")
        try:
            start = datetime.fromtimestamp(t, ZoneInfo(self.tz))
            it = croniter(self.spec, start, max_years_between_matches=MAX_YEARS_BETWEEN_FIRES)
            return float(it.get_next(float))
        except (CroniterError, ValueError, OverflowError):
            return None  # CroniterBadDateError (no matching date) is a CroniterError, and a ValueError

    def advance(self, fired: float, now: float) -> list[float]:
        """Fire times after ``fired`` up to and including ``now`` (missed ones after downtime), capped at 1000
        (the newest kept); the caller applies the misfire policy."""
        if self.kind == "once":
            return []
        out: list[float] = []
        if self.kind == "interval":
            missed = int((now - fired) // self.interval)
            first = max(1, missed - 999)
            out = [fired + k * self.interval for k in range(first, missed + 1)]
            return out
        t = fired
        while len(out) < 1000:
            nxt = self.next_after(t)
            if nxt is None or nxt > now:
                break
            out.append(nxt)
            t = nxt
        return out

    def following(self, fired: float, now: float) -> float | None:
        """The first fire time after ``now`` on this schedule's grid (anchored at ``fired``)."""
        if self.kind == "once":
            return None
        if self.kind == "interval":
            steps = int((now - fired) // self.interval) + 1
            return fired + steps * self.interval
        return self.next_after(max(fired, now))


def _zone(tz: str) -> ZoneInfo:
    """The zone of an IANA name. The name is checked before it reaches ``ZoneInfo``, which reads it as a path
    under the zone directory: a long one was an ``OSError`` (file name too long), and a name that is no zone
    raises one of several exception types (all caught, all the same ``InvalidArgument``)."""
    unknown = InvalidArgument(
        f"unknown time zone '{tz[:80]}' (use an IANA name such as 'Europe/Paris' or 'UTC')", field="tz"
    )
    if not _TZ_NAME.fullmatch(tz):
        raise unknown
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: IsADirectoryError, PermissionError, ...
        raise unknown from None


def parse_schedule(schedule: str, tz: str = "UTC") -> Schedule:
    """Parse a schedule text (see the module docstring); raises ``InvalidArgument`` naming it."""
    text = " ".join(schedule.strip().split())
    zone = _zone(tz or "UTC")
    if not text:
        raise InvalidArgument(f"schedule must not be empty: give {_FORMS}", field="schedule")
    low = text.lower()
    m = _INTERVAL.match(low)
    if m is not None:
        seconds = float(int(m.group("n")) * _UNITS[m.group("unit")[0]])
        if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
            raise InvalidArgument(
                f"schedule '{schedule}': the interval must be between 1s and 366d", field="schedule"
            )
        return Schedule("interval", f"every_{int(seconds)}s", tz or "UTC", interval=seconds)
    if len(text.split(" ")) == 5 and croniter.is_valid(text):
        return Schedule("cron", text, tz or "UTC")
    iso = text.replace("z", "Z")
    if re.match(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}", iso):
        try:
            when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
        except ValueError:
            when = None
        if when is not None:
            if when.tzinfo is None:
                when = when.replace(tzinfo=zone)
            try:
                at = when.timestamp()
                spec = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
            except (ValueError, OverflowError):  # e.g. year 1 at +05:00 is in year 0
                raise InvalidArgument(
                    f"schedule '{schedule}': the time is out of range", field="schedule", schedule=schedule
                ) from None
            return Schedule("once", spec, tz or "UTC", at=at)
    raise InvalidArgument(
        f"invalid schedule '{schedule}': give {_FORMS}", field="schedule", schedule=schedule
    )
