"""An actor's ``Args`` model is checked when the app config loads: an unknown or ill-typed argument fails at
start-up with a ``ConfigError`` naming the argument and listing the known ones."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.runtime import (
    ActorArgs,
    AppConfig,
    ConfigError,
    Duration,
    GenServer,
    call,
    register_actor_type,
)


class Pinger(GenServer):
    class Args(ActorArgs):
        interval: Duration = 5.0
        targets: list[str] = []
        retries: int = 3

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.args = args

    @call
    def get_args(self) -> dict[str, Any]:
        return {"args": self.args}


class Loose(GenServer):
    """Declares no ``Args``: its args are not checked."""


register_actor_type("test.pinger", Pinger)
register_actor_type("test.loose", Loose)


def config(role: str, args: str) -> AppConfig:
    return AppConfig.from_toml(
        f"""
[[supervisor.children]]
name = "first"
role = "test.loose"

[[supervisor.children]]
name = "pinger"
role = "{role}"
args = {args}
"""
    )


def test_an_unknown_argument_fails_at_load_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        config("test.pinger", '{ interval = "2s", retrys = 5 }')
    assert e.value.field == "supervisor.children[1].args.retrys"
    assert "unknown argument of Pinger" in str(e.value)
    assert "(known: interval, targets, retries)" in str(e.value)


def test_an_ill_typed_argument_fails_at_load_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        config("test.pinger", '{ retries = "many" }')
    assert e.value.field == "supervisor.children[1].args.retries"
    assert "known: interval, targets, retries" in str(e.value)
    with pytest.raises(ConfigError, match=r"args\.targets\[1\]"):
        config("test.pinger", '{ targets = ["a", 2] }')
    with pytest.raises(ConfigError, match=r"args\.interval: .*duration"):
        config("test.pinger", '{ interval = "soon" }')


def test_good_arguments_reach_the_actor_as_written() -> None:
    cfg = config("test.pinger", '{ interval = "2s", targets = ["a"] }')
    (_, spec) = cfg.tree.walk()
    assert spec.args == {"interval": "2s", "targets": ["a"]}  # checked, not rewritten
    assert config("test.loose", "{ anything = 1 }").tree.walk()[1].args == {"anything": 1}
