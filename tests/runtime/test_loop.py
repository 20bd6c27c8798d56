"""The event loop choice of ``serve`` and ``chat`` (MINIHERMES_EVENT_LOOP)."""

from __future__ import annotations

import asyncio

import pytest

from minihermes.runtime import ConfigError
from minihermes.runtime._loop import loop_factory, loop_name, run


async def _which() -> str:
    return loop_name()


def test_asyncio_is_chosen_by_name():
    assert loop_factory("asyncio") is None
    assert run(_which(), choice="asyncio") == "asyncio"


def test_auto_prefers_uvloop_when_installed():
    try:
        import uvloop  # noqa: F401
    except ImportError:
        assert loop_factory("auto") is None
        with pytest.raises(ConfigError):
            loop_factory("uvloop")
        return
    assert run(_which(), choice="auto") == "uvloop"
    assert run(_which(), choice="uvloop") == "uvloop"


def test_the_environment_variable_chooses_and_a_bad_value_is_a_config_error(monkeypatch):
    monkeypatch.setenv("MINIHERMES_EVENT_LOOP", "asyncio")
    assert run(_which()) == "asyncio"
    monkeypatch.setenv("MINIHERMES_EVENT_LOOP", "tokio")
    with pytest.raises(ConfigError, match="MINIHERMES_EVENT_LOOP"):
        loop_factory()


def test_a_running_asyncio_loop_is_named():
    assert asyncio.run(_which()) == "asyncio"


def test_gc_tuning_freezes_start_up_objects_and_can_be_left_alone(monkeypatch):
    import gc

    from minihermes.runtime._loop import GC_THRESHOLDS, tune_gc

    before = gc.get_threshold()
    try:
        monkeypatch.setenv("MINIHERMES_GC", "default")
        assert tune_gc() == "default" and gc.get_threshold() == before
        monkeypatch.delenv("MINIHERMES_GC")
        assert "thresholds" in tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
