"""The agent application's supervision tree, its default config and its tools: the composition root.

This is the one module that knows every subsystem: the actor roles of each (``ROLES``) and the toolsets each
contributes (``TOOLSETS``), which ``build_agent_node`` gives the tool executor. Which of them a turn *offers*
the model is the agent's configuration (its ``toolsets`` and ``tenant_toolsets`` args, checked here against
the tool executor's toolsets, and a session's ``set_toolsets``; see ``minihermes.context.toolsets``).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet

from minihermes.agent.agent import Agent
from minihermes.agent.agent_fsm import AgentFSM
from minihermes.agent.api_records import ApiRecords
from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.guardrails import Guardrails
from minihermes.agent.health_monitor import HealthMonitor
from minihermes.agent.llm_gateway import LLMGateway
from minihermes.agent.memory import Memory
from minihermes.agent.session_manager import SessionManager
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.context import ContextCompressor
from minihermes.context.search_tool import SESSION_SEARCH_TOOLSET
from minihermes.context.toolsets import check_names
from minihermes.llm import egress
from minihermes.mcp import MCP_TOOLSET, MCPManager
from minihermes.platforms import PLATFORM_ROLES
from minihermes.runtime import AppConfig, Clock, ConfigError, Node, build_node, register_actor_type
from minihermes.skills import SKILL_ROLES, SKILLS_TOOLSET, SkillTools
from minihermes.tools import CORE_TOOLSETS, Toolset
from minihermes.work import WORK_ROLES, WORK_TOOLSETS

ROLES = {
    "minihermes.agent": Agent,
    "minihermes.agent_fsm": AgentFSM,
    "minihermes.api_records": ApiRecords,
    "minihermes.audit_event": AuditEvent,
    "minihermes.context_compressor": ContextCompressor,
    "minihermes.guardrails": Guardrails,
    "minihermes.health_monitor": HealthMonitor,
    "minihermes.llm_gateway": LLMGateway,
    "minihermes.mcp_manager": MCPManager,
    "minihermes.memory": Memory,
    "minihermes.session_manager": SessionManager,
    "minihermes.tool_executor": ToolExecutor,
    **WORK_ROLES,
    **SKILL_ROLES,
    **PLATFORM_ROLES,
}
for _role, _cls in ROLES.items():
    register_actor_type(_role, _cls)

TOOLSETS: tuple[Toolset, ...] = (
    *CORE_TOOLSETS,  # compute, memory, web, files, terminal
    SESSION_SEARCH_TOOLSET,
    *WORK_TOOLSETS,  # kanban, delegation
    SKILLS_TOOLSET,
    MCP_TOOLSET,
)
"""Every toolset of the app, given to each ``tool_executor`` (its ``toolsets`` arg, see ``toolsets_for``). A
subsystem's tool is listed only where the actor it ``requires`` runs."""


def toolsets_for(wanted: object, where: str = "tool_executor.args.toolsets") -> list[Toolset]:
    """The ``toolsets`` arg of a tool executor: every toolset of the app when none is named, else the ones
    named (by name, from ``TOOLSETS``, or ``Toolset`` objects of the embedding program's own)."""
    if wanted is None:
        return list(TOOLSETS)
    by_name = {t.name: t for t in TOOLSETS}
    if isinstance(wanted, str | Toolset) or not isinstance(wanted, list | tuple):
        wanted = [wanted]
    chosen: list[Toolset] = []
    for item in wanted:
        toolset = item if isinstance(item, Toolset) else by_name.get(str(item))
        if toolset is None:
            raise ConfigError(where, f"unknown toolset {item!r} (known: {', '.join(by_name)})")
        chosen.append(toolset)
    return chosen


def check_offered(args: dict[str, object], known: list[str] | None, where: str) -> None:
    """The agent's ``toolsets`` and ``tenant_toolsets`` args name toolsets of the tool executors (``known``;
    None: not checked) or ``core``, ``all``: a ``ConfigError`` naming the arg otherwise."""
    entries: list[tuple[str, object]] = []
    if args.get("toolsets") is not None:
        entries.append((f"{where}.toolsets", args["toolsets"]))
    tenants = args.get("tenant_toolsets") or {}
    if not isinstance(tenants, dict):
        raise ConfigError(f"{where}.tenant_toolsets", "must map tenant names to lists of toolsets")
    entries.extend((f"{where}.tenant_toolsets.{tenant}", names) for tenant, names in tenants.items())
    for field, names in entries:
        try:
            check_names(names, known)
        except ValueError as e:  # UnknownToolset names the known ones
            raise ConfigError(field, str(e)) from None


# Services start before the agents that use them; a crash in one service restarts only that service.
AGENT_CONFIG = """
[node]
id = "node-1"

[retention]
interval = "1h"
[[retention.rules]]
kind = "events"
selector = "audit"
max_age = "365d"
[[retention.rules]]
kind = "tuples"
selector = "health_snapshot"
max_age = "1d"
[[retention.rules]]
kind = "dead_letters"
max_age = "30d"
[[retention.rules]]
kind = "quarantine"
max_age = "90d"

[supervisor]
strategy = "one_for_one"
max_restarts = 20
max_restart_window_seconds = 60

[[supervisor.children]]
name = "audit_event"
role = "minihermes.audit_event"
behavior_kind = "GenEvent"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "session_manager"
role = "minihermes.session_manager"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "memory"
role = "minihermes.memory"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

# The HTTP layer's records (/v1 responses and session map, Idempotency-Key claims): forgettable.
[[supervisor.children]]
name = "api_records"
role = "minihermes.api_records"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "context_compressor"
role = "minihermes.context_compressor"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "llm_gateway"
role = "minihermes.llm_gateway"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "tool_executor"
role = "minihermes.tool_executor"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "mcp_manager"
role = "minihermes.mcp_manager"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "guardrails"
role = "minihermes.guardrails"
behavior_kind = "GenFSM"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "skill_store"
role = "minihermes.skill_store"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "skill_workflow"
role = "minihermes.skill_workflow"
behavior_kind = "Workflow"
facets = [{ type = "virtual_actor", config = { idle_timeout = "10m" } }]

[[supervisor.children]]
name = "curator"
role = "minihermes.curator"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "skill_tools"
role = "minihermes.skill_tools"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "agent_fsm"
role = "minihermes.agent_fsm"
behavior_kind = "GenFSM"
facets = [{ type = "virtual_actor", config = { idle_timeout = "30m", key_field = "session_id" } }]

[[supervisor.children]]
name = "agent"
role = "minihermes.agent"
facets = [
  { type = "virtual_actor", priority = 100, config = { idle_timeout = "10m", key_field = "session_id" } },
  { type = "durability", priority = 90, config = { checkpoint_interval = 1 } },
  { type = "mailbox", config = { capacity = 100 } },
]

[[supervisor.children]]
name = "health_monitor"
role = "minihermes.health_monitor"

# Work that outlives a turn (minihermes/work): cron, task queue, orchestrator, kanban, goals, notifications.
[[supervisor.children]]
name = "cron_scheduler"
role = "minihermes.cron_scheduler"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "cron_runner"
role = "minihermes.cron_runner"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "task_queue"
role = "minihermes.task_queue"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "task_worker"
role = "minihermes.task_worker"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "goals"
role = "minihermes.goals"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "notifications"
role = "minihermes.notifications"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "kanban"
role = "minihermes.kanban"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "kanban_worker"
role = "minihermes.kanban_worker"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "orchestrator"
role = "minihermes.orchestrator"
behavior_kind = "Workflow"
facets = [
  { type = "virtual_actor", priority = 100, config = { idle_timeout = "10m", key_field = "task_id" } },
  { type = "durability", priority = 90, config = { checkpoint_interval = 1 } },
]
# (end of work actors)

# Messaging platforms (minihermes/platforms): the registry and pairings per tenant, one adapter per connection.
[[supervisor.children]]
name = "platform_gateway"
role = "minihermes.platform_gateway"
facets = [
  { type = "tenancy", config = { per_tenant = true } },
  { type = "durability", config = { checkpoint_interval = 1 } },
]

[[supervisor.children]]
name = "platform_adapter"
role = "minihermes.platform_adapter"
facets = [
  { type = "virtual_actor", priority = 100, config = { idle_timeout = "0s", key_field = "name" } },
  { type = "durability", priority = 90, config = { checkpoint_interval = 1 } },
]
"""


def prepare_data_dir(data_dir: Path) -> dict[str, str]:
    """Create the data dir (0700) and its credential key (0600, made once); returns paths actors need."""
    data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    key_file = data_dir / "credential.key"
    if not key_file.exists():
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(Fernet.generate_key())
    workspaces = data_dir / "workspaces"
    workspaces.mkdir(exist_ok=True)
    return {"credential_key": key_file.read_text().strip(), "workspace_root": str(workspaces)}


def build_agent_node(config: AppConfig, *, clock: Clock | None = None) -> Node:
    """A node for an agent app config: data dir prepared, data-dir-bound args given to the services."""
    paths = prepare_data_dir(config.data_dir)
    # The operator's node-wide egress allow-list, where an actor's own allowed_egress arg is unset.
    egress_env = os.environ.get(egress.ENV_VAR)
    allowed = egress.split_env(egress_env) if egress_env is not None else None
    try:
        egress.EgressPolicy.parse(allowed, egress.ENV_VAR)
    except ValueError as e:
        raise ConfigError(egress.ENV_VAR, str(e)) from None
    executors = [s for s in config.tree.walk() if s.cls is ToolExecutor]
    for spec in executors:
        spec.args["toolsets"] = toolsets_for(spec.args.get("toolsets"), f"{spec.name}.args.toolsets")
    known = sorted({t.name for s in executors for t in s.args["toolsets"]}) if executors else None
    for spec in config.tree.walk():
        if spec.cls in (LLMGateway, MCPManager) and allowed is not None:
            spec.args.setdefault("allowed_egress", allowed)
        if spec.cls is LLMGateway:
            spec.args.setdefault("credential_key", paths["credential_key"])
        elif spec.cls in (ToolExecutor, SessionManager):  # the session manager: to forget workspaces
            spec.args.setdefault("workspace_root", paths["workspace_root"])
        elif spec.cls is Agent:
            check_offered(spec.args, known, f"{spec.name}.args")
            spec.args.setdefault("workspace_root", paths["workspace_root"])
            spec.args.setdefault("soul_path", str(config.data_dir / "SOUL.md"))
        elif spec.cls is SkillTools:
            spec.args.setdefault("tools_root", str(config.data_dir / "skill_tools"))
            # One owner's tool folders share the workspace quota the terminal has (the sandbox's default).
            terminal = executors[0].args.get("terminal", {}) if executors else {}
            for quota in ("workspace_bytes", "workspace_files"):
                if quota in terminal:
                    spec.args.setdefault(quota, terminal[quota])
        elif spec.cls is MCPManager:
            spec.args.setdefault("log_dir", str(config.data_dir / "mcp"))
            spec.args.setdefault("credential_key", paths["credential_key"])
    return build_node(config, clock=clock)


def default_config(data_dir: str | Path | None = None) -> AppConfig:
    cfg = AppConfig.from_toml(AGENT_CONFIG, "<agent>")
    if data_dir is not None:
        cfg.model.node.data_dir = str(data_dir)
    return cfg


def single_owner(config: AppConfig) -> AppConfig:
    """Mark a config as one person's (no auth, or an embedding program): guardrails then let that owner
    approve their own paused tool calls, since nobody else could, the owner may take backups through
    ``health_monitor.backup``, MCP servers may be any stdio program, and
    provider and MCP URLs may reach loopback and private addresses (a local Ollama) (the owner's own machine;
    a node with auth starts no program and reaches no internal address unless its operator lists them)."""
    for spec in config.tree.walk():
        if spec.cls is Guardrails:
            spec.args.setdefault("self_approval", True)
        elif spec.cls is MCPManager:
            spec.args.setdefault("stdio_commands", ["*"])
            spec.args.setdefault("allowed_egress", ["*"])
        elif spec.cls is LLMGateway:
            spec.args.setdefault("allowed_egress", ["*"])
        elif spec.cls is HealthMonitor:
            spec.args.setdefault("backups", True)  # every tenant's data is the owner's
    return config
