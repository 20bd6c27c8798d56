"""``session_search``: the LLM tool over past session transcripts.

The handler runs inside ``tool_executor`` and queries the index directly in the caller's tenant, rather than
asking the ``agent`` actor: the agent that issued the call is waiting for this very result, so an ``ask`` to
it would wait on itself. Visibility follows the request context: end users search their own sessions,
admins the whole tenant (the same rule as the ``agent.session_search`` op). The tool fuses embeddings
whenever the tenant's transcripts have them (the agents' ``semantic`` switch decides whether they are
written) and the semantic extra is installed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from minihermes.runtime import RequestContext, current_context
from minihermes.tools.catalog import Toolset
from minihermes.tools.contract import READ, UNTRUSTED, Tool, ToolEnv

from . import session_index
from .embeddings import Embedder

MAX_LIMIT = 50
_ADMIN = frozenset({"admin", "system"})

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1000,
            "description": 'Words to look for in earlier conversations; absolute dates ("9 November 2022", '
            '"May 2023") match the messages of that day or month',
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "Hits (default 5)"},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def tenant_wide(ctx: RequestContext) -> bool:
    return bool(ctx.roles & _ADMIN)


async def search_visible(
    host: Any,
    query: str,
    limit: int,
    *,
    user_id: str = "",
    session_filter: str = "",
    semantic: bool = True,
    embedder: Embedder | None = None,
) -> dict[str, Any]:
    """Search what the current principal may see: ``{hits, sessions, count}``. ``semantic``: fuse
    embeddings when the tenant's transcripts have them (``session_index.search``)."""
    ctx = current_context()
    wide = tenant_wide(ctx) and not user_id
    owner = user_id if tenant_wide(ctx) and user_id else ctx.principal
    hits = await session_index.search(
        host,
        query,
        user_id=owner,
        tenant_wide=wide,
        limit=limit,
        session_id=session_filter,
        semantic=semantic,
        embedder=embedder,
    )
    sessions = list(dict.fromkeys(h["session_id"] for h in hits))
    return {"hits": hits, "sessions": sessions, "count": len(hits)}


def _when(at: Any) -> str:
    """A hit's time for the model, which cannot read epoch seconds at a glance: "2022-11-09 18:30 UTC"."""
    if not isinstance(at, int | float) or not at:
        return ""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


async def _session_search(args: dict[str, Any], env: ToolEnv) -> Any:
    found = await search_visible(env.host, str(args["query"]), int(args.get("limit", 5)))
    hits = []
    for h in found["hits"]:
        hit = {k: h[k] for k in ("session_id", "role", "snippet")}
        if h.get("speaker"):
            hit["speaker"] = h["speaker"]
        if when := _when(h.get("at")):
            hit["when"] = when
        hits.append(hit | {"current_session": h["session_id"] == env.session_id})
    return {"hits": hits, "sessions": found["sessions"], "count": len(hits)}


SESSION_SEARCH_TOOLSET = Toolset(
    "session_search",
    [
        Tool(
            "session_search",
            "Search earlier conversations (yours; an admin's: the whole tenant) for words; returns snippets "
            "with their session ids.",
            SCHEMA,
            READ,
            # Transcripts hold tool results from outside sources: what comes back is data, not instructions.
            UNTRUSTED,
            handler=_session_search,
            requires="agent",
            permission=("agent", "session_search"),
        )
    ],
    purpose="search past chats",
)
