"""Fusion across collections: every lane alone and fusion variants, on several BEIR
folders in one run, with a leave-one-collection-out choice of a parameter.

    PYTHONPATH=. .venv/bin/python benchmarks/eval_fusion.py \
        ../shared/data/beir_scifact:train ../shared/data/beir_msmarco_subset:test \
        ../shared/data/beir_xquad_ru:test ../shared/data/beir_xquad_ru_en:test \
        --variant shared0=multilingual_weight_shared=0 --variant shared25=multilingual_weight_shared=0.25

Each folder is loaded once into its evaluation database through the pipeline's own
writer (both vector lanes; `library migrate embedder multilingual` semantics for a
database loaded before the second lane existed: missing multilingual vectors are
filled first). Rows: each lane alone (`SearchConfig.only`), the shipped default, naive
(language_aware off), and each `--variant` (SearchConfig overrides on the default).
Then, for every variant, leave-one-collection-out: the variant chosen on the other
collections (mean nDCG@10) and what it scores on the one left out - so a parameter is
never judged on the collection it was chosen on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_tune import load_set, parse_variant  # noqa: E402

from library_pipeline.eval.beir import build_index, eval_database, release  # noqa: E402
from library_pipeline.eval.harness import run_config  # noqa: E402
from library_pipeline.eval.metrics import aggregate, per_query  # noqa: E402
from library_pipeline.migrate.embedder import fill_multilingual  # noqa: E402
from serving.embedding import load_embedder, multilingual_embedder  # noqa: E402
from serving.search import SearchConfig  # noqa: E402

BASE = dict(rerank=False, summaries=False, log_queries=False)


def configs(variants: list[str]) -> dict[str, SearchConfig]:
    out = {
        "vector (MiniLM)": SearchConfig.only("vector", **BASE),
        "multilingual (USE-m3)": SearchConfig.only("multilingual", **BASE),
        "keyword": SearchConfig.only("keyword", **BASE),
        "naive (no language trust)": SearchConfig(language_aware=False, label="naive", **BASE),
        "default": SearchConfig(label="default", **BASE),
    }
    for spec in variants:
        name, overrides = parse_variant(spec)
        out[name] = dataclasses.replace(SearchConfig(**BASE), label=f"v-{name}", **overrides)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sets", nargs="+", help="DATASET_DIR[:split]")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--only", action="append", default=[], help="run only these rows (names)")
    ap.add_argument("--variants-on", action="append", default=[],
                    help="run the --variant rows only on these collections (names, e.g. beir_msmarco_subset); "
                         "a variant of multilingual_weight_shared changes nothing for non-English queries")
    ap.add_argument("--max-queries", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    emb = load_embedder("minilm")
    multi = multilingual_embedder()
    cfgs = configs(args.variant)
    if args.only:
        cfgs = {n: c for n, c in cfgs.items() if n in args.only}
    table: dict[str, dict[str, float]] = {}
    for spec in args.sets:
        ds = load_set(spec, args.max_queries)
        key = f"{ds.name}:{ds.split}"
        db = eval_database(ds.name)
        try:
            t = time.perf_counter()
            figures = build_index(db, ds, emb)
            filled = fill_multilingual(db, multi) if multi is not None else {}
            print(f"# {key}: {len(ds.queries)} queries; load {figures.get('loaded')} docs, "
                  f"multilingual filled {filled.get('embedded', 0)} in {time.perf_counter() - t:.0f}s", flush=True)
            with db.connect() as conn:
                for name, cfg in cfgs.items():
                    if args.variants_on and ds.name not in args.variants_on and cfg.label.startswith("v-"):
                        continue
                    t = time.perf_counter()
                    run, stats = run_config(conn, emb, ds.queries, cfg)
                    m = aggregate(per_query(ds.qrels, run))
                    table.setdefault(name, {})[key] = m["ndcg@10"]
                    print(f"{key:32s} {name:28s} nDCG@10 {m['ndcg@10']:.4f}  p50 {stats['p50_ms']} ms "
                          f"({time.perf_counter() - t:.0f}s)", flush=True)
        finally:
            release(db)
    sets = sorted({k for row in table.values() for k in row})
    print("\n| config | " + " | ".join(sets) + " |")
    print("|---|" + "---|" * len(sets))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(f"{row.get(s, float('nan')):.4f}" for s in sets) + " |")
    tunable = [n for n in table if n not in ("vector (MiniLM)", "multilingual (USE-m3)", "keyword")]
    if len(sets) > 1 and len(tunable) > 1:
        print("\nleave-one-collection-out (chosen on the others by mean nDCG@10 -> score on the one left out):")
        for held in sets:
            rest = [s for s in sets if s != held]
            candidates = [n for n in tunable if all(s in table[n] for s in sets)]
            if not candidates:
                continue
            best = max(candidates, key=lambda n: sum(table[n][s] for s in rest) / len(rest))
            print(f"  {held}: {best} -> {table[best][held]:.4f}")
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
