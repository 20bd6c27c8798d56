"""CLI fixtures: an embedded node with only the agent's core services (so subsystems are absent), a captured
console, scripted terminal input, and a node with stand-in subsystem actors behind the HTTP API."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from minihermes.api import create_app
from minihermes.app import AGENT_CONFIG
from minihermes.cli._backend import Embedded, Remote
from minihermes.embed import MiniHermes
from minihermes.runtime import (
    ActorSpec,
    AppConfig,
    GenServer,
    InvalidArgument,
    Node,
    NotFound,
    SupervisorSpec,
    call,
    state,
)
from minihermes.runtime.store import open_store

_CORE = (
    "audit_event",
    "session_manager",
    "memory",
    "llm_gateway",
    "tool_executor",
    "guardrails",
    "agent_fsm",
    "agent",
)


def core_config() -> AppConfig:
    """The agent app without the optional subsystems (skills, goals, kanban, cron, MCP)."""
    model = AppConfig.from_toml(AGENT_CONFIG, "<agent>").model
    model.supervisor.children = [c for c in model.supervisor.children if c.name in _CORE]
    for child in model.supervisor.children:  # one owner's machine: providers may be on loopback
        if child.name == "llm_gateway":
            child.args["allowed_egress"] = ["*"]
    return AppConfig(model, "<agent core>")


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Embedded]:
    async with MiniHermes(data_dir=tmp_path / "data", config=core_config()) as mh:
        yield Embedded(mh)


class Captured:
    def __init__(self) -> None:
        self.buffer = io.StringIO()
        self.console = Console(file=self.buffer, width=200, color_system=None, force_terminal=False)

    @property
    def text(self) -> str:
        return self.buffer.getvalue()


@pytest.fixture
def captured() -> Captured:
    return Captured()


def lines(*items: str) -> Callable[[str], Any]:
    """A ``read_line`` that answers with ``items`` in order, then end of input."""
    pending = list(items)

    async def read(prompt: str) -> str:
        if not pending:
            raise EOFError
        return pending.pop(0)

    return read


# -- stand-ins for subsystems built elsewhere (their op names and arguments as the CLI sends them) -----------


class FakeKanban(GenServer):
    """The op names and arguments of ``minihermes.work.kanban.Kanban``."""

    tasks: dict[str, dict[str, Any]] = state(default_factory=dict)

    @call
    def list(self, status: str = "") -> dict[str, Any]:
        rows = [t for t in self.tasks.values() if not status or t["status"] == status]
        return {"status": "ok", "tasks": rows, "count": len(rows)}

    @call
    def create(self, title: str, body: str = "", assignee: str = "") -> dict[str, Any]:
        task_id = f"t{len(self.tasks) + 1}"
        self.tasks[task_id] = {
            "task_id": task_id,
            "title": title,
            "body": body,
            "assignee": assignee,
            "status": "todo",
        }
        return {"status": "ok", "task_id": task_id}

    @call
    def move(self, task_id: str, status: str) -> dict[str, Any]:
        if task_id not in self.tasks:
            raise NotFound(f"no task {task_id}", field="task_id")
        self.tasks[task_id]["status"] = status
        return {"status": "ok", "task_id": task_id, "to": status}

    @call
    def show(self, task_id: str) -> dict[str, Any]:
        if task_id not in self.tasks:
            raise NotFound(f"no task {task_id}", field="task_id")
        return {"status": "ok", "task": self.tasks[task_id]}


class FakeSkills(GenServer):
    docs: dict[str, str] = state(default_factory=dict)

    @call
    def import_skills(
        self, path: str = "", documents: list[str] | None = None, scope: str = "tenant"
    ) -> dict[str, Any]:
        out = []
        for text in documents or []:
            if not text.startswith("---"):
                raise InvalidArgument("not a SKILL.md document", field="documents")
            name = text.split("name:", 1)[1].split("\n", 1)[0].strip()
            self.docs[name] = text
            out.append({"skill_id": f"sk-{name}", "name": name, "version": 1, "status": "active"})
        return {"status": "ok", "imported": out, "count": len(out)}

    @call
    def export_skills(self, path: str = "", status: str = "") -> dict[str, Any]:
        docs = [{"name": n, "skill_md": t} for n, t in sorted(self.docs.items())]
        return {"status": "ok", "documents": docs, "count": len(docs)}

    @call
    def list_skills(self, status: str = "", limit: int = 1000) -> dict[str, Any]:
        rows = [{"skill_id": f"sk-{n}", "name": n, "status": "active"} for n in sorted(self.docs)]
        return {"status": "ok", "skills": rows, "count": len(rows)}


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[Remote]:
    """The HTTP API (in-process ASGI) of a node with the stand-in ``kanban`` and ``skill_store`` actors."""
    tree = SupervisorSpec(
        name="root",
        children=[
            ActorSpec("kanban", FakeKanban, per_tenant=True),
            ActorSpec("skill_store", FakeSkills, per_tenant=True),
        ],
    )
    node = Node(open_store("sqlite", data_dir=str(tmp_path / "remote")), tree)
    await node.start()
    transport = httpx.ASGITransport(app=create_app(node))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield Remote(client, "http://127.0.0.1")
    await node.stop()
