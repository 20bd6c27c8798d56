"""Keep connection secrets out of HTTP clients' log lines.

httpx logs every request's URL at INFO ("HTTP Request: POST https://.../bot<token>/getUpdates"), and the
Telegram Bot API puts the bot token in the URL. Adapters register their secret here while connected; a filter
on the clients' loggers replaces it before any handler sees the record.
"""

from __future__ import annotations

import logging

_SECRETS: set[str] = set()
_LOGGERS = ("httpx", "httpcore", "telegram", "telegram.Bot", "telegram.ext")


class _Scrub(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not _SECRETS:
            return True
        text = record.getMessage()
        clean = text
        for secret in _SECRETS:
            clean = clean.replace(secret, "[credential]")
        if clean != text:
            record.msg, record.args = clean, None
        return True


_FILTER = _Scrub()


def guard(secret: str) -> None:
    """Scrub ``secret`` from the HTTP clients' log records from now on."""
    if len(secret) >= 8:
        _SECRETS.add(secret)
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def release(secret: str) -> None:
    _SECRETS.discard(secret)


def scrub(text: str) -> str:
    for secret in _SECRETS:
        text = text.replace(secret, "[credential]")
    return text
