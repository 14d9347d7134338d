"""Pooled relevance judgments for queries without gold answers (the idea of
agent-library's eval_judge_pool.py, github.com/CreateM1nd/agent-library).

A real query ("<title> <author>", "bash scripting basics") has no single gold
answer, so:

1. `build_pool`: every configuration runs every query through
   `serving.search.search`; the top `depth` passages of all of them are pooled
   per query, deduplicated by passage id.
2. `judge_pool`: each pooled (query, passage) pair is judged ONCE, by a judge
   that never sees which configuration found it (candidates are shuffled with a
   fixed seed; `found_by` is not passed to the judge). Judgments are appended to
   a JSONL file as they are made, so an interrupted session resumes where it
   stopped and nothing is judged twice.
3. `score_pool`: every configuration's stored ranking is scored against the
   same judgments. No configuration is scored on labels derived from its own
   output: labels come from the judge alone, over the union of all pools;
   passages never pooled count as not relevant for everyone alike.

Judges (pluggable, `Judge` protocol): `OllamaJudge` (a local LLM, when
LIBRARY_JUDGE_MODEL / --model names one on an Ollama server), `PromptJudge` (a
person at the terminal), and anything else with `name` and `judge(query, text)`.

File formats
------------
pool.json::

    {"version": 1, "created": ISO-8601, "depth": 10,
     "configs": {name: {SearchConfig fields}},
     "queries": {query_id: query text},
     "runs": {config name: {query_id: [passage id, ...best first]}},
     "candidates": [{"query_id", "passage_id", "path", "location", "text"}]}

judgments.jsonl (one object per line, append-only)::

    {"query_id": "q3", "passage_id": 812, "relevance": 0|1|2,
     "judge": "ollama:qwen3:8b" | "person:<name>", "at": ISO-8601}

relevance: 0 not relevant, 1 relevant, 2 exactly what was asked for.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import psycopg

from library_pipeline.eval.metrics import evaluate, ranking_to_run
from serving.embedding import Embedder
from serving.search import SearchConfig, search
from serving.settings import DEFAULT_OLLAMA_URL

JUDGE_PROMPT = """You judge search results for a document library.
Query: {query}

Passage:
{text}

How relevant is the passage to the query? Answer with one digit only:
0 = not relevant, 1 = relevant, 2 = exactly what the query asks for."""


class Judge(Protocol):
    name: str

    def judge(self, query: str, text: str) -> int: ...


class OllamaJudge:
    """A local LLM on an Ollama server. A consistent rater, not a correct one."""

    def __init__(self, model: str, url: str = DEFAULT_OLLAMA_URL, timeout: float = 120.0) -> None:
        import ollama

        self._client = ollama.Client(host=url, timeout=timeout)
        self.model = model
        self.name = f"ollama:{model}"

    def judge(self, query: str, text: str) -> int:
        response = self._client.generate(model=self.model, prompt=JUDGE_PROMPT.format(query=query, text=text[:4000]),
                                         options={"temperature": 0})
        return parse_grade(response["response"])


class PromptJudge:
    """A person, asked at the terminal (typer.prompt by default)."""

    def __init__(self, name: str = "person", ask: Callable[[str], str] | None = None) -> None:
        self.name = f"person:{name}"
        self._ask = ask

    def judge(self, query: str, text: str) -> int:
        ask = self._ask
        if ask is None:
            import typer

            ask = lambda prompt: typer.prompt(prompt)  # noqa: E731
        while True:
            answer = ask(f"\nQUERY: {query}\n\n{text[:1500]}\n\nrelevance 0/1/2")
            try:
                return parse_grade(answer)
            except ValueError:
                continue


def parse_grade(answer: str) -> int:
    match = re.search(r"[012]", answer or "")
    if not match:
        raise ValueError(f"no grade 0/1/2 in {answer[:80]!r}")
    return int(match.group())


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def build_pool(conn: psycopg.Connection, embedder: Embedder, queries: dict[str, str],
               configs: dict[str, SearchConfig], *, depth: int = 10) -> dict:
    runs: dict[str, dict[str, list[int]]] = {}
    candidates: dict[tuple[str, int], dict] = {}
    for name, cfg in configs.items():
        cfg = dataclasses.replace(cfg, log_queries=False, label=name)
        runs[name] = {}
        for qid, text in queries.items():
            resp = search(conn, embedder, text, top_k=depth, config=cfg)
            runs[name][qid] = [r.passage_id for r in resp.results]
            for r in resp.results:
                candidates.setdefault((qid, r.passage_id), {
                    "query_id": qid, "passage_id": r.passage_id, "path": r.path, "location": r.location,
                    "text": r.text})
    return {"version": 1, "created": _now(), "depth": depth,
            "configs": {n: dataclasses.asdict(c) for n, c in configs.items()},
            "queries": dict(queries), "runs": runs, "candidates": list(candidates.values())}


def queries_from_log(conn: psycopg.Connection, limit: int = 50) -> dict[str, str]:
    """The most frequent distinct queries in `search_log` (real queries: agent-library's
    most useful eval set was built from a week of these)."""
    rows = conn.execute("SELECT query, count(*) FROM search_log WHERE config NOT LIKE 'eval%%' "
                        "GROUP BY query ORDER BY count(*) DESC, query LIMIT %s", (limit,)).fetchall()
    return {f"log-{i + 1}": q for i, (q, _) in enumerate(rows)}


def read_judgments(path: Path) -> dict[tuple[str, int], dict]:
    out: dict[tuple[str, int], dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                j = json.loads(line)
                out.setdefault((str(j["query_id"]), int(j["passage_id"])), j)  # first judgment stands
    return out


def judge_pool(pool: dict, judgments_path: Path, judge: Judge, *, seed: int = 13,
               limit: int | None = None, on_judged: Callable[[dict], None] | None = None) -> int:
    """Judge every not-yet-judged candidate once, blind to which configuration found it.
    Returns how many were judged in this call."""
    done = read_judgments(judgments_path)
    todo = [c for c in pool["candidates"] if (str(c["query_id"]), int(c["passage_id"])) not in done]
    random.Random(seed).shuffle(todo)
    if limit is not None:
        todo = todo[:limit]
    judgments_path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with judgments_path.open("a", encoding="utf-8") as fh:
        for c in todo:
            grade = judge.judge(pool["queries"][c["query_id"]], c["text"])
            record = {"query_id": c["query_id"], "passage_id": c["passage_id"], "relevance": int(grade),
                      "judge": judge.name, "at": _now()}
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            n += 1
            if on_judged:
                on_judged(record)
    return n


def score_pool(pool: dict, judgments: dict[tuple[str, int], dict], *, min_relevance: int = 1) -> dict:
    """Every configuration's pooled ranking scored on the shared judgments.
    Queries with no relevant judged passage are left out (reported as `no_relevant`)."""
    qrels: dict[str, dict[str, int]] = {}
    for (qid, pid), j in judgments.items():
        if int(j["relevance"]) >= min_relevance:
            qrels.setdefault(qid, {})[str(pid)] = int(j["relevance"])
    judged = {qid for qid, _ in judgments}
    out = {"queries": len(qrels), "no_relevant": sorted(q for q in pool["queries"] if q in judged and q not in qrels),
           "unjudged_candidates": sum(1 for c in pool["candidates"]
                                      if (str(c["query_id"]), int(c["passage_id"])) not in judgments),
           "configs": {}}
    for name, runs in pool["runs"].items():
        run = {qid: ranking_to_run([str(p) for p in ids]) for qid, ids in runs.items() if qid in qrels}
        m = evaluate(qrels, run)
        out["configs"][name] = {k: round(v, 4) for k, v in m.items() if k != "recall@100"}
    return out
