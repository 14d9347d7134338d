"""Outputs of a BEIR evaluation: the JSON the issue specifies, a markdown table
with the published anchors beside ours, and a PNG bar chart."""

from __future__ import annotations

import json
from pathlib import Path

from library_pipeline.eval.harness import EvalResult
from library_pipeline.eval.metrics import KEYS

# Published nDCG@10 on the BEIR SciFact TEST split (300 queries), from
# ../shared/data/beir_scifact/ANCHORS.md, which cites each source file.
SCIFACT_ANCHORS: list[tuple[str, float, str]] = [
    ("BM25 Anserini flat (Lucene)", 0.6789, "castorini/anserini regressions-beir-v1.0.0-scifact.flat.md"),
    ("BM25 bm25s (MTEB baseline)", 0.68736, "embeddings-benchmark/results mteb__baseline-bm25s SciFact.json"),
    ("BM25 top-100 + MiniLM-L-6 cross-encoder", 0.688, "juanluisdb/MiniLM-L-6-rerank-m3 model card"),
    ("all-MiniLM-L6-v2 dense (our embedder)", 0.64508, "MTEB results, all-MiniLM-L6-v2"),
    ("bge-small-en-v1.5", 0.71273, "MTEB results, BAAI/bge-small-en-v1.5"),
    ("e5-small-v2", 0.68854, "MTEB results, intfloat/e5-small-v2"),
    ("nomic-embed-text-v1.5", 0.70275, "MTEB results, nomic-ai/nomic-embed-text-v1.5"),
    ("bge-base-en-v1.5", 0.74345, "MTEB results, BAAI/bge-base-en-v1.5"),
    ("naive RRF bm25s + MiniLM (ANCHORS.md, same machine kind)", 0.7171, "ANCHORS.md 'Measured' table"),
]


def anchors_for(dataset: str, split: str) -> list[tuple[str, float, str]]:
    return SCIFACT_ANCHORS if "scifact" in dataset.lower() and split == "test" else []


def markdown_table(result: EvalResult) -> str:
    head = "| system | nDCG@10 | P@5 | MRR@10 | R@100 | nDCG@10 ÷ bm25s |\n|---|---|---|---|---|---|\n"
    rows = []
    ratios = result.ratios()
    for name, m in result.configs.items():
        rows.append(f"| ours: {name} | " + " | ".join(f"{m[k]:.4f}" for k in KEYS)
                    + f" | {ratios[name]['ndcg@10']:.3f}× |")
    rows.append("| bm25s, same run | " + " | ".join(f"{result.bm25s[k]:.4f}" for k in KEYS) + " | 1.000× |")
    for label, value, source in anchors_for(result.dataset, result.split):
        rows.append(f"| published: {label} | {value:.4f} | | | | {value / result.bm25s['ndcg@10']:.3f}× |")
    title = (f"{result.dataset}, {result.split} split, {result.queries} queries "
             f"(R@100 of ours = documents among the top 100 passages)\n\n")
    return title + head + "\n".join(rows) + "\n"


def write_json(result: EvalResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")


def write_plot(result: EvalResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result.configs) + ["bm25s"]
    values = [result.configs[n] for n in result.configs] + [result.bm25s]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(KEYS)
    for i, key in enumerate(KEYS):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [v[key] for v in values], width, label=key)
    ax.set_xticks([j + width * (len(KEYS) - 1) / 2 for j in range(len(names))])
    ax.set_xticklabels(names, rotation=15)
    ax.set_ylim(0, 1)
    anchors = anchors_for(result.dataset, result.split)
    for label, value, _ in [a for a in anchors if a[0].startswith(("BM25 bm25s", "all-MiniLM"))]:
        ax.axhline(value, linestyle=":", linewidth=0.8, color="grey")
        ax.text(len(names) - 0.4, value, f"{label[:28]} {value:.3f}", fontsize=6, va="bottom", ha="right")
    ax.set_title(f"{result.dataset} ({result.split}, {result.queries} queries)")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
