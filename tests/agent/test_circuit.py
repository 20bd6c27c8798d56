"""``Circuit``, the gateway's breaker per provider, on its own: opening, recovery on the clock, closing, and
its durable form (the JSON object the gateway's state holds, unchanged from the dict it used to be)."""

from __future__ import annotations

import json
from typing import Any

from minihermes.agent.gateway import CLOSED, HALF_OPEN, OPEN, Circuit, GatewaySettings
from minihermes.runtime import ManualClock

SETTINGS = GatewaySettings(failure_threshold=3, tick_interval=10.0, error_window=10, min_samples=5)


def fail(circuit: Circuit, clock: ManualClock, error: str = "unavailable") -> str | None:
    return circuit.record(ok=False, error=error, now=clock.time(), settings=SETTINGS)


def succeed(circuit: Circuit, clock: ManualClock) -> str | None:
    return circuit.record(ok=True, error=None, now=clock.time(), settings=SETTINGS)


def tick_every(clock: ManualClock, circuit: Circuit, changes: list[str | None]) -> None:
    """The gateway's recovery timer: a tick every ``tick_interval`` seconds of the clock."""

    def fire() -> None:
        changes.append(circuit.tick())
        clock.call_later(SETTINGS.tick_interval, fire)

    clock.call_later(SETTINGS.tick_interval, fire)


async def test_opens_after_n_failures_goes_half_open_after_the_cool_down_and_closes_on_success() -> None:
    clock = ManualClock()
    circuit = Circuit()
    assert [succeed(circuit, clock) for _ in range(5)] == [None] * 5
    assert fail(circuit, clock) is None and fail(circuit, clock) is None
    assert succeed(circuit, clock) is None  # a success resets the consecutive count
    assert [fail(circuit, clock) for _ in range(3)] == [None, None, OPEN]
    opened = clock.time()
    assert circuit.state == OPEN and circuit.opened_at == opened and circuit.opens == 1
    assert succeed(circuit, clock) is None and circuit.state == OPEN  # a late answer does not close it

    changes: list[str | None] = []
    tick_every(clock, circuit, changes)
    await clock.advance(SETTINGS.tick_interval * (SETTINGS.failure_threshold - 1))
    assert circuit.state == OPEN and circuit.consecutive_failures == 1 and changes == [None, None]
    await clock.advance(SETTINGS.tick_interval)
    assert circuit.state == HALF_OPEN and changes[-1] == HALF_OPEN

    assert succeed(circuit, clock) == CLOSED
    view = circuit.view()
    assert view["state"] == CLOSED and view["samples"] == 0 and view["error_rate"] == 0.0
    assert view["opens"] == 1 and view["last_error"] == "unavailable" and view["opened_at"] is None


async def test_a_failed_trial_reopens_for_a_full_recovery() -> None:
    clock = ManualClock()
    circuit = Circuit()
    for _ in range(3):
        fail(circuit, clock)
    for _ in range(3):
        circuit.tick()
    assert circuit.state == HALF_OPEN
    await clock.advance(5)
    assert fail(circuit, clock, "timeout") == OPEN
    assert circuit.opens == 2 and circuit.opened_at == clock.time() and circuit.last_error == "timeout"
    assert circuit.consecutive_failures == SETTINGS.failure_threshold


def test_opens_on_the_error_rate_over_its_window() -> None:
    clock = ManualClock()
    circuit = Circuit()
    changes = [
        f(circuit, clock) for f in (fail, succeed, fail, succeed, succeed, fail, fail)
    ]  # 4 of 7 failed, never 3 in a row
    assert changes[-1] == OPEN and changes[:-1] == [None] * 6
    # Opened by rate, it still needs the full count of ticks to recover.
    assert circuit.consecutive_failures == SETTINGS.failure_threshold


OLD_SHAPE = {"state", "consecutive_failures", "window", "opened_at", "opens", "last_error"}


def test_the_durable_form_round_trips_and_keeps_the_shape_saved_before() -> None:
    clock = ManualClock()
    circuit = Circuit()
    assert set(circuit.to_dict()) == OLD_SHAPE
    for step in (fail, succeed, fail, fail):
        step(circuit, clock)
    saved = json.loads(json.dumps(circuit.to_dict()))  # what a checkpoint holds
    restored = Circuit.from_dict(saved)
    assert restored.view() == circuit.view() and set(saved) == OLD_SHAPE
    # The restored one goes on exactly as the original would.
    assert fail(restored, clock) == fail(circuit, clock) == OPEN
    assert restored.to_dict() == circuit.to_dict()

    # A state written by the code before ``Circuit`` (a plain dict) restores and moves on.
    old: dict[str, Any] = {
        "state": "open",
        "consecutive_failures": 1,
        "window": [1, 1, 1],
        "opened_at": 1_800_000_000.0,
        "opens": 4,
        "last_error": "rate_limited",
    }
    assert Circuit.from_dict(old).tick() == HALF_OPEN
    assert old["state"] == "half_open"  # changed in place: the actor's state is the circuit's storage
