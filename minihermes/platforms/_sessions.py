"""Which session a platform message goes to: (connection, chat, user) and the DM's current topic.

The map lives in the tenant's KV under ``platform_session:<name>:<chat>:<user>``: the current topic ("" for
the plain conversation) and each topic's session id. A session is created through ``session_manager`` as
the linked principal with the platform as channel, so the channel + user index and ``list_sessions`` show
it as that platform's. ``/new`` replaces the current topic's session; ``/topic create|switch|list|off``
keeps several independent sessions in one DM.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from minihermes.runtime import Host, InvalidArgument

_TOPIC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,39}$")
MAX_TOPICS = 50
HELP = "Commands: /new, /topic create NAME, /topic switch NAME, /topic list, /topic off"


def _key(name: str, chat: str, user: str) -> str:
    return f"platform_session:{name}:{quote(chat, safe='')}:{quote(user, safe='')}"


class SessionMap:
    """One sender's sessions in one chat of one connection. Call it as the linked principal."""

    def __init__(self, host: Host, name: str, platform: str, chat: str, user: str) -> None:
        self.host, self.name, self.platform, self.chat, self.user = host, name, platform, chat, user

    async def _load(self) -> dict[str, Any]:
        found = await self.host.kv.get(_key(self.name, self.chat, self.user))
        return found if isinstance(found, dict) else {"topic": "", "sessions": {}}

    async def _save(self, record: dict[str, Any]) -> None:
        await self.host.kv.put(_key(self.name, self.chat, self.user), record)

    async def current(self, principal: str) -> str:
        """The session of the current topic, created on first use."""
        record = await self._load()
        sid = record["sessions"].get(record["topic"])
        if not sid:
            sid = await self._create(principal, record["topic"])
            record["sessions"][record["topic"]] = sid
            await self._save(record)
        return str(sid)

    async def _create(self, principal: str, topic: str) -> str:
        reply = await self.host.ask(
            "session_manager",
            "create_session",
            {
                "channel": self.platform,
                "user_id": principal,
                "metadata": {"platform": self.name, "chat": self.chat, "topic": topic},
            },
        )
        return str(reply["session_id"])

    async def command(self, text: str, principal: str) -> str | None:
        """The reply to a ``/new`` or ``/topic`` command, or None when ``text`` is not one."""
        words = text.strip().split(maxsplit=2)
        if not words or words[0].split("@")[0] not in ("/new", "/topic"):
            return None
        record = await self._load()
        if words[0].startswith("/new"):
            record["sessions"][record["topic"]] = await self._create(principal, record["topic"])
            await self._save(record)
            where = f" in topic {record['topic']}" if record["topic"] else ""
            return f"Started a new conversation{where}."
        sub = words[1].lower() if len(words) > 1 else "list"
        arg = words[2].strip() if len(words) > 2 else ""
        topics = {t for t in record["sessions"] if t}
        if sub == "list":
            if not topics:
                return "No topics yet. " + HELP
            return "Topics: " + ", ".join(
                f"{t} (current)" if t == record["topic"] else t for t in sorted(topics)
            )
        if sub == "off":
            record["topic"] = ""
            await self._save(record)
            return "Back to the main conversation."
        if sub not in ("create", "switch") or not arg:
            return HELP
        if not _TOPIC.fullmatch(arg):
            raise InvalidArgument("a topic name is 1-40 letters, digits, spaces, '_', '.', '-'")
        if sub == "create":
            if arg in topics:
                return f"Topic {arg} exists; /topic switch {arg}"
            if len(topics) >= MAX_TOPICS:
                return f"At most {MAX_TOPICS} topics."
            record["sessions"][arg] = await self._create(principal, arg)
            record["topic"] = arg
            await self._save(record)
            return f"Created topic {arg}; you are in it now."
        if arg not in topics:
            return f"No topic {arg}. /topic create {arg}"
        record["topic"] = arg
        await self._save(record)
        return f"Switched to topic {arg}."
