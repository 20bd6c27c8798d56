"""SQLite full-text search on FTS5.

``text_docs`` holds identity, scope and meta; the words live in one FTS5 table per (tenant, namespace, index)
(``text_indexes`` names it; rowid = text_docs.id), made on the first document. So bm25's statistics are that
index's own (no tenant's ranking moves with another's data) and a search reads only its index's postings.
Queries are user text: they are reduced to words (shared ``search_terms``) and each word is quoted, so FTS5
operators, column filters and stray quotes in the input are never parsed as syntax.

Removing a document deletes its rows, but FTS5 records a deletion as a marker in a new segment: the words
stay in the older segments' pages until a merge rewrites them (SQLite 3.42's ``secure-delete`` option would
avoid that; older SQLite has none). ``compact`` (run by forgetting) merges each named index into one segment
(``optimize``), so nothing of a removed document is left in a live page; the freed pages are zeroed because
the writer connection runs with ``PRAGMA secure_delete`` (``_sqlite_schema.prepare``), and the WAL, which
still holds the pages as they were, is checkpointed and truncated after it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from ._common import (
    check_count,
    check_documents,
    check_name,
    check_prefix,
    check_scope,
    check_text,
    loads_json,
    search_terms,
)
from ._sqlite_common import Part, logger, prefix_clause
from ._sqlite_schema import create_fts_table, fts_table
from .base import JSON, Scope, SearchHit

SNIPPET_START = "["
SNIPPET_END = "]"
SNIPPET_ELLIPSIS = "…"
SNIPPET_TOKENS = 12

_SEARCH = f"""
SELECT d.doc_id, bm25({{t}}) AS rank,
       snippet({{t}}, 0, '{SNIPPET_START}', '{SNIPPET_END}', '{SNIPPET_ELLIPSIS}', {SNIPPET_TOKENS}), d.meta
FROM {{t}} JOIN text_docs AS d ON d.id = {{t}}.rowid
WHERE {{t}} MATCH ? AND d.tenant = ? AND d.ns = ? AND d.idx = ?
ORDER BY rank LIMIT ?"""
"""The search over one index's FTS table (``{t}``: its name, from ``text_indexes``)."""
_INDEX = "SELECT id FROM text_indexes WHERE tenant = ? AND ns = ? AND idx = ?"


def _table(conn: sqlite3.Connection, tenant: str, ns: str, index: str, *, create: bool) -> str | None:
    """The FTS table of (tenant, ns, index); made (writer only) when ``create`` and missing."""
    row = conn.execute(_INDEX, (tenant, ns, index)).fetchone()
    if row is not None:
        return fts_table(int(row[0]))
    if not create:
        return None
    index_id = conn.execute(
        "INSERT INTO text_indexes (tenant, ns, idx) VALUES (?, ?, ?)", (tenant, ns, index)
    ).lastrowid
    assert index_id is not None
    return create_fts_table(conn, index_id)


def match_expression(terms: list[str]) -> str:
    """Any of the words (ranked by bm25, so documents with more and rarer words come first)."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


class SqliteText(Part):
    """Named full-text indexes per scope. A document's fields are indexed together, in field-name order."""

    async def upsert(
        self, scope: Scope, index: str, doc_id: str, fields: dict[str, str], meta: JSON = None
    ) -> None:
        await self.upsert_many(scope, index, [(doc_id, fields, meta)])

    async def upsert_many(
        self, scope: Scope, index: str, docs: Sequence[tuple[str, dict[str, str], JSON]]
    ) -> int:
        op = self.upsert_op(scope, index, docs)
        return 0 if op is None else await self._db.write(op)

    def upsert_op(
        self, scope: Scope, index: str, docs: Sequence[tuple[str, dict[str, str], JSON]]
    ) -> Callable[[sqlite3.Connection], int] | None:
        """``upsert_many`` checked now, as a function of the write connection (None: no documents)."""
        tenant, ns = check_scope(scope)
        check_name("index", index)
        rows = check_documents(docs)
        if not rows:
            return None
        now = self._now()

        def op(conn: sqlite3.Connection) -> int:
            table = _table(conn, tenant, ns, index, create=True)
            for doc_id, body, meta_text in rows:
                key = (tenant, ns, index, doc_id)
                row = conn.execute(
                    "SELECT id FROM text_docs WHERE tenant = ? AND ns = ? AND idx = ? AND doc_id = ?", key
                ).fetchone()
                if row is None:
                    doc_row = conn.execute(
                        "INSERT INTO text_docs (tenant, ns, idx, doc_id, meta, updated_at)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        (*key, meta_text, now),
                    ).lastrowid
                else:
                    doc_row = row[0]
                    conn.execute(
                        "UPDATE text_docs SET meta = ?, updated_at = ? WHERE id = ?",
                        (meta_text, now, doc_row),
                    )
                    conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (doc_row,))
                conn.execute(f"INSERT INTO {table} (rowid, body) VALUES (?, ?)", (doc_row, body))
            return len(rows)

        return op

    async def remove(self, scope: Scope, index: str, doc_id: str) -> bool:
        return await self._db.write(self.remove_op(scope, index, doc_id))

    def remove_op(self, scope: Scope, index: str, doc_id: str) -> Callable[[sqlite3.Connection], bool]:
        """``remove`` checked now, as a function of the write connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_name("doc_id", doc_id)
        key = (tenant, ns, index, doc_id)

        def op(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "DELETE FROM text_docs WHERE tenant = ? AND ns = ? AND idx = ? AND doc_id = ? RETURNING id",
                key,
            ).fetchone()
            if row is None:
                return False
            table = _table(conn, tenant, ns, index, create=False)
            if table is not None:
                conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (row[0],))
            return True

        return op

    async def documents(self, scope: Scope, index: str, prefix: str = "") -> list[tuple[str, JSON]]:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_prefix(prefix)
        where, bounds = prefix_clause("doc_id", prefix)
        sql = f"SELECT doc_id, meta FROM text_docs WHERE tenant = ? AND ns = ? AND idx = ?{where} ORDER BY doc_id"
        rows = await self._db.read(lambda c: c.execute(sql, (tenant, ns, index, *bounds)).fetchall())
        out: list[tuple[str, JSON]] = []
        for doc_id, raw_meta in rows:
            try:
                out.append((doc_id, loads_json(raw_meta)))
            except ValueError:
                out.append((doc_id, None))  # as ``search`` does: the document, without its meta
        return out

    async def search(self, scope: Scope, index: str, query: str, limit: int = 10) -> list[SearchHit]:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_text("query", query)
        check_count("limit", limit)
        terms = search_terms(query)
        if not terms or limit == 0:
            return []
        params = (match_expression(terms), tenant, ns, index, limit)

        def op(conn: sqlite3.Connection) -> list[tuple[str, float, str, str]]:
            table = _table(conn, tenant, ns, index, create=False)
            if table is None:
                return []
            return list(conn.execute(_SEARCH.format(t=table), params).fetchall())

        rows = await self._db.read(op)
        hits = []
        for doc_id, rank, snippet, raw_meta in rows:
            try:
                meta = loads_json(raw_meta)
            except ValueError:
                logger.warning(
                    "search hit %r in index %r has undecodable meta; returning it without", doc_id, index
                )
                meta = None
            hits.append(SearchHit(doc_id, -float(rank), snippet, meta))
        return hits

    async def compact(self, scope: Scope, indexes: Sequence[str]) -> int:
        tenant, ns = check_scope(scope)
        names = list(dict.fromkeys(check_name("index", index) for index in indexes))

        def op(conn: sqlite3.Connection) -> int:
            found = 0
            for index in names:
                table = _table(conn, tenant, ns, index, create=False)
                if table is not None:
                    found += 1
                    # Cost grows with the index (every segment is read and rewritten): see
                    # docs/context.md for a measured number.
                    conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
            return found

        found = await self._db.write(op)
        await self._db.write(truncate_wal, transactional=False)
        return found


def truncate_wal(conn: sqlite3.Connection) -> Any:
    """Copy the WAL into the database and truncate it to nothing, so the page images it held (deleted
    content as it was before) are gone from the -wal file. Best effort: a reader holding an old snapshot
    keeps the frames it needs until the next checkpoint (at the latest, when the store closes)."""
    return conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
