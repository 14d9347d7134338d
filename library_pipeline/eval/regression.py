"""The fixed regression query set, scored on the live library with the serving
search itself (the asset checks in library_pipeline/defs/eval call this).

A query set is a JSON file (queries/example_library.json is the shipped one):

    {"name": ..., "thresholds": {"p@5": 0.3, "ndcg@10": 0.5, "question/ndcg@10": 0.5},
     "queries": [{"id", "kind": "known-item" | "heading" | "question", "query",
                  "relevant": [{"path", "heading"?, "contains"?: [...]}]}]}

Relevance is judged per passage, from rules rather than passage ids, so the set
survives re-chunking: a live passage is relevant when its document's path is
`path`, its heading contains `heading` (if given) and its text contains one of
`contains` (if given), all case- and whitespace-insensitive. P@5, nDCG@10 and
MRR@10 are computed by ir-measures over passage ids. A threshold key
"metric" applies to the mean over all queries, "kind/metric" to one kind.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from library_pipeline.eval.metrics import aggregate, per_query, ranking_to_run
from serving.embedding import Embedder
from serving.search import SearchConfig, search
from serving.search.types import LANES, check_lanes

QUERIES_DIR = Path(__file__).resolve().parent / "queries"
DEFAULT_QUERY_SET = QUERIES_DIR / "example_library.json"
CHECK_METRICS = ("p@5", "ndcg@10", "mrr@10")


def lanes_config(disable: list[str]) -> SearchConfig:
    """The configuration the regression set is scored with: no reranker, no summaries,
    nothing logged, the lanes in `disable` switched off (SearchError for an unknown one)."""
    check_lanes(disable)
    switches = {lane: lane not in disable for lane in LANES}
    return SearchConfig(rerank=False, summaries=False, log_queries=False, label="regression-check", **switches)


@dataclass
class QuerySet:
    name: str
    queries: list[dict]
    thresholds: dict[str, float] = field(default_factory=dict)
    path: Path | None = None


def load_query_set(path: Path | str | None = None) -> QuerySet:
    path = Path(path) if path else DEFAULT_QUERY_SET
    data = json.loads(path.read_text(encoding="utf-8"))
    queries = data["queries"]
    ids = [q["id"] for q in queries]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: duplicate query ids")
    for q in queries:
        if not q.get("query") or not q.get("relevant"):
            raise ValueError(f"{path}: query {q.get('id')!r} needs `query` and `relevant`")
    return QuerySet(name=data.get("name", path.stem), queries=queries,
                    thresholds={k: float(v) for k, v in (data.get("thresholds") or {}).items()}, path=path)


def _norm(text: str | None) -> str:
    return re.sub(r"\s+", " ", (text or "")).strip().casefold()


def relevant_passages(conn: psycopg.Connection, rules: list[dict]) -> set[int]:
    """Ids of live verbatim passages matching any of `rules`."""
    out: set[int] = set()
    for rule in rules:
        rows = conn.execute(
            "SELECT p.id, p.heading, p.content FROM passages p JOIN documents d ON d.id = p.document_id "
            "WHERE d.path = %s AND p.summary_level = 0 AND NOT p.removed AND NOT p.superseded "
            "AND NOT p.archived", (rule["path"],)).fetchall()
        heading = _norm(rule.get("heading")) or None
        contains = [_norm(c) for c in rule.get("contains") or []]
        for pid, head, content in rows:
            if heading and heading not in _norm(head):
                continue
            if contains and not any(c in _norm(content) for c in contains):
                continue
            out.add(pid)
    return out


@dataclass
class RegressionResult:
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]      # metric -> query id -> value
    by_kind: dict[str, dict[str, float]]        # kind -> metric -> mean
    unjudgeable: list[str]                      # queries with no relevant passage in the library
    failures: list[str]                         # metric below threshold, readable

    @property
    def passed(self) -> bool:
        return not self.failures


def score_query_set(conn: psycopg.Connection, embedder: Embedder, qs: QuerySet, *,
                    config: SearchConfig | None = None, top_k: int = 10) -> RegressionResult:
    """Run every query through `serving.search.search` and score it."""
    cfg = config or SearchConfig(rerank=False, log_queries=False, label="regression")
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    unjudgeable = []
    for q in qs.queries:
        rel = relevant_passages(conn, q["relevant"])
        if not rel:
            unjudgeable.append(q["id"])
            continue
        qrels[q["id"]] = {str(pid): 1 for pid in rel}
        resp = search(conn, embedder, q["query"], top_k=top_k, config=cfg)
        run[q["id"]] = ranking_to_run([str(r.passage_id) for r in resp.results])
    values = per_query(qrels, run)
    values = {k: values[k] for k in CHECK_METRICS}
    metrics = aggregate(values) if qrels else {k: 0.0 for k in CHECK_METRICS}
    kinds: dict[str, list[str]] = {}
    for q in qs.queries:
        if q["id"] in qrels:
            kinds.setdefault(q.get("kind", "other"), []).append(q["id"])
    by_kind = {kind: {m: sum(values[m][i] for i in ids) / len(ids) for m in CHECK_METRICS}
               for kind, ids in kinds.items()}
    failures = []
    for key, t in qs.thresholds.items():
        kind, _, m = key.rpartition("/")   # "ndcg@10" (all queries) or "question/ndcg@10" (one kind)
        value = (by_kind.get(kind) or {}).get(m) if kind else metrics.get(m)
        if value is not None and value < t:
            failures.append(f"{key} {value:.3f} < threshold {t:.3f}")
    if unjudgeable and len(unjudgeable) == len(qs.queries):
        failures.append("no query has a relevant passage in this library (is it the library the set was built for?)")
    return RegressionResult(metrics=metrics, per_query=values, by_kind=by_kind, unjudgeable=unjudgeable,
                            failures=failures)
