"""The ingest stage: extracted_text -> chunks -> embeddings, one dynamic
partition per library file.

Every asset has `BackfillPolicy.single_run()`, so a backfill, a sensor range
request or `library ingest` runs many files in ONE run: measured here, a run
costs ~0.5 s in-process (~8 s per partition with the CLI's multiprocess
executor) before any work, against ~60-75 ms per extra partition inside a
range run. Inside a run each file is independent: a bad file is recorded as
failed with its reason and the others go on. A run of a single file that
fails raises, so that partition shows red in the UI with the reason.
"""


import logging
from collections.abc import Callable

import dagster as dg

from library_pipeline.launch import plans as launch
from library_pipeline.defs.ingest.partitions import library_files_partitions
from library_pipeline.ingest.batching import BatchedEmbedder, batched_writer, embed_groups, prefetch
from library_pipeline.documents import StepResult, record_failure_by_key
from library_pipeline.ingest.store import ReusedConnection, chunk_step, embed_step, extract_step
from library_pipeline.resources import EmbedderResource, LibraryDatabase
from serving.db import Database

progress_log = logging.getLogger("library_pipeline.progress")
# per encoded piece (32 passages), at DEBUG: `library ingest` turns it on for its bar
passages_log = logging.getLogger("library_pipeline.progress.passages")

OWNERS = ["team:library"]


# Rows of the per-file table in a step's metadata. A range run writes one
# materialization per partition, each carrying the whole range's metadata: with 200
# rows, a 200-file range stored 600 copies of a ~20 KB table in the event log.
# Failures are listed in full below it.
PER_FILE_ROWS = 40


class IngestConfig(dg.Config):
    force: bool = False  # redo the step even when the file and model are unchanged


def report_files(context: dg.AssetExecutionContext, step: str, results: list[StepResult],
                 extra: Callable[[list[StepResult]], dict] | None = None) -> dg.MaterializeResult:
    failed = [r for r in results if r.status == "failed"]
    if failed and len(results) == 1:
        r = failed[0]
        raise dg.Failure(description=f"{r.path or r.key}: {r.reason}",
                         metadata={"path": r.path or "", "reason": r.reason or ""})
    rows = ["| file | status | detail |", "|---|---|---|"]
    for r in results[:PER_FILE_ROWS]:
        detail = r.reason or ", ".join(f"{k}={v}" for k, v in r.figures.items())
        rows.append(f"| {(r.path or r.key).replace('|', '/')} | {r.status} | {detail.replace('|', '/')} |")
    if len(results) > PER_FILE_ROWS:
        rows.append(f"| … {len(results) - PER_FILE_ROWS} more | | |")
    metadata: dict = {
        "files": len(results),
        "processed": sum(r.status == "ok" for r in results),
        "skipped": sum(r.status == "skipped" for r in results),
        "failed": len(failed),
        "seconds": round(sum(r.figures.get("seconds", 0.0) for r in results), 3),
        "per_file": dg.MetadataValue.md("\n".join(rows)),
    }
    if failed:
        metadata["failures"] = dg.MetadataValue.md(
            "\n".join(f"- `{r.path or r.key}`: {r.reason}" for r in failed[:100]))
        context.log.warning(f"{step}: {len(failed)} file(s) failed: "
                            + "; ".join(f"{r.path}: {r.reason}" for r in failed[:10]))
    if extra:
        metadata.update(extra(results))
    return dg.MaterializeResult(metadata=metadata)


def each_file(context: dg.AssetExecutionContext, step: str, fn: Callable[[str], StepResult],
              db: Database | None = None, keys: list[str] | None = None, done: int = 0,
              total: int | None = None) -> list[StepResult]:
    results = []
    keys = context.partition_keys if keys is None else keys
    total = len(keys) if total is None else total
    for n, key in enumerate(keys, done + 1):
        try:
            result = fn(key)
        except Exception as exc:
            # one file's unforeseen error (a file name with bytes Postgres cannot
            # store raised UnicodeEncodeError) used to fail the whole range run and
            # leave every other file in it pending (benchmarks/hostile_corpus.py)
            context.log.error(f"{step} {key}: unexpected {type(exc).__name__}: {exc}")
            reason = f"internal error in {step} ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
            result = StepResult(key, status="failed", reason=reason)
            if db is not None:
                result.path = record_failure_by_key(db, key, reason)
        results.append(result)
        progress_log.info("%s %d/%d %s %s", step, n, total, result.status, result.path or key,
                          extra={"step": step, "key": key, "status": result.status,
                                 "chunks": result.figures.get("chunks", 0)})
    return results


def _passage_progress(writer) -> Callable:
    """Progress in passages: the texts encoded by the model that reads every passage (the
    multilingual one when it is on), so a long novel's encode moves the bar."""
    counted = (writer.multi or writer.primary).name

    def encoded(model, n: int) -> None:
        # a batched lane answering from vectors encoded ahead reports its real encodes itself
        if model.name == counted and not isinstance(model, BatchedEmbedder):
            passages_log.debug("%d passages encoded by %s", n, model.name, extra={"encoded": n})
    return encoded


def sum_of(field: str) -> Callable[[list[StepResult]], int]:
    return lambda results: sum(int(r.figures.get(field, 0)) for r in results)


@dg.asset(
    partitions_def=library_files_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="ingest",
    kinds={"python", "postgres", "pdf"},
    owners=OWNERS,
    description="Text of each page (PDF, with OCR for image-only pages), spine item (EPUB) or file "
                "(txt/md), with the outline, language and text-search configuration. Rows: `pages`.",
)
def extracted_text(context: dg.AssetExecutionContext, config: IngestConfig,
                   library_db: LibraryDatabase) -> dg.MaterializeResult:
    s = library_db.settings
    with ReusedConnection(library_db.get()) as db:
        results = each_file(context, "extract", lambda key: extract_step(
            db, s.library_dir, key, ocr_languages=s.ocr_languages, max_bytes=s.max_file_bytes,
            force=config.force), db=db)
    return report_files(context, "extract", results, lambda rs: {
        "pages": sum_of("pages")(rs), "ocr_pages": sum_of("ocr_pages")(rs), "chars": sum_of("chars")(rs),
        "languages": ", ".join(sorted({str(r.figures["language"]) for r in rs if "language" in r.figures})) or "-",
    })


@dg.asset(
    deps=[extracted_text],
    partitions_def=library_files_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="ingest",
    kinds={"python", "postgres"},
    owners=OWNERS,
    description="Structure-aware chunks sized to the embedder's window: front-matter TOC runs kept "
                "whole, prose in overlapping windows, each with its pages and heading. Rows: `chunks`.",
)
def chunks(context: dg.AssetExecutionContext, config: IngestConfig, library_db: LibraryDatabase,
           embedder: EmbedderResource) -> dg.MaterializeResult:
    model = embedder.get(library_db.get())
    with ReusedConnection(library_db.get()) as db:
        results = each_file(context, "chunk", lambda key: chunk_step(db, key, model, force=config.force), db=db)
    return report_files(context, "chunk", results, lambda rs: {
        "chunks": sum_of("chunks")(rs), "toc_chunks": sum_of("toc_chunks")(rs)})


@dg.asset(
    deps=[chunks],
    partitions_def=library_files_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="ingest",
    kinds={"python", "postgres", "pgvector"},
    owners=OWNERS,
    description="Chunks embedded (title as contextual prefix) and swapped in as the file's live "
                "passages in one transaction; unchanged passages keep their vectors. Rows: `passages`.",
)
def embeddings(context: dg.AssetExecutionContext, config: IngestConfig, library_db: LibraryDatabase,
               embedder: EmbedderResource) -> dg.MaterializeResult:
    model = embedder.get(library_db.get())
    writer, lanes = batched_writer(model)
    batched = writer.primary
    writer.on_encoded = _passage_progress(writer)
    for lane, _ in lanes:
        lane.on_encoded = writer.on_encoded
    keys = context.partition_keys
    results: list[StepResult] = []
    batch_seconds = 0.0  # both lanes' encodes ahead, side by side: wall time, counted once
    with ReusedConnection(library_db.get()) as db:
        try:
            groups = embed_groups(db, keys)
        except Exception as exc:  # batching is an optimisation: never a reason to fail files
            context.log.warning(f"embed: cannot group files for batching ({type(exc).__name__}: {exc}); "
                                "embedding file by file")
            groups = [[key] for key in keys]
        for group in groups:
            # the group's new texts in one encode call per model, then each file
            # embedded (from those vectors) and swapped in its own transaction as before
            try:
                batch_seconds += prefetch(db, group, lanes, force=config.force, writer=writer)
            except Exception as exc:
                context.log.warning(f"embed: batch encode failed ({type(exc).__name__}: {exc}); "
                                    "embedding these files one by one")
                for lane, _ in lanes:
                    lane.clear()
            results += each_file(context, "embed",
                             lambda key: embed_step(db, key, model, force=config.force, writer=writer),
                             db=db, keys=group, done=len(results), total=len(keys))
            for lane, _ in lanes:
                lane.clear()
    embed_seconds = sum(r.figures.get("embed_seconds", 0.0) for r in results) + batched.seconds
    embedded = sum_of("embedded")(results)
    multi_seconds = sum(r.figures.get("embed_seconds_multilingual", 0.0) for r in results)
    if writer.multi is not None:
        multi_seconds += writer.multi.seconds
    multi_embedded = sum_of("embedded_multilingual")(results)
    multi = next((r.figures["multilingual_model"] for r in results if "multilingual_model" in r.figures), None)
    return report_files(context, "embed", results, lambda rs: {
        "passages": sum_of("passages")(rs), "embedded": embedded, "reused": sum_of("reused")(rs),
        "model": model.name, "dims": model.dims,
        "seconds": round(sum(r.figures.get("seconds", 0.0) for r in rs) + batch_seconds, 3),
        "batched_encode_calls": batched.calls,
        "batched_encode_calls_multilingual": writer.multi.calls if writer.multi is not None else 0,
        "embed_passages_per_s": round(embedded / embed_seconds, 1) if embed_seconds else 0.0,
        # the second vector lane (serving.passage_writer); "off" when LIBRARY_EMBED_MULTILINGUAL=off
        "multilingual_model": multi or "off", "embedded_multilingual": multi_embedded,
        "multilingual_passages_per_s": round(multi_embedded / multi_seconds, 1) if multi_seconds else 0.0,
    })


INGEST_FAILURES_SQL = """
SELECT path, error FROM documents WHERE source = 'library' AND status = 'failed' ORDER BY path
"""


@dg.asset_check(asset=embeddings, description="Files that could not be ingested, with their reasons.",
                blocking=False)
def no_failed_files(library_db: LibraryDatabase) -> dg.AssetCheckResult:
    with library_db.get().connect() as conn:
        rows = conn.execute(INGEST_FAILURES_SQL).fetchall()
    return dg.AssetCheckResult(
        passed=not rows, severity=dg.AssetCheckSeverity.WARN,
        metadata={"failed_files": len(rows),
                  "failures": dg.MetadataValue.md("\n".join(f"- `{p}`: {e}" for p, e in rows[:100]) or "none")})


@dg.asset_check(asset=embeddings, description="Every live passage is embedded with the configured model "
                                              "(mixed-model rows are never compared; stale ones are unsearchable).")
def passages_use_current_model(library_db: LibraryDatabase, embedder: EmbedderResource) -> dg.AssetCheckResult:
    db = library_db.get()
    name = embedder.get(db).name
    with db.connect() as conn:
        stale, total = conn.execute(
            "SELECT count(*) FILTER (WHERE embed_model IS DISTINCT FROM %s "
            # no primary vector is right for a passage that model cannot read, which the
            # multilingual model embedded instead (serving.passage_writer)
            "OR (embedding IS NULL AND embedding_multi IS NULL)), count(*) "
            "FROM passages WHERE source = 'library' AND NOT removed", (name,)).fetchone()
    return dg.AssetCheckResult(passed=stale == 0, metadata={"stale_passages": stale, "passages": total,
                                                           "model": name})


ingest_job = dg.define_asset_job(
    launch.INGEST_JOB,
    selection=dg.AssetSelection.assets(extracted_text, chunks, embeddings),
    description="Extract, chunk and embed library files (one partition per file; ranges run as one run).",
)
