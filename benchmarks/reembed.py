"""Re-embed migration figures: throughput, switch time, search latency
while a migration runs, and the cost of switching back.

    .venv/bin/python benchmarks/reembed.py [--batch 256]

A fresh embedded database under a temp LIBRARY_HOME: the Federal Register
ground-truth text, its PDF and Alice in Wonderland (EPUB) (../shared/data) go through the real ingest
steps with MiniLM, the memory eval set's artifacts through index_memory; then
MiniLM -> paraphrase-MiniLM-L3-v2 (ONNX) and back.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from library_pipeline.ingest.store import chunk_step, embed_step, extract_step, register_files
from library_pipeline.eval.memory_eval import load_artifacts, load_memory_set
from library_pipeline.migrate.embedder import EmbedderSpec, run, start
from serving.db import Database
from serving.embedding import load_embedder
from serving.search import SearchConfig, search
from serving.settings import Settings

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
QUERIES = ["comment period for the proposed rule", "how do I host my site", "the Mad Hatter tea party",
           "Federal Register notice docket number"]
CFG = SearchConfig(rerank=False, log_queries=False, label="bench")


def search_ms(db: Database, embedder) -> list[float]:
    out = []
    with db.connect() as conn:
        for q in QUERIES:
            t = time.perf_counter()
            resp = search(conn, embedder, q, top_k=10, config=CFG)
            out.append((time.perf_counter() - t) * 1000)
            assert resp.results, q
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    home = Path(tempfile.mkdtemp(prefix="reembed-bench-"))
    home.chmod(0o755)
    lib = home / "library"
    lib.mkdir()
    files = {"federal-register.txt": DATA / "documents/pdf_scanned/"
                                             "federal-register-2020-17221_rasterized-p1-3.groundtruth.txt",
             "federal-register.pdf": DATA / "documents/pdf/federal-register-2020-17221.pdf",
             "alice.epub": DATA / "documents/epub/pg11-alice-in-wonderland.epub"}
    for name, src in files.items():
        shutil.copy(src, lib / name)
    db = Database(Settings(library_dir=lib, home=home))
    try:
        db.ensure_schema()
        minilm, onnx = load_embedder("minilm"), load_embedder("onnx")
        t = time.perf_counter()
        keys = register_files(db, {n: lib / n for n in files})
        for key in keys.values():
            extract_step(db, lib, key)
            chunk_step(db, key, minilm)
            embed_step(db, key, minilm)
        with db.connect() as conn:
            load_artifacts(conn, minilm, load_memory_set())
            total = conn.execute("SELECT count(*) FROM passages").fetchone()[0]
        print(f"corpus: {total} passages (ingest + memories with MiniLM: {time.perf_counter() - t:.1f}s)")
        before = search_ms(db, minilm)

        during: list[float] = []
        start(db, EmbedderSpec("onnx"), batch_size=args.batch, embedder=onnx)
        t = time.perf_counter()
        out = run(db, embedder=onnx, on_batch=lambda res, left: during.extend(search_ms(db, minilm)))
        wall = time.perf_counter() - t
        searching = sum(during) / 1000
        print(f"MiniLM -> ONNX L3: {out['embedded']} embedded, {out['reused']} reused in {out['batches']} batches; "
              f"wall {wall:.1f}s incl. {searching:.1f}s of test searches -> "
              f"{total / (wall - searching):.1f} passages/s; switch transaction {out['switch_seconds']}s")
        after = search_ms(db, onnx)
        print(f"search p50 ms: before {statistics.median(before):.1f}, during migration "
              f"{statistics.median(during):.1f} (MiniLM, old model), after switch {statistics.median(after):.1f} (ONNX)")

        start(db, EmbedderSpec("minilm"), batch_size=args.batch, embedder=minilm)
        t = time.perf_counter()
        back = run(db, embedder=minilm)
        print(f"switch back to MiniLM: {back['embedded']} embedded (kept vectors reused), "
              f"{time.perf_counter() - t:.1f}s in all")
    finally:
        db.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
