"""Work that outlives a turn: cron, the task queue, the orchestrator, the kanban board, goals, delegation.

One module per actor; ``WORK_ROLES`` maps their roles for the agent app's tree (``minihermes/agent/app.py``).
Importing this package also registers the LLM tools of these subsystems (``delegate_task``, ``kanban_*``).
"""

from . import delegation, kanban_tools
from .cron import CronScheduler
from .goals import Goals
from .kanban import Kanban
from .kanban_worker import KanbanWorker
from .orchestrator import Orchestrator
from .plan import SubTask, plan_deterministic
from .runner import CronRunner
from .schedule import Schedule, parse_schedule
from .task_queue import TaskQueue
from .workers import TaskWorker

WORK_ROLES = {
    "minihermes.cron_scheduler": CronScheduler,
    "minihermes.cron_runner": CronRunner,
    "minihermes.task_queue": TaskQueue,
    "minihermes.task_worker": TaskWorker,
    "minihermes.orchestrator": Orchestrator,
    "minihermes.kanban": Kanban,
    "minihermes.kanban_worker": KanbanWorker,
    "minihermes.goals": Goals,
}

kanban_tools.register()
delegation.register()

__all__ = [
    "WORK_ROLES",
    "CronRunner",
    "CronScheduler",
    "Goals",
    "Kanban",
    "KanbanWorker",
    "Orchestrator",
    "Schedule",
    "SubTask",
    "TaskQueue",
    "TaskWorker",
    "parse_schedule",
    "plan_deterministic",
]
