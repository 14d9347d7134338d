"""Retrieval metrics, computed by ir-measures (pytrec_eval underneath), never
hand-rolled: nDCG@10, P@5, MRR@10 (RR@10), Recall@100.

A run is {query id: {doc id: score}} (higher is better); qrels are
{query id: {doc id: relevance}}. Queries that have qrels but no results in the
run score 0 (ir-measures skips them, which would flatter a system that returns
nothing), so they are added here as empty runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import ir_measures
from ir_measures import P, R, RR, nDCG

MEASURES = {"ndcg@10": nDCG @ 10, "p@5": P @ 5, "mrr@10": RR @ 10, "recall@100": R @ 100}
KEYS = tuple(MEASURES)


def per_query(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
              measures: Mapping[str, Any] | None = None) -> dict[str, dict[str, float]]:
    """metric key -> {query id: value}, every query in `qrels` present (0 when absent from the run);
    `measures` (key -> ir-measures measure) defaults to MEASURES."""
    measures = measures or MEASURES
    by_measure = {v: k for k, v in measures.items()}
    out: dict[str, dict[str, float]] = {k: {q: 0.0 for q in qrels} for k in measures}
    qrels_d = {q: {d: int(r) for d, r in docs.items()} for q, docs in qrels.items()}
    run_d = {q: {d: float(s) for d, s in docs.items()} for q, docs in run.items() if q in qrels and docs}
    if not run_d:
        return out
    for m in ir_measures.iter_calc(list(measures.values()), qrels_d, run_d):
        out[by_measure[m.measure]][m.query_id] = float(m.value)
    return out


def aggregate(values: dict[str, dict[str, float]]) -> dict[str, float]:
    return {k: (sum(v.values()) / len(v) if v else 0.0) for k, v in values.items()}


def evaluate(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Mean of each metric over every query in `qrels`."""
    return aggregate(per_query(qrels, run))


def paired_difference(a: dict[str, float], b: dict[str, float]) -> tuple[float, float]:
    """Mean and standard error of the per-query difference a - b (same queries)."""
    qs = sorted(set(a) & set(b))
    if not qs:
        return 0.0, 0.0
    d = [a[q] - b[q] for q in qs]
    mean = sum(d) / len(d)
    if len(d) < 2:
        return mean, 0.0
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    return mean, math.sqrt(var / len(d))


def ranking_to_run(ranked_ids: list[str]) -> dict[str, float]:
    """Doc ids best first -> a run row with strictly decreasing scores (no ties for
    trec_eval to break by doc id)."""
    n = len(ranked_ids)
    return {d: float(n - i) for i, d in enumerate(ranked_ids)}
