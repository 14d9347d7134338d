"""The fusion stage search calls (serving.search.fusion.fuse), on hand-made lanes: the
language trust it applies, the weights it reads from the config, and the per-query
confidence variant the replay benchmark measures (off as shipped)."""

from __future__ import annotations

import pytest

from serving.search import SearchConfig
from serving.search.fusion import confidence, confidence_multipliers, fuse, lane_weight
from serving.search.lanes import LaneHits


def _lanes():
    kw = LaneHits("keyword", [1, 2, 3, 4], [12.0, 3.0, 2.5, 2.0], graded=True)      # one hit far ahead
    multi = LaneHits("multilingual", [3, 1, 4, 2], [0.61, 0.60, 0.59, 0.58], graded=True)  # flat
    return kw, multi


def test_confidence_reads_the_score_distribution():
    kw, multi = _lanes()
    assert confidence(kw, 50, "spread") > 0.8 > confidence(multi, 50, "spread")
    assert confidence(kw, 50, "z") > confidence(multi, 50, "z")
    with pytest.raises(ValueError):
        confidence(kw, 50, "loud")


def test_confidence_multipliers_keep_the_total_weight():
    kw, multi = _lanes()
    m = confidence_multipliers([(kw, 1.0), (multi, 1.0)], {}, "spread", 1.0)
    assert m["keyword"] > 1.0 > m["multilingual"]
    assert m["keyword"] + m["multilingual"] == pytest.approx(2.0)
    assert confidence_multipliers([(kw, 1.0), (multi, 1.0)], {}, "none", 1.0) == {}


def test_fuse_applies_language_trust_for_a_russian_query():
    """A Russian query the English-only model cannot read: the keyword hit in Latin script
    is dropped, the multilingual lane speaks at full weight; as shipped, the keyword lane's
    clear first hit wins over the multilingual lane's narrow first place."""
    kw, multi = _lanes()
    kw = LaneHits("keyword", [1, 2, 3, 9], [12.0, 3.0, 2.5, 2.0], graded=True)
    scripts = {1: "cyrillic", 2: "cyrillic", 3: "cyrillic", 4: "cyrillic", 9: "latin"}
    cfg = SearchConfig()
    lanes = [(kw, lane_weight("keyword", cfg)), (multi, lane_weight("multilingual", cfg))]
    fused, trusted, status = fuse(lanes, cfg, scripts=scripts, query_script="cyrillic", primary_reads=False,
                                  primary_monolingual=True)
    assert [f.id for f in fused][0] == 1 and 9 not in {f.id for f in fused}
    assert "weighted sum" in status and len(trusted[0][0]) == 3
    naive = SearchConfig(language_aware=False)
    fused, _, _ = fuse(lanes, naive, scripts=scripts, query_script="cyrillic", primary_reads=False,
                       primary_monolingual=True)
    assert 9 in {f.id for f in fused}


def test_english_query_ignores_the_multilingual_lane_at_shared_weight_zero():
    kw, multi = _lanes()
    cfg = SearchConfig(confidence="spread", confidence_power=1.0)
    scripts = {i: "latin" for i in range(1, 5)}
    vec = LaneHits("vector", [1, 2, 3, 4], [0.9, 0.5, 0.45, 0.4], graded=True)   # as decisive as keyword
    flat = confidence_multipliers([(kw, 1.0), (vec, 1.0)], {}, "spread", 1.0)
    fused, _, _ = fuse([(vec, 1.0), (kw, 1.0), (multi, 1.0)], cfg, scripts=scripts, query_script="latin",
                       primary_reads=True, primary_monolingual=True)
    assert all("multilingual" not in f.parts for f in fused)
    # the silent lane takes no share of the confidence weighting
    assert fused[0].parts["keyword"] == pytest.approx(flat["keyword"])
    assert fused[0].parts["vector"] == pytest.approx(flat["vector"])


def test_lane_weight_for_a_query_the_primary_model_cannot_read():
    cfg = SearchConfig(vector_weight=2.0, vector_weight_foreign=0.25)
    assert lane_weight("vector", cfg) == 2.0 and lane_weight("vector", cfg, foreign=True) == 0.5
    assert lane_weight("title", cfg) == cfg.title_weight


def test_multilingual_lane_alone_speaks_for_an_english_query():
    """With the primary lane off (the eval's "multilingual" row, or a library the primary
    model has not embedded), the multilingual lane is the one dense reader: full weight,
    not the shared weight it has beside the primary model."""
    kw, multi = _lanes()
    scripts = {i: "latin" for i in range(1, 5)}
    fused, _, _ = fuse([(multi, 1.0)], SearchConfig(), scripts=scripts, query_script="latin", primary_reads=True,
                       primary_monolingual=True)
    assert [f.id for f in fused] == multi.ids
    vec = LaneHits("vector", [2, 1], [0.9, 0.8], graded=True)
    fused, _, _ = fuse([(vec, 1.0), (multi, 1.0)], SearchConfig(), scripts=scripts, query_script="latin",
                       primary_reads=True, primary_monolingual=True)
    assert [f.id for f in fused] == [2, 1]   # beside a speaking primary lane: shared weight 0
