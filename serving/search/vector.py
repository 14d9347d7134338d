"""Vector lane: nearest passages by cosine distance over the per-model halfvec HNSW.

The indexes are partial (schema.sql `ensure_vector_indexes`): one over
`embed_model = '<model>' AND summary_level = 0`, one over `summary_level > 0`.
The planner uses a partial index only when the query's WHERE implies the
index predicate, and it cannot prove that through a bound parameter, so the
model name is a literal here (psycopg.sql.Literal) and the ORDER BY repeats
the exact indexed expression `embedding::halfvec(N)`.

A row the model could not read (serving.passage_writer) names the model with no
vector: the index leaves it out, and the exact scan skips it by `IS NOT NULL`.

Filters (one source, one scope, one document) are applied after HNSW finds
its neighbours; a filter that keeps 2% of rows would return ~0.2 of k from a
plain scan. pgvector 0.8's iterative scan (`hnsw.iterative_scan =
relaxed_order`) keeps walking the graph until k rows pass the filter (or
`hnsw.max_scan_tuples` is spent); relaxed order means rows can arrive
slightly out of order, so they are re-sorted by distance here.

A filter that leaves few rows is scanned exactly instead (`scans_exactly`): the
graph walk past rows the filter rejects costs in proportion to the rows it skips,
and at a million passages a filter matching no summary at all walked all 20,000
of them (`max_scan_tuples`) for nothing - 238 ms of a filtered search's 432 ms.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import psycopg
from pgvector import HalfVector
from psycopg import sql

from serving.db import database_key
from serving.search.filters import Predicate
from serving.search.lanes import LaneHits
from serving.search.types import SearchConfig, SearchFilters

log = logging.getLogger(__name__)


def set_scan_options(conn: psycopg.Connection, ef_search: int, max_scan_tuples: int) -> None:
    """Transaction-local HNSW settings (must run inside the search transaction)."""
    conn.execute(
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
        " set_config('hnsw.ef_search', %s, true), set_config('hnsw.max_scan_tuples', %s, true)",
        (str(int(ef_search)), str(int(max_scan_tuples))),
    )


def planner_rows(conn: psycopg.Connection) -> float:
    """The planner's estimate of the passages (0 before the first ANALYZE): a catalogue
    read, where count(*) would scan a million rows."""
    row = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'passages'::regclass").fetchone()
    return float(row[0]) if row and row[0] and row[0] > 0 else 0.0


_ROWS: dict[str, tuple[float, float]] = {}   # database -> (passages, when looked up)
_ROWS_SECONDS = 60.0


def lane_ef(conn: psycopg.Connection, cfg: SearchConfig, ef: int) -> int:
    """A lane's ef_search for this library's size (SearchConfig has the measurements): the
    planner's row count, looked up at most once a minute per database."""
    key = database_key(conn)
    now = time.monotonic()
    have = _ROWS.get(key)
    if have is None or now - have[1] > _ROWS_SECONDS:
        have = _ROWS[key] = (planner_rows(conn), now)
    return ef if have[0] > cfg.ef_small_rows else min(ef, cfg.ef_search_small)


# (vector column, model column) of each vector lane: the primary model's, and the
# multilingual second model's (schema.sql, serving.passage_writer)
COLUMNS = {"primary": ("embedding", "embed_model"), "multilingual": ("embedding_multi", "embed_model_multi")}


# A filtered search whose filter leaves at most this many rows of a level scans them
# exactly (every row's distance, sorted): found through passages_level_idx and
# compared in full, a few thousand rows cost a few milliseconds, where the graph walk
# reads rows in proportion to those the filter rejects and stops at max_scan_tuples
# with fewer than k (a memory search in a library of a million book passages).
EXACT_ROWS = 5000

_COUNT_UP_TO = ("SELECT count(*) FROM (SELECT 1 FROM passages p WHERE {level} AND {pred} "
                "LIMIT {bound}) x")


def scans_exactly(conn: psycopg.Connection, filters: SearchFilters, predicate: Predicate, *,
                  summaries: bool) -> bool:
    """Whether a vector lane over passages (or summaries) should scan the filtered rows
    exactly: always for a document filter, never without a filter (the visibility of a
    viewer alone passes every global row), else when at most EXACT_ROWS rows pass - counted
    up to that bound, so the count costs no more than the scan it decides on."""
    if filters.document_ids:
        return True
    if filters.is_empty:
        return False
    level = sql.SQL("p.summary_level > 0" if summaries else "p.summary_level = 0")
    query = sql.SQL(_COUNT_UP_TO).format(level=level, pred=predicate.clause, bound=sql.Literal(EXACT_ROWS + 1))
    return int(conn.execute(query, predicate.params).fetchone()[0]) <= EXACT_ROWS


def vector_sql(model: str, dims: int, predicate: Predicate, *, summaries: bool, exact: bool = False,
               column: str = "primary") -> sql.Composed:
    """`exact` orders by an expression the index cannot serve (`+ 0`): the planner then
    reads the filtered rows (document btree) and sorts them - right for one document,
    whose few hundred passages HNSW would have to dig for among all the others."""
    vec_col, model_col = (sql.Identifier(c) for c in COLUMNS[column])
    cast = sql.SQL("halfvec({})").format(sql.SQL(str(int(dims))))
    level = sql.SQL("p.summary_level > 0" if summaries else "p.summary_level = 0")
    order = sql.SQL("(p.{col}::{cast} <=> %(qvec)s::{cast}) + 0" if exact else
                    "p.{col}::{cast} <=> %(qvec)s::{cast}").format(cast=cast, col=vec_col)
    return sql.SQL(
        "SELECT p.id, p.document_id, (p.{col}::{cast} <=> %(qvec)s::{cast}) AS distance FROM passages p "
        "WHERE p.{model_col} = {model} AND {level} AND p.{col} IS NOT NULL AND {pred} ORDER BY {order} LIMIT %(k)s"
    ).format(cast=cast, col=vec_col, model_col=model_col, model=sql.Literal(model), level=level,
             pred=predicate.clause, order=order)


def _scan_mode(conn: psycopg.Connection, iterative: bool, ef_search: int | None) -> None:
    """This lane's HNSW walk for the rest of the transaction: iterative or one pass, and its
    candidate list (None: the transaction's as it is)."""
    mode = "relaxed_order" if iterative else "off"
    if ef_search:
        conn.execute("SELECT set_config('hnsw.iterative_scan', %s, true), set_config('hnsw.ef_search', %s, true)",
                     (mode, str(int(ef_search))))
    else:
        conn.execute("SELECT set_config('hnsw.iterative_scan', %s, true)", (mode,))


def vector_lane(conn: psycopg.Connection, model: str, dims: int, qvec: np.ndarray, predicate: Predicate,
                *, depth: int, summaries: bool = False, exact: bool = False, column: str = "primary",
                name: str | None = None, ef_search: int | None = None, one_pass_first: bool = False) -> LaneHits:
    """`ef_search`: this lane's HNSW candidate list (SearchConfig has one per lane), set for
    the rest of the transaction; None leaves the transaction's as it is.
    `one_pass_first`: for a search without filters, whose predicate drops only hidden rows
    (removed, superseded, archived, cold, boilerplate): walk the graph once without the
    iterative scan, and again with it only when that walk left fewer than `depth` rows. The
    first pass of an iterative scan is the same walk, so the rows are the same whenever
    `depth` of them pass; it keeps the candidates it discards for a later pass, which cost
    the multilingual lane at a million passages 10.5 ms p50 against 7.9 without (MiniLM
    5.4 against 4.8; warm, unfiltered, depth 50)."""
    name = name or ("summaries" if summaries else "vector")
    started = time.perf_counter()
    query = vector_sql(model, dims, predicate, summaries=summaries, exact=exact, column=column)
    params = {**predicate.params, "qvec": HalfVector(np.asarray(qvec, dtype=np.float32)), "k": int(depth)}
    if exact:
        rows = conn.execute(query, params).fetchall()
    else:
        _scan_mode(conn, not one_pass_first, ef_search)
        rows = conn.execute(query, params).fetchall()
        if one_pass_first and len(rows) < depth:
            _scan_mode(conn, True, None)
            rows = conn.execute(query, params).fetchall()
    rows.sort(key=lambda r: (r[2], r[0]))  # relaxed_order: restore exact distance order
    hits = LaneHits(name, [r[0] for r in rows], [1.0 - float(r[2]) for r in rows], [r[1] for r in rows],
                    graded=True)
    hits.ms = (time.perf_counter() - started) * 1000
    how = "exact scan" if exact else "HNSW"
    hits.status = f"ok: {len(hits)} nearest ({how})" if rows else f"empty: no embedded rows match ({how})"
    return hits


def is_uniform(scores: list[float], minimum: int = 3, tolerance: float = 1e-6) -> bool:
    """All scores equal: the symptom of a broken embedder (constant vectors) or a
    cross-encoder that ignores its input."""
    return len(scores) >= minimum and (max(scores) - min(scores)) <= tolerance
