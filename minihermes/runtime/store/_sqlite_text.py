"""SQLite full-text search on FTS5.

``text_docs`` holds identity, scope and meta; ``text_fts`` (rowid = text_docs.id) holds the words. Queries are
user text: they are reduced to words (shared ``search_terms``) and each word is quoted, so FTS5 operators,
column filters and stray quotes in the input are never parsed as syntax.
"""

from __future__ import annotations

import sqlite3

from ._common import check_count, check_name, check_scope, check_text, dumps_json, loads_json, search_terms
from ._sqlite_common import Part, logger
from .base import JSON, Scope, SearchHit

SNIPPET_START = "["
SNIPPET_END = "]"
SNIPPET_ELLIPSIS = "…"
SNIPPET_TOKENS = 12

_SEARCH = f"""
SELECT d.doc_id, bm25(text_fts) AS rank,
       snippet(text_fts, 0, '{SNIPPET_START}', '{SNIPPET_END}', '{SNIPPET_ELLIPSIS}', {SNIPPET_TOKENS}), d.meta
FROM text_fts JOIN text_docs AS d ON d.id = text_fts.rowid
WHERE text_fts MATCH ? AND d.tenant = ? AND d.ns = ? AND d.idx = ?
ORDER BY rank LIMIT ?"""


def match_expression(terms: list[str]) -> str:
    """Any of the words (ranked by bm25, so documents with more and rarer words come first)."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


class SqliteText(Part):
    """Named full-text indexes per scope. A document's fields are indexed together, in field-name order."""

    async def upsert(
        self, scope: Scope, index: str, doc_id: str, fields: dict[str, str], meta: JSON = None
    ) -> None:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_name("doc_id", doc_id)
        if not isinstance(fields, dict):
            raise TypeError(f"fields must be a dict of str to str, got {type(fields).__name__}")
        for field_name, value in fields.items():
            check_name("field name", field_name)
            check_text(f"field {field_name!r}", value)
        body = "\n".join(fields[name] for name in sorted(fields))
        meta_text = dumps_json("document meta", meta)
        now = self._now()
        key = (tenant, ns, index, doc_id)

        def op(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT id FROM text_docs WHERE tenant = ? AND ns = ? AND idx = ? AND doc_id = ?", key
            ).fetchone()
            if row is None:
                doc_row = conn.execute(
                    "INSERT INTO text_docs (tenant, ns, idx, doc_id, meta, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (*key, meta_text, now),
                ).lastrowid
            else:
                doc_row = row[0]
                conn.execute(
                    "UPDATE text_docs SET meta = ?, updated_at = ? WHERE id = ?", (meta_text, now, doc_row)
                )
                conn.execute("DELETE FROM text_fts WHERE rowid = ?", (doc_row,))
            conn.execute("INSERT INTO text_fts (rowid, body) VALUES (?, ?)", (doc_row, body))

        await self._db.write(op)

    async def remove(self, scope: Scope, index: str, doc_id: str) -> bool:
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
            conn.execute("DELETE FROM text_fts WHERE rowid = ?", (row[0],))
            return True

        return await self._db.write(op)

    async def search(self, scope: Scope, index: str, query: str, limit: int = 10) -> list[SearchHit]:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_text("query", query)
        check_count("limit", limit)
        terms = search_terms(query)
        if not terms or limit == 0:
            return []
        params = (match_expression(terms), tenant, ns, index, limit)
        rows = await self._db.read(lambda c: c.execute(_SEARCH, params).fetchall())
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
