"""The behaviors: GenServer, GenEvent and GenFSM (Workflow lives in ``_workflow``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from ._actor import Actor, call, cast, state
from ._errors import InvalidArgument, InvalidTransition

F = TypeVar("F", bound=Callable[..., Any])


class GenServer(Actor):
    """Request-reply server with durable state."""

    behavior = "GenServer"


class GenEvent(Actor):
    """An event manager. Events are casts: senders never wait for them to be handled. Every event an
    instance handles is also forwarded (as a cast) to the actors subscribed to it with ``subscribe``."""

    behavior = "GenEvent"
    forward_events: ClassVar[bool] = True
    """Forward each handled event (a cast listed in ``events``, or any cast when ``events`` is empty) to the
    subscribers, as received. An event manager that forwards its own (e.g. scrubbed) records sets False."""
    events: ClassVar[tuple[str, ...]] = ()
    subscribers: list[list[str]] = state(default_factory=list)

    @classmethod
    def _validate_class(cls) -> None:
        for h in cls._handlers.values():
            if h.kind == "call" and h.op in getattr(cls, "events", ()):
                raise TypeError(f"{cls.__name__}: event '{h.op}' must be a @cast handler")

    @call
    def subscribe(self, target: str, op: str = "") -> dict[str, Any]:
        """Forward every event to target (as op, or the event's own op when empty)."""
        if [target, op] not in self.subscribers:
            self.subscribers.append([target, op])
        return {"status": "ok", "subscribers": len(self.subscribers)}

    @call
    def unsubscribe(self, target: str) -> dict[str, Any]:
        before = len(self.subscribers)
        self.subscribers = [s for s in self.subscribers if s[0] != target]
        return {"status": "ok", "removed": before - len(self.subscribers)}


def in_states(*states: str) -> Callable[[F], F]:
    """Restrict a GenFSM handler to some states: the runtime refuses it elsewhere, state unchanged."""

    def deco(fn: F) -> F:
        fn.__minihermes_states__ = frozenset(states)  # type: ignore[attr-defined]
        return fn

    return deco


class GenFSM(Actor):
    """A finite state machine. Subclasses declare ``states``, ``initial`` and ``transitions``; the runtime
    refuses any transition not in the table with a structured ``invalid_transition`` error and leaves the
    state unchanged."""

    behavior = "GenFSM"
    states: ClassVar[tuple[str, ...]] = ()
    initial: ClassVar[str] = ""
    transitions: ClassVar[dict[str, frozenset[str] | set[str]]] = {}

    fsm_state: str = state(default="")
    transition_count: int = state(default=0)

    @classmethod
    def _validate_class(cls) -> None:
        if not cls.states:
            return
        known = set(cls.states)
        if cls.initial not in known:
            raise TypeError(f"{cls.__name__}: initial state {cls.initial!r} is not in states")
        for src, dsts in cls.transitions.items():
            bad = ({src} | set(dsts)) - known
            if bad:
                raise TypeError(f"{cls.__name__}: transitions mention unknown states {sorted(bad)}")
        for h in cls._handlers.values():
            allowed: frozenset[str] = getattr(h.fn, "__minihermes_states__", frozenset())
            if allowed - known:
                raise TypeError(f"{cls.__name__}.{h.op}: in_states names unknown states")

    def __init__(self) -> None:
        super().__init__()
        self.fsm_state = self.initial

    def transition_to(self, to: str) -> str:
        """Move to state ``to``; raises InvalidTransition (state unchanged) when the table forbids it."""
        if to not in self.states:
            raise InvalidArgument(f"unknown state '{to}' (states: {', '.join(self.states)})", field="to")
        allowed = self.transitions.get(self.fsm_state, frozenset())
        if to not in allowed:
            raise InvalidTransition(
                f"transition {self.fsm_state} -> {to} is not allowed", from_state=self.fsm_state, to=to
            )
        prev = self.fsm_state
        self.fsm_state = to
        self.transition_count += 1
        return prev

    @call
    def transition(self, to: str) -> dict[str, Any]:
        prev = self.transition_to(to)
        return {"status": "ok", "from": prev, "to": to}

    @call
    def get_state(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "state": self.fsm_state,
            "transitions": self.transition_count,
            "allowed": sorted(self.transitions.get(self.fsm_state, ())),
        }


__all__ = ["GenEvent", "GenFSM", "GenServer", "call", "cast", "in_states", "state"]
