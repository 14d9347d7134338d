"""The enrich stage: RAPTOR summary trees and the knowledge graph (their logic is
`library_pipeline.enrich`). Merge with `dg.Definitions.merge(..., enrich.defs, ...)` in
library_pipeline/definitions.py; it needs `library_db`, `embedder` and `llm`
(GeneratorResource, from the LIBRARY_LLM_* settings) from there."""

import dagster as dg

from library_pipeline.launch import plans as launch
from library_pipeline.defs.enrich.assets import knowledge_graph, raptor_tree
from library_pipeline.defs.enrich.checks import kg_no_dangling, kg_vocabulary_closed, raptor_trees_current
from library_pipeline.launch.run_plan import ENRICH_LANE

enrich_job = dg.define_asset_job(
    launch.ENRICH_JOB, selection=dg.AssetSelection.assets(raptor_tree, knowledge_graph), tags=ENRICH_LANE,
    description="RAPTOR trees (unchanged files skip) and a budgeted knowledge-graph pass over library files.")

NIGHTLY_BUDGET = 5000  # passages per night: ~1 min of English extraction idle, ~2.5 min loaded (docs/enrichment.md)


# Enrichment follows ingestion: this sensor evaluates the enrich assets' automation
# conditions (eager: a file's partition as soon as its embeddings are materialised)
# and launches what they request, in the enrich lane (its run tags) and pool. Running
# by default, so `library up` / `dagster dev` enrich a fresh library with no command.
enrich_automation = dg.AutomationConditionSensorDefinition(
    "enrich_follows_ingest", target=dg.AssetSelection.assets(raptor_tree, knowledge_graph),
    run_tags=ENRICH_LANE, default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=30,
    description="Brings summary trees and the graph of every new or changed file up to date after its ingest.")


# The safety net: one budgeted run a night over every file, in the enrich lane, for
# anything automation missed (the daemon was down, a run failed, a budget ran out).
@dg.schedule(job=enrich_job, cron_schedule="0 2 * * *", default_status=dg.DefaultScheduleStatus.RUNNING,
             description=f"Nightly: rebuild stale summary trees and extract up to {NIGHTLY_BUDGET} more passages "
                         "into the graph (resuming where the last run stopped), as one range run.")
def enrich_nightly(context: dg.ScheduleEvaluationContext):
    keys = launch.enrich_keys(context.instance)
    if not keys:
        return dg.SkipReason("no library files registered yet")
    budget = {"ops": {"knowledge_graph": {"config": {"budget": NIGHTLY_BUDGET}}}}
    (request,) = launch.run_requests(launch.enrich_plan(keys, "nightly", run_config=budget))
    return request


defs = dg.Definitions(assets=[raptor_tree, knowledge_graph],
                      asset_checks=[kg_vocabulary_closed, kg_no_dangling, raptor_trees_current],
                      jobs=[enrich_job], schedules=[enrich_nightly], sensors=[enrich_automation])
