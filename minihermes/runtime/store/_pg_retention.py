"""PostgreSQL retention: apply parsed rules across all scopes inside one transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ._anchors import AnchorKey
from ._chain import ROW_COLUMNS, erasure_record, rows_of
from ._common import ParsedRule, encode_element, merge_counts
from ._pg_common import prefix_clause
from ._pg_engine import Conn, logger
from ._pg_events import Key, append_erasure, blank_content, write_anchor


@dataclass(frozen=True, slots=True)
class _Target:
    """How one rule kind maps onto a table."""

    table: str
    key: str
    """Columns that identify a row."""
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
            return "TRUE", ()
        if self.by_prefix:
            clause, bounds = prefix_clause(self.selector_column, selector)
            return "TRUE" + clause, bounds
        return f"{self.selector_column} = %s", (self.encode(selector),)

    async def trim(self, conn: Conn, rule: ParsedRule, now: float) -> int:
        """Delete matching rows older than max_age, then all but the newest max_count per partition."""
        where, params = self.where(rule.selector)
        deleted = 0
        cutoff = rule.cutoff(now)
        if cutoff is not None:
            sql = f"DELETE FROM {self.table} WHERE {where} AND {self.time_column} < %s"
            deleted += (await conn.execute(sql, (*params, cutoff))).rowcount
        if rule.max_count is not None:
            window = f"PARTITION BY {self.partition} " if self.partition else ""
            sql = (
                f"DELETE FROM {self.table} WHERE ({self.key}) IN (SELECT {self.key} FROM"
                f" (SELECT {self.key}, ROW_NUMBER() OVER ({window}ORDER BY {self.newest_first}) AS position"
                f" FROM {self.table} WHERE {where}) AS ranked WHERE position > %s)"
            )
            deleted += (await conn.execute(sql, (*params, rule.max_count))).rowcount
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
    "tuples": _Target("tuples", "id", "created_at", _SCOPE, "id DESC", "elems[1]", encode=encode_element),
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


async def _events(conn: Conn, rule: ParsedRule, now: float, signer: AnchorKey) -> int:
    """Trim a prefix of each stream and move its anchor to the last trimmed entry, so the remainder still
    verifies and sequence numbers continue; or, with ``event_types``, remove the content of those kinds'
    entries (``_kinds``). Each stream trimmed gets a signed anchor."""
    sql = "SELECT tenant, ns, stream, last_seq, anchor_seq FROM event_streams"
    params: tuple[object, ...] = ()
    if rule.selector is not None:
        sql, params = sql + " WHERE stream = %s", (rule.selector,)
    heads = await (await conn.execute(sql + " FOR UPDATE", params)).fetchall()
    if rule.event_types:
        deleted = 0
        for tenant, ns, stream, _, _ in heads:
            deleted += await _kinds(conn, rule, now, signer, (tenant, ns, stream))
        return deleted
    cutoff = rule.cutoff(now)
    deleted = 0
    for tenant, ns, stream, last_seq, anchor_seq in heads:
        key = (tenant, ns, stream)
        upto = anchor_seq
        if rule.max_count is not None:
            upto = max(upto, last_seq - rule.max_count)
        if cutoff is not None:
            cur = await conn.execute(
                "SELECT MAX(seq) FROM events WHERE tenant = %s AND ns = %s AND stream = %s AND ts < %s",
                (*key, cutoff),
            )
            row = await cur.fetchone()
            if row is not None and row[0] is not None:
                upto = max(upto, row[0])
        if upto <= anchor_seq:
            continue
        cur = await conn.execute(
            "SELECT hash FROM events WHERE tenant = %s AND ns = %s AND stream = %s AND seq = %s", (*key, upto)
        )
        row = await cur.fetchone()
        if row is None:
            # A missing entry means the stream was tampered with; trimming would hide that, so leave it.
            logger.warning(
                "not trimming stream %s in scope (%r, %r): entry %d is missing", stream, tenant, ns, upto
            )
            continue
        cur = await conn.execute(
            "DELETE FROM events WHERE tenant = %s AND ns = %s AND stream = %s AND seq <= %s", (*key, upto)
        )
        deleted += cur.rowcount
        await conn.execute(
            "UPDATE event_streams SET anchor_seq = %s, anchor_hash = %s WHERE tenant = %s AND ns = %s AND stream = %s",
            (upto, row[0], *key),
        )
        await write_anchor(conn, key, signer, now, {"through_seq": upto, "entries": cur.rowcount})
    return deleted


async def _kinds(conn: Conn, rule: ParsedRule, now: float, signer: AnchorKey, key: Key) -> int:
    """Blank the content of the format-2 entries of ``rule.event_types`` in stream ``key`` that are older
    than max_age or beyond the newest max_count of those kinds; record them in an erasure entry."""
    kinds = list(rule.event_types)
    live = (
        "FROM events WHERE tenant = %s AND ns = %s AND stream = %s AND v = 2 AND kind = ANY(%s)"
        " AND (body IS NOT NULL OR data <> '')"
    )
    seqs: set[int] = set()
    cutoff = rule.cutoff(now)
    if cutoff is not None:
        cur = await conn.execute(f"SELECT seq {live} AND ts < %s", (*key, kinds, cutoff))
        seqs.update(int(r[0]) for r in await cur.fetchall())
    if rule.max_count is not None:
        cur = await conn.execute(
            f"SELECT seq {live} ORDER BY seq DESC OFFSET %s", (*key, kinds, rule.max_count)
        )
        seqs.update(int(r[0]) for r in await cur.fetchall())
    if not seqs:
        return 0
    cur = await conn.execute(
        f"SELECT {ROW_COLUMNS} FROM events WHERE tenant = %s AND ns = %s AND stream = %s AND seq = ANY(%s)"
        " ORDER BY seq",
        (*key, sorted(seqs)),
    )
    blanked, _, kept = await blank_content(conn, key, list(rows_of(await cur.fetchall())), "trimmed")
    if kept:
        logger.warning("retention left %d damaged entries of stream %s in scope %r", kept, key[2], key[:2])
    if not blanked:
        return 0
    record = erasure_record("trimmed", blanked, ())
    await append_erasure(conn, key, now, record | {"event_types": kinds})
    await write_anchor(conn, key, signer, now, {"event_types": kinds, "entries": len(blanked)})
    return len(blanked)


async def apply_rules(conn: Conn, rules: list[ParsedRule], now: float, signer: AnchorKey) -> dict[str, int]:
    """Apply every rule (all scopes) and purge expired KV rows; returns deleted counts per kind, plus
    "kv_expired" for the TTL purge."""
    counts: dict[str, int] = {}
    for rule in rules:
        if rule.kind == "events":
            deleted = await _events(conn, rule, now, signer)
        else:
            deleted = await _TARGETS[rule.kind].trim(conn, rule, now)
        merge_counts(counts, rule.kind, deleted)
    cur = await conn.execute("DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= %s", (now,))
    counts["kv_expired"] = cur.rowcount
    return counts
