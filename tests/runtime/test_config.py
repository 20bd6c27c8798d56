"""App config parsing: the documented format, and errors that name the field."""

from __future__ import annotations

import pytest

from minihermes.runtime import AppConfig, ConfigError, register_actor_type

from .actors import Counter, Door, Steps

register_actor_type("test.counter", Counter)
register_actor_type("test.door", Door)
register_actor_type("test.steps", Steps)

GOOD = """
[node]
id = "n1"
[retention]
interval = "30m"
[[retention.rules]]
kind = "events"
max_age = "90d"
[service_links.weather]
base_url = "https://api.example.test/v1"
credential_env = "WEATHER_KEY"
[supervisor]
strategy = "one_for_one"
max_restarts = 10
max_restart_window_seconds = 60
[[supervisor.children]]
name = "agent"
role = "test.counter"
behavior_kind = "GenServer"
args = { role = "agent", system_prompt = "hi" }
facets = [
  { type = "virtual_actor", priority = 100, config = { idle_timeout = "10m", activation_strategy = "eager", key_field = "session_id" } },
  { type = "durability", priority = 90, config = { checkpoint_interval = 3 } },
]
[[supervisor.children]]
name = "fsm"
role = "test.door"
behavior_kind = "GenFSM"
facets = [{ type = "tenancy", config = { per_tenant = true } }]
[[supervisor.children]]
name = "workers"
restart = "permanent"
[supervisor.children.supervisor]
strategy = "rest_for_one"
[[supervisor.children.supervisor.children]]
name = "wf"
role = "tests.runtime.actors:Steps"
behavior_kind = "Workflow"
"""


def test_good_config_builds_the_tree():
    cfg = AppConfig.from_toml(GOOD)
    agent, fsm, workers = cfg.tree.children
    assert agent.virtual and agent.key_field == "session_id" and agent.idle_timeout == 600
    assert agent.checkpoint_interval == 3 and agent.args["system_prompt"] == "hi"
    assert fsm.per_tenant and fsm.cls is Door
    assert workers.strategy == "rest_for_one" and workers.children[0].cls is Steps
    assert cfg.node_options.node_id == "n1" and cfg.node_options.retention_interval == 1800
    assert cfg.node_options.retention[0].max_age == 90 * 86400
    assert cfg.links["weather"].base_url == "https://api.example.test/v1/"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        (('strategy = "one_for_one"', 'strategy = "one_for_some"'), "supervisor.strategy"),
        (("max_restarts = 10", "max_restarts = -1"), "supervisor.max_restarts"),
        (('role = "test.door"', 'role = "test.dor"'), "supervisor.children[1].role"),
        (('behavior_kind = "GenFSM"', 'behavior_kind = "Workflow"'), "supervisor.children[1].behavior_kind"),
        (("checkpoint_interval = 3", "checkpoint_interval = 0"), "supervisor.children[0].facets[1].config"),
        (('idle_timeout = "10m"', 'idle_timeout = "soon"'), "supervisor.children[0].facets[0].config"),
        (('name = "fsm"', 'name = "agent"'), "supervisor.children[1].name"),
        (('kind = "events"', 'kind = "everything"'), "retention.rules[0].kind"),
        (
            ('base_url = "https://api.example.test/v1"', 'base_url = "ftp://x"'),
            "service_links.weather.base_url",
        ),
        (('id = "n1"', 'id = "n1"\nbogus = 1'), "node.bogus"),
        (
            ('role = "tests.runtime.actors:Steps"', 'role = "tests.runtime.actors:Nope"'),
            "supervisor.children[2].supervisor.children[0].role",
        ),
    ],
)
def test_bad_config_names_the_field(patch, field):
    old, new = patch
    assert old in GOOD
    with pytest.raises(ConfigError) as ei:
        AppConfig.from_toml(GOOD.replace(old, new, 1))
    assert ei.value.field == field, str(ei.value)
    assert field in str(ei.value)


def test_unknown_role_lists_known_and_suggests():
    with pytest.raises(ConfigError) as ei:
        AppConfig.from_toml(GOOD.replace('role = "test.door"', 'role = "test.dor"'))
    assert "did you mean 'test.door'" in str(ei.value)
    with pytest.raises(ConfigError, match="invalid TOML"):
        AppConfig.from_toml("[supervisor\n")


def test_demo_config_is_valid():
    from minihermes.apps.demo import DEMO_CONFIG

    cfg = AppConfig.from_toml(DEMO_CONFIG)
    assert {s.name for s in cfg.tree.walk()} == {"counter", "notebook", "lifecycle", "heartbeat", "pipeline"}


def test_node_options_follow_the_model_and_tenant_share_is_configurable():
    cfg = AppConfig.from_toml(GOOD.replace('id = "n1"', 'id = "n1"\ntenant_max_share = 0.25'))
    assert cfg.node_options.tenant_max_share == 0.25
    cfg.model.node.max_inflight = 123  # edits after loading take effect (as --data-dir does)
    assert cfg.node_options.max_inflight == 123
    with pytest.raises(ConfigError) as ei:
        AppConfig.from_toml(GOOD.replace('id = "n1"', 'id = "n1"\ntenant_max_share = 1.5'))
    assert ei.value.field == "node.tenant_max_share"


def test_inline_calls_is_configurable_and_a_bad_value_names_the_field():
    assert AppConfig.from_toml(GOOD).node_options.inline_calls is True
    cfg = AppConfig.from_toml(GOOD.replace('id = "n1"', 'id = "n1"\ninline_calls = false'))
    assert cfg.node_options.inline_calls is False
    for bad in ('"maybe"', "2", "[]"):
        with pytest.raises(ConfigError) as ei:
            AppConfig.from_toml(GOOD.replace('id = "n1"', f'id = "n1"\ninline_calls = {bad}'))
        assert ei.value.field == "node.inline_calls"
