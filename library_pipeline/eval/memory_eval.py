"""Memory search precision on a fixed eval set (the Agent Librarian's target: precision > 0.7).

The set (queries/memory_set.json, built by build_memory_set.py; its `description`
says how and what it biases) is loaded into its own database - never the live
memory store - through `index_memory`, the path agents use, and every query is
run through `search_memory` as the set's viewer, so visibility, dedup and the
memory search configuration are all part of what is measured.

The set has an English and a Russian half (each query's `lang`): each half is
scored on its own as well as together, and the check passes only when every half
clears the threshold, so a good English half cannot hide a broken Russian one.

Metric: precision@R - of the first R records returned, the share that are
relevant, R being the query's number of relevant artifacts - averaged over the
queries. The seed names no cut-off; P@5 cannot exceed 0.2 for a query with one
relevant record, so a fixed k would measure the set, not the search. P@1, MRR and
P@5 are reported beside it. A record the viewer may not see counts as a
visibility failure and fails the check outright.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from serving.db import Database
from serving.embedding import Embedder
from serving.lexemes import refresh_lexeme_df
from serving.memory.store import MEMORY_SEARCH_CONFIG, index_memory, search_memory
from serving.search.types import SearchConfig, Viewer

log = logging.getLogger(__name__)

# the agents' memory configuration, unlogged: eval queries are not real use
EVAL_CONFIG = dataclasses.replace(MEMORY_SEARCH_CONFIG, log_queries=False, label="memory-eval")
DEFAULT_SET = Path(__file__).resolve().parent / "queries" / "memory_set.json"
CHECK_METRIC = "precision@R"


def load_memory_set(path: Path | str | None = None) -> dict[str, Any]:
    path = Path(path) if path else DEFAULT_SET
    data = json.loads(path.read_text(encoding="utf-8"))
    ids = {a["id"] for a in data["artifacts"]}
    for q in data["queries"]:
        missing = [r for r in q["relevant"] if r not in ids]
        if missing or not q["relevant"]:
            raise ValueError(f"{path}: query {q['id']} names unknown or no relevant artifacts {missing}")
    data["path"] = str(path)
    return data


def load_artifacts(conn: psycopg.Connection, embedder: Embedder, mset: dict[str, Any]) -> int:
    """Replace whatever memories the eval database holds with the set's artifacts."""
    conn.execute("DELETE FROM passages WHERE source = 'memory'")
    conn.execute("DELETE FROM memory_access_log")
    conn.execute("DELETE FROM memories")
    conn.commit()
    for a in mset["artifacts"]:
        index_memory(conn, embedder, Viewer(agent=a["agent"], department=a.get("department")),
                     artifact_id=a["id"], content=a["content"], scope=a["scope"],
                     meta={"type": a.get("type") or "note", "source": a.get("source")})
    conn.commit()
    # the steady state of a live library, where the lexeme_df asset has run since
    refresh_lexeme_df(conn)
    conn.commit()
    return len(mset["artifacts"])


@dataclass
class MemoryEvalResult:
    metrics: dict[str, float]
    threshold: float
    per_query: dict[str, dict[str, Any]] = field(default_factory=dict)
    leaks: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def halves(self) -> dict[str, float]:
        """precision@R of each language half ("precision@R en", "precision@R ru", ...)."""
        prefix = CHECK_METRIC + " "
        return {k[len(prefix):]: v for k, v in self.metrics.items() if k.startswith(prefix)}

    @property
    def passed(self) -> bool:
        scores = list(self.halves.values()) or [self.metrics[CHECK_METRIC]]
        return not self.leaks and min(scores) > self.threshold


def score_memory_set(conn: psycopg.Connection, embedder: Embedder, mset: dict[str, Any], *, top_k: int = 5,
                     config: SearchConfig | None = None) -> MemoryEvalResult:
    started = time.perf_counter()
    viewer = Viewer(**mset["viewer"])
    visible = {a["id"] for a in mset["artifacts"] if a["scope"] == "global"
               or (a["scope"] == "self" and a["agent"] == viewer.agent)
               or (a["scope"] == "department" and a.get("department") == viewer.department)}
    per_query: dict[str, dict[str, Any]] = {}
    leaks: list[str] = []
    for q in mset["queries"]:
        out = search_memory(conn, embedder, viewer, q["query"], top_k=top_k, config=config or EVAL_CONFIG)
        ids = [r["id"] for r in out["results"] if r["source"] == "memory"]
        aids = dict(conn.execute("SELECT id, artifact_id FROM memories WHERE id = ANY(%s)", (ids,)).fetchall())
        got = [aids[i] for i in ids]
        leaks += [f"{q['id']}: {a}" for a in got if a not in visible]
        relevant = set(q["relevant"])
        r = len(relevant)
        first_hit = next((rank for rank, a in enumerate(got, start=1) if a in relevant), None)
        per_query[q["id"]] = {
            "query": q["query"], "lang": q.get("lang", "en"), "returned": got,
            "precision@R": sum(a in relevant for a in got[:r]) / r,
            "p@1": float(bool(got) and got[0] in relevant),
            "p@5": sum(a in relevant for a in got[:5]) / 5,
            "mrr": 1.0 / first_hit if first_hit else 0.0,
        }
    conn.commit()
    names = ("precision@R", "p@1", "p@5", "mrr")
    metrics = _mean(per_query.values(), names)
    langs = sorted({v["lang"] for v in per_query.values()})
    if len(langs) > 1:
        for lang in langs:
            half = _mean([v for v in per_query.values() if v["lang"] == lang], names)
            metrics.update({f"{m} {lang}": x for m, x in half.items()})
    return MemoryEvalResult(metrics, float(mset["threshold"][CHECK_METRIC]), per_query, leaks,
                            time.perf_counter() - started)


def _mean(rows, names: tuple[str, ...]) -> dict[str, float]:
    rows = list(rows)
    return {m: round(sum(v[m] for v in rows) / len(rows), 4) for m in names}


def run_memory_eval(base: Database, embedder: Embedder, path: Path | str | None = None) -> MemoryEvalResult:
    """Load the set into the `library_eval_memory` database beside `base` and score it."""
    from library_pipeline.eval.beir import eval_database, release

    mset = load_memory_set(path)
    db = eval_database("memory", base=base)
    try:
        with db.connect() as conn:
            load_artifacts(conn, embedder, mset)
            return score_memory_set(conn, embedder, mset)
    finally:
        release(db)
