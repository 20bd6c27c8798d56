"""Fixtures for the skill services: the agent tests' node factory and contexts, and a skills tree."""

from __future__ import annotations

from typing import Any

from minihermes.agent.audit_event import AuditEvent
from minihermes.runtime import ActorSpec
from minihermes.skills import Curator, SkillStore, SkillWorkflow
from tests.agent.conftest import ACME, ACME_USER, ACME_VIEWER, GLOBEX, clock, make_node

__all__ = ["ACME", "ACME_USER", "ACME_VIEWER", "GLOBEX", "clock", "make_node", "skills_tree"]


def skills_tree(*extra: ActorSpec, store_args: dict[str, Any] | None = None) -> list[ActorSpec]:
    return [
        ActorSpec("audit_event", AuditEvent, per_tenant=True),
        # BM25 only (deterministic rankings, no model load); tests/skills/test_semantic.py covers fusion.
        ActorSpec("skill_store", SkillStore, per_tenant=True, args={"semantic": "off", **(store_args or {})}),
        ActorSpec("skill_workflow", SkillWorkflow, virtual=True, idle_timeout=None),
        ActorSpec("curator", Curator, per_tenant=True),
        *extra,
    ]
