"""MiniHermes: a runtime for self-improving AI agents as trees of supervised, durable actors.

``minihermes.runtime`` is the actor runtime; ``MiniHermes`` embeds a node running the agent in a program.
"""

from typing import TYPE_CHECKING, Any

__all__ = ["MiniHermes"]

if TYPE_CHECKING:
    from .embed import MiniHermes


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the runtime alone does not load the agent application.
    if name == "MiniHermes":
        from .embed import MiniHermes

        return MiniHermes
    raise AttributeError(name)
