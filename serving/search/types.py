"""The public shapes of search: filters, configuration, results, response.

One `search()` serves agents (MCP), the CLI and the evaluation harness. agent-library's
(github.com/CreateM1nd/agent-library) harness once scored a private copy of the keyword lane and
kept printing stale numbers; so every variant an evaluation wants to compare
("vector only", "keyword only", "fused", "fused + rerank") is a `SearchConfig`
of the same function, never a second implementation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SOURCES = ("library", "vault", "memory")
SCOPES = ("self", "department", "global")
MAX_TOP_K = 100
MAX_QUERY_CHARS = 2000  # MiniLM reads ~1,000 characters; the keyword lane uses <= 6 terms


@dataclass(frozen=True)
class Viewer:
    """Who is reading: decides which `self` / `department` rows exist for the caller.

    Set by the transport (MCP: the HTTP token's identity, or the stdio process's
    configured identity; CLI: `--as`), never by a filter an agent sends. A viewer
    without agent / department sees `global` rows only. `SearchFilters.viewer =
    None` means a trusted in-process caller (pipeline, eval harness): no restriction.
    """

    agent: str | None = None
    department: str | None = None


class SearchError(ValueError):
    """Bad input a caller can fix (empty query, unknown filter, top_k out of range).

    Its message is written for the agent that sent the request: it says what
    was wrong and what would be accepted. Never carries a stack trace or SQL.
    """


@dataclass(frozen=True)
class SearchFilters:
    """Restrict which passages may be returned. Every field is optional.

    Removed, superseded and archived rows are excluded unless asked for
    (DESIGN: never deleted, searchable on explicit request).
    """

    sources: tuple[str, ...] | None = None        # 'library' | 'vault' | 'memory'
    document_ids: tuple[int, ...] | None = None
    paths: tuple[str, ...] | None = None          # exact document paths (as library_files returns them)
    # documents by author, in either script or spelling («Чехов» = "Chekhov")
    authors: tuple[str, ...] | None = None
    scopes: tuple[str, ...] | None = None         # 'self' | 'department' | 'global'
    kinds: tuple[str, ...] | None = None          # 'text' | 'toc' | 'note' | 'memory' | 'boilerplate' (only if named)
    include_removed: bool = False
    include_superseded: bool = False
    include_archived: bool = False
    # agent memory (serving.memory): never accepted from an agent's filter mapping
    viewer: Viewer | None = None                  # visibility of self / department rows, in SQL
    include_cold: bool = False                    # memories moved to the cold tier by retention
    agents: tuple[str, ...] | None = None         # memory author(s)
    memory_types: tuple[str, ...] | None = None   # memories' meta type
    min_relevance: float | None = None            # memories at or above this relevance

    # names accepted from MCP / CLI; singular aliases are what agents tend to type
    _ALIASES = {
        "source": "sources", "sources": "sources",
        "document_id": "document_ids", "document_ids": "document_ids",
        "document": "paths", "documents": "paths", "path": "paths", "paths": "paths",
        "author": "authors", "authors": "authors",
        "scope": "scopes", "scopes": "scopes",
        "kind": "kinds", "kinds": "kinds",
        "include_removed": "include_removed",
        "include_superseded": "include_superseded",
        "include_archived": "include_archived",
    }

    @property
    def is_empty(self) -> bool:
        return dataclasses.replace(self, viewer=None) == SearchFilters()

    @classmethod
    def accepted_names(cls) -> list[str]:
        return sorted(cls._ALIASES)

    @classmethod
    def from_mapping(cls, raw: dict[str, Any] | None) -> SearchFilters:
        """Validate filters sent by an agent; unknown names are an error, not ignored
        (a silently dropped filter returns results the caller believes are filtered)."""
        if not raw:
            return cls()
        if not isinstance(raw, dict):
            raise SearchError(f"filters must be an object, got {type(raw).__name__}")
        values: dict[str, Any] = {}
        for key, value in raw.items():
            name = cls._ALIASES.get(str(key).strip().lower())
            if name is None:
                raise SearchError(f"unknown filter {key!r}; accepted filters: {', '.join(cls.accepted_names())}")
            if value is None:
                continue
            if name.startswith("include_"):
                if not isinstance(value, bool):
                    raise SearchError(f"filter {key!r} must be true or false")
                values[name] = value
                continue
            items = list(value) if isinstance(value, (list, tuple, set)) else [value]
            if not items:
                continue
            if name == "paths" and all(isinstance(v, int) and not isinstance(v, bool) for v in items):
                name = "document_ids"  # {"document": 12} means the id
            if name == "document_ids":
                try:
                    values[name] = tuple(_document_id(v) for v in items)
                except (TypeError, ValueError, OverflowError):
                    raise SearchError(f"filter {key!r} takes integer document ids") from None
            else:
                values[name] = tuple(str(v) for v in items)
                if any("\x00" in v for v in values[name]):
                    # Postgres text cannot hold NUL: it surfaced as an internal DataError (found by the fuzz test)
                    raise SearchError(f"filter {key!r} contains a NUL character")
        return cls(**values).validated()

    def validated(self) -> SearchFilters:
        for name, allowed in (("sources", SOURCES), ("scopes", SCOPES)):
            given = getattr(self, name)
            if given:
                bad = [v for v in given if v not in allowed]
                if bad:
                    raise SearchError(f"filter {name!r}: {bad[0]!r} is not one of {', '.join(allowed)}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v)
                for k, v in dataclasses.asdict(self).items() if v not in (None, False)}


def _document_id(value: Any) -> int:
    """A document id from JSON: an integer (or an integral number / digit string) in
    bigint range. The fuzz test sent `inf`: int() raised OverflowError, an
    internal error to the agent; 1.5 would have been truncated to 1 silently."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    number = int(value)
    if not -2**63 <= number < 2**63:
        raise ValueError(value)
    return number


@dataclass(frozen=True)
class SearchConfig:
    """Lane switches and weights. Defaults are agent-library's figures
    (title lane weight 2.0) except where a measurement on SciFact TRAIN moved them
    (rrf_k, fusion, bm25_b, keyword_doc_weight: see their comments)."""

    vector: bool = True
    # the second vector lane: the multilingual model (LIBRARY_EMBED_MULTILINGUAL) over
    # embedding_multi; off also when that setting is off
    multilingual: bool = True
    keyword: bool = True
    title: bool = True
    structure: bool = True          # "table of contents" -> kind='toc' passages (see structure.py)
    summaries: bool = True
    rerank: bool = True             # used only when a cross-encoder is configured
    # The common k = 60 (Cormack et al. 2009) flattens rank differences within a lane: rank 1 is worth only
    # 15% more than rank 10 (1/61 vs 1/70); at k = 20, 43% (1/21 vs 1/30). Measured (benchmarks/eval_tune.py, SciFact TRAIN,
    # all 809 queries, shipped default otherwise, nDCG@10): k 60 0.7079, 30 0.7122,
    # 20 0.7147 (+0.0068 +- 0.0018 paired). Rank-1 ties keep their structure at any k
    # (title 2/(k+1) = vector + keyword rank 1), so the title weight stands.
    rrf_k: int = 20
    # "calibrated": every candidate scored by every lane that can read it, one P(relevant)
    # each (serving/search/calibration.py); "convex": weighted sum of min-max normalised
    # lane scores (measured against RRF in serving/search/fusion.py); "rrf": weighted
    # reciprocal rank fusion. Under both calibrated and convex, rrf_k still shapes the
    # ranked lanes (title, structure): (k + 1) / (k + rank).
    fusion: str = "calibrated"
    vector_weight: float = 1.0
    keyword_weight: float = 1.0
    # Per-query trust (serving/search/fusion.py trust_factors): the English-only model is
    # left out for a query it cannot read, keyword and English-only hits in another
    # script than the query's are dropped, and the multilingual lane counts fully where
    # it is the only lane that reads query and passage. False: every lane at its weight.
    language_aware: bool = True
    # Latin-lettered names of the query also searched as the library spells them in
    # Cyrillic ("Chervyakov" -> «червяков»: serving/search/lexicon.py)
    cross_script_names: bool = True
    multilingual_weight: float = 1.0
    # the primary model's weight (times vector_weight) for a query in a language it does
    # not read (MiniLM: English only), when the multilingual lane stands in; its hits in
    # another script than the query's are dropped whatever this says
    vector_weight_foreign: float = 0.0
    # the multilingual lane's weight on passages the primary model reads too (an English
    # query over English text): USE-m3 alone scores 0.392 on SciFact against MiniLM's 0.645,
    # 0.6x; at 0 an English library ranks exactly as without the second lane (SciFact
    # unchanged by construction), and the lane still finds what only it can read
    # (passages in another script than the query's). docs/evaluation.md has the figures.
    multilingual_weight_shared: float = 0.0
    # per-query lane weights from each graded lane's score distribution
    # (serving/search/fusion.py confidence): "none" | "spread" | "z", raised to this power.
    # Off: measured (benchmarks/eval_fusion_replay.py, XQuAD ru->ru, 612 queries, paired
    # vs off) spread +0.0007 +- 0.0018, z -0.0043 +- 0.0029 - no gain beyond noise; the
    # English sets could not be loaded with vectors on the shared box to measure it there.
    confidence: str = "none"
    confidence_power: float = 0.0
    # with k = 60 every lane's rank 1 scores 1/61: an exact title match tied an
    # ordinary semantic hit and lost on insertion order until it weighed 2x.
    title_weight: float = 2.0
    structure_weight: float = 1.0
    vector_depth: int = 50
    keyword_depth: int = 50
    title_depth: int = 10
    structure_depth: int = 10
    summaries_k: int = 5
    # HNSW candidate list per lane, and for libraries of at most ef_small_rows passages.
    # Measured (benchmarks/search.py, SciFact-derived rows, 100 queries, recall@10 against
    # an exact scan), with the schema's indexes (MiniLM m 24 / ef_construction 200, USE-m3
    # m 32 / 200):
    #   1M passages  MiniLM 0.889 / 0.919 / 0.956 / 0.982 / 0.991 at ef_search 100 / 200 /
    #                400 / 800 / 1000; USE-m3 0.584 / 0.700 / 0.793 / 0.918 / 0.955
    #                (the indexes before, m 16 / ef_construction 64: 0.923 and 0.78 at 800)
    #   100k         MiniLM 0.999 from 200 up; USE-m3 0.959 / 0.989 / 1.0 at 100 / 200 / 400
    # The candidate list is the lane's cost (USE-m3 at 100k: 5.1 ms p50 at 200, 8.9 at 400,
    # 18.1 at 1000), so a library below ef_small_rows searches with ef_search_small: 200
    # took the 100k search's p50 from 49.4 to 43.8 ms (the same hour), and the suite's six
    # collections (`library eval suite`, at most 23k passages) score the same to the last
    # digit at 200 and at 400.
    ef_search: int = 800
    ef_search_multilingual: int = 1000
    ef_search_summaries: int = 200
    ef_search_small: int = 200
    ef_small_rows: int = 200_000
    max_scan_tuples: int = 20000    # pgvector iterative-scan budget for filtered queries
    # BM25 keyword lane (keyword.py): each term reads at most this many postings in impact
    # order (exact below it), and a query at most ~keyword_work rows in all
    keyword_postings: int = 1000
    keyword_work: int = 20000
    # w x the BM25 of the passage's whole document added to its own (keyword.py). Measured
    # (benchmarks/eval_tune.py --keyword-only, keyword lane alone, nDCG@10): SciFact TRAIN
    # (809) w 0 0.6636, 0.3 0.6767, 1 0.6860 (+0.0224 +- 0.0044), 2 0.6854, 4 0.6865
    # (bm25s 0.6964); held-out checks with w 1: MS MARCO subset 0.7334 -> 0.7347 (bm25s
    # 0.7269), XQuAD ru 0.9092 -> 0.9479 (bm25s 0.9485; its 96-token chunks hold ~8
    # Russian lexemes, a tenth of a paragraph).
    # Calibrated fusion reads the same weight for a passage's context: half this document
    # BM25, half the BM25 of the window of its document's passages within keyword_window
    # ordinals of it (serving/search/calibration.py keyword_evidence has the figures: the
    # whole of a long book holds nearly every word).
    keyword_doc_weight: float = 1.0
    keyword_window: int = 1
    keyword_doc_b: float = 0.75
    title_min_terms: int = 2
    # Known-item detector: the title lane fires only for names holding >= 2/3 of the
    # query's lexemes ("adventures of sherlock holmes", "<title> <author>"), not for a
    # content question that shares a few words with a long title. Measured
    # (benchmarks/eval_tune.py, SciFact TRAIN first 400, nDCG@10): title lane without
    # the rule 0.544, lane off 0.6958; share >= 0.5 0.6710, 0.6 0.6932, 0.67 0.6974,
    # 0.75 0.6986, 0.8 0.6958 (0.67-0.75 within one paired SE of each other; the lower
    # one keeps "<two-word title> <author>" lookups). The previous attempt gated on the
    # share of the *name* covered and broke the Russian known-item test: path stem +
    # title double a name's lexemes, the query's own lexemes do not.
    title_query_share: float = 0.67
    bm25_k1: float = 1.2
    # Passage BM25 over 96-token chunks with the title in the tsvector: length varies less
    # than across whole documents, and a full b = 0.75 over-punished the longer chunk
    # holding the answer. SciFact TRAIN, 809 queries, keyword lane alone: b 0.75 0.6443,
    # 0.5 0.6512, 0.3 0.6508; fused with rrf_k 20: 0.7147 -> 0.7151 (within noise, kept
    # for the keyword lane's own gain). Book chunks are near-uniform, so b barely acts there.
    bm25_b: float = 0.5
    log_queries: bool = True        # the real-query eval set is built from these logs
    label: str = "default"

    def __post_init__(self) -> None:
        if self.fusion not in ("convex", "rrf", "calibrated"):
            raise ValueError(f"unknown fusion {self.fusion!r}: use 'calibrated', 'convex' or 'rrf'")

    @classmethod
    def only(cls, *lanes: str, **overrides: Any) -> SearchConfig:
        """A config with just these lanes on, e.g. SearchConfig.only('vector')."""
        check_lanes(lanes)
        switches: dict[str, Any] = {lane: lane in lanes for lane in LANES}
        return cls(**{**switches, "rerank": False, "label": "+".join(lanes), **overrides})


# Every lane search can run, by the name results carry in `lanes` and SearchConfig's
# switch for it: the one list the eval configurations, the asset check and the MCP
# description are built from.
LANES = ("vector", "multilingual", "keyword", "title", "structure")


def check_lanes(lanes) -> None:
    bad = [lane for lane in lanes if lane not in LANES]
    if bad:
        raise ValueError(f"unknown lane {bad[0]!r}; lanes: {', '.join(LANES)}")


@dataclass
class SearchResult:
    passage_id: int
    document_id: int | None
    path: str | None
    title: str | None
    source: str
    location: str
    kind: str
    score: float
    lanes: dict[str, int]
    text: str
    summary_level: int = 0
    page_start: int | None = None
    page_end: int | None = None
    heading: str | None = None
    fused_score: float = 0.0
    lane_scores: dict[str, float] = field(default_factory=dict)  # lane -> its share of the fused score
    author: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The shape the MCP tool and `library search --json` return."""
        return {
            "id": self.passage_id,
            "source": self.source,
            "path": self.path,
            "title": self.title,
            "author": self.author,
            "location": self.location,
            "kind": self.kind,
            "score": round(self.score, 6),
            "lanes": dict(self.lanes),
            "text": self.text,
        }


@dataclass
class SearchResponse:
    query: str
    results: list[SearchResult]
    summaries: list[SearchResult] = field(default_factory=list)
    score_kind: str = "convex"                          # 'calibrated' | 'convex' | 'rrf' (SearchConfig.fusion) | 'cross-encoder'
    stages: dict[str, str] = field(default_factory=dict)  # stage -> "ok: ..." / "skipped: ..." / "off"
    timings: dict[str, float] = field(default_factory=dict)  # stage -> milliseconds
    warnings: list[str] = field(default_factory=list)
    keyword_trace: list[dict[str, Any]] = field(default_factory=list)
    health: dict[str, Any] = field(default_factory=dict)
    pool_size: int = 0
    config_label: str = "default"
    query_language: str | None = None   # as fusion read it (serving.search.language)

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "returned": len(self.results),
            "score_kind": self.score_kind,
            "results": [r.to_dict() for r in self.results],
            "summaries": [r.to_dict() for r in self.summaries],
            "pool_size": self.pool_size,
            "query_language": self.query_language,
            "stages": dict(self.stages),
            "timings_ms": {k: round(v, 1) for k, v in self.timings.items()},
            "warnings": list(self.warnings),
            "health": dict(self.health),
        }
