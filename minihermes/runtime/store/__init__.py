"""Durable storage for the runtime: one Protocol per primitive (``base``), backends chosen by name.

    from minihermes.runtime.store import open_store

    store = open_store("sqlite", path="data/minihermes.db")   # validates options, no I/O yet
    await store.open()                                          # creates or migrates the schema
    version = await store.kv.put(("acme", "agents"), "greeting", {"text": "hi"})
    await store.close()

Backends: "sqlite" (embedded; ``minihermes.runtime.store.sqlite.SqliteStore``) and "postgres" (shared by
several nodes; ``minihermes.runtime.store.postgres.PostgresStore``, needs psycopg and pgvector). Add one with
``register_backend(name, factory)``; shared, dialect-independent rules live in ``_common`` and ``_chain``.
``store.write_batch(scope, [KVPut(...), TupleWrite(...), TextUpsert(...), ...])`` applies writes to several
primitives in one transaction (all or none). ``sqlite_v1_fixture`` writes a data dir in the oldest storage format, for migration tests.
``rotate_store_key(data_dir, new_key_file)`` re-encrypts an encrypted SQLite store (``minihermes keys rotate``).
``backup_store`` / ``verify_backup`` / ``restore_backup`` copy a SQLite store's data dir while it serves and bring
it back (``minihermes backup`` / ``restore``); ``StorageFull`` is the error of a write refused for lack of disk.
"""

from ._backup import (
    BACKUPS_DIR,
    BackupError,
    Rate,
    backup_store,
    finish_backup,
    library_version,
    prune,
    read_manifest,
    restore_backup,
    sqlite_has_wal_reset_bug,
    verify_backup,
)
from ._errors import FencedOut, SchemaVersionError, StoreClosedError, StoreError
from ._health import StorageFull, StoreFault
from ._registry import BackendFactory, backend_names, get_backend, open_store, register_backend
from ._sqlite_keys import StoreKeyError
from ._sqlite_rotation import rotate_store_key
from .base import (
    JSON,
    BlobInfo,
    BlobStore,
    ChainCheck,
    ChannelDepth,
    ChannelMessage,
    ChannelStore,
    Checkpoint,
    CheckpointStore,
    DeadLetter,
    Erasure,
    EventLog,
    EventRecord,
    Finding,
    KVDelete,
    KVEntry,
    KVPut,
    KVStore,
    LockInfo,
    LockStore,
    Quarantine,
    QuarantinedRecord,
    Reminder,
    ReminderStore,
    RetentionReport,
    RetentionRule,
    Scalar,
    Scope,
    SearchHit,
    Store,
    TextIndex,
    TextRemove,
    TextUpsert,
    TupleSpace,
    TupleTakeAll,
    TupleWrite,
    VectorHit,
    VectorIndex,
    Write,
)
from .testing import sqlite_v1_fixture

__all__ = [
    "BACKUPS_DIR",
    "JSON",
    "BackendFactory",
    "BackupError",
    "BlobInfo",
    "BlobStore",
    "ChainCheck",
    "ChannelDepth",
    "ChannelMessage",
    "ChannelStore",
    "Checkpoint",
    "CheckpointStore",
    "DeadLetter",
    "Erasure",
    "EventLog",
    "EventRecord",
    "FencedOut",
    "Finding",
    "KVDelete",
    "KVEntry",
    "KVPut",
    "KVStore",
    "LockInfo",
    "LockStore",
    "Quarantine",
    "QuarantinedRecord",
    "Rate",
    "Reminder",
    "ReminderStore",
    "RetentionReport",
    "RetentionRule",
    "Scalar",
    "SchemaVersionError",
    "Scope",
    "SearchHit",
    "StorageFull",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoreFault",
    "StoreKeyError",
    "TextIndex",
    "TextRemove",
    "TextUpsert",
    "TupleSpace",
    "TupleTakeAll",
    "TupleWrite",
    "VectorHit",
    "VectorIndex",
    "Write",
    "backend_names",
    "backup_store",
    "finish_backup",
    "get_backend",
    "library_version",
    "open_store",
    "prune",
    "read_manifest",
    "register_backend",
    "restore_backup",
    "rotate_store_key",
    "sqlite_has_wal_reset_bug",
    "sqlite_v1_fixture",
    "verify_backup",
]
