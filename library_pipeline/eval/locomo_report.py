"""Outputs of `library eval memory`: a markdown table (turns: ours beside the same-run
anchors, overall and per category; sessions: R@5 and MRR), the JSON, and a PNG chart
(recall@10 per category, every system)."""

from __future__ import annotations

import json
from pathlib import Path

from library_pipeline.eval.locomo import CATEGORIES, LocomoResult
from library_pipeline.eval.report import anchor_label

MEMORY = "memory"


def system_label(name: str) -> str:
    if name == MEMORY:
        return "**ours: memory_search (index_memory per turn)**"
    if name == "bm25s":
        return "bm25s (English stemmer, stopwords)"
    return anchor_label(name).replace("(whole documents)", "(same turns)")


def _order(result: LocomoResult) -> list[str]:
    return [MEMORY, *[n for n in result.systems if n != MEMORY]]


def markdown(result: LocomoResult) -> str:
    cats = [c for c in CATEGORIES.values() if any(c in m["categories"] for m in result.systems.values())]
    counts = next(iter(result.systems.values()))["categories"]
    head = ("| system | recall@10 | recall@5 | all@10 | "
            + " | ".join(f"{c} ({counts[c]['questions']} q)" for c in cats) + " |\n"
            + "|---|---|---|---|" + "---|" * len(cats) + "\n")
    rows = []
    for name in _order(result):
        m = result.systems[name]
        rows.append(f"| {system_label(name)} | {m['recall@10']:.4f} | {m['recall@5']:.4f} | {m['all@10']:.4f} | "
                    + " | ".join(f"{m['categories'][c]['recall@10']:.3f}" if c in m["categories"] else ""
                                 for c in cats) + " |")
    key = result.answer_key
    audit = (f"the answer key as audited ({key['file']}: {key['applied']} questions corrected, "
             f"{key['evidence_changed']} of them citing other turns, {key['left_without_evidence']} left without "
             "evidence and dropped)" if key else "the answer key as published")
    out = (f"{result.dataset}: {', '.join(result.conversations)}, {result.questions} questions, {audit}. "
           "Evidence recall (per category: recall@10); each conversation one agent, every turn one record.\n\n"
           + head + "\n".join(rows) + "\n")
    search = result.timings.get("search", {})
    index = result.timings.get("index", {})
    if search:
        out += f"\nmemory_search p50 {search['p50_ms']} ms, p95 {search['p95_ms']} ms"
        if index.get("records_per_s"):
            out += (f"; index_memory {index['records']} records in {index['seconds']} s "
                    f"({index['records_per_s']}/s, {index.get('clients', 1)} agents at once)")
        out += ".\n"
    s = result.sessions
    if s:
        out += (f"\nWhole-session notes ({s['records']} sessions in one index, a question's evidence mapped to "
                "its sessions):\n\n| unit | R@5 | MRR | " + " | ".join(f"{c} R@5" for c in s["categories"])
                + " |\n|---|---|---|" + "---|" * len(s["categories"]) + "\n"
                + f"| sessions | {s['R@5']:.4f} | {s['MRR']:.4f} | "
                + " | ".join(f"{v['R@5']:.3f}" for v in s["categories"].values()) + " |\n")
    return out


def write_json(result: LocomoResult, path: Path, per_query: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(per_query=per_query), indent=2) + "\n", encoding="utf-8")


def write_plot(result: LocomoResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = ["all", *[c for c in CATEGORIES.values() if c in result.systems[MEMORY]["categories"]]]
    names = _order(result)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(names)
    cmap = plt.get_cmap("tab10")
    for i, name in enumerate(names):
        m = result.systems[name]
        ys = [m["recall@10"] if g == "all" else m["categories"].get(g, {}).get("recall@10", 0.0) for g in groups]
        style = {"edgecolor": "black", "linewidth": 1.2} if name == MEMORY else {"hatch": "//"}
        ax.bar([j + i * width for j in range(len(groups))], ys, width, label=system_label(name).replace("*", ""),
               color=cmap(i % 10), **style)
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(groups))])
    ax.set_xticklabels(groups)
    ax.set_ylim(0, 1)
    ax.set_ylabel("evidence recall@10")
    ax.set_title(f"{result.dataset}: {result.questions} questions, {len(result.conversations)} conversations")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
