"""Skills: learned procedures, their store, the learning workflow, the curator and self-written tools.

Actors (one per tenant unless said): ``skill_store`` (``SkillStore``), ``skill_workflow`` (``SkillWorkflow``,
one per learned turn), ``curator`` (``Curator``), ``skill_tools`` (``SkillTools``). ``format_skills`` renders
matched skills as the prompt section the agent injects. See docs/skills.md.
"""

from ._index import IndexDoc, SkillIndex
from ._model import format_skills, parse_skill_md, procedure_tools, render_skill_md
from .curator import Curator
from .skill_store import SkillStore
from .skill_tools import SKILLS_TOOLSET, SkillTools
from .skill_workflow import SkillWorkflow

SKILL_ROLES = {
    "minihermes.skill_store": SkillStore,
    "minihermes.skill_workflow": SkillWorkflow,
    "minihermes.curator": Curator,
    "minihermes.skill_tools": SkillTools,
}

__all__ = [
    "SKILLS_TOOLSET",
    "SKILL_ROLES",
    "Curator",
    "IndexDoc",
    "SkillIndex",
    "SkillStore",
    "SkillTools",
    "SkillWorkflow",
    "format_skills",
    "parse_skill_md",
    "procedure_tools",
    "render_skill_md",
]
