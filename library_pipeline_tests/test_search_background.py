"""The calibrated z-scores stand against the passages a search can return: a memory
search's background is memories, a document search's the documents (library, vault), so
agents storing thousands of conversation turns do not move the books' scores, nor the
books the memories' (engine.DOCUMENT_SOURCES, calibration.Background)."""

from __future__ import annotations

import pytest
from psycopg import sql

from library_pipeline.testing.sample_library import create_database, small_library
from serving.memory import Viewer, index_memory
from serving.search import SearchConfig, search
from serving.search import calibration
from serving.search.calibration import BACKGROUND
from serving.search.types import SearchFilters

NOTES = [f"Turn {i}: we talked about the weather, the garden and the dog's new collar." for i in range(12)]


@pytest.fixture(scope="module")
def mixed(server_db, embedder, test_data):
    db = create_database(server_db)
    small_library(db, embedder, test_data, books=2)
    with db.connect(autocommit=True) as conn:
        for i, text in enumerate(NOTES):
            index_memory(conn, embedder, Viewer("Agent-Bg"), artifact_id=f"t{i}", content=text)
    return db


def _sample_size(conn, embedder, sources):
    sample = BACKGROUND._sample(conn, "embedding", embedder.name, embedder.dims,  # noqa: SLF001
                                tuple(sorted(sources)) if sources else None)
    return len(sample.vectors) if sample is not None else 0


def test_each_search_stands_against_its_own_sources(mixed, embedder):
    with mixed.connect() as conn:
        memories = conn.execute("SELECT count(*) FROM passages WHERE source = 'memory' AND summary_level = 0"
                                ).fetchone()[0]
        documents = conn.execute("SELECT count(*) FROM passages WHERE source <> 'memory' AND summary_level = 0"
                                 ).fetchone()[0]
        assert _sample_size(conn, embedder, ("memory",)) == memories == len(NOTES)
        assert _sample_size(conn, embedder, ("library", "vault")) == min(documents, calibration.BACKGROUND_SIZE)
        q = embedder.encode_queries(["the dog's collar"])[0]
        mem = BACKGROUND.stats(conn, "embedding", embedder.name, embedder.dims, q, ("memory",))
        docs = BACKGROUND.stats(conn, "embedding", embedder.name, embedder.dims, q, ("library", "vault"))
        assert mem is not None and docs is not None and mem != docs
        # too few passages of a source: the whole library stands in
        none = BACKGROUND.stats(conn, "embedding", embedder.name, embedder.dims, q, ("vault",))
        assert none == BACKGROUND.stats(conn, "embedding", embedder.name, embedder.dims, q, None)
        # and the empty sample is kept, not looked for again on every search
        empty = BACKGROUND._sample(conn, "embedding", embedder.name, embedder.dims, ("vault",))  # noqa: SLF001
        assert empty is not None and len(empty.vectors) == 0
        assert BACKGROUND._sample(conn, "embedding", embedder.name, embedder.dims, ("vault",)) is empty  # noqa: SLF001


def test_the_sample_is_read_in_the_order_of_its_index(mixed, embedder):
    """The sample's ORDER BY is passages_sample_idx's expression, so it is read in index
    order (with the planner's cheaper plans for a small table switched off, to see that the
    index can serve it): the sort over every passage it replaced took 7.6 s at 1M."""
    with mixed.connect() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off")
        plan = "\n".join(r[0] for r in conn.execute(
            sql.SQL("EXPLAIN ") + calibration.sample_sql("embedding", embedder.dims),
            (embedder.name, None, None, calibration.BACKGROUND_SIZE)))
        assert "passages_sample_idx" in plan, plan
        # the same rows as the multiplicative hash in bigint, the order before the index
        got = conn.execute("SELECT id FROM passages WHERE summary_level = 0 "
                           "ORDER BY (id * 2654435761::numeric) % 4294967296 LIMIT 50").fetchall()
        want = conn.execute("SELECT id FROM passages WHERE summary_level = 0 "
                            "ORDER BY (id * 2654435761) % 4294967296 LIMIT 50").fetchall()
        assert len(got) == 50 and got == want


def test_the_engine_asks_for_the_searchs_sources(mixed, embedder, monkeypatch):
    seen = []
    real = calibration.Background.stats

    def spy(self, conn, column, model, dims, qvec, sources=None):
        seen.append(sources)
        return real(self, conn, column, model, dims, qvec, sources)

    monkeypatch.setattr(calibration.Background, "stats", spy)
    cfg = SearchConfig(rerank=False, log_queries=False)
    with mixed.connect() as conn:
        search(conn, embedder, "the dog's collar", config=cfg, filters=SearchFilters(viewer=Viewer("Agent-Bg")))
        assert seen and set(seen) == {("library", "vault")}
        seen.clear()
        search(conn, embedder, "the dog's collar", config=cfg,
               filters=SearchFilters(viewer=Viewer("Agent-Bg"), sources=("memory",)))
        assert seen and set(seen) == {("memory",)}
