"""One search call's state, shared by the engine's stages (engine.py) and the lanes
(registry.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from serving.embedding import Embedder
from serving.rerank import Reranker
from serving.search.fusion import Fused
from serving.search.lanes import LaneHits
from serving.search.types import SearchConfig, SearchFilters, SearchResponse


def ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


@dataclass
class Call:
    """One search call's state, filled in by the stages in order."""
    conn: psycopg.Connection
    embedder: Embedder
    text: str
    k: int
    cfg: SearchConfig
    filters: SearchFilters
    reranker: Reranker | None
    resp: SearchResponse
    started: float
    side: psycopg.Connection | None = None   # an idle second connection the caller lent
    lane_side: psycopg.Connection | None = None   # and a third, for the primary vector lane
    # plan
    predicate: Any = None
    breaker: Any = None
    multi: Embedder | None = None
    multi_off: str | None = None   # why there is no multilingual lane, when there is none
    languages: Any = None
    primary_reads: bool = True
    vector_bypassed: bool = False
    exact_passages: bool | None = None   # vector lanes scan the filtered rows exactly (None: not decided)
    # lanes: (hits, weight); the vector stage's and the text lanes' are kept apart while the
    # two may run at once, then joined in the registry's order (fusion's input order)
    lanes: list[tuple[LaneHits, float]] = field(default_factory=list)
    vector_lanes: list[tuple[LaneHits, float]] = field(default_factory=list)
    text_lanes: list[tuple[LaneHits, float]] = field(default_factory=list)
    hits: dict[str, LaneHits] = field(default_factory=dict)    # lane name -> its hits
    lexeme_sets: dict[str, set[str]] = field(default_factory=dict)
    lexemes: dict[str, list[str]] = field(default_factory=dict)
    # config -> lexemes the query's Latin-lettered names added in the other script
    cross_names: dict[str, set[str]] = field(default_factory=dict)
    keyword_stats: list = field(default_factory=list)
    names: Any = None
    qvec: Any = None
    mvec: Any = None
    trees_pending: tuple[int, int] | None = None   # (library files without a current tree, files)
    pool_jobs: dict[str, Any] = field(default_factory=dict)   # calibrated fusion's look-ups under way
    # fusion, summaries, rows
    fused: list[Fused] = field(default_factory=list)
    summaries: LaneHits | None = None
    use_rerank: bool = False
    rows: dict[int, tuple] = field(default_factory=dict)
    pool_reason: str | None = None
    # rerank
    ordered: list[tuple[Fused, float]] = field(default_factory=list)
    rerank_reason: str | None = None

    @property
    def vec(self) -> LaneHits | None:
        return self.hits.get("vector")

    @property
    def mvh(self) -> LaneHits | None:
        return self.hits.get("multilingual")

    @property
    def kw(self) -> LaneHits | None:
        return self.hits.get("keyword")

    @property
    def stages(self) -> dict[str, str]:
        return self.resp.stages

    @property
    def timings(self) -> dict[str, float]:
        return self.resp.timings

    @property
    def warnings(self) -> list[str]:
        return self.resp.warnings
