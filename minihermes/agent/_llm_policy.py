"""Moved: the gateway's mechanisms are the package ``minihermes.agent.gateway`` now. These names stay
importable from here for code written against the old module."""

from .gateway import *  # noqa: F403
from .gateway import __all__ as __all__
