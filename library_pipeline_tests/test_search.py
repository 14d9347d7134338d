"""search() on a real sample library: known-item lookups, the TOC query, Russian,
lane explanations and weights, BM25 keyword ranking, filters, bad input.

Real Postgres (embedded), real MiniLM, real text (search_fixtures.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from library_pipeline_tests.search_fixtures import conn, corpus  # noqa: F401  (fixtures)
from serving.search import MAX_TOP_K, SearchConfig, SearchError, SearchFilters, search
from serving.search.fusion import convex_fusion
from serving.search.lanes import LaneHits

SHERLOCK = "epub/pg1661-sherlock-holmes.epub"
MOBY = "epub/pg2701-moby-dick.epub"
SICP = "pdf/sicp-2nd-ed-sarabander.pdf"
PUSHKIN = "text_ru/pushkin_kapitanskaya-dochka.txt"
REMOVED = "epub/old-edition/hound-of-the-baskervilles.txt"


@pytest.mark.parametrize("query, path", [
    ("The Adventures of Sherlock Holmes", SHERLOCK),
    ("moby dick", MOBY),
    ("Structure and Interpretation of Computer Programs", SICP),
    ("Капитанская дочка", PUSHKIN),
    ("kapitanskaya dochka", PUSHKIN),
])
def test_title_query_returns_that_book_first(conn, embedder, query, path):
    response = search(conn, embedder, query, top_k=5)
    top = response.results[0]
    assert top.path == path, [(r.path, r.lanes) for r in response.results]
    assert "title" in top.lanes
    assert response.stages["title"].startswith("ok")


def test_table_of_contents_finds_the_toc_chunk(conn, embedder):
    response = search(conn, embedder, "table of contents", top_k=5)
    assert response.results[0].kind == "toc"
    assert response.results[0].path == SICP
    # SICP's TOC is headed "Contents": the structure lane answers from kind = 'toc',
    # whatever the keyword lane's AND of "tabl & content" happens to match
    assert "structure" in response.results[0].lanes
    named = search(conn, embedder, "SICP table of contents", top_k=3)
    assert named.results[0].kind == "toc" and named.results[0].path == SICP


def test_russian_query_finds_the_russian_document(conn, embedder):
    response = search(conn, embedder, "Пугачев взял Белогорскую крепость", top_k=5)
    assert response.results[0].path == PUSHKIN
    # BM25 matched its Russian words (whichever lane proposed it, every candidate is scored)
    assert response.results[0].lane_scores.get("keyword", 0) > 0
    russian = [t for t in response.keyword_trace if t["config"] == "russian"]
    assert russian and {"пугач", "крепост"} <= {t["lexeme"] for t in russian[0]["terms"]}
    # the English configuration cannot stem Russian: its lexemes match no English posting
    assert not [t for t in response.keyword_trace if t["config"] == "english" and t["terms"]]


def test_mixed_script_query_finds_both_languages(conn, embedder):
    response = search(conn, embedder, "Пугачев Queequeg", top_k=20)
    paths = {r.path for r in response.results if "keyword" in r.lanes}
    assert {PUSHKIN, MOBY} <= paths


def test_every_result_explains_its_fused_score(conn, embedder):
    cfg = SearchConfig()
    response = search(conn, embedder, "whale ship harpooneer", top_k=10, config=cfg)
    weights = {"vector": cfg.vector_weight, "keyword": cfg.keyword_weight, "title": cfg.title_weight,
               "structure": cfg.structure_weight}
    assert response.score_kind == "calibrated", response.stages
    graded = cfg.vector_weight + cfg.keyword_weight
    for r in response.results:
        assert r.lanes and set(r.lanes) <= set(weights) | {"multilingual"}
        # every lane that reads the passage has its say, whether or not it returned it
        assert set(r.lane_scores) <= set(weights) | {"multilingual"} and r.lane_scores
        assert all(v >= 0.0 for v in r.lane_scores.values())
        assert sum(v for lane, v in r.lane_scores.items() if lane not in ("title", "structure")) <= graded
        assert math.isclose(r.score, sum(r.lane_scores.values()), rel_tol=1e-9)
    convex = search(conn, embedder, "whale ship harpooneer", top_k=10,
                    config=dataclasses.replace(cfg, fusion="convex"))
    assert convex.score_kind == "convex"
    for r in convex.results:
        assert r.lanes and set(r.lanes) <= set(weights) and set(r.lane_scores) == set(r.lanes)
        assert all(0.0 <= r.lane_scores[lane] <= weights[lane] for lane in r.lanes)
        assert math.isclose(r.score, sum(r.lane_scores.values()), rel_tol=1e-9)
    # under the convex rule each graded lane's best passage carries that lane's whole weight
    for lane in ("vector", "keyword"):
        firsts = [r for r in convex.results if r.lanes.get(lane) == 1]
        assert firsts and math.isclose(firsts[0].lane_scores[lane], weights[lane])
    for answer in (response, convex):
        scores = [r.score for r in answer.results]
        assert scores == sorted(scores, reverse=True)

    rrf = search(conn, embedder, "whale ship harpooneer", top_k=10, config=SearchConfig(fusion="rrf"))
    assert rrf.score_kind == "rrf" and rrf.stages["fusion"].startswith("ok: weighted RRF")
    for r in rrf.results:
        expected = sum(weights[lane] / (cfg.rrf_k + rank) for lane, rank in r.lanes.items())
        assert math.isclose(r.score, expected, rel_tol=1e-9)
    with pytest.raises(ValueError, match="unknown fusion"):
        SearchConfig(fusion="max")


def test_convex_fusion_normalises_each_graded_lane_over_its_depth():
    vec = LaneHits("vector", [1, 2, 3, 4], [0.9, 0.7, 0.5, 0.1], graded=True)
    kw = LaneHits("keyword", [3, 5], [12.0, 4.0], graded=True)
    title = LaneHits("title", [5], [3.0])  # match counts: ranked, not graded
    depths = {"vector": 3, "keyword": 50}
    fused = convex_fusion([(vec, 1.0), (kw, 1.0), (title, 2.0)], k=20, depths=depths)
    parts = {f.id: f.parts for f in fused}
    assert parts[1] == {"vector": 1.0} and math.isclose(parts[2]["vector"], 0.5)
    assert parts[3] == {"vector": 0.0, "keyword": 1.0}
    assert parts[4] == {"vector": 0.0}              # below the depth-3 floor: clipped, not negative
    assert parts[5] == {"keyword": 0.0, "title": 2.0}
    # 1 and 3 tie at 1.0 with a rank 1 each: the passage id decides, never dict order
    assert [f.id for f in fused] == [5, 1, 3, 2, 4]
    # more hits past a lane's depth (a caller asking for 100 results) reorder nothing above them
    deeper = LaneHits("vector", [1, 2, 3, 4, 6, 7], [0.9, 0.7, 0.5, 0.1, 0.05, 0.01], graded=True)
    again = convex_fusion([(deeper, 1.0), (kw, 1.0), (title, 2.0)], k=20, depths=depths)
    assert [f.id for f in again][:5] == [5, 1, 3, 2, 4]


def test_title_weight_is_load_bearing(conn, embedder):
    """Reference lesson: at k = 60 every lane's rank 1 scores 1/61, so a name match
    tied an ordinary content hit. Here the query names Pushkin's novel (title lane
    only: MiniLM cannot read Russian) and a word Moby Dick is full of."""
    query = "pushkin kapitanskaya dochka whale"
    weighted = search(conn, embedder, query, top_k=3, config=SearchConfig(title_weight=2.0))
    assert weighted.results[0].path == PUSHKIN and weighted.results[0].lanes["title"] == 1
    no_title = search(conn, embedder, query, top_k=10, config=SearchConfig(title=False))
    assert no_title.stages["title"] == "off"
    assert all("title" not in r.lanes for r in no_title.results)
    assert no_title.results[0].path == MOBY
    # a title match counts its weight, no more: at half the best content score it loses
    flat = search(conn, embedder, query, top_k=3,
                  config=SearchConfig(title_weight=no_title.results[0].score / 2))
    assert flat.results[0].path == MOBY


def test_bm25_ranks_passages_holding_more_rare_terms_first(conn, embedder):
    # no passage holds all three (Baker Street is in Holmes, whales in Moby-Dick): every
    # term contributes its idf, so passages holding two terms come before any holding one
    response = search(conn, embedder, "baker street whale", top_k=10, config=SearchConfig.only("keyword"))
    english = [t for t in response.keyword_trace if t["config"] == "english"][0]
    terms = {t["lexeme"]: t for t in english["terms"]}
    assert set(terms) == {"baker", "street", "whale"}
    by_df = sorted(terms.values(), key=lambda t: t["df"])  # rarer term, larger idf (df from lexeme_df)
    assert [t["idf"] for t in by_df] == sorted((t["idf"] for t in by_df), reverse=True)
    assert by_df[0]["idf"] > by_df[-1]["idf"]
    ids = [r.passage_id for r in response.results]
    held = conn.execute(
        "SELECT id, (tsv @@ 'baker'::tsquery)::int + (tsv @@ 'street'::tsquery)::int "
        "+ (tsv @@ 'whale'::tsquery)::int FROM passages WHERE id = ANY(%s)", (ids,)).fetchall()
    counts = [dict(held)[pid] for pid in ids]
    assert counts[0] >= 2 and all(c >= 1 for c in counts)
    scores = [r.score for r in response.results]
    assert scores == sorted(scores, reverse=True)
    assert all(r.lanes == {"keyword": i} for i, r in enumerate(response.results, start=1))


def test_keyword_work_bound_keeps_rare_terms_exact(conn, embedder):
    query = "whale ship harpooneer captain"
    full = search(conn, embedder, query, top_k=20, config=SearchConfig.only("keyword"))
    tight = search(conn, embedder, query, top_k=20,
                   config=SearchConfig.only("keyword", keyword_postings=20, keyword_depth=20))
    caps = {t["lexeme"]: t["cap"] for t in tight.keyword_trace[0]["terms"]}
    assert set(caps.values()) == {20}
    assert len(tight.results) == 20
    # the top of the ranking holds: the best passages are best on every term's best rows
    assert tight.results[0].passage_id == full.results[0].passage_id
    # a long query shares the work budget: per-term bound falls, never below depth
    many = search(conn, embedder, query, top_k=10,
                  config=SearchConfig.only("keyword", keyword_postings=1000, keyword_work=20, keyword_depth=10))
    assert {t["cap"] for t in many.keyword_trace[0]["terms"]} == {10}
    assert len(many.results) == 10


def test_terms_the_corpus_does_not_have_drop_out(conn, embedder):
    response = search(conn, embedder, "xylophonequux holmes", top_k=5, config=SearchConfig.only("keyword"))
    english = [t for t in response.keyword_trace if t["config"] == "english"]
    assert [t["lexeme"] for t in english[0]["terms"]] == ["holm"]
    assert response.results and all("Holmes" in f"{r.title} {r.text}" for r in response.results)


def test_frequent_terms_still_count(conn, embedder):
    # the documents' figures (library and vault), what a search naming no sources reads
    total, = conn.execute("SELECT sum(passages) FROM lexeme_df_totals WHERE ts_config = 'english'::regconfig "
                          "AND source <> 'memory'").fetchone()
    # a lexeme in > 10% of passages (the old lane dropped those as noise), a word stemming
    # to itself, that some passage holds beside "queequeg"
    word, = conn.execute(
        "SELECT lexeme FROM (SELECT lexeme, sum(df) AS df FROM lexeme_df WHERE ts_config = 'english'::regconfig "
        "                    AND source <> 'memory' GROUP BY 1) d WHERE df > %s AND lexeme ~ '^[a-z]{3,}$' "
        "AND tsvector_to_array(to_tsvector('english', lexeme)) = ARRAY[lexeme] "
        "AND EXISTS (SELECT 1 FROM passages p WHERE p.ts_config = 'english'::regconfig "
        "            AND p.tsv @@ (quote_literal(d.lexeme)::tsquery && 'queequeg'::tsquery)) "
        "ORDER BY df DESC LIMIT 1", (0.1 * total,)).fetchone()
    response = search(conn, embedder, f"{word} queequeg", top_k=5, config=SearchConfig.only("keyword"))
    english = [t for t in response.keyword_trace if t["config"] == "english"][0]
    assert {t["lexeme"] for t in english["terms"]} == {word, "queequeg"}
    assert all(t["idf"] > 0 for t in english["terms"])
    # the common term still shapes the ranking: a passage holding both words can only
    # climb against the passages holding "queequeg" alone
    both = search(conn, embedder, f"{word} queequeg", top_k=50, config=SearchConfig.only("keyword"))
    alone = search(conn, embedder, "queequeg", top_k=50, config=SearchConfig.only("keyword"))
    rank_both = {r.passage_id: i for i, r in enumerate(both.results)}
    rank_alone = {r.passage_id: i for i, r in enumerate(alone.results)}
    holders = {pid for pid, in conn.execute("SELECT id FROM passages WHERE id = ANY(%s) AND tsv @@ %s::tsquery",
                                            (list(rank_alone), f"'{word}' & 'queequeg'"))}
    others = [p for p in rank_alone if p not in holders]
    assert holders and others
    # BM25 adds the common term's part to holders only: no holder falls behind a passage
    # it was ahead of
    for h in holders:
        for o in others:
            if rank_alone[h] < rank_alone[o] and h in rank_both and o in rank_both:
                assert rank_both[h] < rank_both[o]
    assert [r.passage_id for r in both.results] != [r.passage_id for r in alone.results]
    only_common = search(conn, embedder, word, top_k=5, config=SearchConfig.only("keyword"))
    assert len(only_common.results) == 5 and only_common.stages["keyword"].startswith("ok")


def test_lane_switches_give_single_lane_configurations(conn, embedder):
    vec = search(conn, embedder, "whale hunting at sea", top_k=5, config=SearchConfig.only("vector"))
    assert vec.results and all(set(r.lanes) == {"vector"} for r in vec.results)
    assert vec.stages["keyword"] == "off" and vec.stages["rerank"] == "off"
    kw = search(conn, embedder, "whale hunting at sea", top_k=5, config=SearchConfig.only("keyword"))
    assert kw.results and all(set(r.lanes) == {"keyword"} for r in kw.results)
    assert kw.stages["vector"] == "off"


def test_summaries_come_beside_passages(conn, embedder):
    response = search(conn, embedder, "a detective solving mysteries in London", top_k=5)
    assert response.summaries and all(s.summary_level > 0 and s.kind == "summary" for s in response.summaries)
    assert response.summaries[0].path == SHERLOCK
    assert all(r.summary_level == 0 for r in response.results)
    filtered = search(conn, embedder, "a detective solving mysteries", top_k=5, filters={"source": "library"})
    assert filtered.summaries  # the filter does not starve the summaries lane


def test_filters_source_path_and_removed(conn, embedder):
    vault = search(conn, embedder, "how to host the site", top_k=5, filters={"source": "vault"})
    assert vault.results and all(r.source == "vault" for r in vault.results)
    one = search(conn, embedder, "evaluation of expressions", top_k=5, filters={"path": SICP})
    assert one.results and all(r.path == SICP for r in one.results)
    assert "exact scan" in one.stages["vector"]
    with pytest.raises(SearchError, match="library_files"):
        search(conn, embedder, "anything", filters={"path": "no/such/file.pdf"})
    query = "hound of the Baskervilles howled over the moor at Grimpen Mire"
    default = search(conn, embedder, query, top_k=20)
    assert REMOVED not in {r.path for r in default.results}
    explicit = search(conn, embedder, query, top_k=20, filters=SearchFilters(include_removed=True))
    assert explicit.results[0].path == REMOVED


@pytest.mark.parametrize("query", [
    "the of and",                                     # stopwords only
    "!&|:*()<->",                                     # to_tsquery operators
    "'; DROP TABLE passages; --",                     # SQL-looking
    "foo:* & !bar | (baz <-> qux)",                   # tsquery syntax around words
    "whale 🐋🐳 harpoon",                            # emoji
    "Pushkin Пушкин 普希金 whale",                     # mixed script
    "o'neil's \\ back\\slash 'quoted'",              # quotes and backslashes
    "null\x00byte and\tcontrol\x07chars",
    "x" * 100_000,                                     # 100 kB, one word
    "whale " * 20_000,                                 # 100 kB of words
])
def test_bad_input_gives_results_or_clear_error(conn, embedder, query):
    response = search(conn, embedder, query, top_k=5)
    assert isinstance(response.results, list)
    assert len(response.query) <= 2000
    assert conn.execute("SELECT to_regclass('passages') IS NOT NULL").fetchone()[0]
    if len(query) > 2000:
        assert any("characters" in w for w in response.warnings)


def test_stopwords_only_query_is_flagged(conn, embedder):
    response = search(conn, embedder, "the of and", top_k=5)
    assert any("no searchable words" in w for w in response.warnings)


@pytest.mark.parametrize("kwargs, message", [
    ({"query": ""}, "empty"),
    ({"query": "   \n\t "}, "empty"),
    ({"query": "whale", "top_k": 0}, "top_k"),
    ({"query": "whale", "top_k": -3}, "top_k"),
    ({"query": "whale", "filters": {"colour": "red"}}, "unknown filter 'colour'"),
    ({"query": "whale", "filters": {"source": "web"}}, "not one of"),
    ({"query": "whale", "filters": {"document_id": "seven"}}, "integer"),
    ({"query": 42}, "string"),
])
def test_invalid_requests_raise_search_error(conn, embedder, kwargs, message):
    query = kwargs.pop("query")
    with pytest.raises(SearchError, match=message):
        search(conn, embedder, query, **kwargs)


def test_huge_top_k_is_capped_with_a_warning(conn, embedder):
    response = search(conn, embedder, "whale", top_k=10**9)
    assert len(response.results) <= MAX_TOP_K
    assert any("maximum" in w for w in response.warnings)


def test_response_reports_stages_timings_and_logs_the_query(conn, embedder):
    response = search(conn, embedder, "Queequeg the harpooneer", top_k=5)
    assert response.stages["rerank"].startswith("skipped: no cross-encoder configured")
    for stage in ("embed", "vector", "keyword", "title", "fusion", "summaries", "total"):
        assert stage in response.timings
    data = response.to_dict()
    assert set(data["results"][0]) >= {"source", "location", "kind", "score", "lanes", "text"}
    logged = conn.execute("SELECT top_k, returned, lanes FROM search_log WHERE query = %s ORDER BY id DESC",
                          ("Queequeg the harpooneer",)).fetchone()
    assert logged[0] == 5 and logged[1] == len(response.results) and logged[2]["vector"] > 0


def test_z_scores_stand_against_a_fixed_sample_of_the_library(conn, embedder):
    """The background a similarity is measured against is the same on every call (a hash of
    the passage ids picks it, not chance), so a query's scores do not move between calls."""
    from serving.search.calibration import BACKGROUND

    qvec = embedder.encode_queries(["whale ship harpooneer"])[0]
    first = BACKGROUND.stats(conn, "embedding", embedder.name, embedder.dims, qvec)
    BACKGROUND._samples.clear()  # noqa: SLF001 - taken again from the database
    again = BACKGROUND.stats(conn, "embedding", embedder.name, embedder.dims, qvec)
    assert first is not None and first == again and first[1] > 0
    assert BACKGROUND.stats(conn, "embedding", "no-such-model", embedder.dims, qvec) is None


def test_the_pool_is_scored_from_stored_vectors_whatever_lane_found_it(conn, embedder):
    """A candidate's similarity comes from its stored vector, not from the lane's list: a
    passage the vector lane did not return for this query still gets its z-score, the same
    one it gets where the lane did return it."""
    from serving.search.calibration import BACKGROUND, Probe, pool_evidence

    query = "whale ship harpooneer"
    vec = search(conn, embedder, query, top_k=5, config=SearchConfig.only("vector", log_queries=False))
    other = search(conn, embedder, "Пугачев", top_k=5, config=SearchConfig.only("keyword", log_queries=False))
    inside = vec.results[0].passage_id
    outside = next(r.passage_id for r in other.results if r.passage_id not in {x.passage_id for x in vec.results})
    qvec = embedder.encode_queries([query])[0]
    probe = Probe("vector", "embedding", embedder.name, embedder.dims, qvec)
    pool = pool_evidence(conn, [inside, outside], [probe])
    z = pool.zscores
    _, sd = BACKGROUND.stats(conn, "embedding", embedder.name, embedder.dims, qvec)
    assert set(z["vector"]) == {inside, outside} and z["vector"][inside] > z["vector"][outside]
    assert pool.configs[outside] == "russian" and pool.scripts[outside] == "cyrillic" and sd > 0


def test_every_candidate_is_scored_by_bm25_whatever_lane_found_it(conn, embedder):
    """The keyword lane returning only its best passage, the passages only the vector lane
    found still get their BM25 - the same sum the lane computes - and the candidates holding
    none of the query's words get none."""
    from serving.search.calibration import bm25_terms, pool_evidence

    query = "whale ship harpooneer"
    cfg = SearchConfig(keyword_depth=1, rerank=False, log_queries=False, summaries=False)
    resp = search(conn, embedder, query, top_k=10, config=cfg)
    assert sum(1 for r in resp.results if "keyword" in r.lanes) == 1
    by_vector = [r for r in resp.results if "keyword" not in r.lanes]
    with_words = [r for r in by_vector if r.lane_scores.get("keyword", 0) > 0]
    assert with_words, "no vector-only candidate got keyword evidence"
    english = next(e for e in resp.keyword_trace if e["config"] == "english")
    idf = {t["lexeme"]: t["idf"] for t in english["terms"]}

    def term_counts(pid: int) -> tuple[dict[str, int], int]:
        rows = conn.execute("SELECT u.lexeme, coalesce(array_length(u.positions, 1), 1), length(p.tsv) "
                            "FROM passages p, unnest(p.tsv) u WHERE p.id = %s AND u.lexeme = ANY(%s)",
                            (pid, list(idf))).fetchall()
        return {lex: n for lex, n, _ in rows}, (rows[0][2] if rows else 0)

    for r in by_vector:
        assert (r.lane_scores.get("keyword", 0) > 0) == bool(term_counts(r.passage_id)[0]), r.text[:80]
    # the BM25 behind the evidence is the lane's sum, term by term
    pid = with_words[0].passage_id
    pool = pool_evidence(conn, [pid], [], bm25_terms(resp.keyword_trace), cfg.bm25_k1, cfg.bm25_b)
    tf, length = term_counts(pid)
    k1, b, avgdl = cfg.bm25_k1, cfg.bm25_b, english["avg_length"]
    expected = sum(idf[t] * f * (k1 + 1) / (f + k1 * (1 - b + b * length / avgdl)) for t, f in tf.items())
    assert abs(pool.bm25[pid] - expected) < 1e-6 * max(expected, 1.0)
