"""Weighted reciprocal rank fusion, explainable: every fused candidate keeps the
rank each lane gave it.

score(p) = sum over lanes that found p of weight_lane / (k + rank_lane(p)),
k = 20 (the reference used 60; SearchConfig.rrf_k has the measurement). Ties
(common: every lane's rank 1 is worth 1/(k+1)) break on
the best single-lane rank, then on the passage id, never on dict order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from serving.search.lanes import LaneHits


@dataclass
class Fused:
    id: int
    score: float = 0.0
    lanes: dict[str, int] = field(default_factory=dict)


def weighted_rrf(lanes: list[tuple[LaneHits, float]], k: int = 60) -> list[Fused]:
    pool: dict[int, Fused] = {}
    for hits, weight in lanes:
        if weight <= 0:
            continue
        for pid, rank in hits.ranks().items():
            item = pool.setdefault(pid, Fused(pid))
            item.lanes[hits.name] = rank
            item.score += weight / (k + rank)
    return sorted(pool.values(), key=lambda f: (-f.score, min(f.lanes.values()), f.id))
