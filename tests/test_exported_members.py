"""Each public package's ``__all__`` is exactly what the package offers (as httpx's test_exported_members):
a name made public without being listed, or listed without existing, fails here, so the public surface cannot
drift unseen. Submodules, ``from __future__`` features and typing helpers imported for annotations are not
members."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = [
    "minihermes.runtime",
    "minihermes.runtime.store",
    "minihermes.api",
    "minihermes.llm",
    "minihermes.tools",
    "minihermes.context",
    "minihermes.skills",
    "minihermes.work",
    "minihermes.mcp",
    "minihermes.cluster",
    "minihermes.agent.gateway",
]


def _foreign(value: object) -> bool:
    """Typing helpers and the like a package imports for its own annotations (not offered)."""
    if value is True or value is False:  # TYPE_CHECKING
        return True
    owner = getattr(value, "__module__", None)
    return isinstance(owner, str) and not owner.startswith("minihermes")


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_what_the_package_offers(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    for member in exported:
        assert getattr(module, member, None) is not None, (
            f"{name}.__all__ lists {member!r}, which is not there"
        )
    public = {
        member
        for member, value in vars(module).items()
        if not member.startswith("_")
        and not isinstance(value, types.ModuleType)
        and type(value).__name__ != "_Feature"  # from __future__ import annotations
        and not _foreign(value)
    }
    assert public <= set(exported), f"{name} offers {sorted(public - set(exported))} without listing them"
