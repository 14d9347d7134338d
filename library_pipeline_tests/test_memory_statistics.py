"""Memories are written between the ingests after which the keyword lane's statistics are
refreshed: the serving process recounts the memory source itself as it grows
(serving.lexemes.SourceRecount), so a memory search weighs its terms by the memories'
own figures, not the library's or none."""

from __future__ import annotations

from serving import lexemes
from serving.memory import Viewer
from serving.memory import service as memsvc
from serving.runtime import Library
from serving.search import SearchConfig
from serving.search.types import SearchFilters


def _memory_totals(conn) -> int | None:
    return conn.execute("SELECT sum(passages) FROM lexeme_df_totals WHERE source = 'memory'").fetchone()[0]


def test_memory_statistics_follow_the_writes(db, embedder):
    lib = Library(db.settings, embedder=embedder)
    agent = Viewer("Agent-Recount")
    try:
        for i in range(lexemes.RECOUNT_MIN):
            memsvc.memory_index(lib, agent, artifact_id=f"n{i}", content=f"Note {i}: the heron came back to the pond.")
            lib.memory_statistics.wait()
        with db.connect() as conn:
            assert _memory_totals(conn) == lexemes.RECOUNT_MIN
            heron = conn.execute("SELECT df FROM lexeme_df WHERE source = 'memory' AND lexeme = 'heron'").fetchone()
            assert heron == (lexemes.RECOUNT_MIN,)
        # a memory search is weighed by them
        out = lib.search("heron", filters=SearchFilters(viewer=agent, sources=("memory",)),
                         config=SearchConfig.only("keyword"))
        english = [t for t in out.keyword_trace if t["config"] == "english"][0]
        assert english["passages"] == lexemes.RECOUNT_MIN and english["terms"][0]["df"] == lexemes.RECOUNT_MIN
        # fewer new passages than a fifth of those counted (and than the minimum): no recount
        memsvc.memory_index(lib, agent, artifact_id="late", content="The heron left again.")
        lib.memory_statistics.wait()
        with db.connect() as conn:
            assert _memory_totals(conn) == lexemes.RECOUNT_MIN
        assert lib.memory_statistics.recounts == 1
        # a duplicate writes nothing and counts nothing
        memsvc.memory_index(lib, agent, artifact_id="late", content="The heron left again.")
        assert lib.memory_statistics._written == 1   # noqa: SLF001
    finally:
        lib.close()
