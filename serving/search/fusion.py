"""Fusion of the lanes, explainable: every fused candidate keeps the rank each
lane gave it.

Two rules here (SearchConfig.fusion; the default, "calibrated", is in
serving/search/calibration.py and scores every candidate under every lane that can read
it):

- "convex": score(p) = sum over lanes of weight_lane * s_lane(p).
  A graded lane (vector: cosine similarity; keyword: BM25) contributes its score
  min-max normalised over the lane's first `depth` hits (1 = the lane's best,
  0 = its depth-th; a lane's hits past its depth clip at 0, so asking for 100
  results does not reorder the first 10). A ranked lane (title, structure: match
  counts) contributes (k + 1) / (k + rank), 1 at rank 1 like a graded lane's best,
  so "title weight 2 = vector and keyword both first" holds as it did under RRF.
- "rrf": weighted reciprocal rank fusion, score(p) = sum of weight / (k + rank).

Why convex: RRF reads only the order, so a passage the vector lane finds far
closer than anything else counts the same as a narrow first place. Bruch et al.
(2023, "An Analysis of Fusion Functions for Hybrid Retrieval") found a tuned
convex combination of normalised scores beats RRF in and out of domain; measured
here (benchmarks/eval_tune.py, SciFact TRAIN, nDCG@10, with the deeper keyword
pool): all 809 queries, RRF k 20 0.7245, convex 0.7347 (+0.0102 +- 0.0034). The
weights and normaliser, first 400 queries (then with keyword context windows, since
dropped): vector share 0.5 0.7357, 0.55 0.7369, 0.6 0.7352, 0.7 0.7313, 0.4 0.7274
(RRF 0.7268); z-score instead of min-max 0.7337, max-only 0.7336. Equal weights
are shipped (0.55 is within one SE).

Ties break on the best single-lane rank, then on the passage id, never on dict
order.

Per-query trust (`trust_factors`): which lane may speak for which passage depends on
the query's language and each passage's script, never on a lane's raw scores (they
change whenever a lane is reworked; the normalisation above absorbs the scale):

- an English-only embedder (MiniLM) reads neither a Russian query nor a Russian
  passage: for a query it cannot read it is left out (XQuAD ru->ru: MiniLM 0.2861,
  fused naively with BM25 0.6144, BM25 alone 0.9485), and its hits in another script
  than the query's are dropped;
- keyword hits in another script than the query's are dropped: a Russian question
  shares only numbers and Latin names with an English paragraph (ru->en BM25 0.1793);
- the multilingual embedder (USE-m3) is the one lane that crosses languages (0.8527
  ru->en): full weight for a query the primary model cannot read, for hits in
  another script than the query's, and wherever the primary lane does not speak (off,
  or no hits); where the primary model reads both query and passage and its lane
  speaks, `multilingual_weight_shared` (it is far weaker there: SciFact 0.392 vs
  MiniLM 0.645, so it must not be fused blindly into English search);
- a lane that cannot see a passage is no evidence against it: a passage in another
  script than the query's is scored by the multilingual lane alone, so that score is
  scaled to the weight a same-script passage can collect from all its lanes (else a
  Russian question over a mixed library would always rank the Russian book's best
  keyword match above the English book's answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from serving.search.lanes import LaneHits


@dataclass
class Fused:
    id: int
    score: float = 0.0
    lanes: dict[str, int] = field(default_factory=dict)    # lane -> rank there
    parts: dict[str, float] = field(default_factory=dict)  # lane -> what it added to score
    demoted: bool = False   # ranked after every candidate that is not (calibration.cross_script_share)


def _ordered(pool: dict[int, Fused]) -> list[Fused]:
    return sorted(pool.values(), key=lambda f: (f.demoted, -f.score, min(f.lanes.values()), f.id))


def weighted_rrf(lanes: list[tuple[LaneHits, float]], k: int = 60) -> list[Fused]:
    pool: dict[int, Fused] = {}
    for hits, weight in lanes:
        if weight <= 0:
            continue
        for pid, rank in hits.ranks().items():
            item = pool.setdefault(pid, Fused(pid))
            item.lanes[hits.name] = rank
            item.parts[hits.name] = weight / (k + rank)
            item.score += item.parts[hits.name]
    return _ordered(pool)


def normalised(scores: list[float], depth: int) -> list[float]:
    """Min-max over the first `depth` scores (best first); later ones clip at 0."""
    if not scores:
        return []
    head = scores[:max(depth, 1)]
    top, floor = max(head), min(head)
    if top <= floor:
        return [1.0 if s >= top else 0.0 for s in scores]
    return [max(0.0, (s - floor) / (top - floor)) for s in scores]


def confidence(hits: LaneHits, depth: int, mode: str) -> float:
    """How decisive a graded lane is for this query, from its own score distribution
    over its first `depth` hits (no constant fitted to a lane's raw scale):
    "spread": 1 - the mean min-max normalised score of hits 2..depth (one hit far ahead
    of a flat tail -> near 1; a flat list -> near 0.5 or below);
    "z": how many standard deviations the best hit stands above the mean of the list."""
    head = hits.scores[:max(depth, 2)]
    if len(head) < 3:
        return 1.0
    if mode == "spread":
        top, floor = head[0], min(head)
        if top <= floor:
            return 0.0
        return 1.0 - sum((s - floor) / (top - floor) for s in head[1:]) / (len(head) - 1)
    if mode == "z":
        mean = sum(head) / len(head)
        sd = (sum((s - mean) ** 2 for s in head) / len(head)) ** 0.5
        return (head[0] - mean) / sd if sd > 0 else 0.0
    raise ValueError(f"unknown confidence {mode!r}")


def confidence_multipliers(lanes: list[tuple[LaneHits, float]], depths: dict[str, int], mode: str,
                           power: float) -> dict[str, float]:
    """Per-query multipliers of the graded lanes' weights: confidence ** power, scaled so
    that their weighted mean is 1 (the lanes' total weight, and so their balance against
    the ranked title and structure lanes, stays what the config says)."""
    graded = [(h, w) for h, w in lanes if h.graded and w > 0 and len(h)]
    if mode == "none" or power == 0 or len(graded) < 2:
        return {}
    raw = {h.name: max(confidence(h, depths.get(h.name, len(h)), mode), 1e-6) ** power for h, _ in graded}
    total = sum(w for _, w in graded)
    mean = sum(raw[h.name] * w for h, w in graded) / total
    return {name: value / mean for name, value in raw.items()}


def convex_fusion(lanes: list[tuple[LaneHits, float]], k: int, depths: dict[str, int],
                  factors: dict[str, dict[int, float]] | None = None, *, confidence_mode: str = "none",
                  confidence_power: float = 0.0) -> list[Fused]:
    """`depths`: the depth each graded lane is normalised over (its configured depth).
    `factors`: lane -> passage -> multiplier of its weight (trust_factors); a passage
    missing there counts 1. `confidence_mode` / `confidence_power`: per-query lane
    weights from each lane's score distribution (confidence_multipliers)."""
    pool: dict[int, Fused] = {}
    factors = factors or {}
    # only lanes that speak for some passage of this query (an English query's
    # multilingual lane at shared weight 0 does not)
    speaking = [(h, w) for h, w in lanes
                if any(factors.get(h.name, {}).get(pid, 1.0) > 0 for pid in h.ids)]
    multipliers = confidence_multipliers(speaking, depths, confidence_mode, confidence_power)
    for hits, weight in lanes:
        weight *= multipliers.get(hits.name, 1.0)
        if weight <= 0:
            continue
        values = (normalised(hits.scores, depths.get(hits.name, len(hits))) if hits.graded
                  else [(k + 1) / (k + rank) for rank in range(1, len(hits) + 1)])
        lane_factors = factors.get(hits.name, {})
        for rank, (pid, value) in enumerate(zip(hits.ids, values), start=1):
            if lane_factors.get(pid, 1.0) <= 0:
                continue   # not trusted for this passage: neither score nor rank (ties stay as without it)
            item = pool.setdefault(pid, Fused(pid))
            if hits.name not in item.lanes:  # first occurrence wins, as in ranks()
                item.lanes[hits.name] = rank
                item.parts[hits.name] = weight * lane_factors.get(pid, 1.0) * value
                item.score += item.parts[hits.name]
    return _ordered(pool)


def drop_hits(hits: LaneHits, keep: set[int] | None = None, drop: set[int] | None = None) -> LaneHits:
    """The lane without the passages in `drop` (ranks and normalisation then run over
    what is left, so its best trusted hit still counts as its best)."""
    drop = drop or set()
    idx = [i for i, pid in enumerate(hits.ids) if pid not in drop and (keep is None or pid in keep)]
    out = LaneHits(hits.name, [hits.ids[i] for i in idx], [hits.scores[i] for i in idx],
                   [hits.doc_ids[i] for i in idx] if hits.doc_ids else [], hits.status, hits.ms, hits.graded)
    if len(out) != len(hits):
        out.status = f"{hits.status}; {len(hits) - len(out)} hits in another script than the query's left out"
    return out


def trust_factors(lanes: list[LaneHits], scripts: dict[int, str], query_script: str, *,
                  primary_reads_query: bool, primary_monolingual: bool = True, primary_lane: str = "vector",
                  multi_lane: str = "multilingual",
                  keyword_lane: str = "keyword", shared_weight: float = 0.0, cross_factor: float = 1.0
                  ) -> tuple[list[LaneHits], dict[str, dict[int, float]]]:
    """The lanes with untrusted hits dropped, and weight multipliers for the rest (see
    the module docstring). `scripts`: passage id -> its script (serving.search.language).
    `cross_factor`: the multiplier of a multilingual hit in another script than the
    query's - only that lane can read such a passage, and a lane that cannot see a
    passage is no evidence against it, so its score stands for the weight of all the
    lanes a same-script passage could collect (the engine passes that sum over the
    multilingual weight)."""
    out: list[LaneHits] = []
    factors: dict[str, dict[int, float]] = {}
    comparable = query_script in ("latin", "cyrillic")
    for hits in lanes:
        if comparable and (hits.name == keyword_lane or (hits.name == primary_lane and primary_monolingual)):
            foreign = {pid for pid in hits.ids if scripts.get(pid, query_script) not in (query_script, "none")}
            out.append(drop_hits(hits, drop=foreign) if foreign else hits)
        elif hits.name == multi_lane:
            same = shared_weight if primary_reads_query else 1.0
            factors[hits.name] = {pid: (same if not comparable or scripts.get(pid, query_script)
                                        in (query_script, "none") else cross_factor) for pid in hits.ids}
            out.append(hits)
        else:
            out.append(hits)
    return out, factors


def lane_weight(name: str, cfg, *, foreign: bool = False) -> float:
    """A lane's configured weight (SearchConfig's `<name>_weight`); `foreign`: the query is in a language
    the primary model does not read and the multilingual lane stands in."""
    if name == "vector":
        return cfg.vector_weight * (cfg.vector_weight_foreign if foreign else 1.0)
    return float(getattr(cfg, f"{name}_weight", 1.0))


def fuse(lanes: list[tuple[LaneHits, float]], cfg, *, scripts: dict[int, str], query_script: str,
         primary_reads: bool, primary_monolingual: bool) -> tuple[list[Fused], list[tuple[LaneHits, float]], str]:
    """The fusion stage of search: per-query trust (when the config is language aware and
    the multilingual lane found something), then the configured fusion rule. Returns the
    fused candidates, the lanes as fused (untrusted hits dropped) and a status line.
    `scripts`: passage id -> script of the vector, multilingual and keyword hits."""
    factors: dict[str, dict[int, float]] = {}
    weights = {h.name: w for h, w in lanes}
    # the multilingual lane gives way to the primary model only where that model speaks:
    # with the primary lane off (or empty) it is the one dense reader, at full weight
    primary_speaks = primary_reads and any(h.name == "vector" and w > 0 and len(h) for h, w in lanes)
    if cfg.language_aware and any(h.name == "multilingual" and len(h) for h, _ in lanes):
        same_script = (weights.get("vector", 0.0) + weights.get("keyword", 0.0)
                       + cfg.multilingual_weight * (cfg.multilingual_weight_shared if primary_speaks else 1.0))
        trusted, factors = trust_factors([h for h, _ in lanes], scripts, query_script,
                                         primary_reads_query=primary_speaks, primary_monolingual=primary_monolingual,
                                         shared_weight=cfg.multilingual_weight_shared,
                                         cross_factor=max(1.0, same_script / cfg.multilingual_weight)
                                         if cfg.multilingual_weight > 0 else 1.0)
        lanes = [(h, w) for h, (_, w) in zip(trusted, lanes)]
    if cfg.fusion == "rrf":
        fused = weighted_rrf(lanes, cfg.rrf_k)
        return fused, lanes, f"ok: weighted RRF (k={cfg.rrf_k}) over {len(fused)} candidates"
    fused = convex_fusion(lanes, cfg.rrf_k, {"vector": cfg.vector_depth, "keyword": cfg.keyword_depth,
                                             "multilingual": cfg.vector_depth}, factors,
                          confidence_mode=cfg.confidence, confidence_power=cfg.confidence_power)
    return fused, lanes, (f"ok: weighted sum of min-max normalised lane scores (ranked lanes: "
                          f"(k+1)/(k+rank), k={cfg.rrf_k}) over {len(fused)} candidates")
