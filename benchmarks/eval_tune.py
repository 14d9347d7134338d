"""Tuning runs on a BEIR split (SciFact TRAIN by default - never tune on test).

    .venv/bin/python benchmarks/eval_tune.py [DATASET_DIR] --split train \
        --variant base= --variant k20=rrf_k=20 --variant kw2=keyword_weight=2,vector_weight=1

Each variant is SearchConfig field overrides on top of the shipped default
(rerank off); prints nDCG@10 etc. and the paired per-query difference to the
first variant with its standard error, and bm25s from the same run.
Assumes the corpus is already loaded (`library eval beir DATASET_DIR`).

--keyword-only: tune the keyword lane without embedding anything. The corpus is
chunked by the ingest's own chunk_step (same passages, same tsvectors) into a
separate database (library_eval_<dataset>_kw) whose passages carry no vectors,
and only keyword-lane variants can run (vector, title, structure off). Embedding
SciFact takes minutes on an idle two-core box and hours on a shared one.

    .venv/bin/python benchmarks/eval_tune.py ../shared/data/beir_scifact --split train --keyword-only \
        --variant base= --variant w1=keyword_doc_weight=1.0
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


def load_set(spec: str, max_queries: int | None = None):
    """A BEIR folder given as `folder[:split]` (split defaults to test), its first
    `max_queries` queries when set."""
    folder, _, split = spec.partition(":")
    ds = load_beir(folder, split or "test")
    if max_queries:
        ds = ds.subset(list(ds.queries)[:max_queries])
    return ds


def cached_capture(ds, cache: Path, capture, emb) -> dict:
    """`capture(conn, emb, queries)` of a loaded set, kept as a pickle in `cache` keyed by
    the set, split and query count, so a second run replays without searching again."""
    import pickle

    cache.mkdir(parents=True, exist_ok=True)
    file = cache / f"{ds.name}-{ds.split}-{len(ds.queries)}.pkl"
    if file.exists():
        return pickle.loads(file.read_bytes())
    db = eval_database(ds.name)
    try:
        started = time.perf_counter()
        with db.connect() as conn:
            cap = capture(conn, emb, ds.queries)
        print(f"# {ds.name}:{ds.split}: captured {len(ds.queries)} queries in {time.perf_counter() - started:.0f}s",
              flush=True)
    finally:
        release(db)
    file.write_bytes(pickle.dumps(cap))
    return cap


def build_keyword_index(db, ds, emb) -> dict:
    """Documents + pages as build_index writes them, chunk_step, then passages straight
    from the chunks (no vectors). The postings triggers index them as any writer's."""
    from library_pipeline.defs.ingest.partitions import partition_key_for
    from library_pipeline.ingest.store import chunk_step
    from library_pipeline.eval.beir import UPSERT_DOC_SQL, doc_hash, document_languages
    from serving.lexemes import refresh_lexeme_df

    with db.connect() as conn:
        have = conn.execute("SELECT count(*) FROM documents WHERE indexed_hash IS NOT NULL").fetchone()[0]
    if have == len(ds.corpus):
        return {"loaded": 0}
    languages = document_languages(ds)
    with db.transaction() as conn:
        conn.execute("DELETE FROM documents")
        with conn.cursor() as cur:
            for did, doc in ds.corpus.items():
                cur.execute(UPSERT_DOC_SQL, {"path": did, "key": partition_key_for(did), "title": doc["title"] or None,
                                             "lang": languages[did], "hash": doc_hash(doc)})
                doc_id = cur.fetchone()[0]
                cur.execute("INSERT INTO pages (document_id, page_no, text) VALUES (%s, 1, %s)",
                            (doc_id, doc["text"].replace("\x00", "")))
    for did in ds.corpus:
        r = chunk_step(db, partition_key_for(did), emb, force=True)
        if r.status == "failed":
            raise RuntimeError(f"chunking {did} failed: {r.reason}")
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO passages (document_id, source, ordinal, kind, page_start, page_end, heading, content, "
            "content_hash, ts_config) SELECT c.document_id, 'library', c.ordinal, c.kind, c.page_start, c.page_end, "
            "c.heading, c.content, c.content_hash, d.ts_config FROM chunks c JOIN documents d ON d.id = c.document_id")
        conn.execute("UPDATE documents SET indexed_hash = content_hash, status = 'ingested'")
    with db.connect() as conn:
        return refresh_lexeme_df(conn)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", nargs="?", default="../shared/data/beir_scifact")
    ap.add_argument("--split", default="train")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--max-queries", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("--keyword-only", action="store_true",
                    help="keyword lane alone, on a vector-free copy of the corpus (see the module doc)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ds = load_beir(args.dataset, args.split)
    if args.max_queries:
        ds = ds.subset(list(ds.queries)[: args.max_queries])
    emb = load_embedder("minilm")
    db = eval_database(ds.name + "_kw" if args.keyword_only else ds.name)
    rows = {}
    try:
        if args.keyword_only:
            print("index", build_keyword_index(db, ds, emb), flush=True)
        else:
            build_index(db, ds, emb)
        base = per_query(ds.qrels, bm25s_run(ds))
        rows["bm25s"] = (aggregate(base), base)
        with db.connect() as conn:
            for spec in args.variant or ["default="]:
                name, overrides = parse_variant(spec)
                base = SearchConfig(rerank=False, summaries=False, log_queries=False)
                if args.keyword_only:
                    base = SearchConfig.only("keyword", summaries=False, log_queries=False)
                cfg = dataclasses.replace(base, label=f"tune-{name}", **overrides)
                t = time.perf_counter()
                run, speed = run_config(conn, emb, ds.queries, cfg)
                pq = per_query(ds.qrels, run)
                rows[name] = (aggregate(pq), pq)
                print(f"{name:24s} " + " ".join(f"{k} {rows[name][0][k]:.4f}" for k in KEYS)
                      + f"  ({time.perf_counter() - t:.0f}s; search p50 {speed['p50_ms']} ms, "
                        f"p95 {speed['p95_ms']} ms) {overrides}", flush=True)
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
