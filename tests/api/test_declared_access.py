"""Access declared on the op (``@call(access=...)``) plus the permission table's overrides is exactly what the
table alone said before the declarations moved onto the handlers: for every (actor, op) of the agent app, over
HTTP (the catalog), for ``may``/``require`` (the tool executor, the CLI), and for a viewer, a user and an admin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minihermes.api._catalog import build_catalog
from minihermes.app import build_agent_node, default_config
from minihermes.permissions import ACCESS_ROLES, DEFAULT_PERMISSIONS, PermissionTable, may
from minihermes.runtime import ActorSpec, GenServer, Node, RequestContext, SupervisorSpec, call, cast
from minihermes.runtime.store import open_store

BEFORE: dict[tuple[str, str], str] = {
    ("agent", "chat"): "write",
    ("agent", "get_history"): "read",
    ("agent", "clear_history"): "write",
    ("agent", "get_stats"): "read",
    ("agent", "last_turn"): "read",
    ("agent", "resume"): "admin",
    ("agent", "cancel_turn"): "write",  # issue 27: its owner or an admin stops the session's turn
    ("agent_fsm", "get_state"): "read",
    ("agent_fsm", "transition"): "admin",
    ("agent_fsm", "reset"): "admin",
    ("llm_gateway", "get_stats"): "read",
    ("llm_gateway", "get_circuit"): "read",
    ("llm_gateway", "list_providers"): "read",
    ("llm_gateway", "completion"): "admin",
    ("llm_gateway", "register_provider"): "admin",
    ("llm_gateway", "switch_provider"): "admin",
    ("llm_gateway", "set_failover"): "admin",
    ("llm_gateway", "register_credential"): "admin",
    ("llm_gateway", "set_budget"): "admin",
    # Added (issue 30): users read their own spend; the op narrows a user to their own usage.
    ("llm_gateway", "get_usage"): "read",
    ("llm_gateway", "timer_tick"): "admin",
    ("llm_gateway", "test_provider"): "admin",
    ("tool_executor", "list_tools"): "read",
    ("tool_executor", "describe_tool"): "read",
    ("tool_executor", "get_stats"): "read",
    ("tool_executor", "register_tool"): "admin",
    ("tool_executor", "unregister_tool"): "admin",
    ("tool_executor", "execute"): "admin",
    ("guardrails", "get_policies"): "read",
    ("guardrails", "get_state"): "read",
    # Deliberately changed from "observe" (issue 18): users reach their own approvals; guardrails narrows a
    # user to the approvals they requested (tests/agent/test_guardrails.py).
    ("guardrails", "list_approvals"): "read",
    ("guardrails", "get_approval"): "read",
    ("guardrails", "check_tool"): "admin",
    ("guardrails", "set_policy"): "admin",
    ("guardrails", "clear_policy"): "admin",
    ("guardrails", "set_mode"): "admin",
    ("guardrails", "tools_changed"): "admin",
    ("guardrails", "request_approval"): "admin",
    ("guardrails", "approve"): "write",
    ("guardrails", "deny"): "write",
    ("guardrails", "set_approval_policy"): "admin",
    ("guardrails", "transition"): "admin",
    ("memory", "store_memory"): "write",
    ("memory", "recall_memory"): "read",
    ("memory", "list_memories"): "read",
    ("memory", "search_memories"): "read",
    ("memory", "delete_memory"): "write",
    ("memory", "core_snapshot"): "read",
    # issue 26: the prompt contributors' part of a turn, read as the turn's caller
    ("memory", "turn_context"): "read",
    ("skill_store", "turn_context"): "read",
    ("goals", "turn_context"): "read",
    ("memory", "get_stats"): "read",
    ("memory", "clear_memories"): "write",
    # issue 25: a quarantined write is listed to, confirmed or discarded by its owner (or an admin)
    ("memory", "list_quarantined"): "read",
    ("memory", "confirm_memory"): "write",
    ("memory", "discard_memory"): "write",
    ("session_manager", "create_session"): "write",
    ("session_manager", "get_session"): "read",
    ("session_manager", "end_session"): "write",
    ("session_manager", "list_sessions"): "read",
    ("session_manager", "touch"): "write",
    ("session_manager", "get_stats"): "read",
    ("audit_event", "query_events"): "read",
    ("audit_event", "poll_events"): "read",
    ("audit_event", "commit_cursor"): "read",
    ("audit_event", "verify"): "read",
    ("audit_event", "get_stats"): "read",
    ("audit_event", "log_event"): "admin",
    ("audit_event", "subscribe"): "admin",
    ("audit_event", "unsubscribe"): "admin",
    # issue 25: anchors are for whoever verifies; forgetting is memory.forget's protocol (users: themselves)
    ("audit_event", "export_anchors"): "read",
    ("audit_event", "forget_subject"): "write",
    ("health_monitor", "get_health"): "read",
    ("health_monitor", "poll_tick"): "admin",
    ("agent", "session_search"): "read",
    ("agent", "set_toolsets"): "write",  # issue 19: the toolsets a session offers, its owner's setting
    ("skill_store", "list_skills"): "read",
    ("skill_store", "get_skill"): "read",
    ("skill_store", "search_skills"): "read",
    ("skill_store", "match_skills"): "read",
    ("skill_store", "get_stats"): "read",
    ("skill_store", "pin"): "admin",
    ("skill_store", "unpin"): "admin",
    ("skill_store", "archive"): "admin",
    ("skill_store", "recover"): "admin",
    ("skill_store", "rollback"): "admin",
    ("skill_store", "reject_skill"): "admin",  # issue 19: an admin turns a candidate down
    # issue 20: users import skill folders as their own candidates; anyone who sees a skill reads its files
    ("skill_store", "import_skills"): "write",
    ("skill_store", "read_skill_file"): "read",
    ("skill_store", "view_skill"): "read",
    # issue 25: a held skill (or tool) is listed to, confirmed or discarded by its owner (or an admin)
    ("skill_store", "list_quarantined"): "read",
    ("skill_store", "confirm_skill"): "write",
    ("skill_store", "discard_skill"): "write",
    ("skill_tools", "list_tools"): "read",
    ("skill_tools", "get_tool"): "read",
    ("skill_tools", "create_tool"): "write",
    ("skill_tools", "rollback_tool"): "write",
    ("skill_tools", "run_tool"): "write",
    ("skill_tools", "promote_tool"): "admin",
    ("skill_tools", "delete_tool"): "write",  # added by issue 23: the owner's or an admin's
    ("skill_tools", "confirm_tool"): "write",
    ("cron_scheduler", "list_jobs"): "read",
    ("cron_scheduler", "get_job"): "read",
    ("cron_scheduler", "job_runs"): "read",
    ("cron_scheduler", "get_stats"): "read",
    # issue 19: users act on their own cron jobs (the scheduler narrows them to what they own)
    ("cron_scheduler", "create_job"): "write",
    ("cron_scheduler", "delete_job"): "write",
    ("cron_scheduler", "pause_job"): "write",
    ("cron_scheduler", "resume_job"): "write",
    ("cron_scheduler", "run_now"): "write",
    ("task_queue", "get_stats"): "read",
    ("task_queue", "dead_letters"): "observe",
    ("task_queue", "redrive"): "admin",
    ("kanban", "list"): "read",
    ("kanban", "show"): "read",
    ("kanban", "stats"): "read",
    ("kanban", "create"): "write",
    ("kanban", "update"): "write",
    ("kanban", "move"): "write",
    ("kanban", "assign"): "write",
    ("kanban", "comment"): "write",
    ("kanban", "block"): "write",
    ("kanban", "unblock"): "write",
    ("kanban", "complete"): "write",
    ("kanban", "cancel"): "write",
    ("kanban", "archive"): "write",
    ("kanban", "start"): "write",
    ("kanban", "heartbeat"): "write",
    ("kanban", "fail"): "write",
    ("kanban", "delete"): "admin",
    ("goals", "list_goals"): "read",
    ("goals", "set_goal"): "write",
    ("goals", "complete_goal"): "write",
    ("goals", "clear_goal"): "write",
    # issue 24: each person's inbox (the actor narrows everyone to their own); delivering is the runtime's
    ("notifications", "list_notifications"): "read",
    ("notifications", "mark_read"): "write",
    ("notifications", "notify"): "admin",
    # issue 25: forgetting runs as the caller (a user forgets what is theirs, an admin a user or the tenant);
    # each store's forget_subject is memory.forget's fan-out and checks the subject against the caller itself.
    ("memory", "forget"): "write",
    ("cron_scheduler", "forget_subject"): "write",
    ("goals", "forget_subject"): "write",
    ("guardrails", "forget_subject"): "write",
    ("kanban", "forget_subject"): "write",
    ("notifications", "forget_subject"): "write",
    ("session_manager", "forget_subject"): "write",
    ("skill_store", "forget_subject"): "write",
    ("skill_tools", "forget_subject"): "write",
    ("task_queue", "forget_subject"): "write",
    ("api_records", "forget_subject"): "write",  # the HTTP layer's records; get/put/cas/delete: admin
    ("orchestrator", "forget"): "write",  # the run's own caller's or an admin's (checked in the op)
    # issue 28: viewers may see connected platforms and their counters (never a credential's value)
    ("platform_gateway", "list_platforms"): "observe",
    ("platform_gateway", "get_platform"): "observe",
}
"""``minihermes.permissions.DEFAULT_TABLE`` before change 5 (every op not in it was admin-only)."""


@pytest.fixture
def agent_node(tmp_path: Path) -> Node:
    return build_agent_node(default_config(tmp_path / "data"))


def test_every_op_of_the_agent_app_keeps_its_access_class(agent_node: Node) -> None:
    catalog = build_catalog(agent_node, DEFAULT_PERMISSIONS)
    effective = DEFAULT_PERMISSIONS.for_node(agent_node)
    served = {(name, op): o for name, info in catalog.items() for op, o in info.ops.items()}
    assert len(served) > 100  # the live catalog, not a list of ours
    for (actor, op), o in served.items():
        want = BEFORE.get((actor, op), "admin")
        assert (o.access, o.roles) == (want, ACCESS_ROLES[want]), (actor, op)
        assert effective.access(actor, op) == want, (actor, op)
    for (actor, op), want in BEFORE.items():  # listed ops the app does not serve keep their class too
        assert effective.access(actor, op) == want, (actor, op)


def test_may_says_what_the_http_edge_says(agent_node: Node) -> None:
    effective = DEFAULT_PERMISSIONS.for_node(agent_node)
    for role in ("viewer", "user", "admin"):
        ctx = RequestContext(tenant="acme", principal="p", roles=frozenset({role}))
        for name, info in build_catalog(agent_node, DEFAULT_PERMISSIONS).items():
            for op, o in info.ops.items():
                assert may(ctx, name, op, effective) == (role in o.roles), (role, name, op)


class Notes(GenServer):
    @call(access="read")
    def list_notes(self) -> dict[str, Any]:
        return {"notes": []}

    @cast(access="write")
    def add(self, text: str) -> None:
        del text

    @call
    def purge(self) -> dict[str, Any]:
        return {}


def test_declared_access_under_the_table() -> None:
    table = PermissionTable({("notes", "add"): "admin"}).with_declared({"notes": Notes, "other": Notes})
    assert table.access("notes", "list_notes") == "read"  # declared
    assert table.access("notes", "add") == "admin"  # the table overrides the declaration
    assert table.access("other", "add") == "write"  # per name: the override is notes' only
    assert table.access("notes", "purge") == "admin"  # declares nothing, not listed: closed
    assert Notes._handlers["add"].access == "write" and Notes._handlers["purge"].access is None


def test_an_unknown_declared_access_class_fails_when_the_table_is_built() -> None:
    class Typo(GenServer):
        @call(access="raed")
        def get(self) -> dict[str, Any]:
            return {}

    with pytest.raises(ValueError, match="unknown access class 'raed'"):
        PermissionTable().with_declared({"typo": Typo})


def test_the_catalog_reads_declared_access(tmp_path: Path) -> None:
    tree = SupervisorSpec("root", children=[ActorSpec("notes", Notes)])
    node = Node(open_store("sqlite", data_dir=str(tmp_path / "data")), tree)
    ops = build_catalog(node, PermissionTable({})).get("notes")
    assert ops is not None
    assert {op: o.access for op, o in ops.ops.items()} == {
        "list_notes": "read",
        "add": "write",
        "purge": "admin",
    }


def test_the_api_tests_stand_ins_declare_what_the_real_actors_declare() -> None:
    from minihermes.agent.guardrails import Guardrails
    from minihermes.agent.llm_gateway import LLMGateway
    from minihermes.agent.tool_executor import ToolExecutor

    from .actors import StubGateway, StubGuardrails, StubTools

    for stub, real in ((StubGuardrails, Guardrails), (StubGateway, LLMGateway), (StubTools, ToolExecutor)):
        for op, handler in stub._handlers.items():
            if op in real._handlers:
                assert handler.access == real._handlers[op].access, (stub.__name__, op)
