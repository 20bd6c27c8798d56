"""The storage contract: one Protocol per host primitive, implemented once per backend.

Every method takes a ``Scope`` (tenant, namespace) as its first argument. Backends never infer a scope: the
runtime's ``Host`` binds it from the request context, so an actor cannot name another tenant's scope. Two
scopes share nothing: keys, tuples, blobs, streams, channels, locks, reminders and checkpoints of one scope
are invisible to every call made with another.

All methods are coroutines; a backend must not block the event loop. Values are JSON-compatible Python values
(``None``, bool, int, float, str, list, dict) unless a signature says ``bytes``.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")
JSON = Any
Scalar = str | int | float | bool | None
Scope = tuple[str, str]
"""(tenant, namespace). Both non-empty strings."""


# --------------------------------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class KVEntry:
    value: JSON
    version: int
    """Starts at 1 on creation, +1 on every successful put/cas. A deleted-then-recreated key restarts at 1."""
    expires_at: float | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class BlobInfo:
    name: str
    size: int
    content_type: str
    updated_at: float


@dataclass(frozen=True, slots=True)
class EventRecord:
    seq: int
    """1-based, gap-free per (scope, stream) even across retention (trimmed entries keep their numbers)."""
    ts: float
    data: JSON
    """None when ``erased``."""
    prev_hash: str
    hash: str
    """Format 1: sha256 hex of prev_hash + canonical JSON of (seq, ts, data); the first entry's prev_hash is 64
    zeros. Format 2: of prev_hash + canonical JSON of (2, seq, ts, kind, key_id, digest), where digest is the
    sha256 hex of the stored content (the sealed bytes, or the canonical JSON text of unsealed data)."""
    kind: str = ""
    """Format 2: the label the appender gave (retention rules select by it); "" for format 1."""
    v: int = 1
    """Chain format: 1 (data hashed as is), 2 (``kind``, and content hashed through its digest)."""
    erased: str = ""
    """"forgotten" (its subject's key was deleted, or its plain content blanked by ``forget``) or "trimmed"
    (content removed by a retention rule on its kind); "" while the content is readable."""


@dataclass(frozen=True, slots=True)
class ChainCheck:
    ok: bool
    checked: int
    first_bad_seq: int | None = None
    reason: str = ""
    anchored: bool = False
    """Verified from a signed anchor given by the caller (``EventLog.verify(anchor=...)``)."""


@dataclass(frozen=True, slots=True)
class Erasure:
    """What ``EventLog.forget`` did: ``forgotten`` entries are unreadable from now on (their subjects' keys
    deleted, ``keys`` of them), ``legacy`` of them plain entries (format 1) whose content was blanked and
    recorded in an erasure entry; ``kept`` plain entries that did not match their own hash were left as they
    are (evidence: ``verify`` reports them)."""

    forgotten: int = 0
    keys: int = 0
    legacy: int = 0
    kept: int = 0


@dataclass(frozen=True, slots=True)
class ChannelMessage:
    msg_id: str
    channel: str
    msg_type: str
    payload: JSON
    deliveries: int
    """How many times this message has been handed out, this delivery included."""
    sent_at: float
    receipt: str = ""
    """Opaque holder tag given to receive(); ack/nack by an older receipt after redelivery are refused."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    msg_id: str
    channel: str
    msg_type: str
    payload: JSON
    deliveries: int
    reason: str
    sent_at: float
    dead_at: float


@dataclass(frozen=True, slots=True)
class ChannelDepth:
    ready: int
    in_flight: int
    dead: int


@dataclass(frozen=True, slots=True)
class LockInfo:
    name: str
    holder: str
    token: int
    expires_at: float


ItemChange = tuple[str, int, tuple[bytes, ...]]
"""(field, start, items): an append-only state field's stored items from ``start`` on become ``items``."""
Items = tuple[ItemChange, ...]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    actor_id: str
    state_version: int
    data: bytes
    updated_at: float
    items: dict[str, bytes] = field(default_factory=dict)
    """Append-only state fields saved item by item: field -> its items as one JSON array, in order."""


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    kind: str
    scope: Scope
    key: str
    reason: str
    data: bytes
    at: float


@dataclass(frozen=True, slots=True)
class Reminder:
    scope: Scope
    target: str
    """Actor address string the reminder is delivered to."""
    name: str
    op: str
    payload: JSON
    next_fire_at: float
    period: float | None
    """Seconds between fires; None for a one-shot reminder (deleted after it fires)."""
    context: JSON = None
    """Serialized request context the reminder fires with (principal etc.)."""


@dataclass(frozen=True, slots=True)
class SearchHit:
    doc_id: str
    score: float
    """Higher is better (backends convert their native ranking, e.g. negate FTS5 bm25())."""
    snippet: str
    meta: JSON = None


@dataclass(frozen=True, slots=True)
class VectorHit:
    doc_id: str
    score: float
    """Cosine similarity of the stored and the query vector, in [-1, 1]; higher is better."""
    meta: JSON = None


@dataclass(slots=True)
class RetentionRule:
    """Delete what is older than ``max_age`` seconds and/or keep at most ``max_count`` newest entries.

    kind is one of: "events" (selector = stream name or "*"), "dead_letters" (selector = channel or "*"),
    "kv" (selector = key prefix), "blobs" (selector = name prefix), "tuples" (selector = first tuple element),
    "quarantine" (selector ignored), "checkpoints" (selector = actor_id prefix; only rows not updated for
    max_age), "dedup" (selector = channel or "*": channel dedup keys, which otherwise outlive their acked
    messages). Applied across all scopes.
    """

    kind: str
    selector: str = "*"
    max_age: float | None = None
    max_count: int | None = None
    event_types: tuple[str, ...] = ()
    """kind "events" only: the rule applies to the format-2 entries of these kinds and removes their content
    (the entries, their kind, time and hash stay, so the chain verifies); max_count keeps the newest N of
    those kinds per stream. Empty: the rule trims the oldest entries of the stream, whatever their kind."""


@dataclass(frozen=True, slots=True)
class RetentionReport:
    deleted: dict[str, int] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------- atomic batches


@dataclass(frozen=True, slots=True)
class KVPut:
    """``KVStore.put`` in a batch (its result: the new version)."""

    key: str
    value: JSON
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class KVDelete:
    """``KVStore.delete`` in a batch (its result: whether a live entry was deleted)."""

    key: str


@dataclass(frozen=True, slots=True)
class TupleWrite:
    """``TupleSpace.write`` in a batch (its result: None)."""

    tup: Sequence[Scalar]


@dataclass(frozen=True, slots=True)
class TupleTakeAll:
    """``TupleSpace.take_all`` in a batch (its result: how many were removed)."""

    pattern: Sequence[Scalar]


@dataclass(frozen=True, slots=True)
class TextUpsert:
    """``TextIndex.upsert`` in a batch (its result: None)."""

    index: str
    doc_id: str
    fields: dict[str, str]
    meta: JSON = None


@dataclass(frozen=True, slots=True)
class TextRemove:
    """``TextIndex.remove`` in a batch (its result: whether the document was there)."""

    index: str
    doc_id: str


Write = KVPut | KVDelete | TupleWrite | TupleTakeAll | TextUpsert | TextRemove
"""One write of ``Store.write_batch``: the same operation as the primitive's method of that name."""


# --------------------------------------------------------------------------------------------------- protocols


@runtime_checkable
class KVStore(Protocol):
    async def get(self, scope: Scope, key: str) -> JSON | None: ...
    async def get_entry(self, scope: Scope, key: str) -> KVEntry | None: ...
    async def put(self, scope: Scope, key: str, value: JSON, ttl: float | None = None) -> int:
        """Store value; returns the new version. ttl in seconds (None = no expiry)."""
        ...

    async def cas(
        self, scope: Scope, key: str, expected_version: int | None, value: JSON, ttl: float | None = None
    ) -> int | None:
        """Compare-and-set. expected_version None means "only if absent (or expired)". Returns the new
        version on success, None on conflict."""
        ...

    async def delete(self, scope: Scope, key: str) -> bool: ...
    async def list(self, scope: Scope, prefix: str = "", limit: int | None = None) -> list[tuple[str, JSON]]:
        """Live (unexpired) entries whose key starts with prefix, ordered by key."""
        ...


@runtime_checkable
class TupleSpace(Protocol):
    """Tuples of scalars. A pattern matches tuples of the same arity; ``None`` in a pattern is a wildcard,
    any other element must equal the tuple's element with the same type (1 != "1", True != 1).
    Results are in insertion order."""

    async def write(self, scope: Scope, tup: Sequence[Scalar]) -> None: ...
    async def write_many(self, scope: Scope, tuples: Sequence[Sequence[Scalar]]) -> int:
        """Write several tuples in one transaction (all or none), in order; returns how many."""
        ...

    async def write_unless(self, scope: Scope, tup: Sequence[Scalar], pattern: Sequence[Scalar]) -> bool:
        """Write ``tup`` unless a tuple matching ``pattern`` exists; True if it wrote. Atomic among the
        ``write_unless`` calls writing tuples with the same first element: of two concurrent ones whose
        tuples match each other's patterns, one writes."""
        ...

    async def read(self, scope: Scope, pattern: Sequence[Scalar]) -> tuple[Scalar, ...] | None: ...
    async def take(self, scope: Scope, pattern: Sequence[Scalar]) -> tuple[Scalar, ...] | None:
        """Remove and return the oldest match, atomically (two concurrent takes never get the same tuple)."""
        ...

    async def read_all(
        self, scope: Scope, pattern: Sequence[Scalar], limit: int | None = None
    ) -> list[tuple[Scalar, ...]]: ...
    async def take_all(self, scope: Scope, pattern: Sequence[Scalar]) -> int:
        """Remove every match; returns how many."""
        ...


@runtime_checkable
class BlobStore(Protocol):
    async def put(
        self, scope: Scope, name: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> None: ...
    async def get(self, scope: Scope, name: str) -> bytes | None: ...
    async def delete(self, scope: Scope, name: str) -> bool: ...
    async def list(self, scope: Scope, prefix: str = "") -> list[BlobInfo]: ...


@runtime_checkable
class EventLog(Protocol):
    """Append-only, hash-chained streams. There is no delete; only retention trims the oldest entries (or
    the content of entries of some kinds), and verification continues across the trim from the retained
    anchor hash; each trim also writes an anchor signed with the node key (``anchors``). ``read``,
    ``last_seq`` and ``verify`` see every append the same store object was asked for before them (committed
    or failed first), whoever asked; other processes' appends once they are committed.

    Forgettable entries: an append that names ``subjects`` (opaque strings: the runtime knows nothing of
    what they stand for) is sealed (AES-256-GCM) under a key kept for that set of subjects, and the chain
    hashes the sealed bytes; ``forget`` deletes the keys of a subject, which makes its entries unreadable
    without changing anything the chain covers. An append that names a ``kind`` or ``subjects`` is written in
    chain format 2; one that names neither in format 1, as before."""

    async def append(
        self,
        scope: Scope,
        stream: str,
        data: JSON,
        *,
        kind: str | None = None,
        subjects: Sequence[str] | None = None,
    ) -> EventRecord: ...
    def append_nowait(
        self,
        scope: Scope,
        stream: str,
        data: JSON,
        *,
        kind: str | None = None,
        subjects: Sequence[str] | None = None,
    ) -> asyncio.Future[EventRecord]:
        """``append`` without waiting: the data is checked and queued now, appends are chained in call
        order, and the future resolves once the event is committed. Cancelling it does not stop the write."""
        ...

    async def read(
        self, scope: Scope, stream: str, after_seq: int = 0, limit: int = 100
    ) -> list[EventRecord]: ...
    async def last_seq(self, scope: Scope, stream: str) -> int: ...
    async def verify(self, scope: Scope, stream: str, *, anchor: dict[str, Any] | None = None) -> ChainCheck:
        """Recompute the chain. With ``anchor`` (one exported by ``anchors``, kept outside the store), the
        chain must also pass through the positions it pins and its signature must hold: a remainder
        rewritten after a trim is reported at the first sequence number that departs from the anchor. A
        malformed anchor, or one for another scope or stream, is a ValueError."""
        ...

    async def streams(self, scope: Scope) -> list[str]: ...
    async def forget(
        self,
        scope: Scope,
        stream: str,
        subjects: Sequence[str] | None,
        *,
        legacy: Callable[[JSON], str | None] | None = None,
    ) -> Erasure:
        """Delete the keys of every subject set that contains one of ``subjects`` (``None``: every key of
        the stream, and the content of every plain entry), with SQLite's secure_delete on. ``legacy``
        selects plain format-1 entries (written before sealing existed) to blank as well: it names the kind
        an entry keeps (None: leave it). Each blanked entry is recorded, with that kind, in a chained
        erasure entry (kind ``~erasure``) so the chain still verifies."""
        ...

    async def anchors(self, scope: Scope, stream: str) -> list[dict[str, Any]]:
        """The signed anchors retention wrote for this stream, oldest first, as exported (JSON objects)."""
        ...


@runtime_checkable
class ChannelStore(Protocol):
    """Durable at-least-once queues."""

    async def declare(
        self, scope: Scope, channel: str, *, max_deliveries: int = 5, visibility_timeout: float = 30.0
    ) -> None:
        """Set per-channel options (idempotent; later calls update them). Undeclared channels use defaults."""
        ...

    async def send(
        self, scope: Scope, channel: str, msg_type: str, payload: JSON, *, dedup_key: str | None = None
    ) -> str:
        """Enqueue; returns msg_id. With dedup_key, a second send with the same key on the same channel
        (while the first message exists, acked or not, within retention) returns the first msg_id and
        enqueues nothing."""
        ...

    async def send_batch(
        self, scope: Scope, channel: str, messages: Sequence[tuple[str, JSON]]
    ) -> builtins.list[str]:
        """Enqueue (msg_type, payload) pairs in one durable write, in order; returns their msg_ids."""
        ...

    async def receive(
        self,
        scope: Scope,
        channel: str,
        *,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        receipt: str = "",
    ) -> list[ChannelMessage]:
        """Non-blocking. Hands out up to max_messages ready messages (oldest first), makes them invisible
        for the visibility timeout and increments their deliveries. A message whose deliveries already
        reached max_deliveries is moved to the dead-letter queue instead of being handed out."""
        ...

    async def ack(self, scope: Scope, channel: str, msg_id: str, receipt: str | None = None) -> bool: ...
    async def ack_batch(
        self, scope: Scope, channel: str, msg_ids: Sequence[str], receipt: str | None = None
    ) -> int:
        """Ack many in one durable write (same receipt rule as ack); returns how many were acked."""
        ...

    async def nack(
        self,
        scope: Scope,
        channel: str,
        msg_id: str,
        *,
        requeue: bool = True,
        reason: str = "",
        receipt: str | None = None,
    ) -> bool:
        """requeue=True makes it ready again at once (dead-lettered instead if max_deliveries is reached);
        requeue=False dead-letters it with reason."""
        ...

    async def release_receipt(self, receipt: str) -> int:
        """Make every in-flight message handed out under this receipt ready again now, in all scopes
        (consumer crash or restart). Returns how many."""
        ...

    async def release_receipt_prefix(self, prefix: str) -> int:
        """Like release_receipt for every receipt starting with prefix (a node restarting releases what its
        previous run left in flight: receipts are "<node_id>:<boot>:..."). Returns how many."""
        ...

    async def depth(self, scope: Scope, channel: str) -> ChannelDepth: ...
    async def dead_letters(self, scope: Scope, channel: str, limit: int = 100) -> list[DeadLetter]: ...
    async def redrive(self, scope: Scope, channel: str, msg_id: str) -> bool:
        """Move one dead letter back to the ready queue with deliveries reset."""
        ...


@runtime_checkable
class LockStore(Protocol):
    async def try_acquire(self, scope: Scope, name: str, holder: str, ttl: float) -> int | None:
        """Returns a fencing token (strictly increasing per (scope, name), never reused) or None if another
        holder has an unexpired lease. The same holder re-acquiring an unexpired lease gets a new token."""
        ...

    async def renew(self, scope: Scope, name: str, holder: str, token: int, ttl: float) -> bool: ...
    async def release(self, scope: Scope, name: str, holder: str, token: int) -> bool: ...
    async def get(self, scope: Scope, name: str) -> LockInfo | None: ...
    async def release_holder(self, holder: str) -> int:
        """Release every lock held by holder, in all scopes (graceful stop). Returns how many."""
        ...


@runtime_checkable
class CheckpointStore(Protocol):
    """Actor state snapshots, optionally fenced: in a cluster each activation of a leased actor ``claim``s
    its checkpoint with its lease's revision (the fence, increasing with every new holder), and every save
    carries it; a save or claim whose fence is lower than one already claimed raises ``FencedOut``, so a
    node that lost a lease without noticing (frozen past its heartbeat) cannot overwrite the new holder's
    state. Saves without a fence (one node) are never refused."""

    async def save(
        self,
        scope: Scope,
        actor_id: str,
        state_version: int,
        data: bytes,
        fence: int | None = None,
        items: Items | None = None,
    ) -> None:
        """Durable when the coroutine returns. Backends may group-commit concurrent saves.

        ``items``: changes to the actor's append-only state fields, in the same transaction: for each
        ``(field, start, new_items)`` the field's stored items from position ``start`` on are replaced by
        ``new_items`` (JSON each). ``load`` returns them in ``Checkpoint.items``; ``delete`` removes them."""
        ...

    def save_nowait(
        self,
        scope: Scope,
        actor_id: str,
        state_version: int,
        data: bytes,
        fence: int | None = None,
        items: Items | None = None,
    ) -> asyncio.Future[None]:
        """Register a save now (synchronously, keeping the order of saves) and return a future that resolves
        once it is durable. Lets an actor go on with its next message while its checkpoint commits."""
        ...

    async def claim(self, scope: Scope, actor_id: str, fence: int) -> Checkpoint | None:
        """``load`` for a new holder: records ``fence`` as the actor's (unless a higher one is recorded:
        ``FencedOut``) in the same transaction, so saves with a lower fence are refused from then on."""
        ...

    async def load(self, scope: Scope, actor_id: str) -> Checkpoint | None: ...
    async def load_with(
        self, scope: Scope, actor_id: str, reader: Callable[[], T]
    ) -> tuple[Checkpoint | None, T]:
        """``load``, and ``reader()`` (blocking reads an activation needs besides its state:
        ``Actor.preload``) run off the event loop, in the same trip to a store thread where the backend can."""
        ...

    async def delete(self, scope: Scope, actor_id: str) -> bool: ...
    async def list(self, scope: Scope, prefix: str = "") -> list[str]: ...


@runtime_checkable
class ReminderStore(Protocol):
    async def upsert(self, reminder: Reminder) -> None: ...
    async def delete(self, scope: Scope, target: str, name: str) -> bool: ...
    async def list(self, scope: Scope, target: str | None = None) -> list[Reminder]: ...
    async def due(self, now: float, limit: int = 100) -> builtins.list[Reminder]:
        """All scopes, next_fire_at <= now, earliest first."""
        ...

    async def next_fire_at(self) -> float | None: ...
    async def advance(self, reminder: Reminder, fired_at: float) -> bool:
        """After a fire: one-shot reminders are deleted; periodic ones move next_fire_at to the first
        multiple of period after fired_at (missed fires during downtime collapse into this one). Only if
        the stored row still has reminder.next_fire_at (so two nodes cannot both advance one fire).
        Returns True if this call advanced it (the caller then delivers the fire), False otherwise."""
        ...


@runtime_checkable
class TextIndex(Protocol):
    """Full-text search (SQLite FTS5 / PostgreSQL tsvector). Documents are grouped in named indexes."""

    async def upsert(
        self, scope: Scope, index: str, doc_id: str, fields: dict[str, str], meta: JSON = None
    ) -> None: ...
    async def upsert_many(
        self, scope: Scope, index: str, docs: Sequence[tuple[str, dict[str, str], JSON]]
    ) -> int:
        """``upsert`` of several ``(doc_id, fields, meta)`` of one index in one transaction (all or none;
        a doc id given twice is a ValueError); returns how many."""
        ...

    async def remove(self, scope: Scope, index: str, doc_id: str) -> bool: ...
    async def documents(self, scope: Scope, index: str, prefix: str = "") -> list[tuple[str, JSON]]:
        """``(doc_id, meta)`` of every document of the index whose id starts with prefix, ordered by id
        (finding what an index holds without a query: cleanups, consistency checks)."""
        ...

    async def search(self, scope: Scope, index: str, query: str, limit: int = 10) -> list[SearchHit]:
        """Free text query (user input: never a syntax error; punctuation is ignored); best first."""
        ...

    async def compact(self, scope: Scope, indexes: Sequence[str]) -> int:
        """After removals that must leave no trace (forgetting): merge each index so removed documents'
        words are gone from its structures too, not only unreachable, and let the store drop the old
        pages (SQLite: FTS5 ``optimize`` per index, then the WAL checkpointed and truncated; PostgreSQL:
        nothing to merge, a removed row is dead at once). Returns how many of the indexes exist."""
        ...


@runtime_checkable
class VectorIndex(Protocol):
    """Nearest-neighbour search by cosine similarity (pgvector HNSW on PostgreSQL, an exact scan on SQLite).
    Vectors are grouped in named indexes per scope and stored as float32; at most 2000 dimensions, never
    all zeros. An index may hold vectors of several dimensions (e.g. two embedding models): a search only
    compares vectors of its own dimension."""

    async def upsert(
        self, scope: Scope, index: str, doc_id: str, vector: Sequence[float], meta: JSON = None
    ) -> None: ...
    async def delete(self, scope: Scope, index: str, doc_id: str) -> bool: ...
    async def search(
        self, scope: Scope, index: str, vector: Sequence[float], limit: int = 10
    ) -> list[VectorHit]:
        """Up to limit hits, most similar first."""
        ...


@runtime_checkable
class Quarantine(Protocol):
    async def put(self, kind: str, scope: Scope, key: str, reason: str, data: bytes) -> None: ...
    async def list(self, limit: int = 100) -> list[QuarantinedRecord]: ...


@dataclass(frozen=True, slots=True)
class Finding:
    """One fact a backend's ``doctor()`` reports about where it would keep its data (``minihermes doctor``)."""

    name: str
    """What was looked at, e.g. "WAL", "pgvector", "schema"."""
    status: str
    """"ok", "warn", "fail" or "skip"."""
    detail: str
    required: bool = True
    """A failed required finding means a node cannot run on this store."""


class Store(Protocol):
    """A backend: the primitives above plus lifecycle. Opened by ``open_store``."""

    backend: str
    kv: KVStore
    tuples: TupleSpace
    blobs: BlobStore
    events: EventLog
    channels: ChannelStore
    locks: LockStore
    checkpoints: CheckpointStore
    reminders: ReminderStore
    text: TextIndex
    vectors: VectorIndex
    quarantine: Quarantine

    async def open(self) -> None:
        """Create or migrate the schema. Idempotent."""
        ...

    async def close(self) -> None:
        """Flush pending group commits, then release resources."""
        ...

    async def write_batch(self, scope: Scope, writes: Sequence[Write]) -> builtins.list[Any]:
        """Apply ``writes`` (kv puts and deletes, tuple writes and take_alls, text upserts and removes) in
        order, in one transaction: all of them or, if one fails, none. Returns each write's result, as its
        primitive's method returns it. Every write is checked before any runs (a bad one raises the same
        TypeError/ValueError as the method); an unknown kind of write is a TypeError. For a record kept in
        several primitives at once (a record, its index entries, its tuples), so a failure between them
        cannot leave part of it behind."""
        ...

    async def schema_version(self) -> int: ...
    async def apply_retention(self, rules: Sequence[RetentionRule], now: float) -> RetentionReport: ...

    async def doctor(self) -> list[Finding]:
        """Check, without opening the store (no schema is created or migrated), that it could open where it
        is configured: the engine, its features and the stored schema version. Works on an unopened store."""
        ...
