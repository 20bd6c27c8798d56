"""Memory (one per tenant): facts stored under keys, in three scopes and three tiers.

- Scopes say who sees a fact: ``global`` (every agent and session of the tenant), ``agent`` (one agent id),
  ``session`` (one session).
- Tiers say how it is used: ``core`` facts are injected into every system prompt (``core_snapshot``),
  ``reachable`` ones are recalled or searched on demand, ``deep`` ones are archival (bigger values allowed).

Each fact also has a **kind**: ``semantic`` (facts, configuration, rules; the default),
``episodic`` (past conversations and task traces: the agent writes one per turn, private to its user) or
``declarative`` (skill manuals). Search ranks by relevance times exponential temporal decay (half-life
``half_life_days``; pinned and core memories exempt), fusing cosine similarity when the semantic extra is
installed (``minihermes.context.recall``). Recognisable secrets are redacted before anything is stored (a
stated fact holding one is refused, ``secret_not_stored``: only a turn's episode is kept redacted), and
``forget`` removes a memory, a session, a user or the whole tenant from every store (``minihermes.context
.forget``).

**Ownership inside the tenant** (issue 17): every fact has an owner principal, taken from the request
context. A user's facts are *private* to them (``holder`` = their principal); *tenant-shared* facts
(``holder`` empty, every user of the tenant sees them) are written by admins (and the runtime) only, and so
is the ``core`` tier of everyone's prompt: a user's own core facts reach only that user's prompts
(``core_snapshot`` = shared core + the user's core). Reads show a user the shared facts plus their own; a
shared session-scoped fact only to the session's owner; a viewer only shared, non-session facts; an admin
everything (or, naming ``user_id``, what that user sees). Users overwrite and delete only their own facts;
another user's fact is "not found", never "forbidden". Records from before ownership have no ``holder``:
one flagged ``private`` belongs to its ``user_id``, any other stays tenant-shared (its writer, the
``user_id``, may still delete it) - the writer's roles were never recorded, so an admin should review old
``core`` facts once (``list_memories`` with ``tier="core"``).

Each fact lives in three primitives, each for its access pattern: ``kv`` holds the record (point lookup by
scope, owner, key and, for a private fact, its holder: the source of truth), the ``text`` index
``memories`` ranks facts for ``search_memories`` (SQLite FTS5 or PostgreSQL, BM25 over the analysed key and
value: stop words out, possessives dropped, Porter stems, so "sister" finds "my sister's name" and "running"
finds "run"; records indexed before that analysis, marked by no ``analysis`` in their index meta, are
matched with the light stemmer they were indexed with) and the
tuple space holds ``["memory", scope, owner, key, tier]`` (shared) or ``[..., tier, holder]`` (private) for
listing by pattern (None is a wildcard); with the semantic extra, kv also holds its embedding. Two users'
facts under the same key are two records. A fact's record, index entry, tuple and embedding are written (and
deleted) in one transaction (``host.write_batch``), so a failed write leaves none of them. Parts that an
older release could leave behind alone (an index entry, a tuple or an embedding without its record, or a
record without its tuple) are never shown: readers skip index hits whose record is missing; ``forget``,
``delete_memory`` and ``clear_memories`` find them under every primitive and remove them, and storing the
fact again rewrites all of them.

A fact named with a session (``session_id``, ``source_session``) is tied to it (forgetting the session takes
it along), so a user may name only their own sessions (admins any): one whose recorded owner (the session
owner index, or the session manager's record) is another principal is refused.

**Expiry** (issue 25): a fact may carry ``expires_at``, from ``store_memory``'s ``ttl_seconds`` (0: its kind's
default from ``ttl_defaults``, episodes 90 days and the others none unless configured; -1: never). From that
moment on it is absent from every read (recall, list, search, the core snapshot and so the prompt), checked
against the actor's clock on what was read anyway (the record, or the index meta, which carries
``expires_at`` too): no extra store round trip. The record's own ``expires_at``, not the store's KV TTL, is
the source of truth, because the KV TTL would hide and purge the record alone and leave its index entry,
tuple and embedding behind. A durable reminder runs the retention pass (``purge_expired``) at the end of the
``retention_interval`` (1 h) in which the earliest expiry falls: it removes each expired fact's record, index
entry, tuple and embedding in one transaction, so passes are batched, at most one per interval.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import quote, unquote

from pydantic import field_validator

from minihermes.agent.audit_event import fire_audit, is_restricted
from minihermes.context import forget as forgetting
from minihermes.context import prompt, query_terms, search_query_terms, search_stem, search_terms, snippet
from minihermes.context.assembly import context_part
from minihermes.context.recall import (
    DEFAULT_HALF_LIFE_DAYS,
    expired,
    final_score,
    for_prompt,
    fuse,
    is_fact,
    lexical,
    load_embedder,
)
from minihermes.context.redact import redact_text, secret_kinds
from minihermes.permissions import provenance as stamped_provenance
from minihermes.runtime import MAX_KEY_CHARS as MAX_ACTOR_KEY_CHARS
from minihermes.runtime import (
    ActorArgs,
    Conflict,
    GenServer,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RequestContext,
    call,
    cast,
    current_context,
    reset_context,
    set_context,
    state,
)
from minihermes.runtime.store import (
    KVDelete,
    KVPut,
    TextRemove,
    TextUpsert,
    TupleTakeAll,
    TupleWrite,
    Write,
)

from .session_manager import session_user

SCOPES = ("global", "agent", "session")
TIERS = ("core", "reachable", "deep")
KINDS = ("semantic", "episodic", "declarative")
INDEX = "memories"
MAX_KEY_CHARS = 200
MAX_ID_CHARS = 200
MAX_QUERY_CHARS = 1000
MAX_VALUE_CHARS = {"core": 2_000, "reachable": 32_000, "deep": 256_000}
"""Core values go into every prompt, so they stay short."""
MAX_MEMORIES = 100_000
MAX_SEARCH_WINDOW = 500
"""Most results a search ranks (``offset`` + ``limit`` at most this)."""
ANALYSIS = 2
"""The index analysis of a record (``analysis`` in its meta): 2 is ``index_terms``; none, ``analyze``."""
CORE_SNAPSHOT_CHARS = 4_000
CORE_PRIORITY = 100
"""The core facts' place among the stable prefix's parts (``turn_context``): the only one there now."""
MEMORIES_PRIORITY = 200
"""The recalled memories' place in the per-turn section: after the skills (300), before the goals (100)."""

Scope = Literal["global", "agent", "session"]
ScopeFilter = Literal["", "global", "agent", "session"]
Tier = Literal["core", "reachable", "deep"]
TierFilter = Literal["", "core", "reachable", "deep"]
Kind = Literal["semantic", "episodic", "declarative"]
KindFilter = Literal["", "semantic", "episodic", "declarative"]
DENSE_MIN_COSINE = 0.35
"""A record found only by its embedding must be at least this similar (unrelated MiniLM pairs sit lower)."""
_VEC = "memvec:"
"""kv prefix of a record's embedding (only with the semantic extra)."""
LOOKUP_TOOLS = frozenset({"memory_search", "memory_recall", "session_search"})
"""The tools that only read back what is remembered: a turn that called nothing else leaves no episode."""
_LAST_EPISODE = "episode_last:"
"""kv prefix of a session's last episode (``{turn_id, key}``): what a correction retracts."""
DAY_SECONDS = 86_400
NEVER = -1
"""``ttl_seconds`` (or a ``ttl_defaults`` value) of a memory that never expires."""
MAX_TTL_SECONDS = 100 * 365 * DAY_SECONDS
DEFAULT_TTLS: dict[str, int] = {"episodic": 90 * DAY_SECONDS}
"""Per kind, the ``ttl_seconds`` a memory stored without one gets (a kind not named: never expires)."""
RETENTION_INTERVAL = 3600.0
"""Seconds: expired memories are removed by one pass at the end of the interval they expired in."""
_PURGE_REMINDER = "memory_expiry"
_PURGE_BATCH = 100
_QUAR = "memq:"
"""kv prefix of a quarantined write (``memq:`` + the record key it would have): the whole record as it would
be stored, held apart from the live one until its owner or an admin confirms it (``confirm_memory``)."""
MAX_QUARANTINED = 1_000
"""Quarantined writes a tenant may hold at once (a poisoned loop cannot fill the store)."""
"""Expired facts removed per transaction by the retention pass."""


def _check_ttl(op: str, field: str, ttl: int, *, default_allowed: bool) -> None:
    if type(ttl) is not int or not (
        ttl == NEVER or 1 <= ttl <= MAX_TTL_SECONDS or (default_allowed and ttl == 0)
    ):
        default = ", 0 (its kind's default)" if default_allowed else ""
        raise InvalidArgument(
            f"{op}: {field} must be an integer: -1 (never expires){default} or 1..{MAX_TTL_SECONDS} seconds",
            op=op,
            field=field,
        )


def ttl_defaults(configured: Mapping[str, Any]) -> dict[str, int]:
    """The per-kind default TTLs: ``DEFAULT_TTLS`` overridden by ``configured`` (kind -> seconds, -1 never),
    checked (an unknown kind or a bad value is an ``InvalidArgument`` naming it)."""
    for kind, ttl in configured.items():
        if kind not in KINDS:
            raise InvalidArgument(
                f"ttl_defaults: unknown kind '{kind}' (known: {', '.join(KINDS)})", field="ttl_defaults"
            )
        _check_ttl("ttl_defaults", f"ttl_defaults.{kind}", ttl, default_allowed=False)
    return {**DEFAULT_TTLS, **configured}


_ADMIN_ROLES = frozenset({"admin", "system"})
_WRITER_ROLES = _ADMIN_ROLES | {"user"}


def _require_writer(op: str) -> None:
    if not current_context().roles & _WRITER_ROLES:
        raise PermissionDenied(f"{op}: a read-only role cannot change memories", op=op)


_REFUSED_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
"""Control characters but tab and newlines, and lone surrogates (no store can hold them as UTF-8)."""
MAX_RECORD_KEY = 4000
"""Longest kv key of a record (the stores hold 4096 characters; its embedding's key adds ``_VEC``): the key,
scope owner and holder are percent-encoded into it, so each within its limit may still not fit together."""


def _check_text(op: str, field: str, value: str, limit: int, *, required: bool = True) -> None:
    if required and not value.strip():
        raise InvalidArgument(f"{op}: {field} must not be empty", op=op, field=field)
    if len(value) > limit:
        raise InvalidArgument(f"{op}: {field} is longer than {limit} characters", op=op, field=field)
    if _REFUSED_CHARS.search(value):
        raise InvalidArgument(f"{op}: {field} must not contain control characters", op=op, field=field)


SECRETS_BELONG = (
    "secrets are kept out of memory, chat history and logs: keep a password in a password manager; an API key "
    "for a model or a service belongs in the credential vault (an admin registers it on the dashboard's "
    "Providers page or with llm_gateway register_credential)"
)


def _refuse_secret(op: str, key: str, value: Any) -> None:
    """A fact whose key or value holds a secret redaction would find is refused, not stored as a silent
    ``[REDACTED]``: the person would believe it was kept. The message names the kind of secret, never it."""
    for field, text in (("key", key), ("value", "" if value is None else _as_text(value))):
        kinds = secret_kinds(text) if isinstance(text, str) else []
        if kinds:
            raise InvalidArgument(
                f"{op}: not stored: the {field} holds a secret ({', '.join(kinds)}), and nothing of it was "
                f"kept; {SECRETS_BELONG}",
                code="secret_not_stored",
                op=op,
                field=field,
            )


def _check_ids(op: str, **ids: str) -> None:
    """The ids an op names (agent, session, user; empty: none or the default), checked before any of them
    reaches a store key or pattern (a NUL or 5000 characters were a crash in the store's own checks): as
    long as an actor key may be, so that every session can be read and forgotten (a fact's own scope id is
    held to ``MAX_ID_CHARS`` when it is stored)."""
    for field, value in ids.items():
        _check_text(op, field, value, MAX_ACTOR_KEY_CHARS, required=False)


def _owner(op: str, scope: str, agent_id: str, session_id: str) -> str:
    """The id a scope is keyed by: none for global, the agent id, or the session id."""
    if scope == "agent":
        _check_text(op, "agent_id", agent_id, MAX_ID_CHARS)
        return agent_id
    if scope == "session":
        _check_text(op, "session_id", session_id, MAX_ID_CHARS)
        return session_id
    return ""


def _record_key(scope: str, owner: str, key: str, holder: str = "") -> str:
    """The kv key of a shared record (as before ownership), or of ``holder``'s private one."""
    base = f"{scope}:{quote(owner, safe='')}:{quote(key, safe='')}"
    return f"memp:{quote(holder, safe='')}:{base}" if holder else f"mem:{base}"


def _ids(record: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """``(scope, owner, key, holder)`` of a record."""
    return record["scope"], record["owner"], record["key"], str(record.get("holder") or "")


def _rkey(record: Mapping[str, Any]) -> str:
    return _record_key(*_ids(record))


def _parse_rkey(rkey: str) -> tuple[str, str, str, str] | None:
    """``(scope, owner, key, holder)`` of a record key (``_record_key``'s inverse); None for another key."""
    parts = rkey.split(":")
    if parts[0] == "mem" and len(parts) == 4:
        scope, owner, key, holder = parts[1], parts[2], parts[3], ""
    elif parts[0] == "memp" and len(parts) == 5 and parts[1]:
        holder, scope, owner, key = parts[1], parts[2], parts[3], parts[4]
    else:
        return None
    if scope not in SCOPES:
        return None
    return scope, unquote(owner), unquote(key), unquote(holder)


def _removal(scope: str, owner: str, key: str, holder: str) -> list[Write]:
    """The writes that remove every part of one fact: record, index entry, embedding and tuple (the
    record's result first: whether it was there)."""
    rkey = _record_key(scope, owner, key, holder)
    return [
        KVDelete(rkey),
        TextRemove(INDEX, rkey),
        KVDelete(_VEC + rkey),
        TupleTakeAll(_tuple(scope, owner, key, None, holder)),
    ]


def _tuple(scope: str, owner: str, key: str, tier: str | None, holder: str) -> list[Any]:
    """The index tuple (a pattern with ``tier`` None): arity 5 for a shared record, 6 for a private one."""
    row: list[Any] = ["memory", scope, owner, key, tier]
    return [*row, holder] if holder else row


def _holder(record: Mapping[str, Any]) -> str:
    """The principal a record (or its index meta) is private to; "" when it is tenant-shared. A record from
    before ownership has no ``holder``: private to its ``user_id`` when flagged private, else shared."""
    if "holder" in record:
        return str(record["holder"] or "")
    return str(record.get("user_id") or "") if record.get("private") else ""


def _owns(record: Mapping[str, Any], principal: str) -> bool:
    """``principal`` may overwrite or delete ``record`` as its owner (admins may regardless): their private
    record, or a shared one they wrote before ownership existed."""
    if not principal:
        return False
    holder = _holder(record)
    if holder:
        return holder == principal
    return "holder" not in record and record.get("user_id") == principal


def _privileged(ctx: RequestContext) -> bool:
    return bool(ctx.roles & _ADMIN_ROLES)


@dataclass(frozen=True, slots=True)
class _Reader:
    """Whose memories a read shows: ``everything`` (an admin or the runtime naming nobody), else the
    tenant-shared ones plus ``me``'s private ones (no private ones for ``me`` empty: viewers)."""

    everything: bool
    me: str

    def needs_owner(self, record: Mapping[str, Any]) -> bool:
        """Whether ``sees`` must know who owns the record's session."""
        return (
            not self.everything
            and bool(self.me)
            and record.get("scope") == "session"
            and not _holder(record)
            and record.get("user_id") != self.me
        )

    def sees(self, record: Mapping[str, Any], sessions: Mapping[str, str | None]) -> bool:
        """``sessions``: the owner of each session ``needs_owner`` named."""
        if self.everything:
            return True
        holder = _holder(record)
        if holder:
            return holder == self.me
        if record.get("scope") != "session":
            return True
        # A shared fact of one session: for the session's owner (or whom it names), not the tenant.
        if not self.me:
            return False
        return record.get("user_id") == self.me or sessions.get(str(record.get("owner"))) == self.me


def _reader(ctx: RequestContext, user_id: str, *, prompt: bool = False) -> _Reader:
    """Admins and the runtime see everything, or what ``user_id`` sees when they name one (a prompt is always
    somebody's: the caller's when nobody is named); users see what they see, whatever they name (another
    user's memories are not found, not forbidden); anybody else (viewers) sees the tenant-shared ones."""
    if _privileged(ctx):
        if user_id or prompt:
            return _Reader(False, user_id or ctx.principal)
        return _Reader(True, ctx.principal)
    if "user" in ctx.roles:
        return _Reader(False, ctx.principal)
    return _Reader(False, "")


def _holder_for(op: str, ctx: RequestContext, user_id: str, private: bool | None) -> str:
    """Whose private fact a write is ("": tenant-shared). A user's facts are theirs (for nobody else, and
    never shared); an admin's are shared unless ``private`` (then ``user_id``'s, default the admin's)."""
    if _privileged(ctx):
        return (user_id or ctx.principal) if private else ""
    if user_id and user_id != ctx.principal:
        raise PermissionDenied(f"{op}: users store memories for themselves only", op=op, field="user_id")
    if private is False or not ctx.principal:
        raise PermissionDenied(f"{op}: tenant-shared memories are written by admins", op=op, field="private")
    return ctx.principal


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


@dataclass(frozen=True, slots=True)
class _Shown:
    """What a search shows: what its reader sees, within its filters (empty: any)."""

    reader: _Reader
    sessions: Mapping[str, str | None]
    agent_id: str
    session_id: str
    scope: str
    tier: str
    kind: str
    episodes: bool

    def admits(self, probe: Mapping[str, Any], now: float) -> bool:
        """Whether the candidate (its index entry, or its record) is shown."""
        if not probe.get("scope") or not _visible(probe, self.agent_id, self.session_id):
            return False
        if expired(probe, now) or not self.reader.sees(probe, self.sessions):
            return False
        if (self.scope and probe["scope"] != self.scope) or (self.tier and probe.get("tier") != self.tier):
            return False
        if self.kind and probe.get("kind", "semantic") != self.kind:
            return False
        return self.episodes or probe.get("kind") != "episodic"


def _visible(record: Mapping[str, Any], agent_id: str, session_id: str) -> bool:
    """With an agent or session id given, another agent's or session's facts are left out (who may see a
    fact at all is ``_Reader.sees``)."""
    if record["scope"] == "agent" and agent_id:
        return bool(record["owner"] == agent_id)
    if record["scope"] == "session" and session_id:
        return bool(record["owner"] == session_id)
    return True


def _view(record: dict[str, Any]) -> dict[str, Any]:
    out = {k: record[k] for k in ("key", "value", "scope", "tier", "user_id", "created_at", "updated_at")}
    out["expires_at"] = record.get("expires_at")
    out["kind"] = record.get("kind", "semantic")
    out["pinned"] = bool(record.get("pinned"))
    out["private"] = bool(_holder(record))
    out["provenance"] = str(record.get("provenance") or "unrecorded")
    out["derived_from_untrusted"] = bool(record.get("derived_from_untrusted"))
    out["quarantined"] = bool(record.get("quarantined"))
    if record.get("confirmed_by"):
        out["confirmed_by"] = record["confirmed_by"]
    if record.get("source_session"):
        out["source_session"] = record["source_session"]
    if record["scope"] == "agent":
        out["agent_id"] = record["owner"]
    elif record["scope"] == "session":
        out["session_id"] = record["owner"]
    return out


def index_terms(text: str) -> list[str]:
    """The words a record is indexed by (and a query searched with): stop words out, possessives dropped
    ("sister's" -> "sister"), Porter-stemmed ("running" -> "run"), as session search analyses."""
    return search_terms(text)


def _shows_episodes(kind: str, include_episodes: bool) -> bool:
    return include_episodes or kind == "episodic"


def _order(record: dict[str, Any]) -> tuple[int, str, str, str]:
    return (SCOPES.index(record["scope"]), record["owner"], record["key"], str(record.get("holder") or ""))


def _is_record(value: Mapping[str, Any], ids: tuple[str, str, str, str]) -> bool:
    """``value`` is a fact's record stored under the key of ``ids``."""
    try:
        return (value["scope"], value["owner"], value["key"], str(value.get("holder") or "")) == ids
    except KeyError:
        return False


@dataclass(slots=True)
class _Part:
    """What is stored of one fact (``Memory._parts``): its record, else the index meta naming it."""

    ids: tuple[str, str, str, str]
    record: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None

    @property
    def scope(self) -> str:
        return self.ids[0]

    @property
    def owner(self) -> str:
        return self.ids[1]

    @property
    def probe(self) -> Mapping[str, Any]:
        """The record, or what its key and index meta tell of a fact whose record is gone (who held it and
        wrote it), for the same ownership checks."""
        if self.record is not None:
            return self.record
        scope, owner, key, holder = self.ids
        meta = self.meta or {}
        return {
            "scope": scope,
            "owner": owner,
            "key": key,
            "holder": holder,
            "user_id": meta.get("user_id") or holder,
            "source_session": meta.get("source_session", ""),
        }


class Memory(GenServer):
    """Per-tenant memory store (see the module docstring).

    Args: ``max_memories`` (per tenant), ``max_value_chars`` (per tier, a dict), ``core_snapshot_chars``,
    ``half_life_days`` (temporal decay of search scores; 0 turns decay off), ``semantic`` (fuse cosine
    similarity from the semantic extra when it is installed; default false), ``ttl_defaults`` (kind ->
    seconds a memory of that kind lives when stored without ``ttl_seconds``, -1 never; over
    ``DEFAULT_TTLS``), ``retention_interval`` (seconds; expired memories are removed at the end of the
    interval they expired in).
    """

    class Args(ActorArgs):
        max_memories: int = MAX_MEMORIES
        max_value_chars: dict[str, int] = {}
        """Per tier, over the defaults (``MAX_VALUE_CHARS``)."""
        core_snapshot_chars: int = CORE_SNAPSHOT_CHARS
        half_life_days: float = DEFAULT_HALF_LIFE_DAYS
        semantic: bool = False
        ttl_defaults: dict[Kind, int] = {}
        """Per kind, over ``DEFAULT_TTLS`` (episodes 90 days); -1: never expires."""
        retention_interval: float = RETENTION_INTERVAL

        @field_validator("ttl_defaults")
        @classmethod
        def _ttls(cls, v: dict[str, int]) -> dict[str, int]:
            try:
                ttl_defaults(v)
            except InvalidArgument as e:
                raise ValueError(e.message) from None
            return v

        @field_validator("retention_interval")
        @classmethod
        def _interval(cls, v: float) -> float:
            if not v > 0:
                raise ValueError("retention_interval must be > 0 seconds")
            return v

    state_version = 1
    memory_count: int = state(default=0)
    purge_at: float | None = state(default=None)
    """When the retention pass's reminder is armed for (None: nothing stored expires)."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.max_memories = int(args.get("max_memories", MAX_MEMORIES))
        self.max_value_chars = {**MAX_VALUE_CHARS, **args.get("max_value_chars", {})}
        self.core_snapshot_chars = int(args.get("core_snapshot_chars", CORE_SNAPSHOT_CHARS))
        self._core: list[dict[str, Any]] | None = None
        """Every core record: read for each system prompt, so cached; every write here invalidates it."""
        self._core_expiry: float | None = None
        """The earliest ``expires_at`` in ``_core``: once it passes, expired records leave the cache."""
        self.ttl_defaults = ttl_defaults(args.get("ttl_defaults") or {})
        self.retention_interval = float(args.get("retention_interval", RETENTION_INTERVAL))
        if not self.retention_interval > 0:
            raise InvalidArgument("retention_interval must be > 0 seconds", field="retention_interval")
        self.half_life_days = float(args.get("half_life_days", DEFAULT_HALF_LIFE_DAYS))
        # Opt-in: loading the model costs seconds and each store an embedding.
        self._embedder = load_embedder() if args.get("semantic", False) else None
        self._vectors: dict[str, list[float]] | None = None
        """Every record's embedding (semantic extra only), loaded on the first search; a cache of kv."""
        self._matrix: Any = None
        self._stats = {"stores": 0, "recalls": 0, "searches": 0, "deletes": 0, "forgets": 0}
        self._audit_on = self.host.has_actor("audit_event")
        self.host.join("svc:memory")

    # -- writes -------------------------------------------------------------------------------------------

    @call(access="write")
    async def store_memory(
        self,
        key: str,
        value: Any,
        scope: Scope = "global",
        tier: Tier = "reachable",
        agent_id: str = "",
        session_id: str = "",
        user_id: str = "",
        kind: Kind = "semantic",
        pinned: bool = False,
        private: bool | None = None,
        source_session: str = "",
        ttl_seconds: int = 0,
    ) -> dict[str, Any]:
        """Store (or overwrite) the fact ``key`` in a scope. Values are text (others are stored as JSON);
        secrets in the key or value are redacted first. A user's facts are private to them (``private``
        false is refused: tenant-shared facts are written by admins); an admin's are tenant-shared unless
        ``private`` (then they belong to ``user_id``, default the admin). ``source_session`` (the session the
        fact came from, default ``session_id``) lets forgetting a session take its facts along.
        ``ttl_seconds``: the fact expires that many seconds from now (1..``MAX_TTL_SECONDS``); 0, its kind's
        default (``ttl_defaults``); -1, never. Overwriting a fact sets its expiry anew. A key or value in
        which redaction finds a secret is refused (``secret_not_stored``): a stated fact is kept as given or
        not at all. An episode (``kind="episodic"``, the record of a turn, which quotes the conversation) is
        stored with its secrets redacted instead."""
        op = "store_memory"
        _require_writer(op)
        if kind != "episodic":
            _refuse_secret(op, key, value)
        _check_ids(
            op, agent_id=agent_id, session_id=session_id, user_id=user_id, source_session=source_session
        )
        await self._check_sessions(op, session_id=session_id, source_session=source_session)
        return await self._store(
            key,
            value,
            scope,
            tier,
            agent_id,
            session_id,
            user_id,
            kind,
            pinned,
            private,
            source_session,
            ttl_seconds,
        )

    async def _check_sessions(self, op: str, **sessions: str) -> None:
        """A user names only their own sessions (admins and the runtime any): refused when the session's
        recorded owner (the session owner index, else the session manager's record) is someone else. A
        session nobody recorded yet (about to start) is accepted: its first turn records the caller."""
        ctx = current_context()
        named = {field: sid for field, sid in sessions.items() if sid}
        if _privileged(ctx) or not named:
            return
        sids = sorted(set(named.values()))
        owners = await asyncio.gather(
            *(forgetting.session_owner(self.host, sid) for sid in sids),
            *(session_user(self.host, sid) for sid in sids),
        )
        for field, sid in named.items():
            i = sids.index(sid)
            recorded = owners[i] if owners[i] is not None else owners[len(sids) + i]
            if recorded is not None and recorded != ctx.principal:
                raise PermissionDenied(
                    f"{op}: session '{sid}' is not yours (a memory names only its writer's sessions)",
                    op=op,
                    field=field,
                )

    async def _store(
        self,
        key: str,
        value: Any,
        scope: Scope,
        tier: Tier,
        agent_id: str,
        session_id: str,
        user_id: str,
        kind: Kind,
        pinned: bool,
        private: bool | None,
        source_session: str,
        ttl_seconds: int = 0,
        origin: tuple[str, bool] | None = None,
        confirmed_by: str = "",
    ) -> dict[str, Any]:
        """``store_memory`` once its sessions are checked (a turn's episode names the turn's own).
        ``origin``: ``(provenance, derived_from_untrusted)`` when the runtime knows it better than the
        request's stamp (a turn's episode); a write derived from untrusted content is quarantined
        (``_quarantine``) unless ``confirmed_by`` names who confirmed it."""
        op = "store_memory"
        _check_ttl(op, "ttl_seconds", ttl_seconds, default_allowed=True)  # before anything is read
        ctx = current_context()
        prov, untrusted = origin if origin is not None else stamped_provenance(ctx)
        holder = _holder_for(op, ctx, user_id, private)
        key, text, owner, rkey = self._checked(op, key, value, scope, tier, agent_id, session_id, holder)
        now = self.host.now()
        ttl = ttl_seconds or self.ttl_defaults.get(kind, NEVER)
        expires_at = None if ttl == NEVER else now + ttl
        record = {
            "key": key,
            "value": text,
            "scope": scope,
            "owner": owner,
            "holder": holder,
            "tier": tier,
            "kind": kind,
            "pinned": pinned,
            "private": bool(holder),
            "source_session": source_session or session_id,
            "user_id": user_id or ctx.principal,
            "created_at": now,
            "updated_at": now,
            "expires_at": expires_at,
            "provenance": prov,
            "derived_from_untrusted": untrusted,
        }
        if untrusted and not confirmed_by:
            # Held apart, whole, until its owner or an admin confirms it: not recalled, searched, listed,
            # put in core or in a prompt meanwhile, and the live fact under the key (if any) stays as it was.
            return await self._quarantine(rkey, {**record, "quarantined": True}, session_id)
        existing = await self.host.kv.get(rkey)
        previous: dict[str, Any] | None = existing if isinstance(existing, dict) else None
        # The holder's own record from before ownership (at the shared key) is replaced by this one.
        old = await self.host.kv.get(_record_key(scope, owner, key)) if holder and previous is None else None
        replaced = old if isinstance(old, dict) and "holder" not in old and _holder(old) == holder else None
        if previous is None and replaced is None and self.memory_count >= self.max_memories:
            raise Conflict(
                f"{op}: this tenant has {self.max_memories} memories already", code="quota_exceeded"
            )
        # A fact that expired but is not removed yet is gone to every reader: storing it again creates it.
        earlier = next((r for r in (previous, replaced) if r is not None and not expired(r, now)), None)
        if earlier:
            record["created_at"] = earlier["created_at"]
        if confirmed_by:
            record["confirmed_by"] = confirmed_by
            record["confirmed_at"] = now
        await self._write_fact(rkey, record, replaced)
        if previous is None:
            self.memory_count += 1
        if replaced is not None:
            self._dropped(replaced, counted=False)
        if tier == "core" or (previous and previous.get("tier") == "core"):
            self._core = None
        if expires_at is not None:
            await self._plan_purge(expires_at)
        self._stats["stores"] += 1
        self.host.incr_counter("memory_stores_total", tier=tier)
        self._audit("memory_stored", f"scope={scope} key={key} tier={tier}", session_id, record)
        return {
            "status": "ok",
            "key": key,
            "scope": scope,
            "tier": tier,
            "kind": kind,
            "private": bool(holder),
            "created": earlier is None,
            "expires_at": expires_at,
            "provenance": prov,
            "quarantined": False,
        }

    def _checked(
        self,
        op: str,
        key: str,
        value: Any,
        scope: Scope,
        tier: Tier,
        agent_id: str,
        session_id: str,
        holder: str,
    ) -> tuple[str, str, str, str]:
        """A fact's key and value checked and redacted, its owner (the scope's id) and its record key."""
        _check_text(op, "key", key, MAX_KEY_CHARS)
        if value is None:
            raise InvalidArgument(f"{op}: value must not be empty", op=op, field="value")
        key = redact_text(key)
        text = redact_text(_as_text(value))
        _check_text(op, "value", text, self.max_value_chars[tier])
        owner = _owner(op, scope, agent_id, session_id)
        rkey = _record_key(scope, owner, key, holder)
        if len(rkey) > MAX_RECORD_KEY:
            raise InvalidArgument(
                f"{op}: key, {scope} id and user id are too long together (fewer characters, or ASCII)",
                op=op,
                field="key",
            )
        return key, text, owner, rkey

    async def _write_fact(self, rkey: str, record: dict[str, Any], replaced: dict[str, Any] | None) -> None:
        """The fact's record, its search entry, its tier tuple and its vector in one transaction (a failure
        leaves none of them), with the holder's record from before ownership (``replaced``) removed."""
        key, scope, owner, holder = record["key"], record["scope"], record["owner"], record["holder"]
        analysed = " ".join(index_terms(f"{key} {record['value']}"))
        meta = {
            "key": key,
            "scope": scope,
            "owner": owner,
            "holder": holder,
            "tier": record["tier"],
            "kind": record["kind"],
            "pinned": record["pinned"],
            "private": record["private"],
            "user_id": record["user_id"],
            "source_session": record["source_session"],
            "updated_at": record["updated_at"],
            "expires_at": record[
                "expires_at"
            ],  # search leaves an expired fact out without reading its record
            "analysis": ANALYSIS,
            # Distinct words for query coverage (bounded: deep values can be long).
            "terms": " ".join(list(dict.fromkeys(analysed.split()))[:400]),
        }
        vector: list[float] | None = None
        if self._embedder is not None:
            # The model runs in a thread: tens of milliseconds of CPU must not stall the event loop.
            text = f"{key}: {record['value'][:2000]}"
            vector = (await asyncio.to_thread(self._embedder.embed, [text]))[0]
        # The tuple is rewritten even when the tier is unchanged (one statement more in the same commit): a
        # record an older release left without its tuple is listed again.
        writes: list[Write] = [
            KVPut(rkey, record),
            TextUpsert(INDEX, rkey, {"terms": analysed or key.lower()}, meta),
            TupleTakeAll(_tuple(scope, owner, key, None, holder)),
            TupleWrite(_tuple(scope, owner, key, record["tier"], holder)),
        ]
        if vector is not None:
            writes.append(KVPut(_VEC + rkey, vector))
        if replaced is not None:  # the holder's record from before ownership goes in the same commit
            writes += _removal(scope, owner, key, "")
        await self.host.write_batch(writes)
        if vector is not None and self._vectors is not None:
            self._vectors[rkey] = vector
            self._matrix = None

    async def _quarantine(self, rkey: str, pending: dict[str, Any], session_id: str) -> dict[str, Any]:
        """Hold a write derived from untrusted content (``pending``, the record it would be) under
        ``memq:`` + its record key; the latest such write to a key replaces an earlier one."""
        op = "store_memory"
        qkey = _QUAR + rkey
        if await self.host.kv.get(qkey) is None:
            held = await self.host.kv.list(_QUAR, limit=MAX_QUARANTINED)
            if len(held) >= MAX_QUARANTINED:
                raise Conflict(
                    f"{op}: this tenant holds {MAX_QUARANTINED} quarantined memories already; confirm or "
                    "discard some (list_quarantined)",
                    code="quota_exceeded",
                )
        pending["quarantined_at"] = pending["updated_at"]
        await self.host.kv.put(qkey, pending)
        if pending["expires_at"] is not None:
            await self._plan_purge(float(pending["expires_at"]))
        self.host.incr_counter("memory_quarantined_total")
        self._audit(
            "memory_quarantined",
            f"scope={pending['scope']} key={pending['key']} provenance={pending['provenance']}",
            session_id,
            pending,
        )
        return {
            "status": "ok",
            "key": pending["key"],
            "scope": pending["scope"],
            "tier": pending["tier"],
            "kind": pending["kind"],
            "private": pending["private"],
            "created": False,
            "expires_at": pending["expires_at"],
            "provenance": pending["provenance"],
            "quarantined": True,
            "id": rkey,
        }

    # -- quarantine ---------------------------------------------------------------------------------------

    @call(access="read")
    async def list_quarantined(self, user_id: str = "", limit: int = 100) -> dict[str, Any]:
        """The writes held for confirmation (derived from untrusted content: a web page, a file, an MCP or
        tool result) that the caller may confirm: a user's own; an admin's all of the tenant's (or
        ``user_id``'s). Each is the memory as it would be stored, with ``id`` (for ``confirm_memory`` /
        ``discard_memory``), ``provenance`` and ``quarantined_at``; newest first."""
        op = "list_quarantined"
        _check_ids(op, user_id=user_id)
        if not 1 <= limit <= 1000:
            raise InvalidArgument(f"{op}: limit must be 1..1000", op=op, field="limit")
        ctx = current_context()
        now = self.host.now()
        held = [
            (qkey[len(_QUAR) :], r)
            for qkey, r in await self.host.kv.list(_QUAR, limit=MAX_QUARANTINED)
            if isinstance(r, dict) and not expired(r, now) and self._may_confirm(ctx, r, user_id)
        ]
        held.sort(key=lambda item: -float(item[1].get("quarantined_at") or 0))
        items = [
            {**_view(r), "id": rkey, "quarantined_at": r.get("quarantined_at")} for rkey, r in held[:limit]
        ]
        return {"status": "ok", "memories": items, "count": len(items), "total": len(held)}

    @staticmethod
    def _may_confirm(ctx: RequestContext, record: Mapping[str, Any], user_id: str = "") -> bool:
        """The held write's owner (a private one's holder) or an admin; a shared one: admins only."""
        if _privileged(ctx):
            return not user_id or _holder(record) == user_id or record.get("user_id") == user_id
        holder = _holder(record)
        return bool(holder) and holder == ctx.principal and "user" in ctx.roles

    async def _held(self, op: str, id: str) -> dict[str, Any]:
        _check_text(op, "id", id, MAX_RECORD_KEY)
        record = await self.host.kv.get(_QUAR + id)
        # Another user's held write is "not found", never "forbidden", as their memories are.
        if not isinstance(record, dict) or not self._may_confirm(current_context(), record):
            raise NotFound(f"{op}: no quarantined memory '{id[:200]}' of yours", op=op, field="id")
        return record

    @call(access="write")
    async def confirm_memory(self, id: str) -> dict[str, Any]:
        """Confirm a quarantined write (its owner or an admin): it is stored as the memory it would have
        been (replacing the live fact under its key, if any), keeping its ``provenance`` and
        ``derived_from_untrusted``, with ``confirmed_by``; from then on it is recalled like any other."""
        op = "confirm_memory"
        _require_writer(op)
        record = await self._held(op, id)
        ctx = current_context()
        now = self.host.now()
        at = record.get("expires_at")
        if at is not None and float(at) <= now:
            await self.host.kv.delete(_QUAR + id)
            raise NotFound(f"{op}: the quarantined memory '{id[:200]}' has expired", op=op, field="id")
        scope = str(record["scope"])
        holder = _holder(record)
        # Stored as its writer would have stored it: a user's own record (``_held`` let only its holder
        # through), or (admin) a shared or named one.
        reply = await self._store(
            key=str(record["key"]),
            value=record["value"],
            scope=scope,  # type: ignore[arg-type]
            tier=record["tier"],
            agent_id=str(record["owner"]) if scope == "agent" else "",
            session_id=str(record["owner"]) if scope == "session" else "",
            user_id=holder or str(record.get("user_id") or ""),
            kind=record.get("kind", "semantic"),
            pinned=bool(record.get("pinned")),
            private=bool(holder),
            source_session=str(record.get("source_session") or ""),
            ttl_seconds=NEVER if at is None else max(1, math.ceil(float(at) - now)),
            origin=(str(record.get("provenance") or "tool"), True),
            confirmed_by=ctx.principal,
        )
        await self.host.kv.delete(_QUAR + id)
        self._audit("memory_confirmed", f"key={record['key']} by={ctx.principal}", "", record)
        return {**reply, "id": id, "confirmed": True}

    @call(access="write")
    async def discard_memory(self, id: str) -> dict[str, Any]:
        """Discard a quarantined write (its owner or an admin): it is removed and never stored."""
        op = "discard_memory"
        _require_writer(op)
        record = await self._held(op, id)
        await self.host.kv.delete(_QUAR + id)
        self._audit("memory_discarded", f"key={record['key']}", "", record)
        return {"status": "ok", "id": id, "key": record["key"], "discarded": True}

    @call(access="write")
    async def delete_memory(
        self, key: str, scope: Scope = "global", agent_id: str = "", session_id: str = "", user_id: str = ""
    ) -> dict[str, Any]:
        """Forget a fact: the caller's own under ``key`` (an admin's: ``user_id``'s when named), else the
        tenant-shared one (admins only). ``deleted`` is false when there was nothing to forget, or nothing
        the caller may see (another user's fact)."""
        op = "delete_memory"
        _require_writer(op)
        _check_ids(op, agent_id=agent_id, session_id=session_id, user_id=user_id)
        _check_text(op, "key", key, MAX_KEY_CHARS)
        owner = _owner(op, scope, agent_id, session_id)
        ctx = current_context()
        admin = _privileged(ctx)
        who = (user_id or ctx.principal) if admin else ctx.principal
        deleted = False
        episodes = 0
        if admin or not user_id or user_id == who:
            for record in await self._candidates(scope, owner, key, who):
                if admin or _owns(record, who):
                    deleted = await self._forget(record)
                    if deleted and record.get("kind") != "episodic":
                        episodes = await self._forget_quoting(record)
                    break
                if await self._sees(_reader(ctx, ""), [record]):
                    raise PermissionDenied(
                        f"{op}: tenant-shared memories are changed by admins", op=op, field="key"
                    )
            else:
                # No record the caller may delete: what an interrupted write left under the keys they may
                # delete (their own; an admin's, the shared one too) goes.
                ids = ([(scope, owner, key, who)] if who else []) + (
                    [(scope, owner, key, "")] if admin else []
                )
                deleted = await self._purge(ids) > 0
        return {"status": "ok", "key": key, "scope": scope, "deleted": deleted, "episodes_deleted": episodes}

    async def _forget_quoting(self, fact: Mapping[str, Any]) -> int:
        """The episodes of ``fact``'s holder that quote its value (the turn that stated it, "my dog's name
        is Biscuit": its record would keep answering after the fact is forgotten). Found through the index
        by the value's words; one goes when its text holds the whole value and the words of the fact's key
        (a short value such as "42" alone would take unrelated calculations along); how many went."""
        value = str(fact.get("value") or "").strip()
        holder = _holder(fact)
        words = search_query_terms(value)
        if not value or not words:
            return 0
        hits = await self.host.text.search(INDEX, " ".join(dict.fromkeys(words)), limit=MAX_SEARCH_WINDOW)
        rkeys = [
            h.doc_id
            for h in hits
            if isinstance(h.meta, dict) and h.meta.get("kind") == "episodic" and _holder(h.meta) == holder
        ]
        gone = 0
        needle = value.casefold()
        key_terms = set(index_terms(str(fact.get("key") or "")))
        for record in await self._raw(rkeys):
            text = str(record.get("value") or "") if isinstance(record, dict) else ""
            if needle in text.casefold() and key_terms <= set(index_terms(text)):
                gone += await self._forget(record)
        return gone

    @call(access="write")
    async def clear_memories(self, scope: Scope, agent_id: str = "", session_id: str = "") -> dict[str, Any]:
        """Forget every fact of one agent or session (e.g. when a session ends), or all global facts
        (admin only). A user clears only their own facts there."""
        op = "clear_memories"
        _require_writer(op)
        _check_ids(op, agent_id=agent_id, session_id=session_id)
        ctx = current_context()
        admin = _privileged(ctx)
        if scope == "global" and not admin:
            raise PermissionDenied(f"{op}: clearing global memories needs the admin role", op=op)
        owner = _owner(op, scope, agent_id, session_id)
        deleted = 0
        fragments: list[tuple[str, str, str, str]] = []
        for part in await self._parts():
            if part.scope != scope or part.owner != owner or not (admin or _owns(part.probe, ctx.principal)):
                continue
            if part.record is None:
                fragments.append(part.ids)
            elif await self._forget(part.record, audit=False):
                deleted += 1
        await self._purge(fragments)
        self._audit("memories_cleared", f"scope={scope} deleted={deleted}", session_id, None)
        return {"status": "ok", "scope": scope, "deleted": deleted}

    async def _forget(self, record: dict[str, Any], *, audit: bool = True) -> bool:
        """Remove every part of ``record`` in one transaction; False if the record was gone already (its
        other parts are removed all the same)."""
        scope, owner, key = record["scope"], record["owner"], record["key"]
        holder = str(record.get("holder") or "")
        results = await self.host.write_batch(_removal(scope, owner, key, holder))
        if not results[0]:
            self._drop_vector(_rkey(record))
            return False
        self._dropped(record)
        if audit:
            session = owner if scope == "session" else ""
            self._audit("memory_deleted", f"scope={scope} key={key}", session, record)
        return True

    def _dropped(self, record: Mapping[str, Any], *, counted: bool = True) -> None:
        """Bookkeeping after ``record``'s parts were removed."""
        self._drop_vector(_rkey(record))
        self.memory_count = max(0, self.memory_count - 1)
        if record.get("tier") == "core":
            self._core = None
        if counted:
            self._stats["deletes"] += 1

    def _drop_vector(self, rkey: str) -> None:
        if self._vectors is not None and self._vectors.pop(rkey, None) is not None:
            self._matrix = None

    async def _purge(self, ids: Iterable[tuple[str, str, str, str]]) -> int:
        """Remove the parts stored under facts that have no record (what an interrupted write of an older
        release left: an index entry, a tuple, an embedding), in one transaction; how many had any."""
        ids = [i for i in ids if len(_record_key(*i)) <= MAX_RECORD_KEY]  # a longer one: never stored
        if not ids:
            return 0
        writes = [w for i in ids for w in _removal(*i)]
        results = await self.host.write_batch(writes)
        for i in ids:
            self._drop_vector(_record_key(*i))
        return sum(any(results[n : n + 4]) for n in range(0, len(results), 4))

    # -- reads --------------------------------------------------------------------------------------------

    @call(access="read")
    async def recall_memory(
        self,
        key: str,
        scope: Scope = "global",
        agent_id: str = "",
        session_id: str = "",
        user_id: str = "",
        include_episodes: bool = True,
    ) -> dict[str, Any]:
        """``{found, value}`` for one key (value is None when not found): the caller's own fact under the key,
        else the tenant-shared one (an admin naming ``user_id``: as that user would find it). With
        ``include_episodes`` false an episode is not found (the agent's ``memory_recall`` tool: what it
        recalls is a stated fact, never its record of a past turn); a person naming an episode's key gets it."""
        op = "recall_memory"
        _check_ids(op, agent_id=agent_id, session_id=session_id, user_id=user_id)
        _check_text(op, "key", key, MAX_KEY_CHARS)
        owner = _owner(op, scope, agent_id, session_id)
        ctx = current_context()
        reader = _reader(ctx, user_id)
        record: dict[str, Any] | None = None
        now = self.host.now()
        for candidate in await self._candidates(scope, owner, key, reader.me):
            if not include_episodes and candidate.get("kind") == "episodic":
                continue
            if expired(candidate, now):
                continue  # gone from the moment it expired (the retention pass removes it later)
            if await self._sees(reader, [candidate]):
                record = candidate
                break
        self._stats["recalls"] += 1
        self.host.incr_counter("memory_recalls_total")
        if record is None:
            return {"status": "ok", "key": key, "scope": scope, "found": False, "value": None}
        return {"status": "ok", "found": True, **_view(record)}

    @call(access="read")
    async def list_memories(
        self,
        scope: ScopeFilter = "",
        tier: TierFilter = "",
        agent_id: str = "",
        session_id: str = "",
        limit: int = 100,
        user_id: str = "",
        kind: KindFilter = "",
        offset: int = 0,
        include_episodes: bool = False,
    ) -> dict[str, Any]:
        """Facts matching a scope, tier and/or kind (empty: any) that the caller may see (an admin naming
        ``user_id``: that user's view), sorted by scope, owner and key, one page at a time: ``limit`` from
        ``offset``; ``total`` counts every match, ``next_offset`` is the next page's (None after the last).
        Episodes (one per finished turn) are left out unless ``include_episodes`` or ``kind="episodic"``.
        With an agent or session id, other agents' and sessions' facts are left out."""
        op = "list_memories"
        _check_ids(op, agent_id=agent_id, session_id=session_id, user_id=user_id)
        if not 1 <= limit <= 1000:
            raise InvalidArgument(f"{op}: limit must be 1..1000", op=op, field="limit")
        if offset < 0:
            raise InvalidArgument(f"{op}: offset must be >= 0", op=op, field="offset")
        episodes = _shows_episodes(kind, include_episodes)
        owner: str | None = None
        if scope == "agent" and agent_id:
            owner = agent_id
        elif scope == "session" and session_id:
            owner = session_id
        rows = await self._rows(["memory", scope or None, owner, None, tier or None])
        now = self.host.now()
        records = [r for r in await self._records(rows) if not expired(r, now)]
        reader = _reader(current_context(), user_id)
        sessions = await self._session_owners(reader, records)
        shown = sorted(
            (
                r
                for r in records
                if _visible(r, agent_id, session_id)
                and reader.sees(r, sessions)
                and (not kind or r.get("kind", "semantic") == kind)
                and (episodes or r.get("kind") != "episodic")
            ),
            key=_order,
        )
        page = shown[offset : offset + limit]
        more = offset + len(page) < len(shown)
        return {
            "status": "ok",
            "memories": [_view(r) for r in page],
            "count": len(page),
            "total": len(shown),
            "offset": offset,
            "next_offset": offset + len(page) if more else None,
            "truncated": more,
        }

    @call(access="read")
    async def search_memories(
        self,
        query: str,
        limit: int = 10,
        scope: ScopeFilter = "",
        tier: TierFilter = "",
        agent_id: str = "",
        session_id: str = "",
        kind: KindFilter = "",
        user_id: str = "",
        min_score: float = 0.0,
        decay: bool = True,
        offset: int = 0,
        include_episodes: bool = False,
    ) -> dict[str, Any]:
        """Search, best first: ``memories: [{key, value, scope, tier, kind, score, relevance, snippet}]``.
        ``relevance`` (0..1) is lexical (query-word coverage weighted by BM25), fused with cosine similarity
        when the semantic extra is installed; ``score`` is relevance times temporal decay (pinned and core
        memories do not decay). Results below ``min_score`` are left out. Only what the caller may see is
        searched (an admin naming ``user_id``: what that user sees). Words match their possessives and
        stems ("sister" finds "sister's name", "running" finds "run"). Paged like ``list_memories``
        (``offset``, ``total``, ``next_offset``; ``offset + limit`` at most 500). Episodes (the record of past
        turns) are left out unless ``include_episodes`` or ``kind="episodic"``: a search answers with stated
        facts, not with what the agent said before; with them, stated facts still come first (each part best
        first), so an episode never outranks a fact (the prompt's recall asks for them, ``context.assembly``)."""
        op = "search_memories"
        _check_ids(op, agent_id=agent_id, session_id=session_id, user_id=user_id)
        _check_text(op, "query", query, MAX_QUERY_CHARS)
        if not 1 <= limit <= 100:
            raise InvalidArgument(f"{op}: limit must be 1..100", op=op, field="limit")
        if not 0 <= offset <= MAX_SEARCH_WINDOW - limit:
            raise InvalidArgument(
                f"{op}: offset must be within 0..{MAX_SEARCH_WINDOW} - limit", op=op, field="offset"
            )
        if not 0 <= min_score <= 1:
            raise InvalidArgument(f"{op}: min_score must be within 0..1", op=op, field="min_score")
        reader = _reader(current_context(), user_id)
        words = search_query_terms(query)
        legacy = query_terms(query)  # the words of records indexed before ANALYSIS (light stemmer)
        # Candidates come from the index; decay and filters reorder them, so fetch more than asked for.
        fetch = min(max((offset + limit) * 5, 50), MAX_SEARCH_WINDOW)
        candidates, best = await self._search_candidates(query, words + legacy, fetch)
        now = self.host.now()
        probes = {
            rkey: {"scope": meta.get("scope", ""), "owner": meta.get("owner", ""), **meta}
            for rkey, (meta, _, _) in candidates.items()
        }
        sessions = await self._session_owners(reader, probes.values())
        shown = _Shown(
            reader, sessions, agent_id, session_id, scope, tier, kind, _shows_episodes(kind, include_episodes)
        )
        ranked: list[tuple[float, float, str, bool]] = []
        for rkey, (meta, bm25, cos) in candidates.items():
            probe = probes[rkey]
            if not shown.admits(probe, now):
                continue
            asked = words if meta.get("analysis") == ANALYSIS else legacy
            relevance = lexical(asked, set(str(meta.get("terms", "")).split()), bm25 or 0.0, best)
            if self._embedder is not None:
                relevance = fuse(relevance, cos if cos is not None else 0.0)
            score = final_score(relevance, probe, now, self.half_life_days if decay else 0.0)
            if score >= min_score and score > 0:
                ranked.append((score, relevance, rkey, is_fact(probe)))
        ranked.sort(key=lambda r: (not r[3], -r[0]))  # stated facts first, then episodes; each best first
        found, gone = await self._search_page(ranked, offset + limit, limit, reader, sessions, words, now)
        page = found[offset:]
        total = len(ranked) - gone
        more = offset + len(page) < total
        self._stats["searches"] += 1
        self.host.incr_counter("memory_searches_total")
        return {
            "status": "ok",
            "query": query,
            "memories": page,
            "count": len(page),
            "total": total,
            "offset": offset,
            "next_offset": offset + len(page) if more else None,
        }

    async def _search_candidates(
        self, query: str, terms: list[str], fetch: int
    ) -> tuple[dict[str, tuple[dict[str, Any], float | None, float | None]], float]:
        """A search's candidates, ``rkey -> (meta, bm25 or None, cosine or None)``, from the text index and,
        with the semantic extra, the nearest vectors; and the best BM25 score (what relevance is scaled by)."""
        hits = await self.host.text.search(INDEX, " ".join(dict.fromkeys(terms)), limit=fetch)
        best = max((h.score for h in hits), default=0.0)
        candidates: dict[str, tuple[dict[str, Any], float | None, float | None]] = {
            h.doc_id: (h.meta if isinstance(h.meta, dict) else {}, h.score, None) for h in hits
        }
        if self._embedder is None:
            return candidates, best
        qvec = (await asyncio.to_thread(self._embedder.embed, [query]))[0]
        for rkey, cos_sim in await self._nearest(qvec, fetch):
            meta, lexical_score, _ = candidates.get(rkey, ({}, None, None))
            if lexical_score is not None or cos_sim >= DENSE_MIN_COSINE:
                candidates[rkey] = (meta, lexical_score, cos_sim)
        missing = [k for k, (meta, _, _) in candidates.items() if not meta]
        for rkey, record in zip(missing, await self._raw(missing), strict=True):
            if isinstance(record, dict):
                terms_of = " ".join(dict.fromkeys(index_terms(f"{record['key']} {record['value']}")))
                _, lexical_score, similarity = candidates[rkey]
                meta = {**record, "terms": terms_of, "analysis": ANALYSIS}
                candidates[rkey] = (meta, lexical_score, similarity)
        return candidates, best

    async def _search_page(
        self,
        ranked: list[tuple[float, float, str, bool]],
        wanted: int,
        spare: int,
        reader: _Reader,
        sessions: dict[str, str | None],
        words: list[str],
        now: float,
    ) -> tuple[list[dict[str, Any]], int]:
        """The first ``wanted`` ranked memories whose records still stand (read with ``spare`` more, for
        those whose record is gone), as the search shows them, and how many index entries were found
        without a record (see the module docstring)."""
        records = await self._raw([r[2] for r in ranked[: wanted + spare]])
        found: list[dict[str, Any]] = []
        gone = 0
        for (score, relevance, _key, _fact), record in zip(ranked, records, strict=False):
            if not isinstance(record, dict) or not reader.sees(record, sessions) or expired(record, now):
                gone += 1
                continue
            text = f"{record['key']}: {record['value'][:4000]}"
            found.append(
                {
                    **_view(record),
                    "score": round(score, 6),
                    "relevance": round(relevance, 6),
                    "snippet": snippet(text, words, stemmer=search_stem),
                }
            )
            if len(found) == wanted:
                break
        return found, gone

    @call(access="read")
    async def core_snapshot(
        self, user_id: str = "", agent_id: str = "", session_id: str = "", max_chars: int = 0
    ) -> dict[str, Any]:
        """The core-tier facts for the system prompt of one user's turns: the tenant-shared ones and that
        user's own (``user_id``, default the caller; users always get their own, viewers the shared ones
        only), global ones plus the agent's and the session's when their ids are given. Sorted, so the same
        facts always give the same prompt; bounded by ``max_chars`` (key + value)."""
        _check_ids("core_snapshot", user_id=user_id, agent_id=agent_id, session_id=session_id)
        budget = max_chars if max_chars > 0 else self.core_snapshot_chars
        reader = _reader(current_context(), user_id, prompt=True)
        records = [
            r
            for r in await self._core_records()
            if (r["scope"] != "agent" or (agent_id and r["owner"] == agent_id))
            and (r["scope"] != "session" or (session_id and r["owner"] == session_id))
        ]
        sessions = await self._session_owners(reader, records)
        chosen: list[dict[str, Any]] = []
        used = 0
        truncated = False
        for record in records:
            if not reader.sees(record, sessions):
                continue
            size = len(record["key"]) + len(record["value"])
            if used + size > budget:
                truncated = True
                continue
            used += size
            chosen.append({"key": record["key"], "value": record["value"], "scope": record["scope"]})
        return {"status": "ok", "memories": chosen, "count": len(chosen), "truncated": truncated}

    @call(access="read")
    async def turn_context(
        self, message: str, session_id: str = "", user_id: str = "", limits: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Memory's part of a turn's prompt (``minihermes.context.assembly``): the core facts of the turn's user
        (the stable prefix: tenant-shared ones and that user's own, never another user's), and the memories
        recalled for its message (``memory_top_k`` at or above ``memory_min_score``, core facts not repeated).
        Stated facts are searched on their own, undecayed (a fact the user stated stays true until they
        change it, and a crowd of fresh episodes must not push it out), then everything, episodes included;
        ``recall.for_prompt`` puts the facts first. Reply: ``parts`` (``ContextPart``)."""
        lim = limits or {}
        core = (await self.core_snapshot(user_id=user_id, max_chars=int(lim.get("core_chars", 4_000))))[
            "memories"
        ]
        parts = [
            context_part("core_memory", prompt.core_section(core), priority=CORE_PRIORITY, place="prefix")
        ]
        top_k = int(lim.get("memory_top_k", 5))
        if top_k > 0:
            query, floor = message[:1000], float(lim.get("memory_min_score", 0.3))
            facts = await self.search_memories(
                query,
                top_k,
                session_id=session_id,
                kind="semantic",
                user_id=user_id,
                min_score=floor,
                decay=False,
            )
            found = await self.search_memories(
                query,
                min(100, top_k * 3),
                session_id=session_id,
                user_id=user_id,
                min_score=floor,
                include_episodes=True,
            )
            core_keys = {m["key"] for m in core}
            candidates = (
                m for m in [*facts["memories"], *found["memories"]] if m.get("key") not in core_keys
            )
            recalled = for_prompt(candidates, top_k)
            text = prompt.memories_section(recalled)
            parts.append(
                context_part(
                    "memories", text, priority=MEMORIES_PRIORITY, ids=[str(m.get("key")) for m in recalled]
                )
            )
        return {"status": "ok", "parts": [p for p in parts if p["text"]]}

    @call(access="write")  # a user forgets what is theirs (checked below); an admin any user or the tenant
    async def forget(
        self,
        key: str = "",
        scope: Scope = "global",
        agent_id: str = "",
        session_id: str = "",
        user_id: str = "",
        everything: bool = False,
        tenant: bool = False,
    ) -> dict[str, Any]:
        """Forget one memory (``key`` in ``scope``), a session (its session-scoped facts, the facts that came
        from it, its transcript, archives, history and skill provenance), a user (all of that for each of
        their sessions, and their facts) or, with ``everything`` or ``tenant`` (admin), the whole tenant,
        from every store (``minihermes.context.forget``); ``cleared`` counts what went, per store. End users
        may forget only their own memories, sessions and themselves: of a session whose owner is not
        recorded, only their own facts."""
        op = "forget"
        _require_writer(op)
        _check_ids(op, agent_id=agent_id, session_id=session_id, user_id=user_id)
        ctx = current_context()
        if key:
            one = await self.delete_memory(key, scope, agent_id, session_id, user_id)
            return {**one, "mode": "memory"}
        admin = _privileged(ctx)
        owner: str | None = None
        if (everything or tenant) and not ctx.roles & _ADMIN_ROLES:  # before user_id: HTTP fills in a user's
            raise PermissionDenied(f"{op}: forgetting a tenant needs the admin role", op=op, field="tenant")
        if session_id:
            mode = "session"
            owner = await forgetting.session_owner(self.host, session_id)
            if is_restricted(ctx) and owner not in (None, ctx.principal):
                raise PermissionDenied(f"{op}: not your session", op=op, field="session_id")
        elif user_id:
            mode = "user"
            if is_restricted(ctx) and user_id != ctx.principal:
                raise PermissionDenied(f"{op}: users can forget only themselves", op=op, field="user_id")
        elif everything or tenant:
            mode = "tenant"
            if not ctx.roles & _ADMIN_ROLES:
                raise PermissionDenied(f"{op}: forgetting a tenant needs the admin role", op=op)
        else:
            raise InvalidArgument(f"{op}: give key, session_id, user_id or tenant", op=op, field="key")

        def taken(scope: Any, holder_of: Any, probe: Mapping[str, Any]) -> bool:
            """Whether this forget takes a fact (``probe``: its record, index meta or held write) of ``scope``
            owned by ``holder_of`` (its session or agent id)."""
            if mode == "session":
                named = (scope == "session" and holder_of == session_id) or probe.get(
                    "source_session"
                ) == session_id
                return named and (admin or owner == ctx.principal or _owns(probe, ctx.principal))
            if mode == "user":
                return _owns(probe, user_id) or (admin and probe.get("user_id") == user_id)
            return True

        deleted = 0
        fragments: list[tuple[str, str, str, str]] = []
        for part in await self._parts():
            if not taken(part.scope, part.owner, part.probe):
                continue
            if part.record is None:
                fragments.append(part.ids)
            elif await self._forget(part.record, audit=False):
                deleted += 1
        partial = await self._purge(fragments)
        held = 0
        for qkey, pending in await self.host.kv.list(_QUAR):
            if isinstance(pending, dict):
                hit = taken(pending.get("scope"), pending.get("owner"), pending)
            else:
                hit = mode == "tenant"
            if hit and await self.host.kv.delete(qkey):
                held += 1
        if session_id:
            await self.host.kv.delete(_LAST_EPISODE + quote(session_id, safe=""))
        elsewhere = await forgetting.forget_elsewhere(
            self.host, session_id=session_id, user_id="" if session_id else user_id, indexes=[INDEX]
        )
        elsewhere["cleared"]["memories"] = deleted + partial
        elsewhere["cleared"]["quarantined_memories"] = held
        self._stats["forgets"] += 1
        self._audit("memories_forgotten", f"mode={mode} deleted={deleted}", session_id, None)
        return {"status": "ok", "mode": mode, "memories": deleted, "partial_memories": partial, **elsewhere}

    @cast
    async def session_ended(self, session_id: str) -> None:
        """A session ended (sent by ``session_manager``): its session-scoped memories go, whoever's."""
        if not session_id or len(session_id) > MAX_ID_CHARS or _REFUSED_CHARS.search(session_id):
            return  # no session-scoped memory was stored for such a session
        for t in await self._rows(["memory", "session", session_id, None, None]):
            record = await self.host.kv.get(_record_key(*t))
            if isinstance(record, dict):
                await self._forget(record, audit=False)
            else:
                await self._purge([t])  # a tuple whose record is gone: with whatever else it left
        for qkey, pending in await self.host.kv.list(_QUAR):  # held writes of the session's scope too
            if isinstance(pending, dict) and (pending.get("scope"), pending.get("owner")) == (
                "session",
                session_id,
            ):
                await self.host.kv.delete(qkey)
        await self.host.kv.delete(_LAST_EPISODE + quote(session_id, safe=""))

    @call
    async def purge_expired(self) -> dict[str, Any]:
        """The retention pass (admin; the memory's own reminder runs it): every part of each expired fact
        (record, index entry, tuple, embedding) is removed in one transaction per batch. Expired facts are
        absent from every read already; this frees their storage. ``{purged, next_purge_at}``."""
        op = "purge_expired"
        if not _privileged(current_context()):
            raise PermissionDenied(f"{op}: the retention pass is run by admins and the runtime", op=op)
        now = self.host.now()
        due: list[str] = []
        later: list[float] = []
        # The index meta carries every fact's expires_at: one scan, no record read for the live ones.
        for rkey, meta in await self.host.text.documents(INDEX):
            if not isinstance(meta, dict) or meta.get("expires_at") is None:
                continue
            if expired(meta, now):
                due.append(rkey)
            else:
                later.append(float(meta["expires_at"]))
        for qkey, pending in await self.host.kv.list(_QUAR):  # held writes expire as memories do
            at = pending.get("expires_at") if isinstance(pending, dict) else None
            if at is not None and float(at) <= now:
                await self.host.kv.delete(qkey)
            elif at is not None:
                later.append(float(at))
        purged = 0
        for start in range(0, len(due), _PURGE_BATCH):
            batch = due[start : start + _PURGE_BATCH]
            records: list[dict[str, Any]] = []
            fragments: list[tuple[str, str, str, str]] = []
            for rkey, record in zip(batch, await self._raw(batch), strict=True):
                if isinstance(record, dict) and expired(record, now):
                    records.append(record)
                elif isinstance(record, dict) and record.get("expires_at") is not None:
                    later.append(float(record["expires_at"]))
                elif record is None and (ids := _parse_rkey(rkey)) is not None:
                    fragments.append(ids)  # an index entry whose record is gone: with what else it left
            purged += await self._forget_all(records)
            await self._purge(fragments)
        self.purge_at = None
        if later:
            await self._plan_purge(min(later))
        else:
            await self.host.cancel_reminder(_PURGE_REMINDER)
        if purged:
            self._audit("memories_expired", f"purged={purged}", "", None)
        return {"status": "ok", "purged": purged, "next_purge_at": self.purge_at}

    async def _forget_all(self, records: list[dict[str, Any]]) -> int:
        """Remove every part of each of ``records`` in one transaction; how many records were there."""
        if not records:
            return 0
        writes = [w for r in records for w in _removal(*_ids(r))]
        results = await self.host.write_batch(writes)
        removed = 0
        for i, record in enumerate(records):
            if results[4 * i]:
                self._dropped(record)
                removed += 1
            else:
                self._drop_vector(_rkey(record))
        return removed

    async def _plan_purge(self, expires_at: float) -> None:
        """Arm the retention pass for a fact expiring at ``expires_at``: at the end of the
        ``retention_interval`` it falls in, unless a pass is armed for no later than that already (so one
        pass per interval removes everything that expired in it, and most stores arm nothing)."""
        step = self.retention_interval
        at = math.ceil(expires_at / step) * step
        if self.purge_at is not None and self.host.now() < self.purge_at <= at:
            return
        with self._as_memory():
            await self.host.set_reminder(_PURGE_REMINDER, "purge_expired", at=at)
        self.purge_at = at

    @contextmanager
    def _as_memory(self) -> Iterator[None]:
        """The reminder fires in the context it was set in: the tenant's, as the memory service itself
        (``system``), never as the user whose store armed it."""
        ctx = current_context()
        token = set_context(replace(ctx, principal="memory", roles=frozenset({"system"})))
        try:
            yield
        finally:
            reset_context(token)

    @call(access="read")
    def get_stats(self) -> dict[str, Any]:
        """Stored facts (durable count) and operations since this instance started."""
        return {"status": "ok", "memories": self.memory_count, **self._stats}

    # -- the turn listener (``minihermes.turn_event``) ----------------------------------------------------

    @cast
    async def turn_completed(
        self,
        session_id: str,
        user_id: str,
        user_message: str,
        status: str,
        response: str,
        tool_calls: list[dict[str, Any]] | None = None,
        episodic: bool = True,
        success: bool = True,
        turn_id: str = "",
        corrects_turn: str = "",
        untrusted: bool = False,
        **_record: Any,
    ) -> None:
        """A finished turn (published by the agent, never awaited): its episode, private to the turn's user
        and taken along when the session is forgotten, unless the session keeps none (``episodic``), the
        turn fell short (``success`` false: a failed tool call, the step limit, an answer contradicting its
        tool results, searches that found nothing, an answer saying it could not do the request: nothing is
        remembered from such a turn) or the turn only looked memories up (every tool call in
        ``LOOKUP_TOOLS``: its episode would repeat other memories). A turn that corrects the session's
        previous one (``corrects_turn``) first deletes that turn's episode. The episode expires after the
        episodic default (``ttl_defaults``), or with the shortest-lived memory the turn stored. The episode of
        a turn that saw untrusted content (``untrusted``) is quarantined like any write derived from it."""
        if corrects_turn:
            await self._retract_episode(session_id, corrects_turn, user_id)
        if not episodic or not success:
            return
        names = [str(c.get("name", "")) for c in tool_calls or [] if isinstance(c, dict)]
        if names and all(n in LOOKUP_TOOLS for n in names):
            return  # it only looked memories up: its episode would echo them (an episode of an episode)
        tools = ", ".join(dict.fromkeys(names)) or "none"
        value = f"Task: {user_message[:500]}\nTools used: {tools}\nOutcome: {status}: {response[:500]}"
        # Keyed by what happened: the same task done the same way again refreshes one episode instead of
        # piling up copies that crowd everything else out of recall.
        digest = hashlib.sha256(f"{user_id}\x1f{value}".encode()).hexdigest()[:20]
        # The turn's own session (no ownership check: the record comes from the agent, or an admin).
        _require_writer("store_memory")
        _check_ids("store_memory", user_id=user_id, source_session=session_id)
        await self._store(
            key=f"episode:{digest}",
            value=value,
            scope="global",
            tier="reachable",
            agent_id="",
            session_id="",
            user_id=user_id,
            kind="episodic",
            pinned=False,
            private=True,
            source_session=session_id,
            ttl_seconds=self._episode_ttl(tool_calls or []),
            origin=("agent", bool(untrusted)),
        )
        if turn_id and session_id:
            # What a correction in the session's next message retracts (one entry per session).
            entry = {"turn_id": turn_id, "key": f"episode:{digest}"}
            await self.host.kv.put(_LAST_EPISODE + quote(session_id, safe=""), entry)

    def _episode_ttl(self, tool_calls: list[dict[str, Any]]) -> int:
        """The episode's ``ttl_seconds``: the episodic default (0), or sooner when the turn stored a memory
        that expires sooner (its text quotes the user's message, so it would outlive the fact)."""
        ttls = [
            ttl
            for c in tool_calls
            if isinstance(c, dict)
            and c.get("name") == "memory_store"
            and not c.get("is_error")
            and isinstance(c.get("input"), dict)
            and type(ttl := c["input"].get("ttl_seconds")) is int
            and 1 <= ttl <= MAX_TTL_SECONDS
        ]
        if not ttls:
            return 0
        default = self.ttl_defaults.get("episodic", NEVER)
        return min(ttls) if default == NEVER else min(*ttls, default)

    async def _retract_episode(self, session_id: str, turn_id: str, user: str) -> None:
        """Delete ``user``'s episode of ``turn_id`` if it is the session's last one (they said it was wrong)."""
        marker = _LAST_EPISODE + quote(session_id, safe="")
        entry = await self.host.kv.get(marker)
        if not isinstance(entry, dict) or entry.get("turn_id") != turn_id:
            return
        # An episode still held in quarantine goes too.
        await self.host.kv.delete(_QUAR + _record_key("global", "", str(entry.get("key") or ""), user))
        for record in await self._candidates("global", "", str(entry.get("key") or ""), user):
            if record.get("kind") == "episodic" and _owns(record, user):
                await self._forget(record, audit=False)
                self._audit("episode_retracted", "corrected by the user", session_id, record)
                break
        await self.host.kv.delete(marker)

    # -- helpers ------------------------------------------------------------------------------------------

    async def _rows(self, pattern: list[Any]) -> list[tuple[str, str, str, str]]:
        """``(scope, owner, key, holder)`` of the shared and the private index tuples matching a 5-element
        pattern."""
        shared, private = await asyncio.gather(
            self.host.tuples.read_all(pattern), self.host.tuples.read_all([*pattern, None])
        )
        return [(str(t[1]), str(t[2]), str(t[3]), "") for t in shared] + [
            (str(t[1]), str(t[2]), str(t[3]), str(t[5])) for t in private
        ]

    async def _records(self, ids: list[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
        keys = [k for i in ids if len(k := _record_key(*i)) <= MAX_RECORD_KEY]  # a longer one: never stored
        got = await asyncio.gather(*(self.host.kv.get(k) for k in keys))
        return [r for r in got if isinstance(r, dict)]

    async def _candidates(self, scope: str, owner: str, key: str, who: str) -> list[dict[str, Any]]:
        """The records ``key`` may name for ``who``, in the order they are looked up: ``who``'s own, then the
        shared one (or one from before ownership)."""
        ids = ([(scope, owner, key, who)] if who else []) + [(scope, owner, key, "")]
        return await self._records(ids)

    async def _session_owners(
        self, reader: _Reader, records: Iterable[Mapping[str, Any]]
    ) -> dict[str, str | None]:
        """The owner of each session whose shared facts ``reader`` needs it for (see ``_Reader.sees``)."""
        sids = sorted({str(r.get("owner")) for r in records if reader.needs_owner(r)})
        owners = await asyncio.gather(*(forgetting.session_owner(self.host, sid) for sid in sids))
        return dict(zip(sids, owners, strict=True))

    async def _sees(self, reader: _Reader, records: list[dict[str, Any]]) -> bool:
        """Whether ``reader`` sees every one of ``records``."""
        sessions = await self._session_owners(reader, records)
        return all(reader.sees(r, sessions) for r in records)

    async def _raw(self, rkeys: list[str]) -> list[Any]:
        return list(await asyncio.gather(*(self.host.kv.get(k) for k in rkeys)))

    async def _nearest(self, qvec: list[float], n: int) -> list[tuple[str, float]]:
        """The ``n`` records whose embeddings are closest to ``qvec`` (a scan of this tenant's vectors,
        held in memory as one matrix; embeddings are unit length, so the dot product is the cosine)."""
        if self._vectors is None:
            rows = await self.host.kv.list(_VEC)
            self._vectors = {k[len(_VEC) :]: v for k, v in rows if isinstance(v, list)}
        if not self._vectors:
            return []
        import numpy as np  # present whenever the semantic extra is (sentence-transformers needs it)

        if self._matrix is None:
            keys = list(self._vectors)
            self._matrix = (keys, np.asarray([self._vectors[k] for k in keys], dtype=np.float32))
        keys, matrix = self._matrix
        sims = matrix @ np.asarray(qvec, dtype=np.float32)
        top = np.argsort(-sims)[:n]
        return [(keys[i], float(sims[i])) for i in top]

    async def _parts(self) -> list[_Part]:
        """Every fact this tenant holds any part of (record, tuple, index entry, embedding), by record key:
        the whole-tenant scan of forgetting, which must also find what an interrupted write left behind."""
        shared, private, rows, docs, vectors = await asyncio.gather(
            self.host.kv.list("mem:"),
            self.host.kv.list("memp:"),
            self._rows(["memory", None, None, None, None]),
            self.host.text.documents(INDEX),
            self.host.kv.list(_VEC),
        )
        parts: dict[str, _Part] = {}

        def part(rkey: str) -> _Part | None:
            if rkey not in parts:
                ids = _parse_rkey(rkey)
                if ids is None:
                    return None
                parts[rkey] = _Part(ids)
            return parts[rkey]

        for rkey, record in [*shared, *private]:
            if isinstance(record, dict) and (p := part(rkey)) is not None and _is_record(record, p.ids):
                p.record = record
        for ids in rows:
            part(_record_key(*ids))
        for rkey, meta in docs:
            if (p := part(rkey)) is not None and isinstance(meta, dict):
                p.meta = meta
        for vkey, _vector in vectors:
            part(vkey[len(_VEC) :])
        return list(parts.values())

    async def _core_records(self) -> list[dict[str, Any]]:
        """The core records that have not expired (cached: once the earliest expiry in the cache passes,
        the expired ones leave it, without reading the store again)."""
        now = self.host.now()
        if self._core is None:
            records = await self._records(await self._rows(["memory", None, None, None, "core"]))
            self._core = sorted((r for r in records if r.get("tier") == "core"), key=_order)
            self._core_expiry = None
        elif self._core_expiry is None or now < self._core_expiry:
            return self._core
        self._core = [r for r in self._core if not expired(r, now)]
        self._core_expiry = min(
            (float(r["expires_at"]) for r in self._core if r.get("expires_at") is not None), default=None
        )
        return self._core

    def _audit(self, event_type: str, detail: str, session_id: str, record: dict[str, Any] | None) -> None:
        data = {}
        if record is not None:
            data = {k: record[k] for k in ("key", "scope", "tier")} | {"size": len(record["value"])}
        if self._audit_on:
            fire_audit(self.host, event_type, detail, session_id=session_id, data=data)
