"""Specs of what a node runs: actor types and (nested) supervisors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ._actor import Actor

Strategy = Literal["one_for_one", "rest_for_one", "one_for_all"]
RestartPolicy = Literal["permanent", "transient", "temporary"]
STRATEGIES: tuple[str, ...] = ("one_for_one", "rest_for_one", "one_for_all")
RESTART_POLICIES: tuple[str, ...] = ("permanent", "transient", "temporary")


@dataclass(slots=True)
class ActorSpec:
    """One actor type under a supervisor.

    - a plain spec runs one shared instance (its checkpoint lives in the system scope; its host primitives
      still act in each message's tenant scope);
    - ``per_tenant`` runs one instance per (tenant, namespace), activated on that tenant's first message;
    - ``virtual`` runs one instance per (tenant, namespace, key): addressed as ``name/key`` or by the
      ``key_field`` argument of the message, activated on demand and deactivated after ``idle_timeout``.
    """

    name: str
    cls: type[Actor]
    args: dict[str, Any] = field(default_factory=dict)
    restart: RestartPolicy = "permanent"
    virtual: bool = False
    key_field: str | None = None
    idle_timeout: float | None = 600.0
    per_tenant: bool = False
    activation: Literal["eager", "lazy"] = "lazy"
    checkpoint_interval: int | None = None
    mailbox_capacity: int | None = None
    max_restarts: int = 10
    """For virtual/per-tenant instances: restarts of one type allowed in the window before escalating."""
    max_restart_window: float = 60.0

    @property
    def dynamic(self) -> bool:
        return self.virtual or self.per_tenant

    @property
    def behavior(self) -> str:
        return self.cls.behavior


@dataclass(slots=True)
class SupervisorSpec:
    name: str
    strategy: Strategy = "one_for_one"
    max_restarts: int = 10
    max_restart_window: float = 60.0
    children: list[ActorSpec | SupervisorSpec] = field(default_factory=list)
    restart: RestartPolicy = "permanent"

    def walk(self) -> list[ActorSpec]:
        out: list[ActorSpec] = []
        for c in self.children:
            out.extend(c.walk() if isinstance(c, SupervisorSpec) else [c])
        return out
