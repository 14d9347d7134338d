"""The library-folder sensor: new, changed and removed files.

Cursor = {relative path: "size:mtime"} of what it has already requested. A
file the database already holds as ingested with the same size and mtime is
known even with an empty cursor, so enabling the sensor on an ingested
library requests nothing (library_pipeline.launch.library_changes, which
`library ingest` asks too).

One add request plus a few range requests keeps a tick at ~20 ms on the 2-core box
(library_pipeline.launch.run_plan has the measurement): new files, added in one request and
so contiguous in partition order, go out in ranges of at most RANGE_SIZE; changed
files, scattered in that order, as `run_plan.plan_ranges` groups them.
"""

import json

import dagster as dg

from library_pipeline.launch import plans as launch
from library_pipeline.defs.ingest.assets import ingest_job
from library_pipeline.resources import LibraryDatabase
from library_pipeline.launch.run_plan import MAX_SINGLE_REQUESTS, RANGE_SIZE

__all__ = ["MAX_SINGLE_REQUESTS", "RANGE_SIZE", "library_folder_sensor", "plan_runs"]


def plan_runs(new_keys: list[str], changed_keys: list[str], key_order: list[str]) -> list[dg.RunRequest]:
    changes = launch.LibraryChanges(keys={}, new=new_keys, changed=changed_keys, removed=0, order=key_order,
                                    cursor={})
    return [r for plan in launch.ingest_sensor_plans(changes) for r in launch.run_requests(plan)]


@dg.sensor(
    job=ingest_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Watches the library folder: registers new files as partitions and ingests them in "
                "batched range runs, re-ingests changed files, marks removed files `removed`.",
)
def library_folder_sensor(context: dg.SensorEvaluationContext, library_db: LibraryDatabase) -> dg.SensorResult:
    cursor: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    changes = launch.library_changes(library_db.get(), context.instance, cursor=cursor)
    gone = len([rel for rel in cursor if rel not in changes.cursor])
    if changes.new or changes.changed or gone:
        context.log.info(f"library folder: {len(changes.new)} new, {len(changes.changed)} changed, "
                         f"{changes.removed} removed, {len(changes.cursor)} files")
    return launch.sensor_result(launch.ingest_sensor_plans(changes), launch.cursor_text(changes))
