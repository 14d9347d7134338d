"""refresh_lexeme_df: the statistics the keyword lane's BM25 takes its IDF from,
recomputed from the passages' own tsvectors; and the lane's behaviour when they
are stale or absent."""

from __future__ import annotations

from library_pipeline_tests.search_fixtures import corpus, small_library  # noqa: F401  (fixture)
from serving.lexemes import refresh_lexeme_df
from serving.search import SearchConfig, search


def test_refresh_counts_document_frequency_per_configuration(db, embedder, test_data, corpus):
    small_library(db, embedder, test_data, books=5, refresh=False)
    with db.connect() as conn:
        # a removed passage and a summary must not count: the lane never searches them
        conn.execute("UPDATE passages SET removed = true WHERE id = (SELECT min(id) FROM passages)")
        conn.commit()
        result = refresh_lexeme_df(conn)
        assert set(result["configs"]) == {"english", "russian"}
        assert result["configs"]["russian"]["passages"] > 0
        expected = conn.execute(
            "SELECT count(*) FROM passages WHERE summary_level = 0 AND NOT removed").fetchone()[0]
        assert result["passages"] == expected
        # df of a lexeme = number of searchable verbatim passages containing it
        for config, lexeme in (("english", "holm"), ("english", "whale"), ("russian", "пугач")):
            df = conn.execute("SELECT df FROM lexeme_df WHERE ts_config = %s::regconfig AND lexeme = %s",
                              (config, lexeme)).fetchone()
            direct = conn.execute(
                "SELECT count(*) FROM passages WHERE ts_config = %s::regconfig AND summary_level = 0 "
                "AND NOT removed AND tsv @@ %s::tsquery", (config, f"'{lexeme}'")).fetchone()[0]
            assert df is not None and df[0] == direct > 0, (config, lexeme)
        avg = conn.execute("SELECT avg_length FROM lexeme_df_totals WHERE ts_config = 'english'::regconfig"
                           ).fetchone()[0]
        direct_avg = conn.execute("SELECT avg(length(tsv)) FROM passages WHERE ts_config = 'english'::regconfig "
                                  "AND summary_level = 0 AND NOT removed").fetchone()[0]
        assert abs(avg - float(direct_avg)) < 1e-6
        again = refresh_lexeme_df(conn)  # idempotent
        assert again["lexemes"] == result["lexemes"] and again["passages"] == result["passages"]


def test_unknown_lexemes_count_as_rare(db, embedder, test_data, corpus):
    lib = small_library(db, embedder, test_data, books=3)
    with db.connect() as conn:
        # ingested after the refresh: "zyzzogeton" is in no lexeme_df row yet
        doc = lib.ids["epub/pg2701-moby-dick.epub"]
        text = "The zyzzogeton lay coiled in the whale boat beside Queequeg."
        vec = embedder.encode_passages([text])[0]
        from pgvector import HalfVector

        new_id = conn.execute(
            "INSERT INTO passages (document_id, ordinal, content, content_hash, ts_config, embedding, embed_model) "
            "VALUES (%s, 999, %s, 'h', 'english', %s, %s) RETURNING id",
            (doc, text, HalfVector(vec), embedder.name)).fetchone()[0]
        conn.commit()
        response = search(conn, embedder, "zyzzogeton whale", top_k=5, config=SearchConfig.only("keyword"))
        english = [t for t in response.keyword_trace if t["config"] == "english"][0]
        terms = {t["lexeme"]: t for t in english["terms"]}
        # counted in the postings (df 1, the rarest), so it outweighs the common "whale"
        assert terms["zyzzogeton"]["df"] == 1 and terms["zyzzogeton"].get("estimated")
        assert terms["zyzzogeton"]["idf"] > terms["whale"]["idf"]
        assert response.results[0].passage_id == new_id


def test_keyword_lane_works_before_the_first_refresh(db, embedder, test_data, corpus):
    small_library(db, embedder, test_data, books=2, refresh=False)
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM lexeme_df").fetchone()[0] == 0
        response = search(conn, embedder, "Sherlock Holmes violin", top_k=5, config=SearchConfig.only("keyword"))
        # the name is in the passage or in its document title (indexed with it: passages.context)
        assert response.results and all("Holmes" in f"{r.title} {r.text}" or "Sherlock" in f"{r.title} {r.text}"
                                        for r in response.results)


def _english(response) -> dict:
    return [t for t in response.keyword_trace if t["config"] == "english"][0]


def test_a_searchs_statistics_are_its_own_sources(db, embedder, test_data, corpus):
    """Agents' memories do not move the library's BM25 (N, average length, df), and a
    memory search is weighed by the memories' own figures once they are counted."""
    from serving.memory import Viewer, index_memory
    from serving.search.types import SearchFilters

    small_library(db, embedder, test_data, books=2)
    keyword = SearchConfig.only("keyword")
    query = "Holmes and the whale"
    agent = Viewer("Agent-Stats")
    with db.connect() as conn:
        before = search(conn, embedder, query, top_k=10, config=keyword)
        for i in range(30):   # short, and all about Holmes: both N's mean length and df would move
            index_memory(conn, embedder, agent, artifact_id=f"n{i}", content=f"Note {i}: Holmes again.")
        conn.commit()
        as_memory = SearchFilters(viewer=agent, sources=("memory",))
        # not counted yet: a memory search takes the whole corpus's figures
        uncounted = _english(search(conn, embedder, query, top_k=10, config=keyword, filters=as_memory))
        assert uncounted["passages"] == _english(before)["passages"]
        refresh_lexeme_df(conn)
        after = search(conn, embedder, query, top_k=10, config=keyword, filters=SearchFilters(viewer=agent))
        assert _english(after) == _english(before)
        assert [r.passage_id for r in after.results] == [r.passage_id for r in before.results]
        memory = _english(search(conn, embedder, query, top_k=10, config=keyword, filters=as_memory))
        assert memory["passages"] == 30
        # "whale" is in the books only: in no memory, so no term of a memory search
        assert {t["lexeme"]: t["df"] for t in _english(before)["terms"]}["whale"] > 0
        assert {t["lexeme"]: t["df"] for t in memory["terms"]} == {"holm": 30}
        # both together: the sums
        both = _english(search(conn, embedder, query, top_k=10, config=keyword,
                               filters=SearchFilters(viewer=agent, sources=("library", "vault", "memory"))))
        assert both["passages"] == 30 + _english(before)["passages"]
        holmes = {t["lexeme"]: t["df"] for t in _english(before)["terms"]}["holm"]
        assert {t["lexeme"]: t["df"] for t in both["terms"]}["holm"] == 30 + holmes


def test_a_source_never_counted_is_still_searched_by_its_words(db, embedder, test_data, corpus):
    """The library counted, a vault synced since: the vault's own words are unknown to the
    statistics, counted among the searched sources' postings, and found."""
    small_library(db, embedder, test_data, books=1)
    with db.connect() as conn:
        doc = conn.execute("INSERT INTO documents (source, path, partition_key, title, status) "
                           "VALUES ('vault', 'notes/pond.md', 'vault-pond', 'Pond', 'ingested') RETURNING id"
                           ).fetchone()[0]
        new_id = conn.execute("INSERT INTO passages (document_id, source, kind, content, content_hash, ts_config) "
                              "VALUES (%s, 'vault', 'note', 'A zyzzogeton by the pond.', 'z', 'english') "
                              "RETURNING id", (doc,)).fetchone()[0]
        conn.commit()
        assert conn.execute("SELECT count(*) FROM lexeme_df_totals WHERE source = 'vault'").fetchone()[0] == 0
        response = search(conn, embedder, "zyzzogeton", top_k=5, config=SearchConfig.only("keyword"))
        assert [r.passage_id for r in response.results] == [new_id]
        assert _english(response)["terms"][0]["estimated"]
