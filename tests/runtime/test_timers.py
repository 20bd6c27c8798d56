"""send_after timers and durable reminders."""

from __future__ import annotations

from minihermes.runtime import ActorSpec, ManualClock

from .actors import Recorder
from .conftest import tree


async def test_send_after_fires_and_can_be_cancelled(make_node, clock: ManualClock):
    node = await make_node(tree(ActorSpec("rec", Recorder)))
    await node.ask("rec", "timer", {"delay": 10, "value": "a"})
    tid = await node.ask("rec", "timer", {"delay": 20, "value": "b"})
    await clock.advance(9)
    assert await node.ask("rec", "get") == []
    await clock.advance(2)
    assert await node.ask("rec", "get") == [["note", "a"]]
    assert await node.ask("rec", "cancel", {"timer_id": tid}) is True
    await clock.advance(30)
    assert await node.ask("rec", "get") == [["note", "a"]]
    assert await node.ask("rec", "cancel", {"timer_id": tid}) is False


async def test_timers_die_with_the_instance(make_node, clock: ManualClock):
    import pytest

    from minihermes.runtime import ActorCrashed

    node = await make_node(tree(ActorSpec("rec", Recorder)))
    await node.ask("rec", "timer", {"delay": 10, "value": "a"})
    with pytest.raises(ActorCrashed):
        await node.ask("rec", "crash")
    await clock.advance(20)
    assert await node.ask("rec", "get") == []


async def test_daily_reminder_survives_a_process_restart(make_node, clock: ManualClock, tmp_path):
    node = await make_node(tree(ActorSpec("rec", Recorder)))
    await node.ask("rec", "remind", {"name": "daily", "every": 86400, "value": "tick"})
    await clock.advance(86400)
    assert await node.ask("rec", "get") == [["note", "tick"]]
    await node.stop()
    # a day and a half of downtime: missed fires collapse into one on start, then the schedule goes on
    await clock.advance(86400 * 1.5)
    node2 = await make_node(tree(ActorSpec("rec", Recorder)))
    await clock.advance(0)
    assert await node2.ask("rec", "get") == [["note", "tick"], ["note", "tick"]]
    await clock.advance(86400)
    assert len(await node2.ask("rec", "get")) == 3


async def test_one_shot_reminder(make_node, clock: ManualClock):
    node = await make_node(tree(ActorSpec("rec", Recorder)))
    await node.ask("rec", "remind", {"name": "once", "at": clock.time() + 100, "value": "x"})
    await clock.advance(99)
    assert await node.ask("rec", "get") == []
    await clock.advance(1)
    await clock.advance(1000)
    assert await node.ask("rec", "get") == [["note", "x"]]
