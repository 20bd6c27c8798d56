"""``RequestContext.stamped``: the context with a provenance, equal to ``replace``'s, reused while the same
context is stamped the same way, never handed to another context."""

from __future__ import annotations

from dataclasses import replace

from minihermes.runtime import RequestContext


def test_stamped_equals_replace_and_is_reused_for_the_same_context() -> None:
    alice = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
    bob = RequestContext(tenant="other", principal="bob", roles=frozenset({"user"}))
    first = alice.stamped("agent", False)
    assert first == replace(alice, provenance="agent", untrusted=False)
    assert alice.stamped("agent", False) is first  # the turn's next tool call: no new copy
    tainted = alice.stamped("tool:web_fetch", True)
    assert tainted == replace(alice, provenance="tool:web_fetch", untrusted=True)
    assert alice.stamped("agent", False) == first
    other = bob.stamped("agent", False)
    assert other.tenant == "other" and other.principal == "bob" and other.provenance == "agent"
    assert alice.stamped("agent", False).principal == "alice"  # never bob's copy
    assert first.stamped("agent", False) is first  # stamped already: itself
