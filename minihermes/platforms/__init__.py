"""Messaging platforms: the gateway from Telegram, signed webhooks (and, later, Slack and Discord) to the agent.

``platform_gateway`` (per tenant) keeps the registry, pairings and linked users; ``platform_adapter`` (one
virtual actor per connection) runs the inbox, the turns and the outbox. An adapter is one ``Adapter`` class in
one module and one registration (``_adapter._BUILTIN`` or ``register_adapter``). See docs/platforms.md.
"""

from ._adapter import Adapter, Connection, Inbound, RetryLater, platform_kinds, register_adapter, split_text
from .platform_adapter import PlatformAdapter
from .platform_gateway import PlatformGateway

PLATFORM_ROLES = {
    "minihermes.platform_gateway": PlatformGateway,
    "minihermes.platform_adapter": PlatformAdapter,
}
"""The package's actor roles, merged into the composition root's ``ROLES``."""

__all__ = [
    "PLATFORM_ROLES",
    "Adapter",
    "Connection",
    "Inbound",
    "PlatformAdapter",
    "PlatformGateway",
    "RetryLater",
    "platform_kinds",
    "register_adapter",
    "split_text",
]
