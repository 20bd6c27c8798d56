"""SQLite retention: apply parsed rules across all scopes inside one write transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from ._anchors import AnchorKey
from ._chain import ROW_COLUMNS, Row, erasure_record, rows_of
from ._common import ParsedRule, encode_element, merge_counts
from ._sqlite_common import logger, prefix_clause
from ._sqlite_events import Key, append_erasure, blank_content, write_anchor


@dataclass(frozen=True, slots=True)
class _Target:
    """How one rule kind maps onto a table."""

    table: str
    key: str
    """Identifies a row: rowid, or the primary-key columns of a WITHOUT ROWID table."""
    time_column: str
    partition: str
    """max_count keeps the newest N per distinct value of these columns ("" = the whole table)."""
    newest_first: str
    selector_column: str = ""
    """Compared with the rule's selector: by prefix for text keys, by equality otherwise."""
    by_prefix: bool = False
    encode: Callable[[str], object] = str

    def where(self, selector: str | None) -> tuple[str, tuple[object, ...]]:
        if selector is None or not self.selector_column:
            return "1", ()
        if self.by_prefix:
            clause, bounds = prefix_clause(self.selector_column, selector)
            return "1" + clause, bounds
        return f"{self.selector_column} = ?", (self.encode(selector),)

    def trim(self, conn: sqlite3.Connection, rule: ParsedRule, now: float) -> int:
        """Delete matching rows older than max_age, then all but the newest max_count per partition."""
        where, params = self.where(rule.selector)
        deleted = 0
        cutoff = rule.cutoff(now)
        if cutoff is not None:
            sql = f"DELETE FROM {self.table} WHERE {where} AND {self.time_column} < ?"
            deleted += conn.execute(sql, (*params, cutoff)).rowcount
        if rule.max_count is not None:
            window = f"PARTITION BY {self.partition} " if self.partition else ""
            sql = (
                f"DELETE FROM {self.table} WHERE ({self.key}) IN (SELECT {self.key} FROM"
                f" (SELECT {self.key}, ROW_NUMBER() OVER ({window}ORDER BY {self.newest_first}) AS position"
                f" FROM {self.table} WHERE {where}) WHERE position > ?)"
            )
            deleted += conn.execute(sql, (*params, rule.max_count)).rowcount
        return deleted


_SCOPE = "tenant, ns"
_TARGETS = {
    "kv": _Target(
        "kv", "tenant, ns, key", "updated_at", _SCOPE, "updated_at DESC, key DESC", "key", by_prefix=True
    ),
    "blobs": _Target("blobs", "id", "updated_at", _SCOPE, "updated_at DESC, id DESC", "name", by_prefix=True),
    "checkpoints": _Target(
        "checkpoints", "id", "updated_at", _SCOPE, "updated_at DESC, id DESC", "actor_id", by_prefix=True
    ),
    "tuples": _Target("tuples", "id", "created_at", _SCOPE, "id DESC", "e0", encode=encode_element),
    "dead_letters": _Target("channel_dead", "id", "dead_at", f"{_SCOPE}, channel", "id DESC", "channel"),
    "dedup": _Target(
        "channel_dedup",
        "tenant, ns, channel, dedup_key",
        "created_at",
        f"{_SCOPE}, channel",
        "created_at DESC, dedup_key DESC",
        "channel",
    ),
    "quarantine": _Target("quarantine", "id", "at", "", "id DESC"),
}


def _events(conn: sqlite3.Connection, rule: ParsedRule, now: float, signer: AnchorKey) -> int:
    """Trim a prefix of each stream and move its anchor to the last trimmed entry, so the remainder still
    verifies and sequence numbers continue; or, with ``event_types``, remove the content of those kinds'
    entries (``_kinds``). Each stream trimmed gets a signed anchor."""
    sql = "SELECT tenant, ns, stream, last_seq, anchor_seq FROM event_streams"
    heads = conn.execute(
        *((sql,) if rule.selector is None else (sql + " WHERE stream = ?", (rule.selector,)))
    )
    if rule.event_types:
        return sum(_kinds(conn, rule, now, signer, (t, n, s)) for t, n, s, _, _ in heads.fetchall())
    cutoff = rule.cutoff(now)
    deleted = 0
    for tenant, ns, stream, last_seq, anchor_seq in heads.fetchall():
        key = (tenant, ns, stream)
        upto = anchor_seq
        if rule.max_count is not None:
            upto = max(upto, last_seq - rule.max_count)
        if cutoff is not None:
            (oldest_kept,) = conn.execute(
                "SELECT MAX(seq) FROM events WHERE tenant = ? AND ns = ? AND stream = ? AND ts < ?",
                (*key, cutoff),
            ).fetchone()
            if oldest_kept is not None:
                upto = max(upto, oldest_kept)
        if upto <= anchor_seq:
            continue
        row = conn.execute(
            "SELECT hash FROM events WHERE tenant = ? AND ns = ? AND stream = ? AND seq = ?", (*key, upto)
        ).fetchone()
        if row is None:
            # A missing entry means the stream was tampered with; trimming would hide that, so leave it.
            logger.warning(
                "not trimming stream %s in scope (%r, %r): entry %d is missing", stream, tenant, ns, upto
            )
            continue
        count = conn.execute(
            "DELETE FROM events WHERE tenant = ? AND ns = ? AND stream = ? AND seq <= ?", (*key, upto)
        ).rowcount
        deleted += count
        conn.execute(
            "UPDATE event_streams SET anchor_seq = ?, anchor_hash = ? WHERE tenant = ? AND ns = ? AND stream = ?",
            (upto, row[0], *key),
        )
        write_anchor(conn, key, signer, now, {"through_seq": upto, "entries": count})
    return deleted


def _kinds(conn: sqlite3.Connection, rule: ParsedRule, now: float, signer: AnchorKey, key: Key) -> int:
    """Blank the content of the format-2 entries of ``rule.event_types`` in stream ``key`` that are older
    than max_age or beyond the newest max_count of those kinds; record them in an erasure entry."""
    kinds = list(rule.event_types)
    marks = ",".join("?" * len(kinds))
    live = (
        f"FROM events WHERE tenant = ? AND ns = ? AND stream = ? AND v = 2 AND kind IN ({marks})"
        " AND (body IS NOT NULL OR data != '')"
    )
    seqs: set[int] = set()
    cutoff = rule.cutoff(now)
    if cutoff is not None:
        seqs.update(r[0] for r in conn.execute(f"SELECT seq {live} AND ts < ?", (*key, *kinds, cutoff)))
    if rule.max_count is not None:
        sql = f"SELECT seq {live} ORDER BY seq DESC LIMIT -1 OFFSET ?"
        seqs.update(r[0] for r in conn.execute(sql, (*key, *kinds, rule.max_count)))
    if not seqs:
        return 0
    rows: list[Row] = []
    for chunk in _chunked(sorted(seqs)):
        sql = (
            f"SELECT {ROW_COLUMNS} FROM events WHERE tenant = ? AND ns = ? AND stream = ?"
            f" AND seq IN ({','.join('?' * len(chunk))}) ORDER BY seq"
        )
        rows.extend(rows_of(conn.execute(sql, (*key, *chunk))))
    blanked, _, kept = blank_content(conn, key, rows, "trimmed")
    if kept:
        logger.warning("retention left %d damaged entries of stream %s in scope %r", kept, key[2], key[:2])
    if not blanked:
        return 0
    record = erasure_record("trimmed", blanked, ())
    append_erasure(conn, key, now, record | {"event_types": kinds})
    write_anchor(conn, key, signer, now, {"event_types": kinds, "entries": len(blanked)})
    return len(blanked)


def _chunked(values: list[int], size: int = 500) -> list[list[int]]:
    return [values[i : i + size] for i in range(0, len(values), size)]


def apply_rules(
    conn: sqlite3.Connection, rules: list[ParsedRule], now: float, signer: AnchorKey
) -> dict[str, int]:
    """Apply every rule (all scopes) and purge expired KV rows; returns deleted counts per kind, plus
    "kv_expired" for the TTL purge."""
    counts: dict[str, int] = {}
    for rule in rules:
        deleted = (
            _events(conn, rule, now, signer)
            if rule.kind == "events"
            else _TARGETS[rule.kind].trim(conn, rule, now)
        )
        merge_counts(counts, rule.kind, deleted)
    counts["kv_expired"] = conn.execute(
        "DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
    ).rowcount
    return counts


def incremental_vacuum(conn: sqlite3.Connection) -> None:
    """Return free pages to the OS. executescript steps the pragma to completion; execute() would free
    only one page per call."""
    conn.executescript("PRAGMA incremental_vacuum;")
