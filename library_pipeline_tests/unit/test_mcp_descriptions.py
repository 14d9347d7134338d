"""Tool descriptions are part of the interface: an agent chooses and reads results by
them. library_search's is written from the configuration it describes; these tests
hold it to that configuration, so a changed default cannot leave a stale description."""

from __future__ import annotations

import dataclasses

from serving.mcp_server import LANE_TEXT, SEARCH_DESCRIPTION, search_description
from serving.search.types import LANES, SearchConfig


def test_every_lane_has_words_for_agents():
    assert set(LANE_TEXT) == set(LANES)
    for lane in LANES:
        assert f'"{lane}"' in LANE_TEXT[lane]


def test_shipped_description_names_the_default_lanes_and_fusion():
    cfg = SearchConfig()
    for lane in LANES:
        assert (f'"{lane}"' in SEARCH_DESCRIPTION.split("Arguments:")[0]) == getattr(cfg, lane), lane
    if cfg.fusion == "calibrated":
        assert "probability of relevance" in SEARCH_DESCRIPTION and "reciprocal" not in SEARCH_DESCRIPTION
        assert f"up to {cfg.title_weight:g} from a title match" in SEARCH_DESCRIPTION
    elif cfg.fusion == "convex":
        assert "reciprocal" not in SEARCH_DESCRIPTION and "normalised score" in SEARCH_DESCRIPTION
        assert f"up to {cfg.title_weight:g} from a title match" in SEARCH_DESCRIPTION
    else:
        assert "reciprocal-rank fusion" in SEARCH_DESCRIPTION


def test_description_follows_the_configuration():
    rrf = search_description(dataclasses.replace(SearchConfig(), fusion="rrf", multilingual=False, structure=False))
    head = rrf.split("Arguments:")[0]
    assert "reciprocal-rank fusion" in head and "normalised score" not in head
    assert '"multilingual"' not in head and '"structure"' not in head and '"keyword"' in head
    convex = search_description(dataclasses.replace(SearchConfig(), fusion="convex"))
    blind = search_description(dataclasses.replace(SearchConfig(), fusion="convex", language_aware=False))
    assert "by language" not in blind and "by language" in convex and "normalised score" in convex
