"""Filtered vector search must return its full k (agent-library's, github.com/CreateM1nd/agent-library,
summaries were invisible for a week behind a filter on the main HNSW index).

5,000 rows made from the sample library's real MiniLM vectors, each copied
with a small random perturbation (cosine ~0.9 to its original): embedding
5,000 texts would take minutes on 2 cores, and the point here is the index,
not the text."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from pgvector import HalfVector
from psycopg import sql

from library_pipeline_tests.search_fixtures import corpus, create_database  # noqa: F401  (fixture)
from serving.search import SearchConfig, search
from serving.search.filters import passage_predicate
from serving.search.types import SearchFilters
from serving.search import vector
from serving.search.vector import vector_sql

ROWS = 5000
EVERY = 50  # 1 row in 50 = 2% carries the filtered scope / is a summary


def _bulk(db, embedder, base: np.ndarray) -> None:
    rng = np.random.default_rng(7)
    with db.connect() as conn:
        conn.execute("SELECT ensure_vector_indexes(%s, %s)", (embedder.name, embedder.dims))
        doc = conn.execute("INSERT INTO documents (path, partition_key, title, status) "
                           "VALUES ('bulk.txt', 'bulk', 'Bulk', 'ingested') RETURNING id").fetchone()[0]
        rows = []
        for i in range(ROWS):
            v = base[i % len(base)] + rng.normal(0, 0.025, base.shape[1])
            v = v / np.linalg.norm(v)
            rows.append((doc, i, f"synthetic passage number {i}", "department" if i % EVERY == 0 else "global",
                         1 if i % EVERY == 1 else 0, HalfVector(v.astype(np.float32)), embedder.name))
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO passages (document_id, ordinal, content, content_hash, scope, summary_level, "
                "embedding, embed_model, kind) VALUES (%s, %s, %s, 'h', %s, %s, %s, %s, 'text')", rows)
        conn.commit()
        conn.execute("ANALYZE passages")
        conn.commit()


def _base_vectors(corpus) -> np.ndarray:
    with corpus.db.connect() as conn:
        rows = conn.execute("SELECT embedding FROM passages WHERE summary_level = 0 ORDER BY id").fetchall()
    return np.stack([np.asarray(r[0].to_list(), dtype=np.float32) for r in rows])


@pytest.fixture(scope="module")
def db(server_db, embedder, corpus):
    """One 5,000-row database for the module (tests only add rows the others ignore)."""
    database = create_database(server_db)
    _bulk(database, embedder, _base_vectors(corpus))
    return database


def _plain_scan(conn: psycopg.Connection, embedder, qvec, filters: SearchFilters, k: int, *, iterative: bool,
                summaries: bool = False) -> tuple[int, str]:
    pred = passage_predicate(filters)
    query = vector_sql(embedder.name, embedder.dims, pred, summaries=summaries)
    params = {**pred.params, "qvec": HalfVector(qvec), "k": k}
    with conn.transaction():
        conn.execute("SELECT set_config('hnsw.iterative_scan', %s, true), set_config('hnsw.ef_search', '40', true)",
                     ("relaxed_order" if iterative else "off",))
        # At 5,000 rows the planner rightly prefers an exact scan for a 2% filter (which
        # trivially returns k); force the HNSW path to show what the iterative scan fixes.
        conn.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off")
        plan = "\n".join(r[0] for r in conn.execute(sql.SQL("EXPLAIN ") + query, params))
        count = len(conn.execute(query, params).fetchall())
    return count, plan


def test_filtered_vector_search_returns_full_k(db, embedder):
    qvec = embedder.encode_queries(["whale hunting"])[0]
    department = SearchFilters(scopes=("department",))
    with db.connect() as conn:
        # the index is used, and without iterative scans the 2% filter starves it
        starved, plan = _plain_scan(conn, embedder, qvec, department, 20, iterative=False)
        assert "passages_hnsw_" in plan and "summary" not in plan.split("Index Scan using ")[1].split()[0]
        assert starved < 20
        full, _ = _plain_scan(conn, embedder, qvec, department, 20, iterative=True)
        assert full == 20
        # and search() itself, through the same function agents call
        response = search(conn, embedder, "whale hunting", top_k=20, filters=department,
                          config=SearchConfig.only("vector", vector_depth=20, ef_search=40))
        assert len(response.results) == 20
        ids = [r.passage_id for r in response.results]
        scopes = {s for s, in conn.execute("SELECT DISTINCT scope FROM passages WHERE id = ANY(%s)", (ids,))}
        assert scopes == {"department"}
        assert [r.lanes["vector"] for r in response.results] == list(range(1, 21))


def test_a_filter_leaving_few_rows_is_scanned_exactly(db, embedder, monkeypatch):
    """100 department rows are few: every one is compared, so the top 20 are the exact top 20;
    the summaries lane, whose filter leaves no summary, answers at once instead of walking
    the summaries' graph for one that passes. Past EXACT_ROWS the graph serves the filter."""
    department = SearchFilters(scopes=("department",))
    config = SearchConfig.only("vector", vector_depth=20, ef_search=40, summaries_k=5)
    with db.connect() as conn:
        exact = search(conn, embedder, "whale hunting", top_k=20, filters=department, config=config)
        assert "exact scan" in exact.stages["vector"] and len(exact.results) == 20
        qvec = embedder.encode_queries(["whale hunting"])[0]
        truth = [r[0] for r in conn.execute(
            "SELECT id FROM passages WHERE scope = 'department' AND summary_level = 0 "
            "ORDER BY embedding::halfvec(384) <=> %s::halfvec(384), id LIMIT 20", (HalfVector(qvec),))]
        assert [r.passage_id for r in exact.results] == truth
        assert exact.summaries == [] and "exact scan" in exact.stages["summaries"]
        monkeypatch.setattr(vector, "EXACT_ROWS", 50)
        walked = search(conn, embedder, "whale hunting", top_k=20, filters=department, config=config)
        assert "HNSW" in walked.stages["vector"] and len(walked.results) == 20


def test_an_unfiltered_lane_walks_once_and_again_only_when_short(db, embedder):
    """Without filters a lane walks the graph once without the iterative scan, and again
    iteratively only when that walk leaves fewer than its depth: when the candidate list is
    shorter than the depth, and when hidden rows (here the 30 nearest, removed) crowd the
    list. Either way its rows are the iterative scan's."""
    qvec = embedder.encode_queries(["whale hunting"])[0]
    pred = passage_predicate(SearchFilters())

    def lane(conn, depth: int, ef: int, once: bool) -> list[int]:
        with conn.transaction():
            hits = vector.vector_lane(conn, embedder.name, embedder.dims, qvec, pred, depth=depth, ef_search=ef,
                                      one_pass_first=once)
        assert "HNSW" in hits.status
        return hits.ids

    with db.connect() as conn:
        for depth, ef in ((20, 100), (60, 40)):
            once = lane(conn, depth, ef, True)
            assert len(once) == depth and once == lane(conn, depth, ef, False)
        nearest = lane(conn, 30, 100, False)
        with conn.transaction():   # rolled back: the module's other tests see no removed rows
            conn.execute("UPDATE passages SET removed = true WHERE id = ANY(%s)", (nearest,))
            once = lane(conn, 20, 40, True)
            assert len(once) == 20 and not set(once) & set(nearest)
            assert once == lane(conn, 20, 40, False)
            raise psycopg.Rollback()
        assert not conn.execute("SELECT count(*) FROM passages WHERE removed").fetchone()[0]


def test_summaries_lane_is_not_starved(db, embedder):
    qvec = embedder.encode_queries(["whale hunting"])[0]
    with db.connect() as conn:
        count, plan = _plain_scan(conn, embedder, qvec, SearchFilters(), 5, iterative=True, summaries=True)
        assert "passages_hnsw_summary_" in plan and count == 5
        response = search(conn, embedder, "whale hunting", top_k=5, config=SearchConfig(summaries_k=5))
        assert len(response.summaries) == 5
        assert all(s.summary_level == 1 for s in response.summaries)
        # a filter on top of the summary partial index still returns k
        scoped = search(conn, embedder, "whale hunting", top_k=5, filters={"scope": "global"},
                        config=SearchConfig(summaries_k=5))
        assert len(scoped.summaries) == 5


def test_single_document_filter_uses_an_exact_scan(db, embedder):
    with db.connect() as conn:
        small = conn.execute("INSERT INTO documents (path, partition_key, title, status) "
                             "VALUES ('small.txt', 'small', 'Small', 'ingested') RETURNING id").fetchone()[0]
        vec = embedder.encode_passages(["a short note about harpoons"])[0]
        conn.execute("INSERT INTO passages (document_id, content, content_hash, embedding, embed_model) "
                     "SELECT %s, 'note ' || g, 'h', %s, %s FROM generate_series(1, 7) g",
                     (small, HalfVector(vec), embedder.name))
        conn.commit()
        response = search(conn, embedder, "whale hunting", top_k=10, filters={"document_id": small},
                          config=SearchConfig.only("vector"))
        assert len(response.results) == 7 and {r.path for r in response.results} == {"small.txt"}
        assert "exact scan" in response.stages["vector"]
