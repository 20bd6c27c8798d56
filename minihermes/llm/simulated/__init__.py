"""The simulated model: a deterministic offline LLM for the agent loop, with its extension points.

``SimulatedProvider`` is what ``create_provider("simulated")`` builds. Extend it with more ``Intent``
classes (kinds of request it understands) or ``PlanAdvisor`` objects (context that reshapes its plan,
like ``SkillProcedures`` for learned skills in the system prompt).
"""

from ._intents import DEFAULT_INTENTS
from ._plan import Intent, Note, Outcome, ParseContext, Plan, Ref, Step
from ._planner import Decision, PlanAdvisor, Planner, PlanningContext, Turn
from ._provider import SimulatedProvider
from ._skills import Procedure, ProcedureStep, SkillProcedures, parse_procedures

__all__ = [
    "DEFAULT_INTENTS",
    "Decision",
    "Intent",
    "Note",
    "Outcome",
    "ParseContext",
    "Plan",
    "PlanAdvisor",
    "Planner",
    "PlanningContext",
    "Procedure",
    "ProcedureStep",
    "Ref",
    "SimulatedProvider",
    "SkillProcedures",
    "Step",
    "Turn",
    "parse_procedures",
]
