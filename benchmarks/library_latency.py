"""Search latency on a user's library as agents are served: each question of a question
file through `serving.search.search` with the shipped configuration (summaries on, the
vector stage on a second connection as the MCP server runs it), warm, twice over.

    .venv/bin/python benchmarks/library_latency.py --home HOME QUESTIONS

HOME: a library home already ingested (`benchmarks/ingest.py --keep HOME`); QUESTIONS: a
question file (`library eval library`'s format). Prints p50 / p95 / max of the wall time
and the p50 of each stage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import time
from pathlib import Path

from library_pipeline.eval.library_questions import AS_AN_AGENT, load_questions
from library_pipeline.eval.locomo import percentile
from serving.db import Database
from serving.embedding import load_embedder, multilingual_embedder
from serving.search import SearchConfig, search
from serving.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("questions", type=Path)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    settings = dataclasses.replace(Settings.from_env(), home=args.home, library_dir=args.home / "library",
                                   db_dsn=None)
    db = Database(settings)
    embedder = load_embedder(settings.embed_backend, settings.embed_model, dims=settings.embed_dims)
    multilingual_embedder()
    questions = [q.text for q in load_questions(args.questions)]
    config = SearchConfig(log_queries=False)
    wall: list[float] = []
    stages: dict[str, list[float]] = {}
    with db.connect() as conn, db.connect() as spare, db.connect() as third:
        side = (spare, third)   # as serving.runtime lends them
        with conn.transaction():
            passages = conn.execute("SELECT count(*) FROM passages WHERE summary_level = 0").fetchone()[0]
        search(conn, embedder, questions[0], filters=AS_AN_AGENT, config=config, side=side)   # caches
        for _ in range(args.rounds):
            for text in questions:
                started = time.perf_counter()
                resp = search(conn, embedder, text, filters=AS_AN_AGENT, config=config, side=side)
                wall.append((time.perf_counter() - started) * 1000)
                for stage, ms in resp.timings.items():
                    stages.setdefault(stage, []).append(ms)
    db.stop()
    figures = {"passages": passages, "searches": len(wall), "p50_ms": round(statistics.median(wall), 1),
               "p95_ms": percentile(wall, 0.95), "max_ms": round(max(wall), 1),
               "stage_p50_ms": {k: round(statistics.median(v), 1) for k, v in stages.items()},
               "cpu_count": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
