"""``agent_fsm``: the lifecycle of one session's agent, a virtual actor per session.

States ``idle``, ``processing``, ``tool_executing``, ``responding``; the table below is the only definition
of which moves are valid. The agent loop drives it; an invalid move is an ``invalid_transition`` error and
the state is unchanged, which catches loop bugs before they corrupt anything. Operators read ``get_state``
to see what every agent is doing.

Durable at rest: the state is checkpointed when a turn ends (``idle``), on ``reset`` and when the actor
stops, not on every move: the agent's own checkpoint is the record a turn resumes from, and a resumed turn
resets this FSM before it drives it again. Moves in between are in memory, so a turn's 9 moves cost one
write instead of nine.
"""

from __future__ import annotations

from typing import Any, ClassVar

from minihermes.runtime import GenFSM, call, state

STATES = ("idle", "processing", "tool_executing", "responding")
TRANSITIONS: dict[str, frozenset[str]] = {
    "idle": frozenset({"processing", "tool_executing"}),
    "processing": frozenset({"tool_executing", "responding", "idle"}),
    "tool_executing": frozenset({"processing", "idle"}),
    "responding": frozenset({"idle"}),
}
HISTORY = 20


class AgentFSM(GenFSM):
    """One session's lifecycle: ``transition(to)``, ``get_state()``, ``reset()``."""

    checkpoint_interval: ClassVar[int] = 1_000_000
    """Saved when a move reaches idle (``checkpoint_after``), on reset and on stop; see the module docstring."""

    states: ClassVar[tuple[str, ...]] = STATES
    initial: ClassVar[str] = "idle"
    transitions: ClassVar[dict[str, frozenset[str] | set[str]]] = {k: v for k, v in TRANSITIONS.items()}

    entered_at: float = state(default=0.0)
    history: list[list[Any]] = state(default_factory=list)
    """The last moves as [from, to, at], oldest first."""

    @call(access="admin")
    def transition(self, to: str, session_id: str = "") -> dict[str, Any]:
        """Move to ``to``; ``invalid_transition`` (state unchanged) when the table forbids it."""
        prev = self.transition_to(to)
        self._record(prev, to)
        if to == "idle":
            self.host.checkpoint_after()
        return {"status": "ok", "from": prev, "to": to, "session_id": self._session(session_id)}

    @call(access="read")
    def get_state(self, session_id: str = "") -> dict[str, Any]:
        """The current state, the moves allowed from it, and the recent moves."""
        return {
            "status": "ok",
            "session_id": self._session(session_id),
            "state": self.fsm_state,
            "transitions": self.transition_count,
            "allowed": sorted(self.transitions.get(self.fsm_state, ())),
            "entered_at": self.entered_at or None,
            "history": [{"from": f, "to": t, "at": at} for f, t, at in self.history],
        }

    @call(access="admin")
    def reset(self, session_id: str = "", reason: str = "") -> dict[str, Any]:
        """Back to ``idle`` from any state (recovery after an interrupted turn)."""
        prev = self.fsm_state
        if prev != "idle":
            self.fsm_state = "idle"
            self.transition_count += 1
            self._record(prev, "idle")
            self.host.checkpoint_after()
        return {"status": "ok", "from": prev, "to": "idle", "reason": reason}

    def _record(self, prev: str, to: str) -> None:
        now = self.host.now()
        self.entered_at = now
        self.history = [*self.history[-(HISTORY - 1) :], [prev, to, now]]

    def _session(self, session_id: str) -> str:
        return session_id or self.actor_id.partition("/")[2]


__all__ = ["STATES", "TRANSITIONS", "AgentFSM"]
