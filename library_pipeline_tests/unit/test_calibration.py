"""The calibrated fusion's rules (serving/search/calibration.py) on hand-made evidence:
who may speak for which passage, the BM25 ceiling that keeps a common word from looking
like a full match, and that a passage in another script must beat same-language ones on
the one scale - not merely top the only lane that reads it."""

from __future__ import annotations

import math

from serving.search.calibration import (DISPLACED, MODELS, PoolEvidence, bm25_ceiling, calibrated_fusion,
                                        cross_script_share, keyword_evidence, probability, readers_of,
                                        script_prior)
from serving.search.language import word_scripts
from serving.search.lanes import LaneHits


def test_readers_follow_query_language_and_passage_script():
    scripts = {1: "latin", 2: "cyrillic", 3: "none"}
    en = readers_of([1, 2, 3], scripts, "latin", primary_reads=True, primary_monolingual=True)
    assert en == {1: {"vector", "keyword", "multilingual"}, 2: {"multilingual"},
                  3: {"vector", "keyword", "multilingual"}}
    # a Russian query: the English-only model reads nothing, keyword only the Russian text
    ru = readers_of([1, 2], scripts, "cyrillic", primary_reads=False, primary_monolingual=True)
    assert ru == {1: {"multilingual"}, 2: {"keyword", "multilingual"}}
    # a multilingual primary model reads across scripts; keyword still does not
    multi = readers_of([2], scripts, "latin", primary_reads=True, primary_monolingual=False)
    assert multi == {2: {"vector", "multilingual"}}
    # "Пугачев Queequeg": BM25 reads a passage in the script of any of the query's words
    mixed = readers_of([1, 2], scripts, "latin", primary_reads=True, primary_monolingual=True,
                       word_scripts=word_scripts("Пугачев Queequeg"))
    assert mixed == {1: {"vector", "keyword", "multilingual"}, 2: {"keyword", "multilingual"}}


def test_ceiling_counts_terms_the_corpus_lacks_at_the_top_idf():
    trace = [{"config": "russian", "passages": 1000, "terms": [{"lexeme": "так", "idf": 0.4}]}]
    top = math.log(1 + 1000.5 / 0.5)
    with_names = bm25_ceiling(trace, {"russian": {"так", "ирен", "адлер"}}, 1.2)["russian"]
    assert math.isclose(with_names, (0.4 + 2 * top) * 2.2)
    # a common word alone: its full score is a small share of what the question asks
    assert 0.4 * 2.2 / with_names < 0.03
    assert math.isclose(bm25_ceiling(trace, {}, 1.2)["russian"], 0.4 * 2.2)


def test_keyword_share_is_bm25_of_passage_and_window_over_what_the_query_could_score():
    # passage 1's window holds more of the query's terms than it does; 3 has no window (a
    # memory: its own context); 4 holds none of the query's terms and gets nothing
    pool = PoolEvidence({}, {1: "english", 2: "english", 3: "english", 4: "english"}, {},
                        {1: 9.0, 2: 0.0, 3: 8.0}, {1: 10, 2: 10, 3: None, 4: 12}, window={1: 31.0, 2: 6.0})
    share = keyword_evidence(pool, {"english": 20.0}, 1.0)
    assert share == {1: (9 + 31) / 40, 2: 6 / 40, 3: (8 + 8) / 40}
    # a document-filtered search scores passages alone (no context share); capped at 1
    assert keyword_evidence(pool, {"english": 8.0}, 0.0) == {1: 1.0, 2: 0.0, 3: 1.0}
    # with the keyword lane's document scores: half window, half document (the window again
    # where the lane did not score the document, the passage itself where it has none)
    both = keyword_evidence(pool, {"english": 20.0}, 1.0, {10: 11.0})
    assert both == {1: (9 + (31 + 11) / 2) / 40, 2: (0 + (6 + 11) / 2) / 40, 3: (8 + 8) / 40}


def test_probability_rises_with_every_kind_of_evidence():
    for names, (coefs, _) in MODELS.items():
        assert all(c > 0 for c in coefs), names
    low, _ = probability({"vector": 1.0, "multilingual": 1.0, "keyword": 0.0})
    high, terms = probability({"vector": 6.0, "multilingual": 5.0, "keyword": 0.5})
    assert 0 <= low < high <= 1 and set(terms) == {"vector", "multilingual", "keyword"}
    assert probability({}) == (0.0, {})


def test_a_cross_script_passage_must_beat_same_language_ones_on_one_scale():
    """English query; passage 9 is Russian, first on the multilingual lane only (the lane
    that alone can read it) with a middling similarity. Under min-max it was worth the
    full weight; here the English passage that the English model and BM25 both rank first
    wins, and the Russian one wins only when the multilingual model is sure of it."""
    vec = LaneHits("vector", [1, 2], [0.62, 0.40], graded=True)
    kw = LaneHits("keyword", [1, 2], [14.0, 3.0], graded=True)
    multi = LaneHits("multilingual", [9, 1, 2], [0.45, 0.44, 0.30], graded=True)
    readers = readers_of([1, 2, 9], {1: "latin", 2: "latin", 9: "cyrillic"}, "latin",
                         primary_reads=True, primary_monolingual=True)
    lanes = [(vec, 1.0), (multi, 1.0), (kw, 1.0)]
    weak = {"vector": {1: 5.5, 2: 2.0}, "multilingual": {9: 2.5, 1: 2.4, 2: 1.0}}
    fused = calibrated_fusion(lanes, zscores=weak, keyword_share={1: 0.5, 2: 0.1}, readers=readers, k=20,
                              graded_weight=2.0)
    assert fused[0].id == 1
    assert fused[0].lanes == {"vector": 1, "multilingual": 2, "keyword": 1}
    assert 0 < fused[0].score <= 2.0 and set(fused[0].parts) <= {"vector", "multilingual", "keyword"}
    strong = {"vector": {1: 1.5, 2: 1.0}, "multilingual": {9: 8.0, 1: 1.2, 2: 1.0}}
    fused = calibrated_fusion(lanes, zscores=strong, keyword_share={1: 0.05, 2: 0.02}, readers=readers, k=20,
                              graded_weight=2.0)
    assert fused[0].id == 9 and fused[0].lanes == {"multilingual": 1}


def test_hits_a_lane_cannot_read_are_no_evidence_and_ranked_lanes_add_their_weight():
    vec = LaneHits("vector", [9, 1], [0.9, 0.5], graded=True)           # 9: Russian, English-only model
    title = LaneHits("title", [2], [3.0])
    readers = {9: {"multilingual"}, 1: {"vector", "keyword", "multilingual"}, 2: {"vector", "keyword", "multilingual"}}
    fused = calibrated_fusion([(vec, 1.0), (title, 2.0)], zscores={"vector": {9: 9.0, 1: 3.0}},
                              keyword_share={}, readers=readers, k=20, graded_weight=2.0)
    assert [f.id for f in fused] == [2, 1]       # 9 came only from a lane that cannot read it
    assert math.isclose(fused[0].parts["title"], 2.0)



def test_script_prior_follows_the_library_composition():
    """Four English books and one Russian (the example library's passage counts): an English
    question's Russian candidates start 1.5 logits down, a Russian question's English ones
    not up (a majority in the other script says nothing of where a Russian question's
    answer is); half and half (the sets the models were fitted on) changes nothing."""
    trace = [{"config": "english", "passages": 4190}, {"config": "russian", "passages": 935}]
    assert math.isclose(script_prior(trace, "latin"), math.log(935 / 4190))
    assert script_prior(trace, "cyrillic") == 0.0
    assert script_prior([{"config": "english", "passages": 5}, {"config": "russian", "passages": 5}], "latin") == 0
    assert script_prior([{"config": "english", "passages": 5}], "latin") == 0.0     # one script only
    assert script_prior(trace, "other") == 0.0
    readers = {1: {"vector", "keyword", "multilingual"}, 9: {"multilingual"}}
    multi = LaneHits("multilingual", [9, 1], [0.5, 0.4], graded=True)
    z = {"multilingual": {9: 4.0, 1: 3.0}, "vector": {1: 3.0}}
    even = calibrated_fusion([(multi, 1.0)], zscores=z, keyword_share={1: 0.2}, readers=readers, k=20,
                             graded_weight=2.0)
    skewed = calibrated_fusion([(multi, 1.0)], zscores=z, keyword_share={1: 0.2}, readers=readers, k=20,
                               graded_weight=2.0, cross_prior=-1.5)
    by = {f.id: f.score for f in even}
    again = {f.id: f.score for f in skewed}
    assert again[9] < by[9] and math.isclose(again[1], by[1])


def test_a_rare_scripts_weak_candidate_ranks_after_every_same_script_one():
    """The example library's shape (a Russian book beside four English ones): a Russian
    passage the multilingual model half-matches is below the best English candidate's P
    times 1 - 935/4190, so it ranks after every English candidate, even a weaker one;
    a Russian passage that beats the best English one stays where its P puts it. On a
    half-and-half library nothing moves."""
    prior = math.log(935 / 4190)
    assert math.isclose(cross_script_share(prior), 1 - 935 / 4190) and cross_script_share(0.0) == 0.0
    readers = {1: {"vector", "keyword", "multilingual"}, 2: {"vector", "keyword", "multilingual"},
               9: {"multilingual"}}
    multi = LaneHits("multilingual", [9, 1, 2], [0.5, 0.45, 0.3], graded=True)
    vec = LaneHits("vector", [1, 2], [0.5, 0.3], graded=True)

    def order(z9: float, cross_prior: float) -> list[int]:
        z = {"multilingual": {9: z9, 1: 3.0, 2: 0.5}, "vector": {1: 3.0, 2: 0.5}}
        fused = calibrated_fusion([(vec, 1.0), (multi, 1.0)], zscores=z, keyword_share={1: 0.3, 2: 0.01},
                                  readers=readers, k=20, graded_weight=2.0, cross_prior=cross_prior)
        scores = [f.score for f in fused]
        assert scores == sorted(scores, reverse=True)     # a caller sorting by score keeps the order
        assert all(math.isclose(sum(f.parts.values()), f.score) for f in fused)
        return [f.id for f in fused]

    assert order(3.0, 0.0) == [1, 9, 2]          # half and half: P alone decides
    assert order(3.0, prior) == [1, 2, 9]        # rare script, weaker than the best English: last
    assert order(8.0, prior)[0] == 9            # rare script, sure of itself: first


def test_a_cross_script_candidate_is_held_against_the_first_page_under_the_model_that_reads_both():
    """An English page the BM25 share undersells (OCR spelling) but the multilingual model
    ranks high sets the bar for a Russian passage that model half-matches: the Russian one
    ranks after it although its own P is higher. A same-script candidate below the first
    DISPLACED by P does not count: the Russian passage would not push it off the page."""
    prior = math.log(935 / 4190)
    z_cross = 3.3
    multi = LaneHits("multilingual", [9, 2, 1], [0.5, 0.45, 0.3], graded=True)

    def order(firsts: int) -> list[int]:
        strong = list(range(100, 100 + firsts))        # well-read English pages, modest multilingual z
        same = [1, 2, *strong]
        readers = {pid: {"vector", "keyword", "multilingual"} for pid in same} | {9: {"multilingual"}}
        vec = LaneHits("vector", same, [0.3] * len(same), graded=True)
        z = {"multilingual": {9: z_cross, 1: 0.5, 2: 3.0} | {pid: 0.5 for pid in strong},
             "vector": {1: 0.5, 2: 2.0} | {pid: 0.6 for pid in strong}}
        shares = {1: 0.3, 2: 0.01} | {pid: 0.3 for pid in strong}
        fused = calibrated_fusion([(vec, 1.0), (multi, 1.0)], zscores=z, keyword_share=shares, readers=readers,
                                  k=20, graded_weight=2.0, cross_prior=prior)
        return [f.id for f in fused]

    p_cross = probability({"multilingual": z_cross}, prior)[0]
    assert probability({"vector": 2.0, "multilingual": 3.0, "keyword": 0.01})[0] < p_cross   # P alone: 9 above 2
    assert order(0)[-1] == 9                       # page 2 is on the first page: 9 after it
    assert order(DISPLACED)[0] == 9                # page 2 is sixth: 9 ranks by its P
