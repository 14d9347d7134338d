"""Agent-memory speed with 100k memories stored: index and search p50/p95.

    .venv/bin/python benchmarks/memory.py                 # 100k memories, embedded Postgres in --home
    .venv/bin/python benchmarks/memory.py --rows 20000    # quicker

The 100k stored memories are bulk-loaded, not indexed one by one (embedding 100k
texts with MiniLM on 2 cores takes over an hour): each is a BEIR SciFact abstract
(first 600 characters) with ~10% of its words dropped, and a perturbed real
vector (the abstract's MiniLM vector + Gaussian noise sigma 0.02/dim,
re-normalised; cosine ~0.93 to the original). Real vectors come from the
SciFact embedding cache of benchmarks/search.py when present, else 1,000
abstracts are embedded here. Scopes: 70% global, 20% department (10
departments), 10% self (50 agents); content_hash through the schema's
memory_content_hash. Then, through the functions the MCP tools call
(serving.memory.index_memory / search_memory, real MiniLM, no cross-encoder):

- index of a ~2,000-token artifact (unique text each time; chunked into ~9
  passages, embedded, stored in one transaction) - the issue's budget is
  p95 <= 200 ms on 2 cores; the spec's < 10 s;
- index of a short (~60-token) artifact;
- exact-duplicate index (same text again: no embedding);
- search as an agent (visibility in SQL), SciFact's real queries, top_k 5.

Figures (2026-11-30, the 2-core box shared with other engineers' eval runs and
Dagster benchmarks, load average 5-7; MiniLM bf16, 1 torch thread as the serving
process uses; 100,000 bulk-loaded memories + those the runs indexed). Run 1:
fresh load; run 2: `--reuse` of the same database, with the stage breakdown:

                                   run 1 p50 / p95     run 2 p50 / p95
  index, ~2,000 tokens (9 passages)   579 /  638 ms       594 /  923 ms
     of which (run 2, p50)            chunk 3.6, embed 550, write 36 ms
  index, short (~60 tokens)            44 /   57 ms        43 /  106 ms
  index, exact duplicate (no embed)     7 /   16 ms         6 /   18 ms
  search, top_k 5 (200 queries)        68 /  107 ms        93 /  164 ms
  search, scope department only     mean 151 ms, 5/5    mean 132 ms, 5/5 returned
  bulk load 100k: 82 s COPY, GIN 4.7 s, HNSW 34 s

Reading (first round): the issue's "p95 <= 200 ms for a 2,000-token artifact" was NOT met
on the loaded box: 92% of the time is MiniLM embedding nine 256-token windows; the store's
own work (chunk + dedup check + one transaction writing the memory and 9 passages into the
100k-row HNSW and GIN) is ~40 ms.

Second round (2026-11-30 evening, the box otherwise idle, load average < 1; 100k memories,
40 index runs, 200 searches; `--reuse` runs of the same database):

                                   1 torch thread     2 threads (env)    shipped (wide_threads)
  index, ~2,000 tokens (9 passages)   259 / 275 ms       165 / 188 ms       162 / 174, 167 / 183 ms
     of which embed (p50)             235 ms             142 ms             139, 144 ms
  index, short (~60 tokens)            19 /  21 ms        16 /  21 ms        18 /  22 ms
  search, top_k 5                      41 /  61 ms        48 /  66 ms        54 /  69, 59 / 74 ms

So serving.threads widens torch to all cores for one multi-window batch while the load
average says the cores are free, and keeps one thread for queries (the loaded-box finding
above still holds: 2 threads made a query 40x slower when an ingest shared the cores). The
goal holds on an idle 2-core box: p95 174-183 ms. Search drifted 41 -> 59 ms p50 over the four
back-to-back runs, whose searches each add access-log rows and memory updates; it is not the
thread policy (queries never widen).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from pgvector import HalfVector

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from serving.db import Database  # noqa: E402
from serving.embedding import load_embedder  # noqa: E402
from serving.memory import Viewer, index_memory, search_memory  # noqa: E402
from serving.threads import limit_torch_threads  # noqa: E402
from serving.search.types import SearchConfig  # noqa: E402
from serving.settings import Settings  # noqa: E402

log = logging.getLogger("bench.memory")
SHARED = Path(os.environ.get("LIBRARY_SHARED_DATA", REPO.parent / "shared" / "data"))
VECTOR_CACHE = Path("/tmp/library-bench/scifact_5183_sentence_transformers_all_minilm_l6_v2.npy")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))]


def summary(values: list[float]) -> dict:
    return {"p50_ms": round(pct(values, 50), 1), "p95_ms": round(pct(values, 95), 1),
            "max_ms": round(max(values), 1), "n": len(values)}


def fresh_database(server: Database, name: str, reuse: bool = False) -> tuple[Database, bool]:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        exists = bool(conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone())
        if not (reuse and exists):
            conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                psycopg.sql.Identifier(name)))
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(server.dsn)
    info["dbname"] = name
    db = Database(dataclasses.replace(server.settings, db_dsn=psycopg.conninfo.make_conninfo(**info)))
    db.ensure_schema()
    return db, reuse and exists


def load_scifact(embedder) -> tuple[list[dict], np.ndarray, list[str]]:
    docs = [json.loads(line) for line in open(SHARED / "beir_scifact" / "corpus.jsonl", encoding="utf-8")]
    queries = [json.loads(line)["text"] for line in open(SHARED / "beir_scifact" / "queries.jsonl", encoding="utf-8")]
    if VECTOR_CACHE.exists() and len(np.load(VECTOR_CACHE, mmap_mode="r")) == len(docs):
        return docs, np.load(VECTOR_CACHE), queries
    docs = docs[:1000]
    log.info("embedding %d abstracts (no cache at %s)", len(docs), VECTOR_CACHE)
    texts = [f"{d['title']}\n{d['text']}" for d in docs]
    return docs, np.concatenate([embedder.encode_passages(texts[i:i + 128]) for i in range(0, len(texts), 128)]), queries


def bulk_load(db: Database, embedder, docs: list[dict], vectors: np.ndarray, rows: int) -> dict:
    rng = np.random.default_rng(20261130)
    started = time.perf_counter()
    words = [d["text"][:600].split() for d in docs]
    with db.connect() as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("DROP INDEX IF EXISTS passages_tsv_idx")
        meta_rows, passage_rows = [], []
        for i in range(rows):
            src = i % len(docs)
            keep = rng.random(len(words[src])) > 0.10
            text = " ".join(w for w, k in zip(words[src], keep) if k) + f" (note {i})"
            r = rng.random()
            if r < 0.7:
                scope, agent, dept = "global", f"agent-{i % 50}", f"dept-{i % 10}"
            elif r < 0.9:
                scope, agent, dept = "department", f"agent-{i % 50}", f"dept-{i % 10}"
            else:
                scope, agent, dept = "self", f"agent-{i % 50}", f"dept-{i % 10}"
            vec = vectors[src] + rng.normal(0.0, 0.02, vectors.shape[1])
            vec = (vec / np.linalg.norm(vec)).astype(np.float32)
            meta_rows.append((i + 1, f"bulk-{i}", agent, dept, scope, "finding", text))
            passage_rows.append((text, f"h{i}", HalfVector(vec), embedder.name, scope, agent, dept, i + 1))
        with conn.cursor() as cur, cur.copy("COPY memories (id, artifact_id, agent, department, scope, type, content, "
                                            "content_hash) FROM STDIN") as copy:
            for row in meta_rows:
                copy.write_row((*row, "pending"))
        conn.execute("UPDATE memories SET content_hash = memory_content_hash(content)")
        conn.execute("SELECT setval(pg_get_serial_sequence('memories', 'id'), %s)", (rows,))
        with conn.cursor() as cur, cur.copy(
                "COPY passages (source, kind, ordinal, content, content_hash, ts_config, embedding, embed_model, "
                "scope, agent, department, memory_id) FROM STDIN") as copy:
            for text, h, vec, model, scope, agent, dept, mid in passage_rows:
                copy.write_row(("memory", "memory", 0, text, h, "english", vec, model, scope, agent, dept, mid))
        loaded = time.perf_counter() - started
        t = time.perf_counter()
        conn.execute("CREATE INDEX IF NOT EXISTS passages_tsv_idx ON passages USING gin (tsv)")
        gin = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute("SELECT ensure_vector_indexes(%s, %s)", (embedder.name, embedder.dims))
        hnsw = time.perf_counter() - t
        conn.commit()
    with db.connect(autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE passages")
        conn.execute("VACUUM ANALYZE memories")
        from serving.lexemes import refresh_lexeme_df

        refresh_lexeme_df(conn)
    return {"rows": rows, "load_s": round(loaded, 1), "gin_s": round(gin, 1), "hnsw_s": round(hnsw, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--index-runs", type=int, default=40)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--home", type=Path, default=Path("/tmp/library-memory-bench"))
    parser.add_argument("--reuse", action="store_true", help="Keep the stored memories of a previous run "
                                                             "(index timings then run on top of its additions).")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.home.mkdir(parents=True, exist_ok=True)
    args.home.chmod(0o755)
    server = Database(Settings(library_dir=args.home / "library", home=args.home))
    embedder = load_embedder("minilm")
    limit_torch_threads()
    docs, vectors, queries = load_scifact(embedder)
    db, reused = fresh_database(server, "memory_bench", args.reuse)
    results: dict = {"embedder": embedder.name,
                     "build": "reused" if reused else bulk_load(db, embedder, docs, vectors, args.rows)}
    run = f"{time.time():.0f}"
    log.info("built %s", results["build"])
    rng = np.random.default_rng(7)
    viewer = Viewer("agent-7", "dept-7")
    cfg = SearchConfig(title=False, structure=False, summaries=False, rerank=False, log_queries=False, label="bench")
    with db.connect(autocommit=True) as conn:
        # warm-up: model, pool pages, the first ensure_vector_indexes
        index_memory(conn, embedder, viewer, artifact_id="warm", content="warm-up artifact", scope="self")
        search_memory(conn, embedder, viewer, "warm-up query", config=cfg)
        long_times, chunks, short_times, dup_times, stages = [], [], [], [], []
        for i in range(args.index_runs):
            picks = rng.choice(len(docs), 40, replace=False)
            text = " ".join(docs[j]["text"] for j in picks)
            ids = embedder.tokenizer(text, add_special_tokens=False)["input_ids"]
            text = embedder.tokenizer.decode(ids[:2000]) + f" [run {run}-{i}]"
            r = index_memory(conn, embedder, viewer, artifact_id=f"long-{run}-{i}", content=text, scope="department",
                             meta={"type": "report", "task_id": f"t{i}"})
            long_times.append(r.ms)
            stages.append(r.timings or {})
            chunks.append(r.chunks)
            s = index_memory(conn, embedder, viewer, artifact_id=f"short-{run}-{i}", scope="self",
                             content=docs[int(picks[0])]["text"][:300] + f" [short {run}-{i}]")
            short_times.append(s.ms)
            d = index_memory(conn, embedder, viewer, artifact_id=f"dup-{run}-{i}", scope="department", content=text)
            assert d.status == "duplicate"
            dup_times.append(d.ms)
        results["index_2000_tokens"] = {**summary(long_times), "chunks": int(np.median(chunks)),
                                        "stages_p50_ms": {k: round(pct([s[k] for s in stages if k in s], 50), 1)
                                                          for k in ("chunk", "embed", "write")}}
        results["index_short"] = summary(short_times)
        results["index_exact_duplicate"] = summary(dup_times)
        search_times, returned = [], []
        for q in queries[: args.queries]:
            t = time.perf_counter()
            out = search_memory(conn, embedder, viewer, q, top_k=5, config=cfg)
            search_times.append((time.perf_counter() - t) * 1000)
            returned.append(out["returned"])
        results["search_top5"] = {**summary(search_times), "mean_returned": round(float(np.mean(returned)), 2)}
        t = time.perf_counter()
        cross = [search_memory(conn, embedder, viewer, q, top_k=5, config=cfg,
                               filter={"scope": "department"})["returned"] for q in queries[:50]]
        results["search_department_only"] = {"mean_ms": round((time.perf_counter() - t) * 20, 1),
                                             "mean_returned": round(float(np.mean(cross)), 2)}
    print(json.dumps(results, indent=2))
    (args.home / "memory_bench.json").write_text(json.dumps(results, indent=2))
    server.stop()


if __name__ == "__main__":
    main()
