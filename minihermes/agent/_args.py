"""The agent's arguments (``Agent.Args``) and the identity texts its prompt starts with.

``identity_reader`` reads a session's SOUL and project context: the workspace's ``SOUL.md`` wins over the data
dir's, which wins over the default; ``system_prompt`` replaces them all. The agent reads them once per
activation, with its state (``Actor.preload``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from minihermes.context import prompt
from minihermes.context.toolsets import DEFAULT as DEFAULT_TOOLSETS
from minihermes.context.toolsets import check_names
from minihermes.runtime import ActorArgs, current_context
from minihermes.tools.workspace import workspace_path

DEFAULT_TOKEN_BUDGET = 32_000


class AgentArgs(ActorArgs):
    """``max_iterations`` (8), ``llm_timeout``, ``tool_timeout``, ``system_prompt`` (replaces SOUL.md),
    ``soul_path`` (a data-dir SOUL.md), ``workspace_root`` (session workspaces: a workspace SOUL.md,
    ``.hermes.md`` / ``AGENTS.md``), ``token_budget`` (history compression), ``skills_limit``,
    ``skills_tokens``, ``memory_top_k``, ``memory_min_score``, ``context_tokens`` (the prompt contributors'
    parts: the lowest priority left out first beyond it), ``episodic`` (write a memory per turn),
    ``index_sessions`` (feed session search), ``semantic`` (``"auto"``: embed indexed turns for session
    search when the semantic extra is installed; ``"on"``: the same, warning when it is not; ``"off"``),
    ``embedder`` (a model object, tests), ``toolsets`` (the toolsets offered to the model, default
    ``["core"]``; ``["all"]``: every tool), ``tenant_toolsets`` (tenant -> toolsets its turns add),
    ``auto_toolsets`` (add the toolsets a request calls for; see ``minihermes.context.toolsets``)."""

    max_iterations: int = 8
    llm_timeout: float = 120
    tool_timeout: float = 120
    system_prompt: str = ""
    soul_path: str | Path | None = None
    workspace_root: str | Path | None = None
    token_budget: int = DEFAULT_TOKEN_BUDGET
    skills_limit: int = 3
    skills_tokens: int = 1_500
    memory_top_k: int = 5
    memory_min_score: float = 0.3
    context_tokens: int = 8_000
    episodic: bool = True
    index_sessions: bool = True
    semantic: Literal["auto", "on", "off"] = "auto"
    embedder: Any = None
    toolsets: list[str] = list(DEFAULT_TOOLSETS)
    tenant_toolsets: dict[str, list[str]] = {}
    auto_toolsets: bool = True

    @field_validator("toolsets")
    @classmethod
    def _toolsets(cls, value: list[str]) -> list[str]:
        return list(check_names(value))  # known names are checked by the app (``toolsets_for``)

    @field_validator("tenant_toolsets")
    @classmethod
    def _tenant_toolsets(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        return {tenant: list(check_names(names)) for tenant, names in value.items()}


def identity_reader(session_id: str, args: dict[str, Any]) -> Callable[[], tuple[str, str]]:
    """A blocking function reading a session's (SOUL, project context): the workspace's SOUL.md wins over
    the data dir's, which wins over the default; ``system_prompt`` in args replaces them all. The project
    context is the workspace's ``.hermes.md`` or ``AGENTS.md``. Called in the session's tenant context."""
    given = str(args.get("system_prompt") or "")
    soul_path = Path(args["soul_path"]) if args.get("soul_path") else None
    root = args.get("workspace_root")
    workspace = None
    if root:
        ctx = current_context()
        workspace = workspace_path(Path(root), ctx.tenant, ctx.namespace, session_id)

    def read() -> tuple[str, str]:
        # Most sessions have no workspace folder (it is made by the first file tool): one stat, not five.
        try:
            folder = workspace if workspace is not None and workspace.is_dir() else None
        except OSError:  # unreadable: as if it were not there
            folder = None
        return given or prompt.load_soul(folder, soul_path), prompt.project_context(folder)

    return read
