"""The adapter contract: one class per messaging platform, registered by name.

An adapter speaks one platform's wire protocol and nothing else. Its actor (``platform_adapter``) gives it a
``Connection``: the registration (``base_url``, ``settings``), the secret resolved from the tenant's vault, and
``accept``, which returns once a batch of inbound messages is durably in the connection's inbox. The adapter
acknowledges to the platform (a polling offset, an HTTP 200) only after ``accept`` returned, and sends what
the outbox hands it with ``send``; a platform's "slow down" is a ``RetryLater``.

Adding a platform is this class in one module and one line in ``_BUILTIN`` (or ``register_adapter``).
"""

from __future__ import annotations

import difflib
import importlib
import logging
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol

from pydantic import SecretStr

from minihermes.runtime import InvalidArgument


@dataclass(frozen=True)
class Inbound:
    """One message from a platform, in the platform-neutral shape the inbox keeps."""

    message_id: str
    """The platform's id of this delivery (Telegram's update_id, a webhook's ``id``): the dedup key."""
    chat: str
    user: str
    text: str
    is_group: bool = False
    addressed: bool = True
    """In a group: the bot was mentioned or replied to. Unaddressed group messages run no turn."""
    quoted: str = ""
    """Forwarded or quoted content: untrusted data, never instructions."""
    display_name: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Inbound:
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in fields})


class RetryLater(Exception):
    """The platform asked us to wait (HTTP 429, ``retry_after``) before sending again."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"retry after {retry_after:g}s")
        self.retry_after = retry_after


class Connection(Protocol):
    """What an adapter gets from its actor."""

    name: str
    base_url: str
    settings: dict[str, Any]
    secret: SecretStr
    log: logging.Logger

    async def accept(self, messages: list[Inbound]) -> None:
        """Returns once every message is durably in the inbox (a redelivered one is dropped there)."""


class Adapter(ABC):
    """One platform's client. Facts as class attributes; ``receive_forever`` and ``send`` do the I/O."""

    kind: ClassVar[str]
    max_length: ClassVar[int] = 4000
    """The longest message the platform takes: replies are split below it."""
    hints: ClassVar[str] = ""
    """What the prompt is told about the platform (formatting it renders, message length)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Check the connection (a bad token fails here, with the platform's error)."""

    @abstractmethod
    async def receive_forever(self) -> None:
        """Take inbound messages until cancelled: ``accept`` them, then acknowledge them to the platform."""

    @abstractmethod
    async def send(self, chat: str, text: str, key: str) -> None:
        """Deliver one part. ``key`` names it (turn and part) for platforms that deduplicate."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and sockets."""


_BUILTIN: dict[str, str] = {
    "telegram": "minihermes.platforms.telegram:TelegramAdapter",
    "webhook": "minihermes.platforms.webhook:WebhookAdapter",
}
PLANNED = ("slack", "discord")
"""Platforms the public contract names whose adapters are not built yet (docs/platforms.md)."""
_REGISTRY: dict[str, type[Adapter] | str] = dict(_BUILTIN)


def register_adapter(kind: str, cls: type[Adapter], *, replace: bool = False) -> None:
    """Make ``register_platform(platform=kind)`` use ``cls``."""
    if kind in _REGISTRY and not replace:
        raise ValueError(f"platform kind {kind!r} is already registered")
    _REGISTRY[kind] = cls


def platform_kinds() -> list[str]:
    return sorted(_REGISTRY)


def check_kind(kind: str) -> str:
    if kind in _REGISTRY:
        return kind
    if kind in PLANNED:
        raise InvalidArgument(
            f"platform {kind!r} has no adapter yet (built: {', '.join(platform_kinds())})", field="platform"
        )
    hint = difflib.get_close_matches(kind, list(_REGISTRY), n=1)
    extra = f"; did you mean {hint[0]!r}?" if hint else ""
    raise InvalidArgument(
        f"unknown platform {kind!r}{extra} (known: {', '.join(platform_kinds())})", field="platform"
    )


def adapter_class(kind: str) -> type[Adapter]:
    found = _REGISTRY[check_kind(kind)]
    if isinstance(found, str):
        module, _, attr = found.partition(":")
        found = getattr(importlib.import_module(module), attr)
        assert isinstance(found, type) and issubclass(found, Adapter)
        _REGISTRY[kind] = found
    return found


def split_text(text: str, limit: int) -> list[str]:
    """``text`` in parts of at most ``limit`` characters, cut at a paragraph, a line or a space where one is
    near; a code fence open at a cut is closed there and opened again in the next part."""
    if limit < 16:
        raise ValueError("limit must be at least 16")
    text = text.strip() or "(empty reply)"
    parts: list[str] = []
    reopen = ""
    while text:
        budget = limit - len(reopen) - 4  # room for a closing fence
        if len(reopen) + len(text) <= limit:
            parts.append(reopen + text)
            break
        window = text[:budget]
        cut = max(window.rfind("\n\n"), window.rfind("\n"), window.rfind(" "))
        if cut < budget // 2:
            cut = budget
        chunk, text = window[:cut].rstrip(), text[cut:].lstrip()
        chunk = reopen + chunk
        fence = _open_fence(chunk)
        if fence is not None:
            chunk += "\n```"
            reopen = fence + "\n"
        else:
            reopen = ""
        parts.append(chunk)
    return parts


def _open_fence(chunk: str) -> str | None:
    """The opening line of a code fence left open at the end of ``chunk``, else None."""
    opening: str | None = None
    for line in chunk.split("\n"):
        if line.lstrip().startswith("```"):
            opening = None if opening is not None else line.strip()
    return opening
