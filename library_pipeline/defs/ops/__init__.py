"""Operational definitions: the weekly reconcile schedule, the re-embed migration,
query-log retention and the nightly backup. Their runs go in the maintenance lane (library_pipeline.launch.run_plan).

Exposes `defs`, merged into `library_pipeline.definitions`.
"""

import dagster as dg

from library_pipeline.launch import plans as launch
from library_pipeline.defs.ingest.assets import ingest_job
from library_pipeline.defs.ingest.partitions import library_files_partitions
from library_pipeline.defs.ops import backup, reembed


def reconcile_requests(keys: list[str], stamp: str | None = None) -> list[dg.RunRequest]:
    """Every file partition in contiguous ranges: one run per range, never one per file."""
    return launch.run_requests(launch.reconcile_plan(keys, stamp))


@dg.schedule(
    job=ingest_job,
    cron_schedule="30 3 * * 0",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Weekly reconcile: re-runs every library file in batched range runs (maintenance lane). "
                "Unchanged files skip on their content hash in milliseconds; a file whose last ingest "
                "failed for a transient reason, or whose passages predate the current model, is redone. "
                "Stopped by default: turn it on in the UI (Automation → Schedules).",
)
def library_reconcile_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
    keys = context.instance.get_dynamic_partitions(library_files_partitions.name)
    if not keys:
        return dg.SkipReason("no library files registered yet")
    # one reconcile per schedule tick: the run keys carry the tick's date
    try:
        stamp = context.scheduled_execution_time.strftime("%Y%m%d")
    except Exception:  # dagster raises a CheckError when the context has no tick time
        stamp = "manual"  # evaluated outside a tick (tests, "Test schedule" in the UI)
    return reconcile_requests(keys, stamp)


# the location's executor is chosen in library_pipeline.definitions (in-process; celery
# for the celery location)
defs = dg.Definitions.merge(
    dg.Definitions(schedules=[library_reconcile_schedule]),
    reembed.defs,  # re-embed migration asset, query-log retention schedule
    backup.defs,  # the nightly backup and its restore check
)
