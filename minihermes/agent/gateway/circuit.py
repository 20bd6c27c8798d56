"""``Circuit``: one provider's circuit breaker (closed -> open -> half_open -> closed).

- closed: calls go through; it opens after ``failure_threshold`` consecutive failures, or when more than
  ``error_rate_threshold`` of the last ``error_window`` calls failed (once ``min_samples`` were seen);
- open: calls are skipped. Each recovery ``tick`` lowers its failure count by one; at zero it is half_open;
- half_open: one trial call decides: a success closes it with a clean slate, a failure opens it again.

Its durable form is the JSON object the gateway keeps in its state (``to_dict``; the keys ``state``,
``consecutive_failures``, ``window``, ``opened_at``, ``opens``, ``last_error``). A ``Circuit`` reads and
changes that object in place (``from_dict`` wraps it, no copy), so the state the actor checkpoints is
always current and a checkpoint written before this class existed restores as it was.
"""

from __future__ import annotations

from typing import Any

from .settings import GatewaySettings

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class Circuit:
    """One provider's breaker, over its durable JSON object (see the module docstring)."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[str, Any] = {
            "state": CLOSED,
            "consecutive_failures": 0,
            "window": [],  # 1 = failure, 0 = success; the newest last
            "opened_at": None,
            "opens": 0,
            "last_error": None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Circuit:
        """The circuit whose durable form is ``data`` (used, and changed, in place)."""
        circuit = cls.__new__(cls)
        circuit._data = data
        return circuit

    def to_dict(self) -> dict[str, Any]:
        """The durable form: JSON, the object the gateway's state holds (not a copy)."""
        return self._data

    @property
    def state(self) -> str:
        return str(self._data["state"])

    @property
    def consecutive_failures(self) -> int:
        return int(self._data["consecutive_failures"])

    @property
    def opened_at(self) -> float | None:
        return self._data["opened_at"]  # type: ignore[no-any-return]

    @property
    def opens(self) -> int:
        return int(self._data["opens"])

    @property
    def last_error(self) -> str | None:
        return self._data["last_error"]  # type: ignore[no-any-return]

    def record(self, *, ok: bool, error: str | None, now: float, settings: GatewaySettings) -> str | None:
        """Apply one call's outcome; returns the new state when the circuit changed state."""
        data = self._data
        if not ok:
            data["last_error"] = error
        state = data["state"]
        if state == HALF_OPEN:
            # The trial call decides alone: a success closes with a clean slate (old failures would
            # otherwise push the error rate over the threshold again at once), a failure reopens for a
            # full recovery.
            if ok:
                data.update(state=CLOSED, consecutive_failures=0, window=[], opened_at=None)
                return CLOSED
            return self._open(now, settings)
        if state == OPEN:
            return None  # a call that started before the circuit opened; the recovery is the ticks' job
        window: list[int] = data["window"]
        window.append(0 if ok else 1)
        del window[: -settings.error_window]
        if ok:
            data["consecutive_failures"] = 0
            return None
        data["consecutive_failures"] += 1
        rate = sum(window) / len(window)
        if data["consecutive_failures"] >= settings.failure_threshold or (
            len(window) >= settings.min_samples and rate > settings.error_rate_threshold
        ):
            return self._open(now, settings)
        return None

    def _open(self, now: float, settings: GatewaySettings) -> str:
        # The failure count is what the recovery ticks count down, so an opening by error rate (with fewer
        # consecutive failures) recovers as slowly as one by consecutive failures.
        data = self._data
        data.update(
            state=OPEN,
            consecutive_failures=max(data["consecutive_failures"], settings.failure_threshold),
            opened_at=now,
            opens=data["opens"] + 1,
        )
        return OPEN

    def tick(self) -> str | None:
        """One recovery tick: an open circuit's failure count drops by one; at zero it goes half_open."""
        data = self._data
        if data["state"] != OPEN:
            return None
        data["consecutive_failures"] = max(0, data["consecutive_failures"] - 1)
        if data["consecutive_failures"] == 0:
            data["state"] = HALF_OPEN
            return HALF_OPEN
        return None

    def view(self) -> dict[str, Any]:
        """What ``get_circuit`` and ``get_stats`` show: the state, the error rate over the window, ..."""
        data = self._data
        window: list[int] = data["window"]
        return {
            "state": data["state"],
            "consecutive_failures": data["consecutive_failures"],
            "error_rate": round(sum(window) / len(window), 4) if window else 0.0,
            "samples": len(window),
            "opened_at": data["opened_at"],
            "opens": data["opens"],
            "last_error": data["last_error"],
        }
