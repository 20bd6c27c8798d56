"""Telegram through python-telegram-bot: long polling (``getUpdates``) and ``sendMessage``.

The update offset moves past a batch only after ``accept`` put it in the inbox, so Telegram redelivers what a
crash interrupted and the inbox drops it if it was already in. The bot token is in every Bot API URL: the
client is given a URL with a placeholder, the token is put in by the request object at the last moment, and
the HTTP clients' loggers scrub it (``_logs``).

Settings: ``poll_timeout`` (seconds a ``getUpdates`` waits, default 30). ``base_url``: a Bot API server other
than ``https://api.telegram.org`` (a local Bot API server, a test double).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from ._adapter import Adapter, Connection, Inbound, RetryLater
from ._logs import guard, release

DEFAULT_BASE = "https://api.telegram.org"
_PLACEHOLDER = "[token]"


class TelegramAdapter(Adapter):
    kind = "telegram"
    max_length = 4096
    hints = "Telegram shows your reply as plain text (no Markdown rendering); keep it conversational."

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn)
        # PTB 22 warns on every 429 unless durations are opted in as timedeltas (its next major's default).
        os.environ.setdefault("PTB_TIMEDELTA", "true")
        from telegram import Bot
        from telegram.request import HTTPXRequest

        token = conn.secret.get_secret_value()
        guard(token)
        poll = float(conn.settings.get("poll_timeout", 30))
        self.poll_timeout = poll
        base = (conn.base_url or DEFAULT_BASE).rstrip("/")

        class _TokenRequest(HTTPXRequest):
            """Puts the token into the URL only when the request is sent: nothing upstream logs it."""

            async def do_request(self, url: str, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
                return await super().do_request(url.replace(_PLACEHOLDER, token), *args, **kwargs)

        self.bot = Bot(
            token=token,
            base_url=lambda _token: f"{base}/bot{_PLACEHOLDER}",
            request=_TokenRequest(read_timeout=15.0),
            get_updates_request=_TokenRequest(read_timeout=poll + 15.0),
        )
        self._token = token
        self._me_id = 0
        self._username = ""

    async def start(self) -> None:
        await self.bot.initialize()  # getMe: a wrong token fails here
        self._me_id = self.bot.id
        self._username = self.bot.username or ""

    async def receive_forever(self) -> None:
        offset: int | None = None
        while True:
            updates = await self.bot.get_updates(
                offset=offset, timeout=int(self.poll_timeout), allowed_updates=["message"]
            )
            if not updates:
                continue
            found = [self._inbound(u) for u in updates]
            await self.conn.accept([m for m in found if m is not None])
            offset = updates[-1].update_id + 1  # acknowledged by the next getUpdates

    def _inbound(self, update: Any) -> Inbound | None:
        message = update.message
        if message is None or message.from_user is None:
            return None
        text = message.text or message.caption or ""
        if not text:
            return None  # attachments are not taken yet (docs/platforms.md)
        is_group = message.chat.type in ("group", "supergroup")
        reply_to = message.reply_to_message
        mention = bool(self._username) and f"@{self._username}".lower() in text.lower()
        replied_to_us = (
            reply_to is not None and reply_to.from_user is not None and reply_to.from_user.id == self._me_id
        )
        quoted = ""
        if getattr(message, "forward_origin", None) is not None:
            quoted, text = text, "(forwarded a message)"
        elif reply_to is not None and not replied_to_us:
            quoted = reply_to.text or reply_to.caption or ""
        return Inbound(
            message_id=str(update.update_id),
            chat=str(message.chat.id),
            user=str(message.from_user.id),
            text=text,
            is_group=is_group,
            addressed=not is_group or mention or replied_to_us,
            quoted=quoted,
            display_name=message.from_user.full_name or "",
        )

    async def send(self, chat: str, text: str, key: str) -> None:
        from telegram.error import RetryAfter

        try:
            await self.bot.send_message(chat_id=int(chat) if chat.lstrip("-").isdigit() else chat, text=text)
        except RetryAfter as e:
            wait = e.retry_after
            raise RetryLater(
                wait.total_seconds() if isinstance(wait, dt.timedelta) else float(wait)
            ) from None

    async def close(self) -> None:
        try:
            await self.bot.shutdown()
        finally:
            release(self._token)
