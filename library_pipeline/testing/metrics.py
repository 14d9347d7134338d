"""The binary-relevance nDCG the chunk-size benchmark (benchmarks/chunk_size.py)
scores documents with; library_pipeline_tests checks it by hand-worked cases."""

from __future__ import annotations

import math


def ndcg_at_k(ranked: list[str], relevant: set[str], k: int = 10) -> float:
    """Binary-relevance nDCG@k: gain 1 / log2(rank + 1) for each relevant id in
    the top k, divided by the gain of a perfect ranking of min(|relevant|, k)."""
    if not relevant:
        return 0.0
    dcg = sum(1.0 / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]) if doc in relevant)
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(len(relevant), k)))
    return dcg / ideal
