"""Which prose chunk size (and overlap) retrieves best with the real MiniLM embedder?

BEIR SciFact, TRAIN split (the test split stays untouched for the product's
regression eval). A sample of train queries, every document relevant to them,
and random distractors. SciFact abstracts average ~330 MiniLM tokens (71 % exceed
the 256-token window), so chunking matters even inside one abstract. Two layouts:

- ``stream``: the sampled abstracts, shuffled, laid end to end as one "book"
  (a paragraph per abstract, a page per few abstracts, no headings), chunked by
  `chunk_pages` exactly as a PDF would be, so windows may straddle two abstracts.
  A chunk belongs to the abstract holding most of its characters.
- ``doc``: each abstract chunked on its own.

Document score = max cosine over its chunks; doc-level nDCG@10 per query.
A ``whole`` baseline embeds each abstract as one (truncated) passage.

    .venv/bin/python benchmarks/chunk_size.py   # ~2.2 M tokens embedded: 8 min in bf16 (auto on
                                                # this CPU), 25 min in fp32 on a shared box at load ~6
    .venv/bin/python benchmarks/chunk_size.py --queries 50 --docs 300 --sizes 96,192
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import logging
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from library_pipeline.testing.metrics import ndcg_at_k  # noqa: E402

log = logging.getLogger("benchmarks.chunk_size")
DEFAULT_DATA = REPO.parent / "shared" / "data" / "beir_scifact"


@dataclass
class Data:
    docs: dict[str, str]             # id -> "title\ntext" (whitespace normalised)
    queries: dict[str, str]
    qrels: dict[str, set[str]]


def load_scifact(root: Path, split: str = "train") -> Data:
    docs = {}
    with open(root / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            title, text = " ".join(row["title"].split()), " ".join(row["text"].split())
            docs[str(row["_id"])] = f"{title}\n{text}" if title else text
    with open(root / "queries.jsonl", encoding="utf-8") as fh:
        queries = {str(r["_id"]): r["text"] for r in map(json.loads, fh)}
    qrels: dict[str, set[str]] = {}
    with open(root / "qrels" / f"{split}.tsv", encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if int(row["score"]) > 0 and row["corpus-id"] in docs:
                qrels.setdefault(row["query-id"], set()).add(row["corpus-id"])
    return Data(docs, queries, qrels)


def sample(data: Data, n_queries: int, n_docs: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    qids = sorted(q for q in data.qrels if q in data.queries)
    qids = sorted(rng.sample(qids, min(n_queries, len(qids))), key=int)
    relevant = sorted({d for q in qids for d in data.qrels[q]})
    others = sorted(set(data.docs) - set(relevant))
    distractors = rng.sample(others, max(0, n_docs - len(relevant)))
    doc_ids = relevant + distractors
    rng.shuffle(doc_ids)  # the stream order: a relevant abstract sits between random ones
    return qids, doc_ids


def chunks_stream(data: Data, doc_ids: list[str], docs_per_page: int, count_tokens, size: int, overlap: int,
                  max_tokens: int) -> list[tuple[str, list[str]]]:
    from library_pipeline.ingest.chunking import chunk_pages
    from library_pipeline.ingest.extract import Page

    paras = [data.docs[d] for d in doc_ids]
    pages = [Page(i // docs_per_page + 1, "\n\n".join(paras[i:i + docs_per_page]))
             for i in range(0, len(paras), docs_per_page)]
    joined = "\n\n".join(paras)  # what the chunker sees as one run (no headings)
    starts, pos = [], 0
    for para in paras:
        starts.append(pos)
        pos += len(para) + 2
    chunks = chunk_pages(pages, count_tokens=count_tokens, max_tokens=max_tokens,
                         target_tokens=size, overlap_tokens=overlap)
    out, cursor = [], 0
    for chunk in chunks:
        at = joined.find(chunk.content, cursor)
        if at < 0:
            at = joined.find(chunk.content)
        if at < 0:
            log.warning("chunk %d not found in the stream; skipped", chunk.ordinal)
            continue
        cursor = at + 1
        end = at + len(chunk.content)
        first = bisect.bisect_right(starts, at) - 1
        last = bisect.bisect_right(starts, end - 1) - 1
        # the chunk is a result in its own right: it belongs to the abstract that
        # holds most of it (straddling still costs, through a diluted embedding)
        share = {i: min(end, starts[i] + len(paras[i])) - max(at, starts[i]) for i in range(first, last + 1)}
        out.append((chunk.content, [doc_ids[max(share, key=lambda i: (share[i], -i))]]))
    return out


def chunks_per_doc(data: Data, doc_ids: list[str], count_tokens, size: int, overlap: int,
                   max_tokens: int) -> list[tuple[str, list[str]]]:
    from library_pipeline.ingest.chunking import chunk_pages
    from library_pipeline.ingest.extract import Page

    out = []
    for d in doc_ids:
        for chunk in chunk_pages([Page(1, data.docs[d])], count_tokens=count_tokens, max_tokens=max_tokens,
                                 target_tokens=size, overlap_tokens=overlap):
            out.append((chunk.content, [d]))
    return out


class EmbeddingCache:
    """Identical chunk texts (short abstracts are one chunk at every size) are embedded once."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.vectors: dict[str, np.ndarray] = {}
        self.seconds = 0.0

    def __call__(self, texts: list[str]) -> np.ndarray:
        todo = sorted({t for t in texts if t not in self.vectors})
        if todo:
            started = time.perf_counter()
            for text, vec in zip(todo, self.embedder.encode_passages(todo)):
                self.vectors[text] = vec
            self.seconds += time.perf_counter() - started
        return np.stack([self.vectors[t] for t in texts])


def evaluate(chunks: list[tuple[str, list[str]]], qids: list[str], query_vecs: np.ndarray, data: Data,
             embed: EmbeddingCache, k: int = 10) -> list[float]:
    """Per-query nDCG@k with document score = max over the chunks that touch it."""
    vecs = embed([c for c, _ in chunks])
    sims = query_vecs @ vecs.T  # both sides unit-normalised
    doc_index: dict[str, int] = {}
    owner_rows, owner_cols = [], []
    for col, (_, owners) in enumerate(chunks):
        for d in owners:
            owner_rows.append(doc_index.setdefault(d, len(doc_index)))
            owner_cols.append(col)
    names = list(doc_index)
    rows, cols = np.array(owner_rows), np.array(owner_cols)
    scores = []
    for qi, qid in enumerate(qids):
        doc_scores = np.full(len(names), -np.inf, dtype=np.float32)
        np.maximum.at(doc_scores, rows, sims[qi, cols])
        top = np.argsort(-doc_scores, kind="stable")[:k]
        scores.append(ndcg_at_k([names[i] for i in top], data.qrels[qid], k))
    return scores


def _model_dtype(embedder) -> str:
    try:
        return str(next(embedder._model.parameters()).dtype).replace("torch.", "")
    except Exception:  # another backend: not a torch model
        return "unknown dtype"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--queries", type=int, default=300, help="train queries sampled")
    parser.add_argument("--docs", type=int, default=600, help="documents: all relevant ones plus distractors")
    parser.add_argument("--sizes", default="64,96,128,192,256", help="target tokens, comma-separated")
    parser.add_argument("--overlaps", default="0,0.25", help="overlap as a share of the target (stream)")
    parser.add_argument("--doc-overlaps", default="0.25", help="overlap shares for the per-abstract layout")
    parser.add_argument("--modes", default="stream,doc")
    parser.add_argument("--docs-per-page", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256, help="hard budget per chunk (MiniLM window)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("sentence_transformers", "transformers", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from serving.embedding import load_embedder

    started = time.perf_counter()
    data = load_scifact(args.data)
    qids, doc_ids = sample(data, args.queries, args.docs, args.seed)
    log.info("%d train queries, %d documents (%d relevant)", len(qids), len(doc_ids),
             len({d for q in qids for d in data.qrels[q]}))
    embedder = load_embedder("minilm")  # LIBRARY_EMBED_DTYPE decides fp32 / bf16, as in production
    dtype = _model_dtype(embedder)
    log.info("embedder %s, %s", embedder.name, dtype)
    embed = EmbeddingCache(embedder)
    query_vecs = embedder.encode_queries([data.queries[q] for q in qids])

    results: list[tuple[str, int, int, int, float, list[float]]] = []  # mode, size, overlap, chunks, tokens, per-query
    whole = [(data.docs[d], [d]) for d in doc_ids]
    results.append(("whole", 0, 0, len(whole), 0.0, evaluate(whole, qids, query_vecs, data, embed)))
    sizes = [int(s) for s in args.sizes.split(",")]
    for mode in args.modes.split(","):
        overlaps = [float(o) for o in (args.overlaps if mode == "stream" else args.doc_overlaps).split(",")]
        for size in sizes:
            for share in overlaps:
                overlap = int(round(size * share))
                t0 = time.perf_counter()
                if mode == "stream":
                    chunks = chunks_stream(data, doc_ids, args.docs_per_page, embedder.count_tokens, size, overlap,
                                           args.max_tokens)
                else:
                    chunks = chunks_per_doc(data, doc_ids, embedder.count_tokens, size, overlap, args.max_tokens)
                chunk_s = time.perf_counter() - t0
                mean_tokens = float(np.mean([embedder.count_tokens(c) for c, _ in chunks]))
                per_query = evaluate(chunks, qids, query_vecs, data, embed)
                results.append((mode, size, overlap, len(chunks), mean_tokens, per_query))
                log.info("%-6s size %3d overlap %3d: %5d chunks (mean %.0f tokens), nDCG@10 %.4f "
                         "(chunking %.1fs, embedding so far %.0fs)", mode, size, overlap, len(chunks), mean_tokens,
                         float(np.mean(per_query)), chunk_s, embed.seconds)

    print(f"\nBEIR SciFact train: {len(qids)} queries, {len(doc_ids)} docs, seed {args.seed}, "
          f"all-MiniLM-L6-v2 ({dtype}), doc score = max over chunks")
    print(f"{'mode':<7}{'target':>7}{'overlap':>8}{'chunks':>8}{'tokens':>8}{'nDCG@10':>9}{'Δ best':>9}{'±SE':>7}")
    for mode in dict.fromkeys(r[0] for r in results):
        rows = [r for r in results if r[0] == mode]
        best = max(rows, key=lambda r: np.mean(r[5]))
        for r in rows:
            diff = np.array(r[5]) - np.array(best[5])
            se = float(np.std(diff, ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else 0.0
            print(f"{r[0]:<7}{r[1] or '-':>7}{r[2]:>8}{r[3]:>8}{r[4]:>8.0f}{np.mean(r[5]):>9.4f}"
                  f"{np.mean(diff):>+9.4f}{se:>7.4f}")
    print(f"total {time.perf_counter() - started:.0f}s, embedding {embed.seconds:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
