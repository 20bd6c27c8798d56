"""CONTRIBUTING.md's tool recipe, followed literally: its module (taken from the file itself, so the recipe
cannot drift from what works) in a package of its own, and one registration (the embedding program's
``[*TOOLSETS, WEATHER_TOOLSET]``); then a plain turn on the app's whole tree offers the model the tool, and
the model's call of it runs. No other file is touched: no toolset setting, no intent, no name anywhere."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.app import TOOLSETS, build_agent_node, default_config
from minihermes.runtime import ActorSpec, GenServer, ManualClock, Node, call
from tests.agent import scripted_turns as st
from tests.agent.conftest import ACME_USER

CONTRIBUTING = Path(__file__).resolve().parents[2] / "CONTRIBUTING.md"


def recipe_module() -> str:
    """The first Python block of CONTRIBUTING.md's "Adding a built-in tool"."""
    text = CONTRIBUTING.read_text()
    section = text.split("## Adding a built-in tool", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "CONTRIBUTING.md's tool recipe has no Python block"
    return textwrap.dedent(found.group(1))


class WeatherService(GenServer):
    """The actor the recipe's tool talks to (``requires="weather_svc"``)."""

    @call(access="read")
    def today(self, city: str) -> dict[str, Any]:
        return {"found": city == "Paris", "city": city, "sky": "sunny"}


@pytest.fixture
def weather_module(tmp_path: Path) -> Iterator[Any]:
    """File 1: the recipe's module, in a package of the embedding program's own."""
    package = tmp_path / "pkg" / "acme_weather"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "weather.py").write_text(recipe_module())
    sys.path.insert(0, str(tmp_path / "pkg"))
    try:
        yield importlib.import_module("acme_weather.weather")
    finally:
        sys.path.remove(str(tmp_path / "pkg"))
        for name in [n for n in sys.modules if n == "acme_weather" or n.startswith("acme_weather.")]:
            del sys.modules[name]


@pytest.fixture(autouse=True)
def _scripts() -> Iterator[None]:
    st.reset()
    yield
    st.reset()


async def app_node(data_dir: Path, toolsets: list[Any] | None) -> Node:
    """The app's whole tree, the LLM scripted per session (``tests/agent/scripted_turns``), the weather
    service beside it, and (file 2, the registration) the tool executor given ``toolsets``."""
    config = default_config(data_dir)
    for spec in config.tree.walk():
        if spec.name == "llm_gateway":
            spec.cls, spec.args = st.TurnGateway, {}
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
        elif spec.name == "memory":
            spec.args["semantic"] = False
        elif spec.name == "tool_executor" and toolsets is not None:
            spec.args["toolsets"] = toolsets
    config.tree.children.append(ActorSpec("weather_svc", WeatherService, per_tenant=True))
    node = build_agent_node(config, clock=ManualClock())
    await node.start()
    return node


def offered(session: str, call_index: int = 0) -> set[str]:
    return {t.name for t in st.SCRIPTS[session].requests[call_index].tools}


async def test_a_tool_added_per_contributing_is_offered_in_a_plain_turn_and_runs(tmp_path, weather_module):
    registration = [*TOOLSETS, weather_module.WEATHER_TOOLSET]  # file 2: the embedding program's line
    node = await app_node(tmp_path / "data", registration)
    try:
        st.script("w1", st.calls(("weather", {"city": "Paris"})), st.answer("Sunny in Paris."))
        reply = await node.ask(
            "agent", "chat", {"message": "what should I wear today?", "session_id": "w1"}, ctx=ACME_USER
        )
        assert reply["status"] == "ok" and reply["tool_calls"] == 1
        assert "weather" in offered("w1")  # a plain turn (no setting, no keyword) offers it
        assert "kanban_create" not in offered("w1")  # while an on-request toolset still waits to be asked for
        result = st.SCRIPTS["w1"].requests[1].messages[-1]
        assert "sunny" in str(result) and "not_found" not in str(result)  # and the model's call ran
    finally:
        await node.stop()


async def test_without_the_registration_the_tool_is_not_there(tmp_path, weather_module):
    node = await app_node(tmp_path / "data", None)
    try:
        st.script("w2", st.answer("No idea."))
        await node.ask(
            "agent", "chat", {"message": "what should I wear today?", "session_id": "w2"}, ctx=ACME_USER
        )
        assert "weather" not in offered("w2") and "calculator" in offered("w2")
    finally:
        await node.stop()
