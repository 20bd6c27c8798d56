"""Work that outlives a turn: cron, the task queue, the orchestrator, the kanban board, goals, delegation, and
the notifications that tell people what it did.

One module per actor; ``WORK_ROLES`` maps their roles for the agent app's tree (``minihermes/app.py``).
``WORK_TOOLSETS`` are their LLM tools (``kanban``: ``kanban_*``; ``delegation``: ``delegate_task``; ``schedule``:
``cron_*``; ``goals``: ``goal_*``), which the composition root gives the tool executor.
"""

from .cron_runner import CronRunner
from .cron_scheduler import CronScheduler
from .delegation import DELEGATION_TOOLSET
from .goals import Goals
from .kanban import Kanban
from .kanban_tools import KANBAN_TOOLSET
from .kanban_worker import KanbanWorker
from .notifications import Notifications
from .orchestrator import Orchestrator
from .plan import SubTask, plan_deterministic
from .schedule import Schedule, parse_schedule
from .task_queue import TaskQueue
from .task_worker import TaskWorker
from .time_tools import GOALS_TOOLSET, SCHEDULE_TOOLSET

WORK_ROLES = {
    "minihermes.cron_scheduler": CronScheduler,
    "minihermes.cron_runner": CronRunner,
    "minihermes.task_queue": TaskQueue,
    "minihermes.task_worker": TaskWorker,
    "minihermes.orchestrator": Orchestrator,
    "minihermes.kanban": Kanban,
    "minihermes.kanban_worker": KanbanWorker,
    "minihermes.goals": Goals,
    "minihermes.notifications": Notifications,
}

WORK_TOOLSETS = (KANBAN_TOOLSET, DELEGATION_TOOLSET, SCHEDULE_TOOLSET, GOALS_TOOLSET)

__all__ = [
    "DELEGATION_TOOLSET",
    "GOALS_TOOLSET",
    "KANBAN_TOOLSET",
    "SCHEDULE_TOOLSET",
    "WORK_ROLES",
    "WORK_TOOLSETS",
    "CronRunner",
    "CronScheduler",
    "Goals",
    "Kanban",
    "KanbanWorker",
    "Notifications",
    "Orchestrator",
    "Schedule",
    "SubTask",
    "TaskQueue",
    "TaskWorker",
    "parse_schedule",
    "plan_deterministic",
]
