"""PostgreSQL full-text search: tsvector + GIN, ranked with the same BM25 formula as SQLite's FTS5.

Words: the text is first reduced to the words the shared ``search_terms`` would see (``\\w+`` runs), then
indexed with the ``minihermes_text`` configuration (lower-case, accents removed, no stemming, no stop words:
FTS5's ``unicode61 remove_diacritics``). Reducing first keeps the two backends' word boundaries the same
(PostgreSQL's parser would otherwise keep "1.5" or "a.b.com" as single tokens that a query never forms).

Ranking: FTS5's bm25() with k1 = 1.2, b = 0.75 and idf = ln((N - df + 0.5) / (df + 0.5)) floored at 1e-6,
computed in SQL from the tsvector's term positions. N, df and the average length are taken over the
documents of the same (scope, index), not the whole table as FTS5 does, so one tenant's documents never
shift another's scores. Queries are user text: only words reach ``to_tsquery``, each quoted as a literal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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
from ._pg_common import Part, prefix_clause, write_rows
from ._pg_engine import Conn, Op, logger
from .base import JSON, Scope, SearchHit

_WORD = re.compile(r"\w+", re.UNICODE)
CONFIG = "minihermes_text"
SNIPPET_TOKENS = 12
_HEADLINE = (
    f"StartSel=[, StopSel=], MaxWords={SNIPPET_TOKENS}, MinWords=4, ShortWord=0, MaxFragments=1,"
    " FragmentDelimiter=…"
)

_UPSERT = f"""
INSERT INTO text_docs (tenant, ns, idx, doc_id, body, tsv, doc_len, meta, updated_at)
SELECT %(tenant)s, %(ns)s, %(idx)s, %(doc_id)s, %(body)s, v,
       (SELECT COALESCE(SUM(array_length(positions, 1)), 0) FROM unnest(v)), %(meta)s, %(now)s
FROM to_tsvector('{CONFIG}', %(words)s) AS v
ON CONFLICT (tenant, ns, idx, doc_id) DO UPDATE SET body = excluded.body, tsv = excluded.tsv,
    doc_len = excluded.doc_len, meta = excluded.meta, updated_at = excluded.updated_at"""

_SCOPE = "tenant = %(tenant)s AND ns = %(ns)s AND idx = %(idx)s"
_SEARCH = f"""
WITH q AS (SELECT to_tsquery('{CONFIG}', %(query)s) AS query),
terms AS (SELECT unnest(tsvector_to_array(to_tsvector('{CONFIG}', %(words)s))) AS lexeme),
stats AS (SELECT COUNT(*)::float8 AS n, COALESCE(AVG(doc_len), 0)::float8 AS avgdl
          FROM text_docs WHERE {_SCOPE}),
hits AS (SELECT d.id, d.doc_len, d.tsv FROM text_docs d, q WHERE {_SCOPE} AND d.tsv @@ q.query),
tf AS (SELECT h.id, h.doc_len, u.lexeme, array_length(u.positions, 1)::float8 AS tf
       FROM hits h, unnest(h.tsv) AS u WHERE u.lexeme IN (SELECT lexeme FROM terms)),
df AS (SELECT lexeme, COUNT(*)::float8 AS df FROM tf GROUP BY lexeme),
scored AS (
    SELECT tf.id, SUM(GREATEST(ln((stats.n - df.df + 0.5) / (df.df + 0.5)), 1e-6)
                      * tf.tf * 2.2 / (tf.tf + 1.2 * (0.25 + 0.75 * tf.doc_len / GREATEST(stats.avgdl, 1))))
                  AS score
    FROM tf JOIN df USING (lexeme) CROSS JOIN stats GROUP BY tf.id
    ORDER BY score DESC, tf.id LIMIT %(limit)s)
SELECT d.doc_id, s.score, ts_headline('{CONFIG}', d.body, q.query, %(headline)s), d.meta
FROM scored s JOIN text_docs d ON d.id = s.id CROSS JOIN q
ORDER BY s.score DESC, d.id"""


def words_of(text: str) -> str:
    return " ".join(_WORD.findall(text))


def tsquery_of(terms: list[str]) -> str:
    """Any of the words, each a quoted literal (a word the parser splits, like foo_bar, becomes a phrase)."""
    return " | ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)


class PgText(Part):
    """Named full-text indexes per scope. A document's fields are indexed together, in field-name order."""

    async def upsert(
        self, scope: Scope, index: str, doc_id: str, fields: dict[str, str], meta: JSON = None
    ) -> None:
        await self._db.run(self.upsert_op(scope, index, doc_id, fields, meta))

    def upsert_op(
        self, scope: Scope, index: str, doc_id: str, fields: dict[str, str], meta: JSON = None
    ) -> Op:
        """``upsert`` checked now, as a function of a connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        check_name("index", index)
        [doc] = check_documents([(doc_id, fields, meta)])
        params = self._params(tenant, ns, index, doc, self._now())

        async def op(conn: Conn) -> None:
            await conn.execute(_UPSERT, params)

        return op

    async def upsert_many(
        self, scope: Scope, index: str, docs: Sequence[tuple[str, dict[str, str], JSON]]
    ) -> int:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        now = self._now()
        rows = [self._params(tenant, ns, index, doc, now) for doc in check_documents(docs)]
        return await write_rows(self._db, _UPSERT, rows)

    @staticmethod
    def _params(tenant: str, ns: str, index: str, doc: tuple[str, str, str], now: float) -> dict[str, object]:
        doc_id, text, meta = doc
        # NUL cannot be stored in PostgreSQL text; it is no word character, so a space is equivalent.
        body = text.replace("\x00", " ")
        return {
            "tenant": tenant,
            "ns": ns,
            "idx": index,
            "doc_id": doc_id,
            "body": body,
            "words": words_of(body),
            "meta": meta,
            "now": now,
        }

    async def remove(self, scope: Scope, index: str, doc_id: str) -> bool:
        removed: bool = await self._db.run(self.remove_op(scope, index, doc_id))
        return removed

    def remove_op(self, scope: Scope, index: str, doc_id: str) -> Op:
        """``remove`` checked now, as a function of a connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_name("doc_id", doc_id)
        sql = "DELETE FROM text_docs WHERE tenant = %s AND ns = %s AND idx = %s AND doc_id = %s"
        params = (tenant, ns, index, doc_id)

        async def op(conn: Conn) -> bool:
            cur = await conn.execute(sql, params)
            return cur.rowcount > 0

        return op

    async def compact(self, scope: Scope, indexes: Sequence[str]) -> int:
        """Nothing to merge: a removed row's tsvector is in no index structure a query or ``pg_dump`` reads.
        Its dead tuple stays in the table's heap file until (auto)vacuum reuses the space: see
        docs/security.md for what that means for erasure."""
        tenant, ns = check_scope(scope)
        names = list(dict.fromkeys(check_name("index", index) for index in indexes))
        sql = "SELECT COUNT(DISTINCT idx) FROM text_docs WHERE tenant = %s AND ns = %s AND idx = ANY(%s)"
        rows = await self._db.fetchall(sql, (tenant, ns, names))
        return int(rows[0][0]) if rows else 0

    async def documents(self, scope: Scope, index: str, prefix: str = "") -> list[tuple[str, JSON]]:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_prefix(prefix)
        where, bounds = prefix_clause("doc_id", prefix)
        sql = f"SELECT doc_id, meta FROM text_docs WHERE tenant = %s AND ns = %s AND idx = %s{where} ORDER BY doc_id"
        out: list[tuple[str, JSON]] = []
        for doc_id, raw_meta in await self._db.fetchall(sql, (tenant, ns, index, *bounds)):
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
        params = {
            "tenant": tenant,
            "ns": ns,
            "idx": index,
            "query": tsquery_of(terms),
            "words": " ".join(terms),
            "limit": limit,
            "headline": _HEADLINE,
        }
        hits = []
        for doc_id, score, snippet, raw_meta in await self._db.fetchall(_SEARCH, params):
            try:
                meta = loads_json(raw_meta)
            except ValueError:
                logger.warning(
                    "search hit %r in index %r has undecodable meta; returning it without", doc_id, index
                )
                meta = None
            hits.append(SearchHit(doc_id, float(score), snippet, meta))
        return hits
