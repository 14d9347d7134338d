"""What every lane returns: a ranked list of passage ids with its own scores."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LaneHits:
    name: str
    ids: list[int] = field(default_factory=list)      # best first
    scores: list[float] = field(default_factory=list)  # lane-native: cosine similarity, BM25, overlap...
    doc_ids: list[int | None] = field(default_factory=list)  # document of each hit (title lane picks by it)
    status: str = "ok"
    ms: float = 0.0
    # scores grade the evidence (cosine similarity, BM25), so fusion may use their
    # spread and not only their order; the title and structure lanes' scores are
    # match counts, ranked only
    graded: bool = False
    # the keyword lane's BM25 of each document it scored as a whole (the part its document
    # weight multiplies), for calibrated fusion's context of a candidate
    doc_scores: dict[int, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def ranks(self) -> dict[int, int]:
        """passage id -> 1-based rank (first occurrence wins)."""
        out: dict[int, int] = {}
        for rank, pid in enumerate(self.ids, start=1):
            out.setdefault(pid, rank)
        return out
