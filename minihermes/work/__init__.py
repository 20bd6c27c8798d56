"""Work that outlives a turn: cron, the task queue, the orchestrator, the kanban board, goals, delegation.

One module per actor; ``WORK_ROLES`` maps their roles for the agent app's tree (``minihermes/agent/app.py``).
Importing this package also registers the LLM tools of these subsystems (``delegate_task``, ``kanban_*``).
"""

from .cron import CronScheduler
from .runner import CronRunner
from .schedule import Schedule, parse_schedule
from .task_queue import TaskQueue
from .workers import TaskWorker

WORK_ROLES = {
    "minihermes.cron_scheduler": CronScheduler,
    "minihermes.cron_runner": CronRunner,
    "minihermes.task_queue": TaskQueue,
    "minihermes.task_worker": TaskWorker,
}

__all__ = [
    "WORK_ROLES",
    "CronRunner",
    "CronScheduler",
    "Schedule",
    "TaskQueue",
    "TaskWorker",
    "parse_schedule",
]
