"""Tuning runs on a BEIR split (SciFact TRAIN by default - never tune on test).

    .venv/bin/python benchmarks/eval_tune.py [DATASET_DIR] --split train \
        --variant base= --variant k20=rrf_k=20 --variant kw2=keyword_weight=2,vector_weight=1

Each variant is SearchConfig field overrides on top of the shipped default
(rerank off); prints nDCG@10 etc. and the paired per-query difference to the
first variant with its standard error, and bm25s from the same run.
Assumes the corpus is already loaded (`library eval beir DATASET_DIR`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

from library_pipeline.eval.beir import build_index, eval_database, load_beir, release
from library_pipeline.eval.harness import bm25s_run, run_config
from library_pipeline.eval.metrics import KEYS, aggregate, paired_difference, per_query
from serving.embedding import load_embedder
from serving.search import SearchConfig


def parse_variant(spec: str) -> tuple[str, dict]:
    name, _, rest = spec.partition("=")
    overrides = {}
    fields = {f.name: f for f in dataclasses.fields(SearchConfig)}
    for part in filter(None, rest.split(",")):
        key, _, value = part.partition("=")
        kind = type(getattr(SearchConfig(), key))
        overrides[key] = (value.lower() in ("1", "true", "yes")) if kind is bool else kind(value)
        assert key in fields
    return name, overrides


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", nargs="?", default="../shared/data/beir_scifact")
    ap.add_argument("--split", default="train")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--max-queries", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ds = load_beir(args.dataset, args.split)
    if args.max_queries:
        ds = ds.subset(list(ds.queries)[: args.max_queries])
    emb = load_embedder("minilm")
    db = eval_database(ds.name)
    rows = {}
    try:
        build_index(db, ds, emb)
        base = per_query(ds.qrels, bm25s_run(ds))
        rows["bm25s"] = (aggregate(base), base)
        with db.connect() as conn:
            for spec in args.variant or ["default="]:
                name, overrides = parse_variant(spec)
                cfg = dataclasses.replace(SearchConfig(rerank=False, summaries=False, log_queries=False),
                                          label=f"tune-{name}", **overrides)
                t = time.perf_counter()
                run, _ = run_config(conn, emb, ds.queries, cfg)
                pq = per_query(ds.qrels, run)
                rows[name] = (aggregate(pq), pq)
                print(f"{name:24s} " + " ".join(f"{k} {rows[name][0][k]:.4f}" for k in KEYS)
                      + f"  ({time.perf_counter() - t:.0f}s) {overrides}", flush=True)
    finally:
        release(db)
    names = [n for n in rows if n != "bm25s"]
    ref = names[0]
    print(f"\n{ds.name} {ds.split}, {len(ds.queries)} queries; Δ = paired nDCG@10 difference to {ref} ± SE")
    for n in ["bm25s", *names]:
        m, pq = rows[n]
        d, se = paired_difference(pq["ndcg@10"], rows[ref][1]["ndcg@10"])
        ratio = m["ndcg@10"] / rows["bm25s"][0]["ndcg@10"]
        print(f"{n:24s} " + " ".join(f"{m[k]:.4f}" for k in KEYS) + f"  ×bm25s {ratio:.3f}  Δ {d:+.4f} ± {se:.4f}")
    if args.out:
        Path(args.out).write_text(json.dumps({n: rows[n][0] for n in rows}, indent=2))


if __name__ == "__main__":
    main()
