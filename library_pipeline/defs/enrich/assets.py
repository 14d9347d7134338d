"""The enrich stage (group "enrich"): `raptor_tree` and `knowledge_graph`, per
library file, downstream of `embeddings`.

Both follow ingestion by themselves: an eager automation condition requests a
file's partition when its `embeddings` partition is materialised (a new file,
a changed file, a re-ingest) and the automation sensor (running by default,
library_pipeline.defs.enrich) launches it. They run in the enrich pool and
lane (one slot each, library_pipeline.instance.home), so enrichment never
starves ingestion on 2 cores, and both have `BackfillPolicy.single_run()`, so
the files one tick requests are one run (~0.5 s of run overhead, not ~0.5 s
per file). An unchanged file skips in milliseconds (tree current, graph
current), so a re-ingest that changed nothing costs nothing here.

No `from __future__ import annotations`: Dagster inspects Config and resource
annotations at definition time.
"""

import dagster as dg
from pydantic import Field

from library_pipeline.defs.enrich.resources import GeneratorResource
from library_pipeline.defs.ingest.assets import OWNERS, each_file, embeddings, report_files, sum_of
from library_pipeline.defs.ingest.partitions import library_files_partitions
from library_pipeline.enrich.kg_store import collect_orphans, kg_step
from library_pipeline.enrich.raptor import raptor_step
from library_pipeline.resources import EmbedderResource, LibraryDatabase
from library_pipeline.launch.run_plan import ENRICH_LANE, ENRICH_POOL

GROUP = "enrich"
# Dagster's eager() plus the backlog: eager() requests only partitions that become
# missing after its first evaluation, and `library up` ingests the library before the
# daemon's first tick, so with eager() alone a fresh library was never enriched
# (measured: 0 partitions requested). On the first evaluation every file still
# missing its tree / graph is requested too. Then: new files and files whose
# passages changed (their embeddings partition materialised), never while the
# file's ingest is in progress or before it has passages.
_ = dg.AutomationCondition
FOLLOWS_INGEST = (
    _.in_latest_time_window()
    # since(...) rather than since_last_handled(): the latter counts the initial
    # evaluation as handled, which is what drops the backlog
    & (_.newly_missing() | _.any_deps_updated() | (_.missing() & _.initial_evaluation())).since(
        _.newly_requested() | _.newly_updated())
    & ~_.any_deps_missing()
    & ~_.any_deps_in_progress()
    & ~_.in_progress()
).with_label("follows ingest")


class RaptorConfig(dg.Config):
    force: bool = Field(default=False, description="Rebuild even when the tree is current.")


class GraphConfig(dg.Config):
    # Automated runs take the defaults and no later run is requested for a file left
    # unfinished, so the default covers a whole library of books in one run (the
    # example library: ~2,600 passages); the nightly schedule and the CLI set their own.
    budget: int = Field(default=50000, description="Passages extracted per run, over all files of the run; "
                                                   "files not finished resume in the next run.")
    batch: int = Field(default=200, description="Passages per committed batch (progress saved with each).")
    restart: bool = Field(default=False, description="Forget progress and extract the files again.")


@dg.asset(
    deps=[embeddings],
    partitions_def=library_files_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name=GROUP,
    kinds={"python", "postgres", "pgvector", "scikitlearn"},
    owners=OWNERS,
    op_tags=ENRICH_LANE,
    pool=ENRICH_POOL,
    automation_condition=FOLLOWS_INGEST,
    description="RAPTOR summary tree per file: k-means clusters of the passage embeddings (~16 per cluster, "
                "<= 3 levels), each summarised (extractive offline, abstractive with an LLM backend), embedded "
                "and stored as passages with summary_level > 0, replaced in one transaction.",
)
def raptor_tree(context: dg.AssetExecutionContext, config: RaptorConfig, library_db: LibraryDatabase,
                embedder: EmbedderResource, llm: GeneratorResource) -> dg.MaterializeResult:
    db, generator = library_db.get(), llm.get()
    model = embedder.get(db)
    results = each_file(context, "raptor", lambda key: raptor_step(db, key, model, generator, force=config.force))
    seconds = sum(r.figures.get("summarise_seconds", 0.0) for r in results)
    made = sum_of("summaries")(results)
    return report_files(context, "raptor", results, lambda rs: {
        "summaries": made, "passages": sum_of("passages")(rs),
        "sentences_embedded": sum_of("sentences_embedded")(rs),
        "summariser": generator.name if generator else "extractive", "model": model.name,
        "summaries_per_s": round(made / seconds, 2) if seconds else 0.0,
    })


@dg.asset(
    deps=[embeddings],
    partitions_def=library_files_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name=GROUP,
    kinds={"python", "postgres", "spacy"},
    owners=OWNERS,
    op_tags=ENRICH_LANE,
    pool=ENRICH_POOL,
    automation_condition=FOLLOWS_INGEST,
    description="Knowledge graph per file, incremental: at most `budget` passages per run, each batch committed "
                "with its progress (kg_progress). Entities and relations mapped onto the closed ontology "
                "(serving/ontology.py); names resolved across files (normalised exact, then edit distance <= 2).",
)
def knowledge_graph(context: dg.AssetExecutionContext, config: GraphConfig, library_db: LibraryDatabase,
                    llm: GeneratorResource) -> dg.MaterializeResult:
    db, generator = library_db.get(), llm.get()
    orphans = collect_orphans(db)
    remaining = [config.budget]

    def one(key: str):
        result = kg_step(db, key, generator, budget=remaining[0], batch=config.batch, restart=config.restart)
        remaining[0] = max(0, remaining[0] - int(result.figures.get("passages", 0)))
        return result

    results = each_file(context, "graph", one)
    seconds = sum(r.figures.get("extract_seconds", 0.0) for r in results)
    done = sum_of("passages")(results)
    with db.connect() as conn:
        coverage = conn.execute(COVERAGE_SQL).fetchone()
    return report_files(context, "graph", results, lambda rs: {
        "passages_extracted": done, "entities_touched": sum_of("entities")(rs),
        "relations_touched": sum_of("relations")(rs), "budget": config.budget, "orphans_collected": orphans,
        "passages_per_s": round(done / seconds, 1) if seconds else 0.0,
        "extractor": generator.name if generator else "offline (spaCy / natasha + patterns)",
        "files_complete": coverage[0], "files_ingested": coverage[1],
        "coverage": round(coverage[0] / coverage[1], 3) if coverage[1] else 0.0,
    })


COVERAGE_SQL = """
SELECT (SELECT count(*) FROM kg_progress k JOIN documents d ON d.id = k.document_id
        WHERE d.status = 'ingested' AND k.completed_at IS NOT NULL AND k.version = d.version),
       (SELECT count(*) FROM documents WHERE source = 'library' AND status = 'ingested')
"""
