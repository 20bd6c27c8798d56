"""The ``turn_completed`` event: what the agent publishes when a turn ends, and who gets it.

The agent is the durable turn; what follows a turn is other actors' work. When a turn finishes (status ``ok``
or ``max_iterations``; a turn that failed, waits for approval or was stopped (``agent.cancel_turn``) publishes
nothing, so nothing is learned or remembered from it), the agent casts one ``TurnCompleted`` record to every *turn listener*: each actor type
on the node that takes the ``turn_completed`` cast (``listeners``). Memory writes the turn's episode, the skill
store counts each skill the turn was given as used or ignored (by ``tool_calls``: whether the turn followed
it) and considers the turn for learning, goals judges the
session's active goals. A record whose ``success`` is false (a failed tool call, the step limit, an answer
that contradicts its tool results, searches that found nothing, an answer saying it could not do the request)
leaves no episode and teaches no skill; one whose ``corrects_turn`` names
the previous turn retracts that turn's episode and skill. A new listener is an actor with that op in the node's config; the agent is not
edited (CONTRIBUTING.md, "Adding a turn listener").

The group is the actor *types* that declare the op, not the running instances that joined it
(``Host.join``): the listeners are per-tenant actors started on their tenant's first message, so a group of
running instances would miss the turns of a tenant whose listener has not started yet, is restarting, or runs
on another node not yet in this node's view of the directory. A cast to the type's name reaches the turn's
tenant's instance as every message does: started on demand, queued across a restart, routed in a cluster.

The casts are fire-and-forget (they never delay the reply, and one that cannot be sent is logged and
dropped) and carry the turn's request context: a listener acts as the turn's caller (tenant, principal,
roles), as the casts the agent sent before this event did. Every listener gets the same record, read-only. A
listener takes the fields it uses and ``**rest``: the record may gain fields.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict, cast

from minihermes.runtime import ActorError, Host

TURN_COMPLETED: Final = "turn_completed"
"""The event's op: an actor type that takes it is a turn listener."""


class TurnCompleted(TypedDict):
    """One finished turn, as its listeners get it."""

    turn_id: str
    session_id: str
    user_id: str
    """The turn's user: the caller's principal, or the ``user_id`` the chat was given."""
    user_message: str
    """The user's message (secrets redacted)."""
    status: str
    """``ok`` or ``max_iterations`` (the step limit ended the turn)."""
    response: str
    tool_calls: list[dict[str, Any]]
    """In order: ``{name, input, is_error, result}``, the result cut to 500 characters."""
    skill_ids: list[str]
    """The skills matched and injected into the turn's prompt."""
    success: bool
    """``status`` is ``ok``, no tool call failed, the answer is ``truthful`` and the turn did what was asked
    (not every search empty, no "I can't ..." in the answer). Nothing is remembered or learned from a turn
    that is not a success."""
    episodic: bool
    """Whether the session keeps a memory of each turn (the agent's ``episodic`` argument)."""
    truthful: bool
    """The final answer does not contradict the turn's tool results (``minihermes.context.consistency``:
    no internal wrapper, no "nothing found" over entries found, no result number no tool returned)."""
    fell_short: str
    """Why the turn is not a success (a failed tool call, the status, the contradiction, "the turn found
    nothing (...)", "the answer says it could not do the request"); "" when it is."""
    corrects_turn: str
    """The session's previous turn when this turn's message corrects it ("no, that's wrong", "actually
    it's ...", ``consistency.is_correction``): listeners retract what that turn produced (its episode, a
    skill learned from it). "" otherwise."""
    untrusted: bool
    """The turn saw untrusted content (a tool result marked untrusted: a web page, a file, an MCP result) or
    was started by one that did: what listeners derive from it (its episode, a skill learned from it) is
    quarantined until its owner or an admin confirms it."""
    untrusted_sources: list[str]
    """Where that content came from, first first: ``tool:<name>``."""


def listeners(host: Host) -> tuple[str, ...]:
    """The turn listeners on this node: the actor types that take ``turn_completed``, in name order."""
    return tuple(host.actors_taking(TURN_COMPLETED))


def publish(host: Host, targets: tuple[str, ...], record: TurnCompleted) -> None:
    """Cast the record to each listener in the current request context, without waiting: a listener that
    cannot take it now (overloaded, shutting down) is skipped with a debug log, as a lost cast would be."""
    payload = cast(dict[str, Any], record)  # one record for all: the node binds a copy of its fields
    for target in targets:
        try:
            host.send(target, TURN_COMPLETED, payload)
        except ActorError as e:
            host.log.debug("turn_completed for %s not delivered: %s", target, e.message)


__all__ = ["TURN_COMPLETED", "TurnCompleted", "listeners", "publish"]
