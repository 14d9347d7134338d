"""Hybrid search: vector (English + multilingual) + keyword (BM25) + title (+ structure)
lanes, score fusion with per-query language trust, cross-encoder rerank of the whole pool, and a separate summaries lane.

    from serving.search import search, SearchConfig, SearchFilters
    response = search(conn, embedder, "moby dick harpoon", top_k=10)
"""

from serving.search.engine import search
from serving.search.types import (
    MAX_QUERY_CHARS,
    MAX_TOP_K,
    SearchConfig,
    SearchError,
    SearchFilters,
    SearchResponse,
    SearchResult,
)

__all__ = [
    "search",
    "SearchConfig",
    "SearchFilters",
    "SearchResponse",
    "SearchResult",
    "SearchError",
    "MAX_TOP_K",
    "MAX_QUERY_CHARS",
]
