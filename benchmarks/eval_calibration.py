"""Fit and check the calibrated fusion (serving/search/calibration.py): each query's
pool evidence is captured once from the real `search` (fusion="calibrated"; what
`calibrated_fusion` is given), then logistic models P(relevant | evidence) are fitted per
set of evidence a candidate can have, and the fusion is replayed with them.

    PYTHONPATH=. .venv/bin/python benchmarks/eval_calibration.py \\
        ../shared/data/beir_xquad_mixed_en ../shared/data/beir_xquad_mixed_ru \\
        ../shared/data/beir_xquad_ru ../shared/data/beir_scifact:train [--fit]

Prints, per set, nDCG@10 of the shipped MODELS and of models fitted on the other half of
the queries (odd/even, a question and its translation share a half) and on the other
collections (leave one out), each with its paired difference to the convex rule; --fit
prints MODELS fitted on every set given. Captures are kept in --cache. Folders must
already be loaded into their evaluation databases (`library eval beir` loads them).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_tune import cached_capture, load_set  # noqa: E402

import serving.search.engine as engine  # noqa: E402
from library_pipeline.eval.beir import eval_database, release  # noqa: E402
from library_pipeline.eval.harness import TOP_K  # noqa: E402
from library_pipeline.eval.metrics import aggregate, paired_difference, per_query, ranking_to_run  # noqa: E402
from serving.embedding import load_embedder  # noqa: E402
from serving.search import SearchConfig, calibration  # noqa: E402

BASE = dict(rerank=False, summaries=False, log_queries=False)
LANES = ("vector", "multilingual", "keyword")


def capture(conn, emb, queries: dict[str, str]) -> dict:
    """qid -> calibrated_fusion's input and the convex rule's ranking, from real searches."""
    seen: dict = {}
    real = engine.calibrated_fusion

    def spy(lanes, **kw):
        seen.update(lanes=lanes, **kw)
        return real(lanes, **kw)

    out: dict[str, dict] = {}
    engine.calibrated_fusion = spy
    try:
        for qid, text in queries.items():
            seen.clear()
            engine.search(conn, emb, text, top_k=TOP_K, config=SearchConfig(fusion="calibrated", **BASE))
            convex = engine.search(conn, emb, text, top_k=TOP_K, config=SearchConfig(fusion="convex", **BASE))
            out[qid] = {**seen, "convex": [r.passage_id for r in convex.results]}
    finally:
        engine.calibrated_fusion = real
    ids = {pid for c in out.values() for h, _ in c.get("lanes", []) for pid in h.ids} | \
        {pid for c in out.values() for pid in c["convex"]}
    paths = dict(conn.execute("SELECT p.id, d.path FROM passages p JOIN documents d ON d.id = p.document_id "
                              "WHERE p.id = ANY(%s)", (sorted(ids),)).fetchall())
    return {"queries": out, "paths": paths}


def timing(conn, emb, queries: list[str]) -> None:
    """Warm p50 / p95 of the whole search and of its fusion stage, each rule on the same
    queries in turn (the calibrated rule's pool scoring happens inside the fusion stage)."""
    for rule in ("convex", "calibrated"):
        cfg = SearchConfig(fusion=rule, **BASE)
        engine.search(conn, emb, queries[0], top_k=TOP_K, config=cfg)   # warm the background sample
        total, fusion = [], []
        for text in queries:
            resp = engine.search(conn, emb, text, top_k=TOP_K, config=cfg)
            total.append(resp.timings["total"])
            fusion.append(resp.timings["fusion"])
        print(f"{rule}: search p50 {np.percentile(total, 50):.1f} ms / p95 {np.percentile(total, 95):.1f} ms; "
              f"fusion stage p50 {np.percentile(fusion, 50):.2f} ms / p95 {np.percentile(fusion, 95):.2f} ms "
              f"({len(queries)} queries)", flush=True)


def evidence_rows(c: dict):
    """(passage, evidence dict) for every candidate calibrated_fusion would score."""
    pids = {pid for h, _ in c["lanes"] if h.graded for pid in h.ids if h.name in c["readers"].get(pid, ())}
    for pid in sorted(pids):
        can = c["readers"][pid]
        ev = {lane: z[pid] for lane, z in c["zscores"].items() if lane in can and pid in z}
        if "keyword" in can:
            ev["keyword"] = c["keyword_share"].get(pid, 0.0)
        yield pid, ev


def fit(caps: list[tuple[dict, dict, list[str]]], l2: float = 1e-2) -> dict:
    """MODELS fitted on (capture, qrels, qids): one logistic regression per evidence set, on
    the candidates with exactly that evidence (a passage in another script than the query's
    is not a same-script passage with two lanes missing: the multilingual model rates
    cross-language pairs lower), or, with fewer than 20 relevant ones, on every candidate
    that has at least that evidence.

    Each collection gets its own intercept (its base rate: one relevant abstract among
    5,183 in SciFact, one article among 120 in XQuAD), the slopes are shared. A model's
    bias is then its intercept where candidates of different evidence sets compete for the
    same questions (the mixed-language sets: an English passage read by every lane against
    a Russian one only the multilingual model reads), averaged over such collections; a
    model never in such a collection takes its mean intercept. A single pooled intercept
    had put the SciFact-dominated same-script model's probabilities far below the
    cross-script one's: the example library's English questions went to the Russian book."""
    rows = []
    for g, (cap, qrels, qids) in enumerate(caps):
        for qid in qids:
            c = cap["queries"][qid]
            rel = {d for d, r in qrels.get(qid, {}).items() if r > 0}
            for pid, ev in evidence_rows(c):
                rows.append((ev, 1.0 if cap["paths"].get(pid) in rel else 0.0, g))
    relevant: dict[int, dict[tuple[str, ...], int]] = {}
    for ev, y, g in rows:
        if y:
            key = tuple(n for n in calibration.EVIDENCE if n in ev)
            relevant.setdefault(g, {}).setdefault(key, 0)
            relevant[g][key] += 1
    competing = {g for g, sets in relevant.items() if sum(1 for n in sets.values() if n >= 20) >= 2}
    models = {}
    for names in calibration.MODELS:
        data = [([ev[n] for n in names], y, g) for ev, y, g in rows if set(ev) == set(names)]
        if sum(d[1] for d in data) < 20:
            data = [([ev[n] for n in names], y, g) for ev, y, g in rows if all(n in ev for n in names)]
        if sum(d[1] for d in data) < 20:
            models[names] = calibration.MODELS[names]
            continue
        x = np.array([d[0] for d in data])
        y = np.array([d[1] for d in data])
        groups = sorted({d[2] for d in data})
        onehot = np.array([[1.0 if d[2] == g else 0.0 for g in groups] for d in data])
        # more evidence must never lower P: a feature whose fitted weight comes out negative
        # would rank against its own lane's evidence; it is dropped and the rest refitted
        keep = list(range(len(names)))
        while True:
            w = _logistic(np.hstack([x[:, keep], onehot]), y, l2)
            slopes = w[:len(keep)]
            if all(v >= 0 for v in slopes) or not keep:
                break
            keep.pop(int(np.argmin(slopes)))
        intercepts = dict(zip(groups, w[len(keep):]))
        coefs = [0.0] * len(names)
        for i, v in zip(keep, slopes):
            coefs[i] = float(v)
        mixed = [intercepts[g] for g in groups if g in competing]
        bias = float(np.mean(mixed if mixed else list(intercepts.values())))
        models[names] = (tuple(round(v, 3) for v in coefs), round(bias, 3))
    return models


def _logistic(x: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """Weights of an L2-regularised logistic regression without a bias column (Newton's
    method); the caller's one-hot group columns are the intercepts."""
    w = np.zeros(x.shape[1])
    for _ in range(40):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        g = x.T @ (p - y) + l2 * w
        h = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.eye(len(w))
        w -= np.linalg.solve(h, g)
    return w


def replay(cap: dict, qids: list[str], models: dict | None) -> dict[str, dict[str, float]]:
    saved = calibration.MODELS
    run = {}
    try:
        if models is not None:
            calibration.MODELS = models
        for qid in qids:
            c = cap["queries"][qid]
            if models is None:
                ranked = c["convex"]
            else:
                args = {k: c[k] for k in ("zscores", "keyword_share", "readers", "k", "graded_weight")}
                ranked = [f.id for f in calibration.calibrated_fusion(c["lanes"], **args)]
            docs: dict[str, None] = {}
            for pid in ranked:
                docs.setdefault(cap["paths"][pid], None)
                if len(docs) >= TOP_K:
                    break
            run[qid] = ranking_to_run(list(docs))
    finally:
        calibration.MODELS = saved
    return run


def score(ds, cap, qids, models, base=None):
    qrels = {q: ds.qrels[q] for q in qids if q in ds.qrels}
    pq = per_query(qrels, replay(cap, qids, models))
    line = f"{aggregate(pq)['ndcg@10']:.4f}"
    if base is not None:
        mean, se = paired_difference(pq["ndcg@10"], base["ndcg@10"])
        line += f" ({mean:+.4f} ± {se:.4f})"
    return pq, line


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sets", nargs="+", help="DATASET_DIR[:split]")
    ap.add_argument("--fit", action="store_true", help="print MODELS fitted on every set given")
    ap.add_argument("--cache", default="/tmp/calibration-replay")
    ap.add_argument("--max-queries", type=int, default=0, help="the first N queries of each set")
    ap.add_argument("--timing", type=int, default=0, metavar="N",
                    help="only time N queries of each set under both rules")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    emb = load_embedder("minilm")
    if args.timing:
        for spec in args.sets:
            ds = load_set(spec)
            db = eval_database(ds.name)
            try:
                with db.connect() as conn:
                    print(f"# {ds.name}:{ds.split}")
                    timing(conn, emb, list(ds.queries.values())[:args.timing])
            finally:
                release(db)
        return
    loaded = []
    for spec in args.sets:
        ds = load_set(spec, args.max_queries)
        loaded.append((ds, cached_capture(ds, Path(args.cache), capture, emb)))
    print("| set | convex | shipped MODELS | fitted on the other half | fitted on the other sets |")
    print("|---|---|---|---|---|")
    for i, (ds, cap) in enumerate(loaded):
        qids = [q for q in ds.queries if q in cap["queries"]]
        base, convex = score(ds, cap, qids, None)
        _, shipped = score(ds, cap, qids, calibration.MODELS, base)
        halves = [qids[0::2], qids[1::2]]
        per: dict[str, dict[str, float]] = {"ndcg@10": {}}
        for part in (0, 1):
            models = fit([(c, d.qrels, [q for q in (list(d.queries)[part::2]) if q in c["queries"]])
                          for d, c in loaded])
            pq = per_query({q: ds.qrels[q] for q in halves[1 - part] if q in ds.qrels},
                           replay(cap, halves[1 - part], models))
            per["ndcg@10"].update(pq["ndcg@10"])
        mean, se = paired_difference(per["ndcg@10"], {q: base["ndcg@10"][q] for q in per["ndcg@10"]})
        half = f"{sum(per['ndcg@10'].values()) / max(len(per['ndcg@10']), 1):.4f} ({mean:+.4f} ± {se:.4f})"
        others = [(c, d.qrels, list(d.queries)) for j, (d, c) in enumerate(loaded) if j != i]
        loo = score(ds, cap, qids, fit(others), base)[1] if others else "-"
        print(f"| {ds.name}:{ds.split} | {convex} | {shipped} | {half} | {loo} |", flush=True)
    if args.fit:
        models = fit([(c, d.qrels, list(d.queries)) for d, c in loaded])
        print("\nMODELS = {")
        for names, (coefs, bias) in models.items():
            print(f"    {names!r}: ({coefs!r}, {bias!r}),")
        print("}")


if __name__ == "__main__":
    main()
