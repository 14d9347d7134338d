"""Fusion variants scored in seconds: each query's lanes are captured once from the real
`search` (every lane run, the English-only one too for a query it cannot read), then the
fusion stage (`serving.search.fusion.fuse`, the function `search` calls) is replayed
under each variant's SearchConfig. Lanes do not depend on fusion parameters, so a
variant's replayed ranking is the one `search` would return (the title lane's input
aside, which is the other lanes' hits, not their weights).

    PYTHONPATH=. .venv/bin/python benchmarks/eval_fusion_replay.py \
        ../shared/data/beir_scifact:train ../shared/data/beir_msmarco_subset:test \
        ../shared/data/beir_xquad_ru:test ../shared/data/beir_xquad_ru_en:test \
        --variant kw15=keyword_weight=1.5 --variant conf=lane_confidence=1

Captures are kept in --cache (pickle per set, keyed by the split and query count): a
second run with other variants does not search again. The first rows are the shipped
default and each lane alone; every variant row is followed by its paired difference to
the default (± standard error) per set, and, for two or more sets, the
leave-one-collection-out choice among the variants (chosen on the mean of the others).
Folders must already be loaded into their evaluation databases (`library eval beir`
or benchmarks/eval_fusion.py load them).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_tune import cached_capture, load_set, parse_variant  # noqa: E402

import serving.search.engine as engine  # noqa: E402
from library_pipeline.eval.harness import TOP_K  # noqa: E402
from library_pipeline.eval.metrics import aggregate, paired_difference, per_query, ranking_to_run  # noqa: E402
from serving.embedding import embedder_languages, load_embedder  # noqa: E402
from serving.search import SearchConfig  # noqa: E402
from serving.search.fusion import fuse, lane_weight  # noqa: E402
from serving.search.language import query_language  # noqa: E402

BASE = dict(rerank=False, summaries=False, log_queries=False)
LANE_ONLY = ("vector", "multilingual", "keyword")


def capture(conn, emb, queries: dict[str, str]) -> dict[str, dict]:
    """qid -> the lanes (hits only) and what fuse() was told, from one real search each."""
    seen: dict = {}
    real = engine.fuse

    def spy(lanes, cfg, **kw):
        seen.update(lanes=[h for h, _ in lanes], **kw)
        return real(lanes, cfg, **kw)

    cfg = SearchConfig(vector_weight_foreign=1.0, label="capture", **BASE)
    out: dict[str, dict] = {}
    engine.fuse = spy
    try:
        for i, (qid, text) in enumerate(queries.items(), start=1):
            if i % 100 == 0:
                logging.getLogger(__name__).warning("captured %d of %d queries", i, len(queries))
            seen.clear()
            engine.search(conn, emb, text, top_k=TOP_K, config=cfg)
            out[qid] = {"text": text, **seen}
    finally:
        engine.fuse = real
    ids = {pid for c in out.values() for h in c["lanes"] for pid in h.ids}
    paths = dict(conn.execute("SELECT p.id, d.path FROM passages p JOIN documents d ON d.id = p.document_id "
                              "WHERE p.id = ANY(%s)", (sorted(ids),)).fetchall())
    return {"queries": out, "paths": paths}


def replay(cap: dict, cfg: SearchConfig, languages) -> dict[str, dict[str, float]]:
    run = {}
    for qid, c in cap["queries"].items():
        reads = languages is None or query_language(c["text"]) in languages
        multi = next((h for h in c["lanes"] if h.name == "multilingual"), None) if cfg.multilingual else None
        foreign = bool(multi) and cfg.language_aware and not reads
        lanes = []
        for h in c["lanes"]:
            if h.name in LANE_ONLY and not getattr(cfg, h.name):
                continue
            if h.name in ("title", "structure") and not getattr(cfg, h.name):
                continue
            if h.name == "vector" and foreign and cfg.vector_weight_foreign <= 0:
                continue   # search does not run it
            lanes.append((h, lane_weight(h.name, cfg, foreign=foreign)))
        fused, _, _ = fuse(lanes, cfg, scripts=c.get("scripts", {}) if multi else {},
                           query_script=c["query_script"], primary_reads=c["primary_reads"],
                           primary_monolingual=c["primary_monolingual"])
        docs: dict[str, None] = {}
        for f in fused[:TOP_K]:
            docs.setdefault(cap["paths"][f.id], None)
        run[qid] = ranking_to_run(list(docs))
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sets", nargs="+", help="DATASET_DIR[:split]")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--max-queries", type=int, default=0)
    ap.add_argument("--half", choices=("odd", "even"), help="score only every other query (cross-validation)")
    ap.add_argument("--cache", default="/tmp/fusion-replay")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    emb = load_embedder("minilm")
    languages = embedder_languages(emb)
    cfgs = {"default": SearchConfig(label="default", **BASE)}
    for lane in LANE_ONLY:
        cfgs[lane] = SearchConfig.only(lane, **BASE)
    for spec in args.variant:
        name, overrides = parse_variant(spec)
        cfgs[name] = dataclasses.replace(SearchConfig(**BASE), label=f"v-{name}", **overrides)
    table: dict[str, dict[str, float]] = {}
    for spec in args.sets:
        ds = load_set(spec, args.max_queries)
        key = f"{ds.name}:{ds.split}"
        cap = cached_capture(ds, Path(args.cache), capture, emb)
        qids = list(ds.queries)
        if args.half:
            qids = qids[(0 if args.half == "even" else 1)::2]
        qrels = {q: ds.qrels[q] for q in qids}
        cap = {**cap, "queries": {q: cap["queries"][q] for q in qids}}
        base = None
        for name, cfg in cfgs.items():
            pq = per_query(qrels, replay(cap, cfg, languages))
            m = aggregate(pq)
            table.setdefault(name, {})[key] = m["ndcg@10"]
            line = f"{key:30s} {name:24s} nDCG@10 {m['ndcg@10']:.4f}"
            if base is None:
                base = pq
            else:
                mean, se = paired_difference(pq["ndcg@10"], base["ndcg@10"])
                line += f"  vs default {mean:+.4f} ± {se:.4f}"
            print(line, flush=True)
    sets = list(dict.fromkeys(k for row in table.values() for k in row))
    print("\n| config | " + " | ".join(sets) + " | mean |")
    print("|---|" + "---|" * (len(sets) + 1))
    for name, row in table.items():
        vals = [row.get(s, float("nan")) for s in sets]
        print(f"| {name} | " + " | ".join(f"{v:.4f}" for v in vals) + f" | {sum(vals) / len(vals):.4f} |")
    tunable = [n for n in table if n not in LANE_ONLY]
    if len(sets) > 1 and len(tunable) > 1:
        print("\nleave-one-collection-out (chosen on the others by mean nDCG@10 -> score on the one left out):")
        for held in sets:
            rest = [s for s in sets if s != held]
            best = max(tunable, key=lambda n: sum(table[n][s] for s in rest) / len(rest))
            print(f"  {held}: {best} -> {table[best][held]:.4f} (default {table['default'][held]:.4f})")


if __name__ == "__main__":
    main()
