"""The node's side of a cluster fabric (``NodePort``), fabrics by name, and the runtime's import direction."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest

import minihermes
from minihermes.runtime import (
    ActorCrashed,
    ActorNotFound,
    ActorSpec,
    AppConfig,
    Cell,
    ClusterModel,
    Node,
    NodePort,
    RequestContext,
    build_node,
    fabric_names,
    get_fabric,
    open_fabric,
    register_fabric,
)
from minihermes.runtime import _fabric as fabric_module

from .actors import GATES, Counter, Slow
from .conftest import tree, until

A = RequestContext(tenant="acme")
PACKAGE = Path(minihermes.__file__).parent
ABOVE_RUNTIME = ("agent", "cluster", "api", "cli", "work", "skills", "context", "mcp", "tools", "llm")


# -- fabrics by name -----------------------------------------------------------------------------------------


class FakeFabric:
    """Records the ``[cluster]`` section it was built from; never started here."""

    def __init__(self, model: ClusterModel) -> None:
        self.model = model

    @classmethod
    def build(cls, model: ClusterModel) -> FakeFabric:
        return cls(model)


@pytest.fixture
def fabrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test do not outlive it."""
    monkeypatch.setattr(fabric_module, "_fabrics", dict(fabric_module._fabrics))


def test_an_unknown_fabric_lists_the_known_ones_and_suggests(fabrics: None) -> None:
    assert "nats" in fabric_names()
    with pytest.raises(ValueError, match="Did you mean 'nats'") as ei:
        get_fabric("nast")
    assert "Known fabrics: nats" in str(ei.value)
    with pytest.raises(ValueError, match="already registered"):
        register_fabric("nats", f"{__name__}:FakeFabric.build")
    with pytest.raises(ValueError, match="non-empty"):
        register_fabric("", f"{__name__}:FakeFabric.build")


def test_a_fabric_registered_by_lazy_name_is_built_from_the_cluster_section(fabrics: None) -> None:
    register_fabric("fake", f"{__name__}:FakeFabric.build")
    assert "fake" in fabric_names()
    model = ClusterModel(enabled=True, fabric="fake", name="c1")
    fabric = open_fabric("fake", model)
    assert isinstance(fabric, FakeFabric) and fabric.model is model
    assert not isinstance(fabric_module._fabrics["fake"], str)  # resolved once, then kept

    cfg = AppConfig.from_dict({"cluster": {"enabled": True, "fabric": "fake"}})
    node = build_node(cfg)
    assert isinstance(node.fabric, FakeFabric) and node.fabric.model.fabric == "fake"
    cfg = AppConfig.from_dict({"cluster": {"enabled": True, "fabric": "fakee"}})
    with pytest.raises(ValueError, match="Did you mean 'fake'"):
        build_node(cfg)
    assert build_node(AppConfig.from_dict({})).fabric is None


def test_the_built_in_fabric_is_the_nats_cluster() -> None:
    from minihermes.cluster import Cluster

    assert get_fabric("nats") == Cluster.from_model
    assert ClusterModel().fabric == "nats"


# -- the port ------------------------------------------------------------------------------------------------


def port_members() -> set[str]:
    names = set(NodePort.__annotations__)
    names.update(n for n, v in vars(NodePort).items() if not n.startswith("_") and callable(v))
    names.update(n for n, v in vars(NodePort).items() if isinstance(v, property))
    return names


def test_node_implements_its_port_with_public_members() -> None:
    members = port_members()
    assert {
        "activate_here",
        "is_active_here",
        "lease_key",
        "deliver_system",
        "evict_here",
        "accepting",
    } <= members
    for name in members:
        assert not name.startswith("_")
        if name in NodePort.__annotations__:
            continue  # attributes set in Node.__init__ (checked on a node below)
        mine, declared = getattr(Node, name), getattr(NodePort, name)
        assert inspect.iscoroutinefunction(mine) == inspect.iscoroutinefunction(declared), name


async def test_evict_here_stops_the_actor_and_fails_its_queued_asks(make_node: Any) -> None:
    GATES["gate"] = asyncio.Event()
    GATES["entered"] = []
    node = await make_node(
        tree(ActorSpec("nb", Counter, virtual=True), ActorSpec("slow", Slow, per_tenant=True)),
        inline_calls=False,
    )
    for name in NodePort.__annotations__:
        assert hasattr(node, name), name
    assert node.accepting

    assert await node.ask("nb/s1", "add", {"amount": 2}, ctx=A) == {"count": 2}
    ck = node.lease_key("nb/s1", None, A)
    assert ck is not None and node.is_active_here(ck)
    assert node.members("svc:counter", A.scope) == ["nb/s1"]
    node.evict_here(ck, "lease lost")
    assert not node.is_active_here(ck)
    await until(lambda: _true(node.members("svc:counter", A.scope) == []))  # it exited: out of its groups
    node.evict_here(ck, "lease lost")  # nothing there: no-op
    assert await node.ask("nb/s1", "get", ctx=A) == {"count": 2, "init": ["nb/s1", {}]}  # active again

    running = asyncio.ensure_future(node.ask("slow", "work", {"n": 1}, ctx=A))
    await until(lambda: _true(GATES["entered"] == [1]))
    queued = asyncio.ensure_future(node.ask("slow", "work", {"n": 2}, ctx=A))
    slow = node.lease_key("slow", None, A)
    assert slow is not None
    await until(lambda: _true(len(node.cells("slow")[0].mailbox) == 1))
    node.evict_here(slow, "lease lost")
    with pytest.raises(ActorNotFound, match="lease lost"):
        await queued
    with pytest.raises(ActorCrashed, match="lease lost"):  # the running ask dies with its instance
        await running
    GATES["gate"].set()


async def test_deliver_system_never_raises(make_node: Any) -> None:
    node = await make_node(tree(ActorSpec("nb", Counter, virtual=True)))
    node.deliver_system("nope", "add", {}, A)  # no such actor: dropped, counted
    node.deliver_system("nb/s1", "bump", {}, A)
    assert (await node.ask("nb/s1", "get", ctx=A))["count"] == 1
    assert node.metrics.counter("system_messages_dropped_total") == 1


async def test_observers_see_each_instance_start_and_exit(make_node: Any) -> None:
    node = await make_node(tree(ActorSpec("nb", Counter, virtual=True)))
    seen: list[tuple[str, str]] = []

    def observe(cell: Cell, event: str) -> None:
        seen.append((cell.address, event))

    node.observe_cells(observe)
    await node.ask("nb/s1", "add", ctx=A)
    assert seen == [("nb/s1", "start")]
    ck = node.lease_key("nb/s1", None, A)
    assert ck is not None
    node.evict_here(ck, "lease lost")
    await until(lambda: _true(seen[-1:] == [("nb/s1", "exit")]))


async def _true(value: bool) -> bool:
    return value


# -- import direction ----------------------------------------------------------------------------------------


def imports(path: Path) -> list[str]:
    """Every module a file imports (top-level, lazy and TYPE_CHECKING alike), relative ones resolved."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.append(base)
            out.extend(f"{base}.{a.name}" for a in node.names)
    return out


def test_the_runtime_imports_nothing_above_it() -> None:
    bad = [
        f"{p.relative_to(PACKAGE)}: {m}"
        for p in sorted((PACKAGE / "runtime").rglob("*.py"))
        for m in imports(p)
        if m.split(".")[:2] in (["minihermes", up] for up in ABOVE_RUNTIME)
    ]
    assert bad == []


def test_the_cluster_uses_only_the_runtimes_public_names() -> None:
    bad = []
    for p in sorted((PACKAGE / "cluster").rglob("*.py")):
        bad += [f"{p.name}: {m}" for m in imports(p) if m.startswith("minihermes.runtime._")]
        tree_ = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree_):
            # node._x or self.node._x: a private member of the runtime's node
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and (
                    (isinstance(node.value, ast.Name) and node.value.id in ("node", "n"))
                    or (isinstance(node.value, ast.Attribute) and node.value.attr == "node")
                )
            ):
                bad.append(f"{p.name}:{node.lineno}: node.{node.attr}")
    assert bad == []
